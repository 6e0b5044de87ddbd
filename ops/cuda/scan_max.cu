// scanops CUDA back end: the Max kernels (cummax, values and indices).
#include "ops/cuda/launch_scan.cuh"

namespace scanops::cuda {
#define SCANOPS_INSTANTIATE(in_t, out_t, val) \
  template void launch_scan<MaxCombine<val>, in_t, out_t>(const DeviceProblem&);
SCANOPS_CUDA_EXTREMUM_TYPES(SCANOPS_INSTANTIATE)
#undef SCANOPS_INSTANTIATE
}  // namespace scanops::cuda
