// scanops CUDA back end, layer 1: decoupled look-back (carries between the tiles of a line
// scanned by different blocks in one launch), deterministic.
//
// Each tile (a row chunk or a column tile: the callers' work item) publishes its aggregate as
// soon as its block has reduced it; then its block's first warp reads its predecessors'
// published states, kWindow (128) at a time, until it meets an inclusive prefix; the tile
// then publishes its own inclusive prefix. Blocks take tiles in
// order from an atomic counter, so every tile a block waits for belongs to a running block
// that publishes its aggregate without waiting: no deadlock whatever the grid.
//
// Run-to-run reproducibility: which predecessors are found inclusive depends on timing, so
// the usual look-back (a tree over whatever it found) associates differently from run to run
// and float sums change in their last bits. Here every inclusive prefix is, by construction,
// the *sequential left fold* of the line's tile aggregates, I(k) = I(k-1) + A(k): the walk
// keeps what it read (up to kHistory predecessors, in shared memory) and one lane folds it
// left to right starting from the inclusive prefix it met. Whichever inclusive prefix it
// meets, the fold gives the same bits (by induction, each I(m) is already that fold), provided
// the fold's combines and the publications' give the same bits for the same operands, which
// C++ arithmetic does not promise (FMA contraction, NaN payloads): both use pinned.cuh's
// PinnedCombine. The
// fold costs one dependent combine per predecessor walked over (loads batched ahead, see
// fold_left); the walk is as in CUB's decoupled look-back.
//
// States are arbitrary trivially copyable structs, so a status flag and its state live in
// separate arrays: the state is written through L2 (st.cg), then the flag with release
// semantics; readers load the flag with acquire semantics, then the state through L2 (ld.cg,
// never a stale L1 line). A state of 4 bytes (float sums: 1-D cumsum) shares one 64-bit word
// with its flag instead (`words`, written and read as single 64-bit accesses), so a walk's
// round is one L2 round trip, not two (flag, then state). Measured on the H100
// (bench/row_items_bench.cu, share of copy): float32 cumsum 1-D 2^30 69% -> 76%, (64, 2^22)
// rows 67% -> 75%; float16 / bfloat16 1-D 48-49% -> 69-71% (with 32 KB chunks). Wider
// states keep the two arrays (a 16-byte access is not single-copy atomic in PTX's model).
#pragma once

#include "ops/cuda/block_scan.cuh"
#include "ops/cuda/pinned.cuh"

namespace scanops::cuda {

// Status of every chunk of a launch, and the chunk counter (zeroed by make_chunk_status).
template <class state_t>
struct ChunkStatus {
  unsigned long long* counter;  // next chunk to hand out
  unsigned* flags;              // per chunk: kEmpty, kAggregate or kInclusive
  state_t* aggregate;           // per chunk: the chunk's own combined state
  state_t* inclusive;           // per chunk: the combined state of its line up to its end
  // Packed status (lookback_packs<state_t>, one state per chunk), instead of the three
  // arrays above: per chunk, the flag in the high 32 bits, the state's bits in the low ones
  // (the aggregate, overwritten by the inclusive prefix).
  unsigned long long* words = nullptr;
};

enum : unsigned { kEmpty = 0, kAggregate = 1, kInclusive = 2 };

// Whether LookBack keeps a chunk's flag and state in one 64-bit word.
template <class state_t>
constexpr bool lookback_packs = sizeof(state_t) == 4 && std::is_trivially_copyable_v<state_t>;

// Scratch for the status of `chunks` chunks with `states` states each (the column tiles keep
// one per column); enqueues the zeroing of counter and flags (packed: the words).
template <class state_t>
ChunkStatus<state_t> make_chunk_status(const LaunchContext& ctx, int64_t chunks,
                                       int64_t states = 1) {
  if (lookback_packs<state_t> && states == 1) {
    const int64_t bytes = 16 + 8 * chunks;  // the counter, then a word per chunk
    auto* base = static_cast<unsigned char*>(ctx.scratch->allocate(bytes));
    C10_CUDA_CHECK(cudaMemsetAsync(base, 0, bytes, ctx.stream));
    ChunkStatus<state_t> st{reinterpret_cast<unsigned long long*>(base), nullptr, nullptr, nullptr};
    st.words = reinterpret_cast<unsigned long long*>(base + 16);
    return st;
  }
  const int64_t flag_bytes = 16 + 4 * chunks;  // the counter, then the flags
  auto* base = static_cast<unsigned char*>(ctx.scratch->allocate(flag_bytes));
  C10_CUDA_CHECK(cudaMemsetAsync(base, 0, flag_bytes, ctx.stream));
  return {reinterpret_cast<unsigned long long*>(base), reinterpret_cast<unsigned*>(base + 16),
          scratch_states<state_t>(ctx, chunks * states),
          scratch_states<state_t>(ctx, chunks * states)};
}

namespace detail {

template <class T>
__device__ __forceinline__ void store_cg(T* p, const T& v) {
  constexpr int kWords = (sizeof(T) + 3) / 4;
  static_assert(sizeof(T) % 4 == 0 && alignof(T) >= 4, "states are stored as 32-bit words");
  unsigned w[kWords];
  memcpy(w, &v, sizeof(T));
#pragma unroll
  for (int k = 0; k < kWords; ++k) __stcg(reinterpret_cast<unsigned*>(p) + k, w[k]);
}

template <class T>
__device__ __forceinline__ T load_cg(const T* p) {
  constexpr int kWords = (sizeof(T) + 3) / 4;
  unsigned w[kWords];
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __ldcg(reinterpret_cast<const unsigned*>(p) + k);
  T v;
  memcpy(&v, w, sizeof(T));
  return v;
}

// An asynchronous copy of a state (a multiple of 16 bytes) from global memory (L2) to shared
// memory, without registers (cp.async.cg); copy_async_wait waits for the thread's copies.
// Written as PTX rather than through cuda::memcpy_async / __pipeline_memcpy_async: the
// look-back's states are written by other SMs, so the copy must bypass L1 (.cg), which those
// interfaces do not let the caller choose.
template <class T>
__device__ __forceinline__ void copy_async_cg(T* shared, const T* global) {
  static_assert(sizeof(T) % 16 == 0 && alignof(T) >= 16, "16-byte copies");
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const auto* g = reinterpret_cast<const unsigned char*>(global);
#pragma unroll
  for (int k = 0; k < static_cast<int>(sizeof(T) / 16); ++k) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s + 16 * k), "l"(g + 16 * k)
                 : "memory");
  }
}

__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ void store_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void store_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

template <class T>
__device__ __forceinline__ unsigned long long pack(unsigned flag, const T& s) {
  unsigned bits;
  memcpy(&bits, &s, 4);
  return (static_cast<unsigned long long>(flag) << 32) | bits;
}

template <class T>
__device__ __forceinline__ T unpack(unsigned long long w) {
  const unsigned bits = static_cast<unsigned>(w);
  T s;
  memcpy(&s, &bits, 4);
  return s;
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Called by the 32 lanes of a warp: each lane's state s to *state (its own slot; only the
// lanes with `write`, where others hold copies of their states), then, once every lane's
// store is visible, lane 0 sets *flag to v (release): a reader that acquires the flag sees
// all 32 states.
template <class T>
__device__ __forceinline__ void warp_publish(unsigned* flag, T* state, const T& s, unsigned v,
                                             bool write = true) {
  if (write) store_cg(state, s);
  __threadfence();
  __syncwarp();
  if (threadIdx.x % 32 == 0) store_release(flag, v);
}

}  // namespace detail

// The sequential left fold h(n-1) + h(n-2) + ... + h(0) of the states h(d) = at(d) (in that
// order: the same association for every n), with PinnedCombine's combine and canonical()
// (pinned.cuh): bitwise what a publication's lookback_combine gives for the same states, at
// every step whatever the unrolling. It is on the look-back's critical path: every
// tile folds what it walked over before it can publish, so one step's cost bounds the rate
// at which a line's tiles complete. Loads are issued kBatch at a time ahead of their
// combines, so a step costs one dependent combine instead of a shared-memory round trip plus
// the combine. (kBatch: fewer where the states are wide, as a lane's vector of columns.)
template <class Combine, int kBatch = 8, class At>
__device__ __forceinline__ typename Combine::state_t fold_left(int n, At&& at) {
  using state_t = typename Combine::state_t;
  using P = PinnedCombine<Combine>;
  state_t prefix = at(n - 1);
  int d = n - 2;
#pragma unroll 1
  for (; d >= kBatch - 1; d -= kBatch) {
    state_t h[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) h[u] = at(d - u);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) prefix = P::combine(prefix, h[u]);
  }
#pragma unroll 1
  for (; d >= 0; --d) prefix = P::combine(prefix, at(d));
  return P::canonical(prefix);
}

// The walk of a deterministic look-back, shared by LookBack (below) and the segmented scans'
// look-back over chunks (segmented.cuh), so that both stop, keep and fold alike. Called by the
// 32 lanes of a warp. Each round, read(depth, flag, v) gives lane i its kReads predecessors
// d = depth + u * 32 + i (u < kReads; d counts back from the tile, 0 the nearest), each with
// a flag that is no longer kEmpty (predecessors before the line: kInclusive and identity()).
// The walk stops at the nearest predecessor for which complete(flag, v) holds (its state is
// then the line's whole prefix up to it: an inclusive prefix, or a segmented aggregate that
// holds a head), keeps the states it read up to there in hist[0, depth) (a round that finds
// none starts again from the nearest predecessor when hist would overflow: by then further
// ones are done) and returns in every lane the left fold of hist from the stop on: the state
// before the tile, bitwise the same whichever complete predecessor it met (see the header).
template <class Combine, int kReads, int kHistory, class Read, class Complete>
__device__ __forceinline__ typename Combine::state_t walk_back(typename Combine::state_t* hist,
                                                               Read&& read, Complete&& complete) {
  using state_t = typename Combine::state_t;
  constexpr int kWindow = kReads * kWarpSize;
  static_assert(kHistory >= kWindow, "a round's reads must fit the history");
  const int lane = threadIdx.x % kWarpSize;
  int depth = 0;  // predecessors kept in hist
  for (;;) {
    unsigned flag[kReads];
    state_t v[kReads];
    read(depth, flag, v);
    // The nearest complete predecessor of the round, if any: the walk stops there.
    int stop = kWindow - 1;
    bool found = false;
#pragma unroll
    for (int u = 0; u < kReads; ++u) {
      const unsigned done = __ballot_sync(kFullMask, complete(flag[u], v[u]));
      if (!found && done != 0) {
        stop = u * kWarpSize + __ffs(static_cast<int>(done)) - 1;
        found = true;
      }
    }
#pragma unroll
    for (int u = 0; u < kReads; ++u) {
      const int d = u * kWarpSize + lane;
      if (d <= stop) hist[depth + d] = v[u];
    }
    depth += stop + 1;
    if (found) break;
    if (depth + kWindow > kHistory) depth = 0;  // start again from the nearest predecessor
  }
  __syncwarp();
  state_t prefix = Combine::identity();
  if (lane == 0) prefix = fold_left<Combine>(depth, [&](int d) { return hist[d]; });
  prefix = shfl_idx(prefix, 0);
  __syncwarp();  // hist is read before a later tile of this block writes it
  return prefix;
}

// One tile's part in the look-back: `chunk` indexes the status arrays, `first` is the index
// of the first tile of its line (whose predecessors belong to another line).
template <class Combine>
struct LookBack {
  using state_t = typename Combine::state_t;
  // A round of the walk reads kWindow predecessors (kReads per lane, all flag loads issued
  // before any is waited on): a walk deeper than 32 predecessors (measured on the H100, 1-D
  // float32 rows, one look-back per tile: ~90 deep on average) takes fewer rounds of two
  // dependent L2 round trips (flag, then state). Measured there, it did not change the
  // speed (1-D cumsum 54% of copy with 1 or 4 reads per lane): the block's stall in the
  // look-back, not the walk, was the cost, and chunks of tiles (row_scan.cuh) are the remedy.
  static constexpr int kReads = 4;
  static constexpr int kWindow = kReads * kWarpSize;
  // Predecessor states a walk keeps for the fold; a walk that finds no inclusive prefix
  // within them starts again from the nearest predecessor (by then further ones are done).
  static constexpr int kHistory = 2 * kWindow;
  struct Storage {
    RawArray<state_t, kHistory> history;  // history[d]: tile chunk - 1 - d
  };

  ChunkStatus<state_t> status;
  int64_t chunk;
  int64_t first;

  // Called by the 32 lanes of warp 0 with the tile's aggregate: publishes it, waits for the
  // predecessors, publishes the tile's inclusive prefix and returns (in every lane) the
  // combined state of the line before the tile. A line's first tile (chunk == first) takes
  // line_start() (called only there: the state the line starts from, its initial value's
  // Combine::start or identity()); every later tile's prefix is the left fold from it, as the
  // first tile publishes combine(line_start(), aggregate) as its inclusive prefix and never
  // an aggregate alone (so no walk goes past it, and the tiles before `first` are never read).
  template <class LineStart>
  __device__ state_t warp_exclusive_prefix(Storage& st, const state_t& aggregate,
                                           LineStart&& line_start) const {
    return finish(st, begin(aggregate), aggregate, line_start);
  }

  // warp_exclusive_prefix in two steps, for packed states (lookback_packs): begin publishes
  // the aggregate and issues the walk's first round of loads, finish waits for them and
  // completes the walk. Work between the two (a tile's loads) overlaps the round trip.
  struct Pending {
    unsigned long long w[lookback_packs<state_t> ? kReads : 1];
  };
  __device__ Pending begin(const state_t& aggregate) const {
    Pending p{};
    if constexpr (lookback_packs<state_t>) {
      if (chunk != first) {
        const int lane = threadIdx.x % kWarpSize;
        if (lane == 0) publish(kAggregate, status.aggregate, aggregate);
        load_round(p.w, 0, lane);
      }
    }
    return p;
  }

  template <class LineStart>
  __device__ state_t finish(Storage& st, const Pending& pending, const state_t& aggregate,
                            LineStart&& line_start) const {
    const int lane = threadIdx.x % kWarpSize;
    state_t prefix = Combine::identity();
    if (chunk == first) {
      prefix = line_start();  // (identity() without an initial value)
    } else {
      if (!lookback_packs<state_t> && lane == 0) publish(kAggregate, status.aggregate, aggregate);
      bool preloaded = lookback_packs<state_t>;
      const auto read = [&](int depth, unsigned(&flag)[kReads], state_t(&v)[kReads]) {
        // Read u of lane i: predecessor d = u * 32 + i, tile chunk - 1 - depth - d (tiles
        // before `first`: inclusive identity).
        if constexpr (lookback_packs<state_t>) {  // a flag and its state in one load
          unsigned long long w[kReads];
          if (preloaded) {
#pragma unroll
            for (int u = 0; u < kReads; ++u) w[u] = pending.w[u];
            preloaded = false;
          } else {
            load_round(w, depth, lane);
          }
#pragma unroll
          for (int u = 0; u < kReads; ++u) {
            const int64_t j = chunk - 1 - depth - (u * kWarpSize + lane);
            while ((w[u] >> 32) == kEmpty) w[u] = detail::load_relaxed(status.words + j);
            flag[u] = static_cast<unsigned>(w[u] >> 32);
            v[u] = detail::unpack<state_t>(w[u]);
          }
        } else {
#pragma unroll
          for (int u = 0; u < kReads; ++u) {
            const int64_t j = chunk - 1 - depth - (u * kWarpSize + lane);
            flag[u] = j >= first ? detail::load_acquire(status.flags + j) : kInclusive;
          }
#pragma unroll
          for (int u = 0; u < kReads; ++u) {
            const int64_t j = chunk - 1 - depth - (u * kWarpSize + lane);
            v[u] = Combine::identity();
            if (j >= first) {
              while (flag[u] == kEmpty) flag[u] = detail::load_acquire(status.flags + j);
              v[u] = detail::load_cg((flag[u] == kInclusive ? status.inclusive : status.aggregate) + j);
            }
          }
        }
      };
      prefix = walk_back<Combine, kReads, kHistory>(
          &st.history[0], read, [](unsigned flag, const state_t&) { return flag == kInclusive; });
    }
    // (lookback_combine: the bits a later tile's fold_left gives for this tile's prefix.)
    if (lane == 0) {
      publish(kInclusive, status.inclusive, lookback_combine<Combine>(prefix, aggregate));
    }
    return prefix;
  }

 private:
  // Packed: the status words of predecessors depth + u * 32 + lane.
  __device__ __forceinline__ void load_round(unsigned long long (&w)[kReads], int depth,
                                             int lane) const {
#pragma unroll
    for (int u = 0; u < kReads; ++u) {
      const int64_t j = chunk - 1 - depth - (u * kWarpSize + lane);
      w[u] = j >= first ? detail::load_relaxed(status.words + j)
                        : detail::pack(kInclusive, Combine::identity());
    }
  }

  __device__ void publish(unsigned flag, state_t* states, const state_t& s) const {
    if constexpr (lookback_packs<state_t>) {
      detail::store_relaxed(status.words + chunk, detail::pack(flag, s));
      return;
    }
    detail::store_cg(states + chunk, s);
    detail::store_release(status.flags + chunk, flag);
  }
};

}  // namespace scanops::cuda
