// scanops CUDA back end: the segmented scans' kernels and launch_segmented (declared in
// segmented.h), instantiated per combine kind in segmented_<kind>.cu.
//
// Every kernel walks scan positions with the semantics of SegmentedArgs (ops/segmented.h): a
// head restarts the running state at its own element; pieces of a line walked by different
// threads meet through SegmentedCombine. Two families, chosen by shape:
//
//   inner == 1 (rows): the rows laid end to end form one flat sequence of outer * length
//     elements, read backwards for a reverse scan (each row then comes in its own scan
//     order). A row's first element in scan order is a head of that sequence, whose state is
//     combine(start(initial), x) where the row has an initial value: so the sequence needs
//     nothing from before a row. A warp walks a chunk of the sequence in tiles of 32 * K
//     elements: loaded warp-striped (coalesced) into shared memory, each lane folds K
//     consecutive elements, a warp scan (heads as ballots) gives each lane its prefix, the
//     lane rescans its elements, and the results leave warp-striped.
//       outer >= kRowAlignedWarpsPerSM rows per SM: chunks of whole rows, one launch.
//       Otherwise chunks of whole tiles: the chunk totals (first launch), their exclusive
//       scan into carries (second), the rescan from the carries (third).
//   inner > 1 (columns): a thread per (outer index, chunk of positions, column), the column
//     fastest among consecutive threads (coalesced loads), walking its positions with K
//     elements loaded ahead (walk_batched).
//       outer * inner >= kColumnLinesPerSM lines per SM, or short lines: whole lines, one
//       launch. Otherwise lines are cut into chunks, at most kColumnThreadsPerSM threads per
//       SM (one round of resident threads): totals, carries, rescan as for rows.
//
// Carries (the state a chunk continues from) come from the totals of its line by one thread
// per line (up to kSerialCarries chunks a line) or by a block per line with a block scan.
//
// Determinism: no atomics; which elements are combined in which order depends only on the
// shape and the SM count (the chunking), never on timing.
//
// Chunk totals start from their first element, not from identity() combined with it (which
// is not exact for every combine: 0.0 + -0.0 is 0.0), so a chunk boundary changes the
// association of a floating fold but never adds an operand.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/cuda/block_scan.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/segmented.h"

namespace scanops::cuda {
namespace seg {

// Rows: 8 warps a block, 4 blocks per SM; the chunk count targets one chunk per resident warp.
constexpr int kRowWarps = 8;
constexpr int kRowThreads = kRowWarps * kWarpSize;
constexpr int kRowBlocksPerSM = 4;
constexpr int64_t kRowWarpsPerSM = kRowWarps * kRowBlocksPerSM;
// At least this many rows per SM: a warp per run of whole rows, no carries (one read of the
// input instead of two).
constexpr int64_t kRowAlignedWarpsPerSM = 16;
// A flat chunk holds at least this many tiles (fewer: not worth the extra launches).
constexpr int64_t kRowMinTiles = 4;

// Columns: blocks of 256 threads, 4 blocks per SM (K loads in flight per thread).
constexpr int kColumnThreads = 256;
constexpr int kColumnBlocksPerSM = 4;
constexpr int64_t kColumnThreadsPerSM = kColumnThreads * kColumnBlocksPerSM;  // when cut
constexpr int64_t kColumnLinesPerSM = 512;  // at least this many lines: whole lines
constexpr int64_t kColumnMinChunk = 32;     // positions a chunk holds, at least

// Carries: one thread per line folds up to kSerialCarries chunk totals, else a block per line.
constexpr int64_t kSerialCarries = 32;
constexpr int kCarryThreads = 256;

// Elements a column thread loads ahead, a lane takes per row tile: about kBytes bytes of
// states, a power of two <= 16 (a lane's head bits then lie in one 32-bit ballot).
template <class C, int kBytes>
constexpr int items() {
  constexpr int b = static_cast<int>(sizeof(typename C::state_t));
  constexpr int k = kBytes / b;
  return k >= 16 ? 16 : k >= 8 ? 8 : k >= 4 ? 4 : k >= 2 ? 2 : 1;
}
constexpr int kColumnBytes = 64;
// The row kernel keeps a tile's elements twice (striped, then blocked) beside its cursor: 64
// bytes of states spilled registers under its 64-register budget (4 blocks per SM).
constexpr int kRowBytes = 32;

template <class C, class in_t, class out_t>
using Args = SegmentedArgs<C, in_t, out_t>;

// Element access by offsets the kernels step along (no multiplications per element):
// e the element's dense offset, l its position along the line (indexed combines), the
// companions' offsets. The same lift and write as SegmentedArgs::lift / write.
template <class C>
constexpr bool kHasMask = C::arity == 1 && !C::indexed;  // (SegmentedArgs::lift reads it)

struct Offsets {
  int64_t e = 0;      // input, values, indices
  int64_t l = 0;      // position along the line
  int64_t reset = 0;  // reset of the element (forward) or of the next one in memory (reverse)
  int64_t mask = 0;
  int64_t coeff = 0;
};

template <class C, class in_t, class out_t>
__device__ __forceinline__ typename C::state_t lift_at(const Args<C, in_t, out_t>& a,
                                                       const Offsets& at) {
  const in_t x = a.input[at.e];
  if constexpr (C::arity == 2) {
    return C::template lift<in_t>(a.coeff[at.coeff], x);
  } else if constexpr (C::indexed) {
    return C::template lift<in_t>(x, at.l);
  } else {
    if (a.mask != nullptr && !a.mask[at.mask]) return C::identity();
    return C::template lift<in_t>(x);
  }
}

template <class C, class in_t, class out_t>
__device__ __forceinline__ void write_at(const Args<C, in_t, out_t>& a, int64_t e,
                                         const typename C::state_t& s) {
  a.values[e] = static_cast<out_t>(C::value(s));
  if constexpr (C::indexed) a.indices[e] = C::index(s);
}

// The offsets of element (o, l, i) (reset: of (o, l + 1, i) for a reverse scan, where
// SegmentedArgs::head reads it).
template <class C, class in_t, class out_t>
__device__ __forceinline__ Offsets offsets_of(const Args<C, in_t, out_t>& a, int64_t o,
                                              int64_t l, int64_t i) {
  Offsets at;
  at.e = a.dense(o, l, i);
  at.l = l;
  at.reset = a.reset_at.at(o, a.reverse ? l + 1 : l, i);
  if constexpr (kHasMask<C>) at.mask = a.mask_at.at(o, l, i);
  if constexpr (C::arity == 2) at.coeff = a.coeff_at.at(o, l, i);
  return at;
}

// at += d, field by field (the fields a combine reads).
template <class C>
__device__ __forceinline__ void step_offsets(Offsets& at, const Offsets& d) {
  at.e += d.e;
  at.l += d.l;
  at.reset += d.reset;
  if constexpr (kHasMask<C>) at.mask += d.mask;
  if constexpr (C::arity == 2) at.coeff += d.coeff;
}

// SegmentedArgs::step for an element already lifted (x) and tested for a head (h): the same
// branches, so that a walk over elements loaded ahead writes exactly what step would.
template <bool kWrite, class C, class in_t, class out_t>
__device__ __forceinline__ void apply(const Args<C, in_t, out_t>& a, int64_t e,
                                      const typename C::state_t& x, bool h, SegState<C>& r) {
  if (h) {
    if (kWrite && a.exclusive) write_at(a, e, C::identity());
    r.s = x;
    r.head = true;
  } else {
    if (kWrite && a.exclusive) write_at(a, e, r.s);
    r.s = C::combine(r.s, x);
  }
  if (kWrite && !a.exclusive) write_at(a, e, r.s);
}

// SegmentedArgs::walk over scan positions [k0, k1) of line (o, i), `at` the offsets of
// position k0 and `d` their step from one scan position to the next; K elements are loaded
// (lifted, tested for heads) before any is taken in: K loads in flight per thread, not one.
template <bool kWrite, class C, class in_t, class out_t>
__device__ __forceinline__ void walk_batched(const Args<C, in_t, out_t>& a, int64_t k0,
                                             int64_t k1, Offsets at, const Offsets& d,
                                             SegState<C>& r) {
  using state_t = typename C::state_t;
  constexpr int K = items<C, kColumnBytes>();
  for (int64_t k = k0; k < k1; k += K) {
    const int64_t n = k1 - k;
    state_t x[K];
    bool h[K];
    int64_t e = at.e;
#pragma unroll
    for (int t = 0; t < K; ++t) {
      if (t < n) {
        x[t] = lift_at(a, at);
        h[t] = k + t == 0 ? a.initial == nullptr : a.reset[at.reset];
        step_offsets<C>(at, d);
      }
    }
#pragma unroll
    for (int t = 0; t < K; ++t) {
      if (t < n) {
        apply<kWrite>(a, e, x[t], h[t], r);
        e += d.e;
      }
    }
  }
}

// ---- columns (inner > 1): a thread per (o, chunk, i) -------------------------------------

// Thread g = (o * chunks + c) * inner + i walks positions [c * chunk_len, ...) of line (o, i).
// kWrite false: writes the chunk's total to totals[g] (from its first element). kWrite true:
// walks from carries[g] (nullptr: whole lines, from line_start) and writes.
template <bool kWrite, class C, class in_t, class out_t>
__global__ void __launch_bounds__(kColumnThreads, kColumnBlocksPerSM)
    columns_kernel(const Args<C, in_t, out_t> a, int64_t chunks, int64_t chunk_len,
                   SegState<C>* totals, const SegState<C>* carries) {
  const int64_t n = a.outer * chunks * a.inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n;
       g += stride) {
    const int64_t t = g / a.inner;
    const int64_t i = g - t * a.inner;
    const int64_t o = t / chunks;
    const int64_t c = t - o * chunks;
    const int64_t k0 = c * chunk_len;
    const int64_t k1 = std::min(a.length, k0 + chunk_len);
    Offsets d;  // one scan position on: l steps by -1 in a reverse scan
    const int64_t dir = a.reverse ? -1 : 1;
    d.e = dir * a.inner;
    d.l = dir;
    d.reset = dir * a.reset_at.sl;
    d.mask = dir * a.mask_at.sl;
    d.coeff = dir * a.coeff_at.sl;
    const Offsets at = offsets_of(a, o, a.pos(k0), i);
    if constexpr (kWrite) {
      SegState<C> r = carries != nullptr ? carries[g] : a.line_start(o, i);
      walk_batched<true>(a, k0, k1, at, d, r);
    } else {
      SegState<C> r{lift_at(a, at), k0 == 0 ? a.initial == nullptr : a.reset[at.reset]};
      Offsets next = at;
      step_offsets<C>(next, d);
      walk_batched<false>(a, k0 + 1, k1, next, d, r);
      totals[g] = r;
    }
  }
}

// ---- carries: chunk totals -> the state each chunk starts from (in place) ----------------

// The totals of line g = o * inner + i sit at t[(o * chunks + c) * inner + i], c = 0 ..
// chunks - 1; afterwards t holds the carries: carry_0 = the line's start (rows: identity(),
// the flat sequence starts at a head), carry_{c+1} = combine(carry_c, total_c).
template <class C, class in_t, class out_t>
__device__ __forceinline__ SegState<C> carry_start(const Args<C, in_t, out_t>& a, bool rows,
                                                   int64_t o, int64_t i) {
  return rows ? SegmentedCombine<C>::identity() : a.line_start(o, i);
}

// Totals are read kCarryBatch at a time, all loads issued before the first combine.
constexpr int kCarryBatch = 4;

// The fold of totals c0 .. c1 - 1 of a line (c0 < c1), t[at(c)] being chunk c's.
template <class C, class At>
__device__ __forceinline__ SegState<C> fold_run(const SegState<C>* t, const At& at, int64_t c0,
                                                int64_t c1) {
  SegState<C> r = t[at(c0)];
  for (int64_t c = c0 + 1; c < c1; c += kCarryBatch) {
    SegState<C> v[kCarryBatch];
#pragma unroll
    for (int b = 0; b < kCarryBatch; ++b) {
      if (c + b < c1) v[b] = t[at(c + b)];
    }
#pragma unroll
    for (int b = 0; b < kCarryBatch; ++b) {
      if (c + b < c1) r = SegmentedCombine<C>::combine(r, v[b]);
    }
  }
  return r;
}

// Rewrites totals c0 .. c1 - 1 of a line as carries, r being the state before chunk c0.
template <class C, class At>
__device__ __forceinline__ void rescan_run(SegState<C>* t, const At& at, int64_t c0, int64_t c1,
                                           SegState<C> r) {
  for (int64_t c = c0; c < c1; c += kCarryBatch) {
    SegState<C> v[kCarryBatch];
#pragma unroll
    for (int b = 0; b < kCarryBatch; ++b) {
      if (c + b < c1) v[b] = t[at(c + b)];
    }
#pragma unroll
    for (int b = 0; b < kCarryBatch; ++b) {
      if (c + b < c1) {
        t[at(c + b)] = r;
        r = SegmentedCombine<C>::combine(r, v[b]);
      }
    }
  }
}

// A thread per line (few chunks a line).
template <class C, class in_t, class out_t>
__global__ void __launch_bounds__(kCarryThreads)
    carries_serial_kernel(const Args<C, in_t, out_t> a, SegState<C>* t, int64_t lines,
                          int64_t chunks, int64_t inner, bool rows) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < lines;
       g += stride) {
    const int64_t o = g / inner;
    const int64_t i = g - o * inner;
    const auto at = [&](int64_t c) { return (o * chunks + c) * inner + i; };
    rescan_run(t, at, 0, chunks, carry_start(a, rows, o, i));
  }
}

// A block per line: thread j folds a run of consecutive totals, a block scan gives each run
// the state before it, the thread rewrites its run as carries.
template <class C, class in_t, class out_t>
__global__ void __launch_bounds__(kCarryThreads)
    carries_block_kernel(const Args<C, in_t, out_t> a, SegState<C>* t, int64_t lines,
                         int64_t chunks, int64_t inner, bool rows) {
  using SC = SegmentedCombine<C>;
  using Scan = BlockScan<SC, kCarryThreads>;
  __shared__ typename Scan::Storage storage;
  const int64_t per = ceil_div(chunks, kCarryThreads);
  const int64_t c0 = std::min(chunks, threadIdx.x * per);
  const int64_t c1 = std::min(chunks, c0 + per);
  for (int64_t g = blockIdx.x; g < lines; g += gridDim.x) {
    const int64_t o = g / inner;
    const int64_t i = g - o * inner;
    const auto at = [&](int64_t c) { return (o * chunks + c) * inner + i; };
    // Threads past the last chunk hold identity(): they follow every thread that has
    // chunks, so no carry depends on them.
    const SegState<C> agg = c0 < c1 ? fold_run(t, at, c0, c1) : SC::identity();
    const SegState<C> start = carry_start(a, rows, o, i);
    SegState<C> total;
    const SegState<C> r = Scan::exclusive_scan(
        storage, false, agg, [&](const SegState<C>&) { return start; }, total);
    rescan_run(t, at, c0, c1, r);
    __syncthreads();  // the storage is reused by the next line
  }
}

template <class C, class in_t, class out_t>
void launch_carries(const Args<C, in_t, out_t>& a, const LaunchContext& ctx, SegState<C>* t,
                    int64_t lines, int64_t chunks, int64_t inner, bool rows) {
  if (chunks <= kSerialCarries) {
    carries_serial_kernel<C, in_t, out_t>
        <<<grid_size(ctx, ceil_div(lines, kCarryThreads), 8), kCarryThreads, 0, ctx.stream>>>(
            a, t, lines, chunks, inner, rows);
  } else {
    carries_block_kernel<C, in_t, out_t>
        <<<grid_size(ctx, lines, 8), kCarryThreads, 0, ctx.stream>>>(a, t, lines, chunks, inner,
                                                                     rows);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class C, class in_t, class out_t>
void launch_columns(const Args<C, in_t, out_t>& a, const LaunchContext& ctx) {
  const int64_t lines = a.outer * a.inner;
  int64_t chunks = 1;
  if (lines < ctx.sms * kColumnLinesPerSM && a.length >= 2 * kColumnMinChunk) {
    // At most one thread per resident thread: a single round, no tail of a few chunks.
    chunks = std::min((ctx.sms * kColumnThreadsPerSM) / lines, a.length / kColumnMinChunk);
  }
  const int64_t chunk_len = ceil_div(a.length, chunks);
  chunks = ceil_div(a.length, chunk_len);
  const int64_t threads = lines * chunks;
  const unsigned grid =
      grid_size(ctx, ceil_div(threads, kColumnThreads), kColumnBlocksPerSM);
  if (chunks == 1) {
    columns_kernel<true, C, in_t, out_t><<<grid, kColumnThreads, 0, ctx.stream>>>(
        a, 1, a.length, nullptr, nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  SegState<C>* t = scratch_states<SegState<C>>(ctx, threads);
  columns_kernel<false, C, in_t, out_t><<<grid, kColumnThreads, 0, ctx.stream>>>(
      a, chunks, chunk_len, t, nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_carries(a, ctx, t, lines, chunks, a.inner, /*rows=*/false);
  columns_kernel<true, C, in_t, out_t><<<grid, kColumnThreads, 0, ctx.stream>>>(
      a, chunks, chunk_len, nullptr, t);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- rows (inner == 1): warp tiles over the flat sequence --------------------------------

// The flat sequence: scan index q = 0 .. n - 1 is element e = q (e = n - 1 - q for a reverse
// scan) of the tensor, i.e. (o, l) = (e / length, e % length). Chunk c holds q in
// [c * chunk_len, min(n, (c + 1) * chunk_len)).
struct RowGeom {
  int64_t n;
  int64_t chunk_len;
  int64_t chunks;
  // A lane's next striped element is 32 scan indices on: 32 = step_o * length + step_l.
  int64_t step_o, step_l;
  // What the offsets add then (forward; a reverse scan subtracts): `step` where l does not
  // wrap past the row's end, step + wrap where it does (wrap = so - length * sl).
  Offsets step, wrap;
};

// A lane's cursor: its striped element's offsets and row o. Past the sequence's end it may
// leave the tensor: it is then never read.
struct RowCursor {
  Offsets at;
  int64_t o;
  template <class C>
  __device__ __forceinline__ void advance(const RowGeom& g, int64_t length, bool reverse) {
    if (!reverse) {
      o += g.step_o;
      step_offsets<C>(at, g.step);
      if (at.l >= length) {
        at.l -= length;
        ++o;
        step_offsets<C>(at, g.wrap);
      }
    } else {
      o -= g.step_o;
      Offsets back = g.step;
      back.e = -back.e;
      back.l = -back.l;
      back.reset = -back.reset;
      back.mask = -back.mask;
      back.coeff = -back.coeff;
      step_offsets<C>(at, back);
      if (at.l < 0) {
        at.l += length;
        --o;
        back = g.wrap;
        back.l = 0;
        back.e = 0;
        back.reset = -back.reset;
        back.mask = -back.mask;
        back.coeff = -back.coeff;
        step_offsets<C>(at, back);
      }
    }
  }
};

// kWrite false: totals[c] = chunk c's total (from its first element). kWrite true: chunk c
// walked from carries[c] (nullptr: chunks of whole rows, which need none) and written.
template <bool kWrite, class C, class in_t, class out_t>
__global__ void __launch_bounds__(kRowThreads, kRowBlocksPerSM)
    rows_kernel(const Args<C, in_t, out_t> a, const RowGeom g, SegState<C>* totals,
                const SegState<C>* carries) {
  using state_t = typename C::state_t;
  constexpr int K = items<C, kRowBytes>();
  constexpr int kTile = kWarpSize * K;
  constexpr int kPadded = kTile + K;  // a state of padding every 32 (bank conflicts)
  __shared__ RawArray<state_t, kRowWarps * kPadded> shared;
  __shared__ unsigned shared_heads[kRowWarps][K];  // the tile's head ballots
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  state_t* sm = &shared[warp * kPadded];
  unsigned* sm_heads = shared_heads[warp];
  // Slot of element p of the tile: p + p / 32. Striped element lane + 32 m sits at
  // lane + 33 m, blocked element base + t at blocked + t.
  const int base = lane * K;  // the lane's first element of a tile, in blocked order
  const int blocked = base + base / kWarpSize;
  const int64_t length = a.length;
  const int64_t de = a.reverse ? -kWarpSize : kWarpSize;  // e from one striped element to the next

  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowWarps;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kRowWarps + warp; c < g.chunks;
       c += warps) {
    const int64_t q0 = c * g.chunk_len;
    const int64_t q1 = std::min(g.n, q0 + g.chunk_len);
    RowCursor cur;
    {
      const int64_t q = std::min(q0 + lane, g.n - 1);  // (a lane past the end reads nothing)
      const int64_t e = a.reverse ? g.n - 1 - q : q;
      cur.o = e / length;
      cur.at = offsets_of(a, cur.o, e - cur.o * length, 0);
    }
    // The state before the tile: the chunk's carry (kWrite), or, for a total, nothing before
    // the first tile (has_carry false) and the fold so far after it, its head flag whether
    // the fold holds a head.
    SegState<C> carry = SegmentedCombine<C>::identity();
    if constexpr (kWrite) {
      if (carries != nullptr) carry = carries[c];
    }
    bool has_carry = kWrite;
    for (int64_t qt = q0; qt < q1; qt += kTile) {
      const int count = static_cast<int>(std::min<int64_t>(kTile, q1 - qt));
      const int64_t e_tile = cur.at.e;  // the lane's first striped element of the tile
      // Striped load: lane j takes elements j, j + 32, ... of the tile, all loads issued
      // before the first is used. A row's first element in scan order is a head; with an
      // initial value its state is combine(start(initial), x), and an exclusive scan's
      // output there, start(initial), is written now (`written`: the store below skips it).
      state_t x[K];
      bool h[K];
      unsigned written = 0;
#pragma unroll
      for (int m = 0; m < K; ++m) {
        h[m] = false;
        if (lane + m * kWarpSize < count) {
          x[m] = lift_at(a, cur.at);
          const bool first = a.reverse ? cur.at.l == length - 1 : cur.at.l == 0;
          if (first) {
            h[m] = true;
            if (a.initial != nullptr) {
              const state_t st = C::template start<out_t>(a.initial[cur.o]);
              x[m] = C::combine(st, x[m]);
              if constexpr (kWrite) {
                if (a.exclusive) {
                  write_at(a, cur.at.e, st);
                  written |= 1u << m;
                }
              }
            }
          } else {
            h[m] = a.reset[cur.at.reset];
          }
        }
        cur.advance<C>(g, length, a.reverse);
      }
#pragma unroll
      for (int m = 0; m < K; ++m) {
        const int p = lane + m * kWarpSize;
        if (p < count) sm[lane + m * (kWarpSize + 1)] = x[m];
        const unsigned hb = __ballot_sync(kFullMask, h[m]);
        if (lane == m) sm_heads[m] = hb;
      }
      __syncwarp();
      // Blocked: the lane's elements base .. base + K - 1 (nl of them in the tile), their
      // head bits those of ballot base / 32 from bit base % 32 on.
      const int nl = std::max(0, std::min(K, count - base));
      const unsigned bits =
          (sm_heads[base / kWarpSize] >> (base % kWarpSize)) & ((1u << K) - 1u);
      state_t y[K];
#pragma unroll
      for (int t = 0; t < K; ++t) {
        if (t < nl) y[t] = sm[blocked + t];
      }
      // The lane's fold from its last head (all of it if none); identity() for a lane past
      // the tile's end (it follows every lane with elements, so none of them sees it).
      state_t agg = C::identity();
#pragma unroll
      for (int t = 0; t < K; ++t) {
        if (t < nl) agg = (t == 0 || ((bits >> t) & 1u)) ? y[t] : C::combine(agg, y[t]);
      }
      const unsigned heads = __ballot_sync(kFullMask, bits != 0);
      const state_t inc = warp_inclusive_scan<C>(agg, heads, lane);
      const bool seen = (heads & lanemask_le(lane)) != 0;
      const state_t after = (seen || !has_carry) ? inc : C::combine(carry.s, inc);
      const state_t before = shfl_up(after, 1);
      if constexpr (kWrite) {
        // Rescan from the state before the lane's elements (lane 0: the carry, always there
        // in a written chunk), results into the lane's own slots.
        state_t r = lane == 0 ? carry.s : before;
#pragma unroll
        for (int t = 0; t < K; ++t) {
          if (t < nl) {
            state_t out;
            if ((bits >> t) & 1u) {
              out = C::identity();  // exclusive at a head
              r = y[t];
            } else {
              out = r;
              r = C::combine(r, y[t]);
            }
            if (!a.exclusive) out = r;
            sm[blocked + t] = out;
          }
        }
        __syncwarp();
        // Striped store.
        int64_t e = e_tile;
#pragma unroll
        for (int m = 0; m < K; ++m) {
          const int p = lane + m * kWarpSize;
          if (p < count && !((written >> m) & 1u)) {
            write_at(a, e, sm[lane + m * (kWarpSize + 1)]);
          }
          e += de;
        }
      }
      carry.s = shfl_idx(after, (count - 1) / K);
      carry.head = (has_carry && carry.head) || heads != 0;
      has_carry = true;
      __syncwarp();  // the tile's shared slots are read before the next tile overwrites them
    }
    if constexpr (!kWrite) {
      if (lane == 0) totals[c] = carry;
    }
  }
}

// What a companion's offset adds when its element moves on by 32 scan indices (forward).
inline void row_steps(const SegStrides& s, int64_t length, const RowGeom& g, int64_t& step,
                      int64_t& wrap) {
  step = g.step_o * s.so + g.step_l * s.sl;
  wrap = s.so - length * s.sl;
}

template <class C, class in_t, class out_t>
void launch_rows(const Args<C, in_t, out_t>& a, const LaunchContext& ctx) {
  constexpr int64_t kTile = int64_t{kWarpSize} * items<C, kRowBytes>();
  RowGeom g;
  g.n = a.outer * a.length;
  g.step_o = kWarpSize / a.length;
  g.step_l = kWarpSize % a.length;
  g.step.e = kWarpSize;
  g.step.l = g.step_l;
  g.wrap.e = 0;
  g.wrap.l = 0;  // (advance subtracts length itself)
  row_steps(a.reset_at, a.length, g, g.step.reset, g.wrap.reset);
  row_steps(a.mask_at, a.length, g, g.step.mask, g.wrap.mask);
  row_steps(a.coeff_at, a.length, g, g.step.coeff, g.wrap.coeff);
  const int64_t target = ctx.sms * kRowWarpsPerSM;
  bool whole_rows = false;
  if (a.outer >= ctx.sms * kRowAlignedWarpsPerSM) {
    const int64_t rows = ceil_div(a.outer, target);
    g.chunk_len = rows * a.length;
    whole_rows = true;
  } else {
    const int64_t chunks = std::clamp<int64_t>(ceil_div(g.n, kTile * kRowMinTiles), 1, target);
    g.chunk_len = ceil_div(ceil_div(g.n, chunks), kTile) * kTile;
  }
  g.chunks = ceil_div(g.n, g.chunk_len);
  const unsigned grid = grid_size(ctx, ceil_div(g.chunks, kRowWarps), kRowBlocksPerSM);
  if (whole_rows || g.chunks == 1) {
    rows_kernel<true, C, in_t, out_t><<<grid, kRowThreads, 0, ctx.stream>>>(a, g, nullptr,
                                                                           nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  SegState<C>* t = scratch_states<SegState<C>>(ctx, g.chunks);
  rows_kernel<false, C, in_t, out_t><<<grid, kRowThreads, 0, ctx.stream>>>(a, g, t, nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_carries(a, ctx, t, /*lines=*/1, g.chunks, /*inner=*/1, /*rows=*/true);
  rows_kernel<true, C, in_t, out_t><<<grid, kRowThreads, 0, ctx.stream>>>(a, g, nullptr, t);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace seg

template <class Combine, class in_t, class out_t>
void launch_segmented(const SegmentedDeviceProblem& p) {
  seg::Args<Combine, in_t, out_t> a;
  a.input = static_cast<const in_t*>(p.input);
  a.coeff = static_cast<const in_t*>(p.coeff);
  a.coeff_at = p.coeff_at;
  a.mask = p.mask;
  a.mask_at = p.mask_at;
  a.reset = p.reset;
  a.reset_at = p.reset_at;
  a.values = static_cast<out_t*>(p.output);
  a.indices = p.indices;
  a.initial = static_cast<const out_t*>(p.initial);
  a.outer = p.outer;
  a.length = p.length;
  a.inner = p.inner;
  a.exclusive = p.flags.exclusive;
  a.reverse = p.flags.reverse;
  if (a.inner == 1) {
    seg::launch_rows(a, p.ctx);
  } else {
    seg::launch_columns(a, p.ctx);
  }
}

}  // namespace scanops::cuda
