// scanops CUDA back end: the Prod kernels (cumprod).
#include "ops/cuda/launch_scan.cuh"

namespace scanops::cuda {
#define SCANOPS_INSTANTIATE(in_t, out_t, acc) \
  template void launch_scan<ProdCombine<acc>, in_t, out_t>(const DeviceProblem&);
SCANOPS_CUDA_PROD_TYPES(SCANOPS_INSTANTIATE)
#undef SCANOPS_INSTANTIATE
}  // namespace scanops::cuda
