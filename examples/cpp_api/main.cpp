// scanops C++ API example: every op, on the CPU and (when there is one) on the GPU, checked
// against PyTorch's own ops. Prints one line per check; exits 1 if any check fails.
//
//   build/examples/cpp_api/scanops_cpp_api_example
#include <scanops/scanops.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

int g_failures = 0;

void report(const std::string& what, const torch::Device& device, const torch::Tensor& got,
            const torch::Tensor& want, double tol = 1e-5) {
  const bool same_dtype = got.scalar_type() == want.scalar_type();
  const double err = (got.to(torch::kCPU, torch::kDouble) - want.to(torch::kCPU, torch::kDouble))
                         .abs()
                         .max()
                         .item<double>();
  const bool ok = same_dtype && err <= tol;
  if (!ok) ++g_failures;
  std::printf("%-34s %-6s %-9s max|err| %.2e  %s\n", what.c_str(), device.str().c_str(),
              std::string(c10::toString(got.scalar_type())).c_str(), err, ok ? "ok" : "MISMATCH");
}

// torch reference for an exclusive and/or reverse scan.
torch::Tensor ref_scan(const torch::Tensor& x, int64_t dim, bool prod, bool exclusive,
                       bool reverse) {
  torch::Tensor t = reverse ? x.flip(dim) : x;
  torch::Tensor y = prod ? torch::cumprod(t, dim) : torch::cumsum(t, dim);
  if (exclusive) {
    y = torch::cat({torch::full_like(y.narrow(dim, 0, 1), prod ? 1 : 0),
                    y.narrow(dim, 0, y.size(dim) - 1)},
                   dim);
  }
  return reverse ? y.flip(dim) : y;
}

void run_all(const torch::Device& device) {
  torch::manual_seed(0);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const torch::Tensor x = torch::randn({4, 1000}, f32);

  // cumsum: inclusive, exclusive + reverse, and a dtype conversion (int32 -> int64 default).
  report("cumsum(x, 1)", device, scanops::cumsum(x, 1), torch::cumsum(x, 1), 1e-3);
  report("cumsum(x, 1, exclusive, reverse)", device,
         scanops::cumsum(x, 1, {.exclusive = true, .reverse = true}),
         ref_scan(x, 1, false, true, true), 1e-3);
  const torch::Tensor ints = torch::randint(-100, 100, {3, 257}, f32.dtype(torch::kInt));
  report("cumsum(int32, -1)", device, scanops::cumsum(ints, -1), torch::cumsum(ints, -1), 0);
  report("cumsum(x, 0, dtype=float64)", device, scanops::cumsum(x, 0, {.dtype = torch::kDouble}),
         torch::cumsum(x.to(torch::kDouble), 0));

  // masked_cumsum: the mask broadcasts along dim 0.
  const torch::Tensor mask = torch::rand({1, 1000}, f32) > 0.5;
  report("masked_cumsum(x, mask, 1)", device, scanops::masked_cumsum(x, mask, 1),
         torch::cumsum(x * mask, 1), 1e-3);

  // cumprod on values near 1 (keeps the products in range).
  const torch::Tensor p = 1 + 0.01 * torch::randn({4, 300}, f32);
  report("cumprod(p, 1)", device, scanops::cumprod(p, 1), torch::cumprod(p, 1), 1e-4);
  report("cumprod(p, 1, exclusive)", device, scanops::cumprod(p, 1, {.exclusive = true}),
         ref_scan(p, 1, true, true, false), 1e-4);

  // linear_recurrence against a plain loop: h[t] = a[t] * h[t-1] + x[t].
  const torch::Tensor a = torch::rand({4, 64}, f32.dtype(torch::kDouble));
  const torch::Tensor u = torch::randn({4, 64}, f32.dtype(torch::kDouble));
  torch::Tensor h = torch::zeros({4}, f32.dtype(torch::kDouble));
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < 64; ++t) {
    h = a.select(1, t) * h + u.select(1, t);
    steps.push_back(h);
  }
  report("linear_recurrence(a, u, 1)", device, scanops::linear_recurrence(a, u, 1),
         torch::stack(steps, 1), 1e-10);

  // Autograd: backward through scanops::cumprod (with a zero in the input) matches torch.
  torch::Tensor q = torch::rand({3, 50}, f32.dtype(torch::kDouble));
  q.index_put_({1, 10}, 0.0);
  const torch::Tensor q1 = q.clone().requires_grad_(true);
  const torch::Tensor q2 = q.clone().requires_grad_(true);
  const torch::Tensor w = torch::randn({3, 50}, q.options());
  (scanops::cumprod(q1, 1) * w).sum().backward();
  (torch::cumprod(q2, 1) * w).sum().backward();
  report("grad of cumprod(q, 1), q has a 0", device, q1.grad(), q2.grad(), 1e-10);
}

}  // namespace

int main() {
  std::printf("scanops %s, libtorch %s\n", scanops::version().c_str(), TORCH_VERSION);
  std::vector<torch::Device> devices{torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA);
  for (const auto& device : devices) run_all(device);
  if (g_failures > 0) {
    std::printf("%d check(s) FAILED\n", g_failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
