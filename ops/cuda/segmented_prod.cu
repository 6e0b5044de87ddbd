// scanops CUDA back end: the segmented Prod (cumprod) kernels (segmented.cuh).
#include "ops/cuda/segmented.cuh"

namespace scanops::cuda {
#define SCANOPS_INSTANTIATE(in_t, out_t, acc) \
  template void launch_segmented<ProdCombine<acc>, in_t, out_t>(const SegmentedDeviceProblem&);
SCANOPS_CUDA_PROD_TYPES(SCANOPS_INSTANTIATE)
#undef SCANOPS_INSTANTIATE
}  // namespace scanops::cuda
