// scanops CUDA back end: the LogAddExp kernels (logcumsumexp).
#include "ops/cuda/launch_scan.cuh"

namespace scanops::cuda {
#define SCANOPS_INSTANTIATE(in_t, out_t, acc) \
  template void launch_scan<LogAddExpCombine<acc>, in_t, out_t>(const DeviceProblem&);
SCANOPS_CUDA_FLOAT_COMPLEX_TYPES(SCANOPS_INSTANTIATE)
#undef SCANOPS_INSTANTIATE
}  // namespace scanops::cuda
