// scanops CUDA back end: the segmented Sum (cumsum, masked_cumsum) kernels (segmented.cuh).
#include "ops/cuda/segmented.cuh"

namespace scanops::cuda {
#define SCANOPS_INSTANTIATE(in_t, out_t, acc) \
  template void launch_segmented<SumCombine<acc>, in_t, out_t>(const SegmentedDeviceProblem&);
SCANOPS_CUDA_SCAN_TYPES(SCANOPS_INSTANTIATE)
#undef SCANOPS_INSTANTIATE
}  // namespace scanops::cuda
