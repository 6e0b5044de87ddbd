// scanops CUDA back end: the Affine kernels (linear_recurrence, cumprod's backward).
#include "ops/cuda/launch_scan.cuh"

namespace scanops::cuda {
#define SCANOPS_INSTANTIATE(in_t, out_t, acc) \
  template void launch_scan<AffineCombine<acc>, in_t, out_t>(const DeviceProblem&);
SCANOPS_CUDA_FLOAT_COMPLEX_TYPES(SCANOPS_INSTANTIATE)
SCANOPS_CUDA_AFFINE_WIDE_TYPES(SCANOPS_INSTANTIATE)
#undef SCANOPS_INSTANTIATE
}  // namespace scanops::cuda
