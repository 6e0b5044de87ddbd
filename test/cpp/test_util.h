#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace scanops_test {

inline std::vector<torch::Device> devices() {
  std::vector<torch::Device> d{torch::kCPU};
  if (torch::cuda::is_available()) d.emplace_back(torch::kCUDA);
  return d;
}

#define SKIP_WITHOUT_CUDA()                                                  \
  do {                                                                       \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";      \
  } while (0)

// float64 references built from torch's own ops.
inline torch::Tensor ref_scan(const torch::Tensor& x64, int64_t dim, bool prod, bool exclusive,
                              bool reverse) {
  torch::Tensor t = reverse ? x64.flip(dim) : x64;
  torch::Tensor y = prod ? torch::cumprod(t, dim) : torch::cumsum(t, dim);
  if (exclusive) {
    const int64_t n = t.size(dim);
    torch::Tensor first = torch::full_like(t.narrow(dim, 0, 1), prod ? 1.0 : 0.0);
    y = torch::cat({first, y.narrow(dim, 0, n - 1)}, dim);
  }
  return reverse ? y.flip(dim) : y;
}

}  // namespace scanops_test
