// scanops CUDA back end: a row of C float32 columns as one element of a line, for CCCL's
// DeviceScan (cub_lanes_sum in cub_line_scan.cu; bench/cub_lanes_bench.cu times the same
// types). Header-only, CUDA and CCCL only.
#pragma once

#include <cuda/functional>

namespace scanops::cuda {

// A row of C float32 columns as one element (cub_lanes_sum), aligned to its vector width for
// even C (8 or 16 bytes: CUB loads it whole). Measured on the H100 (bench/cub_lanes_bench.cu,
// 2^28 elements): aligned tuples of 2 / 4 / 6 / 8 ran at 79 / 74 / 66 / 61% of a copy, the
// same tuples aligned to 4 bytes at 75 / 61 / 61 / 41%.
template <int C>
struct alignas(C % 4 == 0 ? 16 : C % 2 == 0 ? 8 : 4) Lanes {
  float v[C];
};

template <int C>
struct LanePlus {
  __host__ __device__ Lanes<C> operator()(const Lanes<C>& a, const Lanes<C>& b) const {
    Lanes<C> r;
#pragma unroll
    for (int k = 0; k < C; ++k) r.v[k] = a.v[k] + b.v[k];
    return r;
  }
};

}  // namespace scanops::cuda

// The lanes' identity, which the stable-order lookahead kernel folds its unused tile states
// with (cuda::identity_element knows the arithmetic types only): -0.0 in every lane, as CUB's
// own for a floating plus (-0.0 + x is x's bits, -0.0 included).
#define SCANOPS_LANES_IDENTITY(C)                                                              \
  template <>                                                                                  \
  __host__ __device__ constexpr auto                                                           \
  cuda::identity_element<scanops::cuda::LanePlus<C>, scanops::cuda::Lanes<C>>() noexcept {     \
    scanops::cuda::Lanes<C> r{};                                                               \
    for (int k = 0; k < C; ++k) r.v[k] = -0.0f;                                                \
    return r;                                                                                  \
  }
SCANOPS_LANES_IDENTITY(2)
SCANOPS_LANES_IDENTITY(3)
SCANOPS_LANES_IDENTITY(4)
SCANOPS_LANES_IDENTITY(5)
SCANOPS_LANES_IDENTITY(6)
SCANOPS_LANES_IDENTITY(7)
SCANOPS_LANES_IDENTITY(8)
#undef SCANOPS_LANES_IDENTITY
