// scanops CUDA back end: logcumsumexp's backward in one scan along rows (lse_grad.cu), the
// boundary between the host side (scan_cuda.cpp's LseGradFn) and the kernel.
#pragma once

#include <cstdint>

#include "ops/cuda/scan_cuda.h"  // LaunchContext

namespace scanops::cuda {

// dx = the gradient of logcumsumexp(x; exclusive, reverse) = y for the incoming gradient g
// (ops/lse_grad.h), float32, over `rows` lines of `length` contiguous elements (line r at
// element r * length) of x, y, g and dx, all of the same layout. Enqueues on ctx.stream.
struct LseGradArgs {
  const float* x;
  const float* y;
  const float* g;
  float* dx;
  int64_t rows, length;
  bool exclusive, reverse;
};
void launch_lse_grad_rows(const LaunchContext& ctx, const LseGradArgs& a);

}  // namespace scanops::cuda
