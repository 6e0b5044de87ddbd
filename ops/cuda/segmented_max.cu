// scanops CUDA back end: the segmented Max (cummax, values and indices) kernels (segmented.cuh).
#include "ops/cuda/segmented.cuh"

namespace scanops::cuda {
#define SCANOPS_INSTANTIATE(in_t, out_t, val) \
  template void launch_segmented<MaxCombine<val>, in_t, out_t>(const SegmentedDeviceProblem&);
SCANOPS_CUDA_EXTREMUM_TYPES(SCANOPS_INSTANTIATE)
#undef SCANOPS_INSTANTIATE
}  // namespace scanops::cuda
