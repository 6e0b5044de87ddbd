// scanops CUDA back end: the segmented LogAddExp (logcumsumexp) kernels (segmented.cuh).
#include "ops/cuda/segmented.cuh"

namespace scanops::cuda {
#define SCANOPS_INSTANTIATE(in_t, out_t, acc) \
  template void launch_segmented<LogAddExpCombine<acc>, in_t, out_t>(const SegmentedDeviceProblem&);
SCANOPS_CUDA_FLOAT_COMPLEX_TYPES(SCANOPS_INSTANTIATE)
#undef SCANOPS_INSTANTIATE
}  // namespace scanops::cuda
