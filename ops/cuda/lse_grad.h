// scanops CUDA back end: logcumsumexp's backward in one scan (lse_grad.cu), the boundary
// between the host side (scan_cuda.cpp's LseGradFn) and the kernels.
#pragma once

#include <cstdint>

#include "ops/cuda/scan_cuda.h"  // LaunchContext

namespace scanops::cuda {

// dx = the gradient of logcumsumexp(x; exclusive, reverse) = y for the incoming gradient g
// (ops/lse_grad.h), float32, along the middle dim of contiguous (outer, length, inner) x, y,
// g and dx (inner == 1: rows). Enqueues on ctx.stream.
struct LseGradArgs {
  const float* x;
  const float* y;
  const float* g;
  float* dx;
  int64_t outer, length, inner;
  bool exclusive, reverse;
};
void launch_lse_grad(const LaunchContext& ctx, const LseGradArgs& a);

}  // namespace scanops::cuda
