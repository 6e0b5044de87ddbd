// scanops CUDA back end: the jagged form's offsets checked, and turned into the reset form's
// mask or their int64 form, in one pass over them (jagged_offsets.h; the host side is
// scan_cuda.cpp's jagged_offsets_cuda).
//
// Why a kernel of its own: the ATen composition it replaces (a copy to int64, two comparisons
// of neighbours and two of the ends stacked and read back, index_fill into zeros) wrote an
// int64 copy of the offsets and read it three more times; for 2^28 length-1 segments the
// jagged cumsum took 4.4 ms on the H100 where the reset form's scan takes 0.86 ms; on an H200
// this kernel took it from 3.40 to 1.85 ms (docs/benchmarks/segmented-2026-11-27.md).
#include "ops/cuda/jagged_offsets.h"

#include <c10/cuda/CUDAException.h>

namespace scanops::cuda {
namespace {

constexpr int kThreads = 256;

// Thread b (grid-stride) takes entry b: a fault sets *bad (every writer stores 1); the mask's
// byte at p[b] is set where 0 <= p[b] < total (so bad offsets never write out of bounds; the
// caller discards the outputs of bad offsets). Entry b + 1 comes from the next lane (the
// warp's last lane loads it), so the offsets are read from memory once.
template <class index_t>
__global__ void __launch_bounds__(kThreads)
    jagged_offsets_kernel(const index_t* __restrict__ p, int64_t n, int64_t total,
                          bool* __restrict__ heads, int64_t* __restrict__ as_long,
                          unsigned* __restrict__ bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  // n rounded up to whole warps, so that every lane of a warp takes part in the shuffle
  const int64_t end = (n + 31) / 32 * 32;
  const unsigned lane = threadIdx.x % 32;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; b < end;
       b += stride) {
    const bool in = b < n;
    const int64_t v = in ? static_cast<int64_t>(p[b]) : 0;
    int64_t next = __shfl_down_sync(0xffffffffu, v, 1);
    if (lane == 31 && b + 1 < n) next = static_cast<int64_t>(p[b + 1]);
    if (!in) continue;
    const bool fault = (b == 0 && v != 0) || (b + 1 < n && next < v) || (b == n - 1 && v != total);
    if (fault) *bad = 1;
    if (heads != nullptr && v >= 0 && v < total) heads[v] = true;
    if (as_long != nullptr) as_long[b] = v;
  }
}

template <class index_t>
void launch(const JaggedOffsetsArgs& a) {
  // a few waves of resident blocks; each thread then takes ~n / (grid * 256) entries
  const int64_t want = (a.n + kThreads - 1) / kThreads;
  const int64_t cap = a.sms * 8;
  const int grid = static_cast<int>(want < cap ? (want < 1 ? 1 : want) : cap);
  jagged_offsets_kernel<index_t><<<grid, kThreads, 0, a.stream>>>(
      static_cast<const index_t*>(a.offsets), a.n, a.total, a.heads, a.as_long, a.bad);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void launch_jagged_offsets(const JaggedOffsetsArgs& a) {
  if (a.int32) {
    launch<int32_t>(a);
  } else {
    launch<int64_t>(a);
  }
}

}  // namespace scanops::cuda
