// scanops CUDA back end, layer 1: decoupled look-back (carries between the chunks of a line
// scanned by different blocks in one launch).
//
// Each chunk publishes its aggregate as soon as its block has reduced it, then its block's
// first warp walks back over the predecessors' published states, 32 at a time, combining
// aggregates until it meets an inclusive prefix; the chunk then publishes its own inclusive
// prefix. Blocks take chunks in order from an atomic counter, so every chunk a block waits
// for belongs to a running block that publishes its aggregate without waiting: no deadlock
// whatever the grid.
//
// States are arbitrary trivially copyable structs, so a status flag and its state live in
// separate arrays: the state is written through L2 (st.cg), then the flag with release
// semantics; readers load the flag with acquire semantics, then the state through L2 (ld.cg,
// never a stale L1 line).
#pragma once

#include "ops/cuda/block_scan.cuh"

namespace scanops::cuda {

// Status of every chunk of a launch, and the chunk counter (zeroed by make_chunk_status).
template <class state_t>
struct ChunkStatus {
  unsigned long long* counter;  // next chunk to hand out
  unsigned* flags;              // per chunk: kEmpty, kAggregate or kInclusive
  state_t* aggregate;           // per chunk: the chunk's own combined state
  state_t* inclusive;           // per chunk: the combined state of its line up to its end
};

enum : unsigned { kEmpty = 0, kAggregate = 1, kInclusive = 2 };

// Scratch for the status of `chunks` chunks; enqueues the zeroing of counter and flags.
template <class state_t>
ChunkStatus<state_t> make_chunk_status(const LaunchContext& ctx, int64_t chunks) {
  const int64_t flag_bytes = 16 + 4 * chunks;  // the counter, then the flags
  auto* base = static_cast<unsigned char*>(ctx.scratch->allocate(flag_bytes));
  C10_CUDA_CHECK(cudaMemsetAsync(base, 0, flag_bytes, ctx.stream));
  return {reinterpret_cast<unsigned long long*>(base), reinterpret_cast<unsigned*>(base + 16),
          scratch_states<state_t>(ctx, chunks), scratch_states<state_t>(ctx, chunks)};
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

__device__ __forceinline__ void store_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace detail

// One chunk's part in the look-back: `chunk` indexes the status arrays, `first` is the index
// of the first chunk of its line (whose predecessors belong to another line).
template <class Combine>
struct LookBack {
  using state_t = typename Combine::state_t;
  struct Storage {
    RawArray<state_t, 1> prefix;
  };

  ChunkStatus<state_t> status;
  int64_t chunk;
  int64_t first;

  // Publishes the chunk's aggregate, waits for the predecessors and returns the combined
  // state of the line before the chunk (identity for a line's first chunk); publishes the
  // chunk's inclusive prefix. Block-wide (a barrier inside, unless chunk == first): every
  // thread calls it with the same aggregate.
  __device__ state_t exclusive_prefix(Storage& st, const state_t& aggregate) const {
    if (chunk == first) {
      if (threadIdx.x == 0) publish(kInclusive, status.inclusive, aggregate);
      return Combine::identity();
    }
    if (threadIdx.x < kWarpSize) {
      const int lane = threadIdx.x;
      if (lane == 0) publish(kAggregate, status.aggregate, aggregate);
      state_t acc = Combine::identity();  // the predecessors walked so far, in line order
      for (int64_t window = chunk - 1;; window -= kWarpSize) {
        // Lane i reads chunk window - i (chunks before `first` read as an inclusive identity).
        const int64_t j = window - lane;
        unsigned flag = kInclusive;
        state_t v = Combine::identity();
        if (j >= first) {
          while ((flag = detail::load_acquire(status.flags + j)) == kEmpty) {
          }
          v = detail::load_cg((flag == kInclusive ? status.inclusive : status.aggregate) + j);
        }
        // The nearest inclusive prefix ends the walk; lanes past it do not contribute.
        const unsigned inclusive = __ballot_sync(kFullMask, flag == kInclusive);
        const int stop = inclusive != 0 ? __ffs(static_cast<int>(inclusive)) - 1 : kWarpSize - 1;
        if (lane > stop) v = Combine::identity();
        // Combine the window in line order (lane 31 earliest): reverse the lanes and scan.
        v = shfl_idx(v, kWarpSize - 1 - lane);
        v = warp_inclusive_scan<Combine>(v, 0u, lane);
        acc = Combine::combine(shfl_idx(v, kWarpSize - 1), acc);
        if (inclusive != 0) break;
      }
      if (lane == 0) {
        publish(kInclusive, status.inclusive, Combine::combine(acc, aggregate));
        st.prefix[0] = acc;
      }
    }
    __syncthreads();
    return st.prefix[0];
  }

 private:
  __device__ void publish(unsigned flag, state_t* states, const state_t& s) const {
    detail::store_cg(states + chunk, s);
    detail::store_release(status.flags + chunk, flag);
  }
};

}  // namespace scanops::cuda
