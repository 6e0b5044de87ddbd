// The smallest scanops program: scans on the GPU if there is one, else on the CPU.
#include <scanops/scanops.h>
#include <torch/torch.h>

#include <iostream>

void print(const char* name, const torch::Tensor& t) {
  std::cout << name;
  for (const torch::Tensor& v : t.cpu().unbind()) std::cout << ' ' << v.item<double>();
  std::cout << '\n';
}

int main() {
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const torch::Tensor x = torch::arange(1, 6, torch::dtype(torch::kFloat).device(device));

  const torch::Tensor sum = scanops::cumsum(x, 0);                          // 1 3 6 10 15
  const torch::Tensor excl = scanops::cumsum(x, 0, {.exclusive = true});    // 0 1 3 6 10
  const torch::Tensor prod = scanops::cumprod(x, 0, {.reverse = true});     // 120 120 60 20 5
  const torch::Tensor h = scanops::linear_recurrence(torch::full_like(x, 0.5), x, 0);

  std::cout << "scanops " << scanops::version() << " on " << device << '\n';
  print("cumsum:          ", sum);
  print("exclusive cumsum:", excl);
  print("reverse cumprod: ", prod);
  print("h = 0.5 h + x:   ", h);  // 1 2.5 4.25 6.125 8.0625

  const bool ok = torch::equal(sum, torch::cumsum(x, 0)) &&
                  torch::equal(excl, torch::cumsum(x, 0) - x) &&
                  torch::equal(prod, torch::cumprod(x.flip(0), 0).flip(0));
  return ok ? 0 : 1;
}
