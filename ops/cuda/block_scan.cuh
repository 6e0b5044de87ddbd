// scanops CUDA back end, layer 1: warp- and block-wide scan primitives.
//
// Generic over a Combine: states are only created by identity() and merged by
// combine(earlier, later) (never assumed commutative), and they move between lanes as
// 32-bit words, so a state may be any trivially copyable struct.
//
// The scans are *segmented*: a head flag starts a new segment, and the incoming carry only
// continues the segment open at the start. The same code serves tiles of one long row
// (no heads; the carry chains the tiles) and tiles packing many short rows (a head at every
// row start). Segment boundaries travel as warp ballots, so only states are shuffled.
#pragma once

#include <cstring>
#include <type_traits>

#include "ops/cuda/common.cuh"

namespace scanops::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ unsigned lanemask_lt(int lane) { return (1u << lane) - 1u; }
__device__ __forceinline__ unsigned lanemask_le(int lane) { return kFullMask >> (31 - lane); }

// Warp shuffles of any trivially copyable value, one 32-bit word at a time.
template <class T, class Shuffle>
__device__ __forceinline__ T shuffle_words(const T& v, Shuffle shuffle) {
  static_assert(std::is_trivially_copyable_v<T>, "states must be trivially copyable");
  constexpr int kWords = (sizeof(T) + 3) / 4;
  unsigned w[kWords] = {};
  memcpy(w, &v, sizeof(T));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = shuffle(w[k]);
  T r = v;
  memcpy(&r, w, sizeof(T));
  return r;
}

template <class T>
__device__ __forceinline__ T shfl_up(const T& v, int delta) {
  return shuffle_words(v, [delta](unsigned w) { return __shfl_up_sync(kFullMask, w, delta); });
}

template <class T>
__device__ __forceinline__ T shfl_idx(const T& v, int src_lane) {
  return shuffle_words(v, [src_lane](unsigned w) { return __shfl_sync(kFullMask, w, src_lane); });
}

// Inclusive segmented scan over the lanes of a warp (all 32 lanes must call it). Lane L
// combines the states of lanes [F, L], F being the highest lane <= L whose bit is set in
// `heads` (0 if none): a head lane's state is where its segment starts. Kogge-Stone, where
// a lane only takes from lanes of its own segment.
template <class Combine, class S>
__device__ __forceinline__ S warp_inclusive_scan(S s, unsigned heads, int lane) {
  const unsigned h = heads & lanemask_le(lane);
  const int first = h != 0 ? 31 - __clz(static_cast<int>(h)) : 0;
#pragma unroll
  for (int d = 1; d < kWarpSize; d <<= 1) {
    const S other = shfl_up(s, d);
    if (lane - d >= first) s = Combine::combine(other, s);
  }
  return s;
}

// Inclusive scan over the lanes of a warp taken `stride` apart (a power of two <= 32; all 32
// lanes must call it): lane L combines the states of lanes L % stride, L % stride + stride,
// ..., L in that order (Kogge-Stone over the lane's residue class). stride 32: no step.
template <class Combine, class S>
__device__ __forceinline__ S warp_strided_inclusive_scan(S s, int stride, int lane) {
  for (int d = stride; d < kWarpSize; d <<= 1) {
    const S other = shfl_up(s, d);
    if (lane >= d) s = Combine::combine(other, s);
  }
  return s;
}

// Block-wide exclusive segmented scan of one aggregate per thread, in thread order.
template <class Combine, int kThreads>
struct BlockScan {
  using state_t = typename Combine::state_t;
  static constexpr int kWarps = kThreads / kWarpSize;
  static_assert(kThreads % kWarpSize == 0 && kWarps <= kWarpSize, "one warp scans the warps");

  struct Storage {
    RawArray<state_t, kWarps> warp_agg;     // each warp's inclusive scan at its last lane
    RawArray<state_t, kWarps> warp_prefix;  // the state each warp continues from
    RawArray<state_t, 1> total;             // the state after the last thread
    bool warp_head[kWarps];                 // whether the warp holds a segment head
  };

  // `has_head`: the thread's items contain a segment head; `agg`: the combined state of its
  // items from its last head on (all of them if none). Returns the state the thread's items
  // continue from (that of the preceding threads' open segment, the carry included while no
  // head has occurred); `total` receives the state after the last thread, i.e. the carry of
  // the next tile.
  // `carry_op(block_aggregate)` gives the carry the tile continues from. It is called by the
  // 32 lanes of warp 0 together (it may be a warp-wide look-back, as CUB's prefix callback)
  // once the block's aggregate is known, and must return the same state in every lane.
  // Has two __syncthreads: every thread of the block must call it.
  template <class CarryOp>
  static __device__ __forceinline__ state_t exclusive_scan(Storage& st, bool has_head,
                                                           const state_t& agg, CarryOp&& carry_op,
                                                           state_t& total) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const unsigned heads = __ballot_sync(kFullMask, has_head);
    const state_t inc = warp_inclusive_scan<Combine>(agg, heads, lane);
    if (lane == kWarpSize - 1) {
      st.warp_agg[warp] = inc;
      st.warp_head[warp] = heads != 0;
    }
    __syncthreads();
    if (warp == 0) {
      // Scan the warps' aggregates the same way, then continue them from the carry.
      const bool valid = lane < kWarps;
      const state_t a = valid ? st.warp_agg[lane] : Combine::identity();
      const unsigned wheads = __ballot_sync(kFullMask, valid && st.warp_head[lane]);
      const state_t winc = warp_inclusive_scan<Combine>(a, wheads, lane);
      const state_t carry = carry_op(shfl_idx(winc, kWarps - 1));
      const state_t after = (wheads & lanemask_le(lane)) ? winc : Combine::combine(carry, winc);
      const state_t before = shfl_up(after, 1);
      if (valid) st.warp_prefix[lane] = lane == 0 ? carry : before;
      if (lane == kWarps - 1) st.total[0] = after;
    }
    __syncthreads();
    const state_t wprefix = st.warp_prefix[warp];
    const state_t after = (heads & lanemask_le(lane)) ? inc : Combine::combine(wprefix, inc);
    const state_t before = shfl_up(after, 1);
    total = st.total[0];
    return lane == 0 ? wprefix : before;
  }
};

}  // namespace scanops::cuda
