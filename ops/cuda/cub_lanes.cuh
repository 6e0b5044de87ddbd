// scanops CUDA back end: a row of C float32 columns as one element of a line, for CCCL's
// DeviceScan (cub_lanes_sum in cub_line_scan.cu; bench/cub_lanes_bench.cu times the same
// types). Header-only, CUDA and CCCL only.
#pragma once

#include <cuda/functional>

namespace scanops::cuda {

// A row of C float32 columns as one element. The library uses A = 4 (any dense float32 block
// is an array of them); bench/cub_lanes_bench.cu times the vector-aligned ones too (A = 8 for
// 2 and 6 columns, 16 for 4 and 8: CUB then loads a tuple whole), which the library does not
// use yet (cub_line_scan.h).
template <int C, int A = alignof(float)>
struct alignas(A) Lanes {
  float v[C];
};

template <int C, int A = alignof(float)>
struct LanePlus {
  __host__ __device__ Lanes<C, A> operator()(const Lanes<C, A>& a, const Lanes<C, A>& b) const {
    Lanes<C, A> r;
#pragma unroll
    for (int k = 0; k < C; ++k) r.v[k] = a.v[k] + b.v[k];
    return r;
  }
};

}  // namespace scanops::cuda

// The lanes' identity, which the stable-order lookahead kernel folds its unused tile states
// with (cuda::identity_element knows the arithmetic types only): -0.0 in every lane, as CUB's
// own for a floating plus (-0.0 + x is x's bits, -0.0 included).
#define SCANOPS_LANES_IDENTITY(C, A)                                                      \
  template <>                                                                              \
  __host__ __device__ constexpr auto cuda::identity_element<                               \
      scanops::cuda::LanePlus<C, A>, scanops::cuda::Lanes<C, A>>() noexcept {              \
    scanops::cuda::Lanes<C, A> r{};                                                        \
    for (int k = 0; k < C; ++k) r.v[k] = -0.0f;                                            \
    return r;                                                                              \
  }
SCANOPS_LANES_IDENTITY(2, 4)
SCANOPS_LANES_IDENTITY(3, 4)
SCANOPS_LANES_IDENTITY(4, 4)
SCANOPS_LANES_IDENTITY(5, 4)
SCANOPS_LANES_IDENTITY(6, 4)
SCANOPS_LANES_IDENTITY(7, 4)
SCANOPS_LANES_IDENTITY(8, 4)
SCANOPS_LANES_IDENTITY(2, 8)
SCANOPS_LANES_IDENTITY(6, 8)
SCANOPS_LANES_IDENTITY(4, 16)
SCANOPS_LANES_IDENTITY(8, 16)
#undef SCANOPS_LANES_IDENTITY
