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
//     nothing from before a row. One launch (flat_kernel, namespace flat below): blocks of
//     256 threads scan tiles of 256 * K elements (vector loads and stores through a shared-
//     memory transpose, the reset read as bits, 16 bytes at a time), chunks of a few tiles
//     chained by a deterministic decoupled look-back; a chunk whose first element is a head
//     needs no carry and reads its elements once, any other reduces them first (a second
//     read, from L2).
//   inner > 1 (columns), few long lines of a cheap combine over dense operands (a sum or
//     product whose (state, head) vectors fit: float32 / float64 / int64 / complex64 sums,
//     float64 / int64 products): column_scan.cuh's vector column tiles run on (state, head)
//     pairs (launch_vec_columns below), one launch (a tile read twice, the second from L2).
//   inner > 1 (columns), the rest: a thread per (outer index, chunk of positions, column),
//     the column fastest among consecutive threads (coalesced loads), walking its positions
//     with K elements loaded ahead (walk_batched).
//       outer * inner >= kColumnLinesPerSM lines per SM, or short lines: whole lines, one
//       launch. Otherwise lines are cut into chunks, at most kColumnThreadsPerSM threads per
//       SM (one round of resident threads): the chunk totals (first launch), their exclusive
//       scan into carries (second), the rescan from the carries (third).
//
// Carries of column chunks (the state a chunk continues from) come from the totals of its
// line by one thread per line (up to kSerialCarries chunks a line) or by a block per line
// with a block scan.
//
// Determinism: no atomics on values (the row kernel hands out chunks by an atomic counter);
// which elements are combined in which order depends only on the shape and the SM count
// (the chunking), never on timing.
//
// Carries (Carry, common.cuh): column chunk totals and their scan, the row tiles' thread
// folds, block scans, tile-to-tile states and look-back states are in carry_combine_t<C>
// (float64 for float32 linear recurrences); each thread or chunk rescans its elements in C
// from its carry rounded once (Carry::narrow). For every other combine the two are one.
//
// Column chunk totals start from their first element, not from identity() combined with it
// (which is not exact for every combine: 0.0 + -0.0 is 0.0), so a chunk boundary changes the
// association of a floating fold but never adds an operand. The row tiles combine identity()
// into a tile's total where the tile holds no head (a block scan's carry, elements past the
// sequence's end), as the unsegmented row kernels do: a sign of zero may differ there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/cuda/block_scan.cuh"
#include "ops/cuda/column_scan.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/lookback.cuh"
#include "ops/cuda/segmented.h"

namespace scanops::cuda {
namespace seg {

// Columns: blocks of 256 threads, 4 blocks per SM (K loads in flight per thread).
constexpr int kColumnThreads = 256;
constexpr int kColumnBlocksPerSM = 4;
constexpr int64_t kColumnThreadsPerSM = kColumnThreads * kColumnBlocksPerSM;  // when cut
constexpr int64_t kColumnLinesPerSM = 512;  // at least this many lines: whole lines
constexpr int64_t kColumnMinChunk = 32;     // positions a chunk holds, at least

// Carries: one thread per line folds up to kSerialCarries chunk totals, else a block per line.
constexpr int64_t kSerialCarries = 32;
constexpr int kCarryThreads = 256;

// Elements a column thread loads ahead: about kBytes bytes of states, a power of two <= 16.
template <class C, int kBytes>
constexpr int items() {
  constexpr int b = static_cast<int>(sizeof(typename C::state_t));
  constexpr int k = kBytes / b;
  return k >= 16 ? 16 : k >= 8 ? 8 : k >= 4 ? 4 : k >= 2 ? 2 : 1;
}
constexpr int kColumnBytes = 64;

template <class C, class in_t, class out_t>
using Args = SegmentedArgs<C, in_t, out_t>;

// Outputs larger than this take evict-first stores (several times L2): the second reads of
// the row chunks and of the column tiles need L2.
constexpr int64_t kStreamingBytes = int64_t{64} << 20;

// A carry with its head flag (Carry's combine), and the conversions from and to SegState<C>.
template <class C>
using WideSeg = SegState<carry_combine_t<C>>;
// (The state itself where the two combines are one: the same machine code as before
// Carry, not a field-by-field copy that the compiler schedules differently.)
template <class C>
__device__ __forceinline__ WideSeg<C> widen_seg(const SegState<C>& v) {
  if constexpr (Carry<C>::kWide) {
    return {Carry<C>::widen(v.s), v.head};
  } else {
    return v;
  }
}
template <class C>
__device__ __forceinline__ SegState<C> narrow_seg(const WideSeg<C>& v) {
  if constexpr (Carry<C>::kWide) {
    return {Carry<C>::narrow(v.s), v.head};
  } else {
    return v;
  }
}

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

// apply<false> in Carry's combine: the element widened, then folded into a carry.
template <class C>
__device__ __forceinline__ void fold_wide(const typename C::state_t& x, bool h, WideSeg<C>& r) {
  const auto w = Carry<C>::widen(x);
  if (h) {
    r.s = w;
    r.head = true;
  } else {
    r.s = carry_combine_t<C>::combine(r.s, w);
  }
}

// SegmentedArgs::walk over scan positions [k0, k1) of line (o, i), `at` the offsets of
// position k0 and `d` their step from one scan position to the next; K elements are loaded
// (lifted, tested for heads) before any is taken in: K loads in flight per thread, not one.
// kWrite: writes each result, r a SegState<C>; else folds into r, a carry (WideSeg<C>).
template <bool kWrite, class C, class in_t, class out_t, class R>
__device__ __forceinline__ void walk_batched(const Args<C, in_t, out_t>& a, int64_t k0,
                                             int64_t k1, Offsets at, const Offsets& d, R& r) {
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
        if constexpr (kWrite) {
          apply<true>(a, e, x[t], h[t], r);
        } else {
          fold_wide<C>(x[t], h[t], r);
        }
        e += d.e;
      }
    }
  }
}

// ---- columns (inner > 1): a thread per (o, chunk, i) -------------------------------------

// Thread g = (o * chunks + c) * inner + i walks positions [c * chunk_len, ...) of line (o, i).
// kWrite false: writes the chunk's total to totals[g] (from its first element, in Carry's
// combine). kWrite true: walks from carries[g] rounded (nullptr: whole lines, from
// line_start) and writes.
template <bool kWrite, class C, class in_t, class out_t>
__global__ void __launch_bounds__(kColumnThreads, kColumnBlocksPerSM)
    columns_kernel(const Args<C, in_t, out_t> a, int64_t chunks, int64_t chunk_len,
                   WideSeg<C>* totals, const WideSeg<C>* carries) {
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
      SegState<C> r = carries != nullptr ? narrow_seg<C>(carries[g]) : a.line_start(o, i);
      walk_batched<true>(a, k0, k1, at, d, r);
    } else {
      WideSeg<C> r{Carry<C>::widen(lift_at(a, at)),
                   k0 == 0 ? a.initial == nullptr : a.reset[at.reset]};
      Offsets next = at;
      step_offsets<C>(next, d);
      walk_batched<false>(a, k0 + 1, k1, next, d, r);
      totals[g] = r;
    }
  }
}

// ---- carries: chunk totals -> the state each chunk starts from (in place) ----------------

// The totals of line g = o * inner + i sit at t[(o * chunks + c) * inner + i], c = 0 ..
// chunks - 1; afterwards t holds the carries: carry_0 = the line's start, carry_{c+1} =
// combine(carry_c, total_c). All in Carry's combine (W below: SegState<W> = WideSeg<C>).

// Totals are read kCarryBatch at a time, all loads issued before the first combine.
constexpr int kCarryBatch = 4;

// The fold of totals c0 .. c1 - 1 of a line (c0 < c1), t[at(c)] being chunk c's (C: here the
// carries' combine).
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
    carries_serial_kernel(const Args<C, in_t, out_t> a, WideSeg<C>* t, int64_t lines,
                          int64_t chunks, int64_t inner) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < lines;
       g += stride) {
    const int64_t o = g / inner;
    const int64_t i = g - o * inner;
    const auto at = [&](int64_t c) { return (o * chunks + c) * inner + i; };
    rescan_run(t, at, 0, chunks, widen_seg<C>(a.line_start(o, i)));
  }
}

// A block per line: thread j folds a run of consecutive totals, a block scan gives each run
// the state before it, the thread rewrites its run as carries.
template <class C, class in_t, class out_t>
__global__ void __launch_bounds__(kCarryThreads)
    carries_block_kernel(const Args<C, in_t, out_t> a, WideSeg<C>* t, int64_t lines,
                         int64_t chunks, int64_t inner) {
  using seg_t = WideSeg<C>;
  using SC = SegmentedCombine<carry_combine_t<C>>;
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
    const seg_t agg = c0 < c1 ? fold_run(t, at, c0, c1) : SC::identity();
    const seg_t start = widen_seg<C>(a.line_start(o, i));
    seg_t total;
    const seg_t r = Scan::exclusive_scan(
        storage, false, agg, [&](const seg_t&) { return start; }, total);
    rescan_run(t, at, c0, c1, r);
    __syncthreads();  // the storage is reused by the next line
  }
}

template <class C, class in_t, class out_t>
void launch_carries(const Args<C, in_t, out_t>& a, const LaunchContext& ctx, WideSeg<C>* t,
                    int64_t lines, int64_t chunks, int64_t inner) {
  if (chunks <= kSerialCarries) {
    carries_serial_kernel<C, in_t, out_t>
        <<<grid_size(ctx, ceil_div(lines, kCarryThreads), 8), kCarryThreads, 0, ctx.stream>>>(
            a, t, lines, chunks, inner);
  } else {
    carries_block_kernel<C, in_t, out_t>
        <<<grid_size(ctx, lines, 8), kCarryThreads, 0, ctx.stream>>>(a, t, lines, chunks, inner);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- columns through the vector column tiles -----------------------------------------------
//
// Few long lines (what the kernels above cut into chunks, three launches) of a cheap combine
// over dense operands take column_scan.cuh's column_vec_kernel, run on the (state, head)
// pairs: TileSegCombine is SegmentedCombine with the members that kernel reads of a combine,
// VecSegSource lifts each element with its head flag (vector loads of the input, mask and
// reset; combines of one operand: a linear recurrence's lanes do not fit), VecSegSink lowers
// a pair's state. The tiles' aggregates, warp
// scans and per-column deterministic look-back are that kernel's; a tile whose aggregate holds
// a head in every column publishes it as its inclusive prefix at once (owns_prefix), so with
// short segments the tiles do not wait in a chain. The association is the kernel's, fixed by
// the shape (run-to-run identical), as for the unsegmented columns. Measured (H200, against
// the three passes): docs/benchmarks/h200-2026-11-29-segmented-columns.md.
//
// (The head as a 32-bit word, not SegState's bool: with bools in the lanes' vectors of
// states ptxas kept them on the stack, 200-400 bytes a thread.)
template <class C>
using TileSegState = SegState<C, uint32_t>;

template <class C>
struct TileSegCombine : SegmentedCombine<C, uint32_t> {
  using state_t = TileSegState<C>;
  static constexpr int arity = 1;
  static constexpr bool indexed = false;
  static constexpr bool selects = C::selects;
  static constexpr bool costly = C::costly;
  static __device__ __forceinline__ bool owns_prefix(const state_t& s) { return s.head != 0; }
  static __device__ __forceinline__ state_t exclusive_before(const state_t& before,
                                                             const state_t& x) {
    return x.head != 0 ? SegmentedCombine<C, uint32_t>::identity() : before;
  }
};

}  // namespace seg

// The look-back's combine of TileSegCombine: SegmentedCombine's (pinned.cuh).
template <class C>
struct PinnedCombine<seg::TileSegCombine<C>> : PinnedCombine<SegmentedCombine<C, uint32_t>> {};

namespace seg {

// Element i at position pos of its line: (lift, head) with SegmentedArgs' head rule (the
// line's first element in scan order is a head where the line has no initial value; any
// other reads the reset of its own row forward, of the next row reverse). The reset is
// dense along the line (a vector at i + head_step) or one flag a row shared by the columns
// (`rows`: the flag at pos * row_stride + head_step: jagged values of shape (total,
// features), the segment ops' layout, or one flag a token of (B, L, features)). The
// companions (mask, reset) are dense along the line with any stride across
// outer indices: at_outer gives a tile the source of its outer index o (its companions moved
// once by o * shift, where shift = the outer stride - length * inner, so that element i
// reads them at i; for row flags, shift = the reset's outer stride).
//
// Tried (H200, bench/ab_env.py "seg cols", 2026-11-29; the record
// h200-2026-11-29-segmented-columns-2.md): the two reset forms as two source types instead
// of the run-time `rows`: float64 (N/128, 64) with a flag every 4 rows 51% -> 34% of the
// floor (ncu: fewer instructions, 8 -> 14 cycles a warp instruction), float32 level. The
// reset and mask as words of kVec bytes tested in place (no byte permutes): float32 70 -> 50
// thread instructions an element (ncu) at the same time. The words tested after the batch's
// loads (in lift_held): 150-450 bytes of stack.
template <class C, class in_t>
struct VecSegSource {
  using state_t = TileSegState<C>;
  using held_t = state_t;
  static constexpr int kVec = vec_width<in_t>();
  static constexpr bool kCompanions = false;
  static constexpr int kInBytes = sizeof(in_t);
  // Rows a lane takes in a tile, and holds at a time (column_scan.cuh's vec_tile_rows and
  // vec_tile_held_rows): 32 and 8, a tile of 1024 rows of 64 float32 columns (256 KB) read
  // twice. Measured on the H200 (bench/ab_env.py, 2^28 elements, share of the floor; float32
  // (N/64, 64) along dim 0 with a flag every 4 rows / float64 (N/128, 64)): 4 rows held,
  // no second read, 19.9% / 26.5%; 16 rows holding 8 (4 for float64) 30.9% / 43.1%; these
  // 30.3% / 50.6%; the same in 8-warp tiles, two blocks an SM, 31.4% / 41.5% (float64 holding
  // 4). The three passes of launch_columns: 22.8% / 39.7%.
  static constexpr int kTileRows = 32;
  static constexpr int kHeldRows = 8;
  // (No coefficients: vec_columns_compiled rejects every linear recurrence, whose (state,
  // head) lanes are 48 bytes against its 32.)
  static_assert(C::arity == 1, "the vector column tiles take combines of one operand");
  const in_t* in;
  const bool* mask;  // nullptr: none
  const bool* reset;
  int64_t mask_shift, reset_shift;  // per outer index (at_outer)
  int64_t head_step;   // dense: 0 forward, inner reverse; row flags: 0, row_stride reverse
  int64_t row_stride;  // row flags: the reset's stride along the scan dim
  int64_t first;       // the position of a line's first element in scan order
  bool first_head;     // the lines have no initial values
  bool rows;           // the reset is one flag a row (else dense)
  // Row flags of 4-byte inputs: the input kHeldRows rows ahead (the lane's next batch) asked
  // of L2 as each vector is loaded (`ahead` elements, signed; 0: none; never past [0, n)).
  // Measured (H200, ab_env "seg cols", one library with the distance as a run-time switch):
  // float32 (N/64, 64) with a flag every 4 rows 30.6% -> 33.6% of the floor, one flag a token
  // of (8, N/512, 64) 31.9% -> 35.1%; 16 and 32 rows ahead +2% / 0%. Not taken: dense resets
  // (-1.6% to +5%: their reset vectors still wait) and float64 (-0.8%).
  int64_t ahead;
  int64_t n;  // the input's elements

  __device__ __forceinline__ VecSegSource at_outer(int64_t o) const {
    VecSegSource t = *this;
    if constexpr (kHasMask<C>) {
      if (mask != nullptr) t.mask += o * mask_shift;
    }
    t.reset += o * reset_shift;
    return t;
  }
  static __device__ __forceinline__ held_t held_identity() {
    return SegmentedCombine<C, uint32_t>::identity();
  }
  __device__ __forceinline__ state_t lift_held(const held_t& h) const { return h; }
  __device__ __forceinline__ void hold_vec(int64_t i, const int64_t (&pos)[kVec],
                                           held_t (&out)[kVec]) const {
    using V = Vec<in_t, kVec>;
    using B = Vec<bool, kVec>;
    if (ahead != 0) {
      const int64_t j = i + ahead;
      if (j >= 0 && j < n) asm volatile("prefetch.global.L2 [%0];" ::"l"(in + j));
    }
    const V x = *reinterpret_cast<const V*>(in + i);
    B m{};
    if constexpr (kHasMask<C>) {
      if (mask != nullptr) m = *reinterpret_cast<const B*>(mask + i);
    }
    const bool at_first = pos[0] == first;  // (a vector's elements share their row)
    B r{};
    if (!at_first) {
      if (rows) {
        const bool h = reset[pos[0] * row_stride + head_step];
#pragma unroll
        for (int v = 0; v < kVec; ++v) r.v[v] = h;
      } else {
        r = *reinterpret_cast<const B*>(reset + i + head_step);
      }
    }
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      if constexpr (kHasMask<C>) {
        out[v].s = mask != nullptr && !m.v[v] ? C::identity() : C::template lift<in_t>(x.v[v]);
      } else {
        out[v].s = C::template lift<in_t>(x.v[v]);
      }
      out[v].head = at_first ? first_head : r.v[v];  // (0 or 1)
    }
  }
};

// OutputSink's stores of a pair's state (its fields: vec_columns_ok reads them).
template <class C, class out_t>
struct VecSegSink : OutputSink<C, out_t> {
  using Base = OutputSink<C, out_t>;
  using state_t = TileSegState<C>;
  using lowered_t = typename Base::lowered_t;
  static constexpr int kVec = Base::kVec;
  __device__ __forceinline__ state_t line_start(int64_t line) const {
    return {Base::line_start(line), 1u};  // (SegmentedArgs::line_start)
  }
  __device__ __forceinline__ bool has_epilogue() const { return false; }
  static __device__ __forceinline__ lowered_t lower(const state_t& s) { return Base::lower(s.s); }
  template <bool kEpilogue = true>
  __device__ __forceinline__ void put_vec(int64_t i, const lowered_t (&y)[kVec]) const {
    Base::template put_vec<false>(i, y);
  }
};

// Whether the vector column tiles took the problem (else the caller's kernels run it).
template <class C, class in_t, class out_t>
bool launch_vec_columns(const Args<C, in_t, out_t>& a, const LaunchContext& ctx) {
  using K = TileSegCombine<C>;
  using Snk = VecSegSink<C, out_t>;
  if constexpr (C::arity != 1) {
    return false;  // (VecSegSource)
  } else if constexpr (!vec_columns_compiled<K, VecSegSource<C, in_t>, Snk>()) {
    return false;
  } else {
    using Src = VecSegSource<C, in_t>;
    constexpr int V = Src::kVec;
    // Dense along the line, and vectors that stay aligned at every outer index.
    const auto dense = [&](const SegStrides& st) {
      return st.sl == a.inner && st.si == 1 && (a.outer == 1 || st.so % V == 0);
    };
    const bool masked = kHasMask<C> && a.mask != nullptr;
    const bool rows = a.reset_at.si == 0;  // one flag a row
    if (!(rows || (dense(a.reset_at) && reinterpret_cast<uintptr_t>(a.reset) % V == 0)) ||
        (masked && !dense(a.mask_at))) {
      return false;
    }
    const ColTileGeometry g =
        vec_tile_geometry<Src>(a.outer, a.length, a.inner, ScanFlags{a.exclusive, a.reverse});
    if (!vec_tiles_fit<V>(g)) return false;
    const int64_t line = a.length * a.inner;
    const int64_t n = a.outer * line;
    const Snk dst{{a.values, nullptr, n * static_cast<int64_t>(sizeof(out_t)) > kStreamingBytes,
                   nullptr, nullptr, nullptr, a.initial}};
    const bool* mask = masked ? a.mask : nullptr;
    const Src src{a.input,
                  mask,
                  a.reset,
                  a.mask_at.so - line,
                  rows ? a.reset_at.so : a.reset_at.so - line,
                  a.reverse ? (rows ? a.reset_at.sl : a.inner) : 0,
                  a.reset_at.sl,
                  a.reverse ? a.length - 1 : 0,
                  a.initial == nullptr,
                  rows,
                  rows && sizeof(in_t) == 4 ? (a.reverse ? -1 : 1) * Src::kHeldRows * a.inner : 0,
                  n};
    if (!vec_columns_ok<K>(src, dst, a.inner)) return false;
    launch_column_vec<K>(ctx, src, dst, g);
    return true;
  }
}

template <class C, class in_t, class out_t>
void launch_columns(const Args<C, in_t, out_t>& a, const LaunchContext& ctx) {
  const int64_t lines = a.outer * a.inner;
  if (lines < ctx.sms * kColumnLinesPerSM && launch_vec_columns(a, ctx)) return;
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
  WideSeg<C>* t = scratch_states<WideSeg<C>>(ctx, threads);
  // Zeroed first: the totals are stored field by field where the compiler splits the store,
  // and loaded whole by the carry pass, whose loads then read padding bytes (a state and a
  // bool) that nothing wrote (compute-sanitizer initcheck reported them; never used as values).
  C10_CUDA_CHECK(cudaMemsetAsync(t, 0, threads * static_cast<int64_t>(sizeof(WideSeg<C>)),
                                 ctx.stream));
  columns_kernel<false, C, in_t, out_t><<<grid, kColumnThreads, 0, ctx.stream>>>(
      a, chunks, chunk_len, t, nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_carries(a, ctx, t, lines, chunks, a.inner);
  columns_kernel<true, C, in_t, out_t><<<grid, kColumnThreads, 0, ctx.stream>>>(
      a, chunks, chunk_len, nullptr, t);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- rows (inner == 1): block tiles over the flat sequence, one launch ---------------------
//
// The flat sequence of n = outer * length elements (element e = o * length + l of the
// tensor) is cut into memory tiles of kTile = 256 * K elements (tile T: [T * kTile, ...),
// only the last one partial), visited in scan order (descending for a reverse scan), and the
// tiles into chunks of chunk_tiles consecutive tiles in scan order. Companions (reset, mask,
// coefficients) are read dense in the flat sequence: one not laid out so (broadcast, strided)
// is first copied into scratch in that layout (densify), so that every row problem takes the
// same kernel and its results do not depend on the companions' layout, bit for bit. A block
// takes chunks in order from an atomic counter (an index, never a value) and:
//   - where the chunk's first element in scan order is a head (a row's first, or reset; the
//     sequence's first always), it needs no carry: it scans its tiles once, carrying the
//     state from tile to tile, and publishes the state after its last as its inclusive
//     prefix;
//   - otherwise it reduces the chunk (a first read: each warp folds a contiguous eighth of
//     it, K consecutive elements per lane loaded as vectors, a warp scan of the lanes' folds,
//     its steps from the last back to the first that holds a head, the ones before unread;
//     one barrier for the eight warps'), finds its carry by a look-back over the chunks
//     before it, then scans its tiles from the carry (a second read, from L2: a chunk is
//     ~32 KB of input, asked of L2 first).
// A scan tile: warp-striped vector loads of the input (and coefficients) through a padded
// shared-memory transpose into K consecutive elements per thread, the thread's head bits
// from K bytes of the reset loaded at once and its row starts from one division, the thread
// folds its elements from its last head, a block scan (heads as ballots) gives each thread
// its prefix, the thread rescans its elements into the transpose buffer, and the results
// leave as striped vector stores. Elements past the sequence's end lift to identity()
// (`keep` bits) instead of branching per element. Offsets inside a tile are 32-bit, tile and
// element offsets 64-bit.
//
// Look-back (deterministic, as lookback.cuh): a chunk publishes its aggregate A (with
// SegmentedCombine's head flag), reads its predecessors' published states until the nearest
// "complete" one, and folds them left to right from it; it publishes its inclusive prefix
// I = combine(P, A). Complete: an inclusive prefix, or an aggregate that holds a head (its
// inclusive prefix is the aggregate itself, bit for bit: combine(f, g) = g when g holds a
// head; such a chunk publishes it as inclusive at once). Whichever complete state a walk
// meets, the fold gives the same bits, so the carries depend only on the shape (the
// chunking), never on timing. A 4-byte state shares one 64-bit status word with its flag
// and head bit (one L2 round trip per read); wider ones keep a flag and two state arrays.
namespace flat {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;

// The element the transpose carries: the input, or (arity 2) the coefficient and the input.
// Lifted (masked, positioned) only once each thread holds its consecutive elements.
template <class in_t>
struct Pair {
  in_t a, x;
};
template <class C, class in_t>
using elem_t = std::conditional_t<C::arity == 2, Pair<in_t>, in_t>;

constexpr int pow2_below(int v) { return v <= 1 ? 1 : 2 * pow2_below(v / 2); }

// Elements per thread: about 64 bytes of held elements (each in a register of its own, so
// at least 4 bytes counted) and at most 128 bytes of lowered results per thread in the
// transpose buffer, a multiple of both vector widths, 2 .. 32 (the head bits are one word).
template <class C, class in_t, class out_t>
constexpr int items() {
  using E = elem_t<C, in_t>;
  using L = typename OutputSink<C, out_t>::lowered_t;
  constexpr int e = sizeof(E) < 4 ? 4 : static_cast<int>(sizeof(E));
  constexpr int a = 64 / e;
  constexpr int b = 128 / static_cast<int>(sizeof(L));
  constexpr int v = pow2_below(a < b ? a : b);
  constexpr int vi = vec_width<in_t>(), vo = vec_width<out_t>();
  constexpr int lo = vi > vo ? vi : vo;
  constexpr int k = v < lo ? lo : v;
  return k < 2 ? 2 : k > 32 ? 32 : k;
}

// Resident blocks the register budget must allow: 4 (64 registers) for states of <= 8 bytes
// with their head flag, else 2.
template <class C>
constexpr int min_blocks() {
  return sizeof(SegState<C>) <= 8 ? 4 : 2;
}

template <class C, class in_t, class out_t>
struct Params {
  const in_t* in;
  const in_t* coeff;  // arity 2
  const bool* mask;   // nullptr: none
  const bool* reset;
  OutputSink<C, out_t> dst;  // values, indices, initial values
  int64_t n, outer, length;
  int64_t tiles, chunk_tiles, chunks;
  FastDiv32 by_length;  // narrow only
  bool narrow;          // n < 2^31: positions by FastDiv32
  bool exclusive, reverse;
};

template <class C>
struct Status {
  unsigned long long* counter = nullptr;  // nullptr: a single chunk, no look-back
  unsigned long long* words = nullptr;    // packed (4-byte states)
  unsigned* flags = nullptr;              // unpacked
  SegState<C>* aggregate = nullptr;
  SegState<C>* inclusive = nullptr;
};

template <class C>
constexpr bool kPacked = sizeof(typename C::state_t) == 4;
constexpr unsigned kHeadBit = 4;  // in a packed word's flag half: the state holds a head

__device__ __forceinline__ int slot(int e) { return e + (e >> 5); }  // padded: one per 32

// 4 bytes of bools (any nonzero byte true) as bits 0..3, byte i -> bit i.
__device__ __forceinline__ unsigned nibble(unsigned w) {
  return (((__vcmpne4(w, 0u) & 0x01010101u) * 0x01020408u) >> 24) & 0xFu;
}

// K bytes of bools at p (aligned to min(K, 16) bytes) as bits 0 .. K - 1.
template <int K>
__device__ __forceinline__ unsigned load_bits(const bool* p) {
  if constexpr (K == 2) {
    const unsigned v = *reinterpret_cast<const unsigned short*>(p);
    return ((v & 0xFFu) != 0 ? 1u : 0u) | ((v >> 8) != 0 ? 2u : 0u);
  } else {
    constexpr int kWords = K / 4;
    constexpr int kPer = kWords < 4 ? kWords : 4;  // words per load (16 bytes at most)
    unsigned bits = 0;
#pragma unroll
    for (int i = 0; i < kWords; i += kPer) {
      const auto v = *reinterpret_cast<const Vec<unsigned, kPer>*>(p + 4 * i);
#pragma unroll
      for (int u = 0; u < kPer; ++u) bits |= nibble(v.v[u]) << (4 * (i + u));
    }
    return bits;
  }
}

template <int K>
__device__ __forceinline__ unsigned low_bits(int n) {  // bits 0 .. n - 1, 0 <= n <= K
  if constexpr (K == 32) {
    return n >= 32 ? ~0u : (1u << n) - 1u;
  } else {
    return (1u << n) - 1u;
  }
}

// Bits 0 .. K - 1 reversed (bit i -> bit K - 1 - i).
template <int K>
__device__ __forceinline__ unsigned reverse_bits(unsigned b) {
  const unsigned r = __brev(b);
  if constexpr (K == 32) {
    return r;
  } else {
    return r >> (32 - K);
  }
}

__device__ __forceinline__ bool byte_set(const bool* p, int64_t i) {
  return reinterpret_cast<const unsigned char*>(p)[i] != 0;
}

template <class C, class in_t, class out_t, int K>
struct Tile {
  using state_t = typename C::state_t;
  // The carries (Carry): thread folds, the block scan, the reduce's warp folds and the
  // states from tile to tile are in W; each thread rescans its items in C.
  using CW = Carry<C>;
  using W = typename CW::type;
  using carry_t = typename W::state_t;
  using seg_t = SegState<W>;
  using SC = SegmentedCombine<W>;
  using E = elem_t<C, in_t>;
  using Sink = OutputSink<C, out_t>;
  using lowered_t = typename Sink::lowered_t;
  using P = Params<C, in_t, out_t>;
  using Scan = BlockScan<W, kThreads>;
  static constexpr int kWarpItems = kWarpSize * K;
  static constexpr int kTile = kThreads * K;
  static constexpr int kSlots = kWarpItems + kWarpItems / kWarpSize;
  static constexpr int VI = vec_width<in_t>();
  static constexpr int VO = Sink::kVec;
  static constexpr int VB = K < 16 ? K : 16;  // bytes per head-bit load
  static_assert(K % VI == 0 && K % VO == 0 && K >= 2 && K <= 32);

  union Exchange {
    RawArray<E, kSlots> in;
    RawArray<lowered_t, kSlots> out;
  };
  struct Storage {
    Exchange ex[kWarps];
    typename Scan::Storage scan;
    RawArray<seg_t, kWarps> warp_agg;  // the reduce's warp folds
  };

  // The tile's memory range [lo, lo + nt) of scan-order tile i.
  static __device__ __forceinline__ void range(const P& p, int64_t i, int64_t& lo, int& nt) {
    const int64_t t = p.reverse ? p.tiles - 1 - i : i;
    lo = t * kTile;
    nt = static_cast<int>(std::min<int64_t>(kTile, p.n - lo));
  }

  // The element lifted; identity() where not kept (masked off, or past the sequence's end).
  static __device__ __forceinline__ state_t lift(const E& v, bool keep, int64_t pos) {
    if (!keep) return C::identity();
    if constexpr (C::arity == 2) {
      return C::template lift<in_t>(v.a, v.x);
    } else if constexpr (C::indexed) {
      return C::template lift<in_t>(v, pos);
    } else {
      return C::template lift<in_t>(v);
    }
  }

  // The position along its row of the scan item after one at `pos`.
  static __device__ __forceinline__ int64_t next_pos(const P& p, int64_t pos) {
    if (p.reverse) return pos == 0 ? p.length - 1 : pos - 1;
    return pos + 1 == p.length ? 0 : pos + 1;
  }

  // A thread's K items: scan item k (k < nv valid) at memory e0 + k (forward) or e0 - k.
  struct Items {
    unsigned heads = 0;      // bit k: item k starts a segment (a row's first, or reset)
    unsigned row_heads = 0;  // bit k: item k is a row's first in scan order
    unsigned keep = 0;       // bit k: item k is valid and not masked off
    int64_t l0 = 0;          // item 0's position along its row
    int64_t j_first = 0;     // the row of the first row start among the items
  };

  static __device__ __forceinline__ Items items_at(const P& p, int64_t e0, int nv) {
    Items it;
    if (nv <= 0) return it;
    const bool rev = p.reverse;
    int64_t o0 = 0;
    if (p.outer == 1) {
      it.l0 = e0;
    } else if (p.narrow) {
      const auto e32 = static_cast<uint32_t>(e0);
      const uint32_t q = p.by_length.div(e32);
      o0 = q;
      it.l0 = static_cast<int64_t>(e32 - q * static_cast<uint32_t>(p.length));
    } else {
      o0 = e0 / p.length;
      it.l0 = e0 - o0 * p.length;
    }
    const int64_t l0 = it.l0;
    // Row starts in scan order: position 0 (forward) or length - 1 (reverse).
    int64_t k1;
    if (!rev) {
      k1 = l0 == 0 ? 0 : p.length - l0;
      it.j_first = l0 == 0 ? o0 : o0 + 1;
    } else {
      k1 = l0 == p.length - 1 ? 0 : l0 + 1;
      it.j_first = l0 == p.length - 1 ? o0 : o0 - 1;
    }
    for (int64_t k = k1; k < nv; k += p.length) it.row_heads |= 1u << k;
    // Resets: of the item itself (forward) or of the next element in memory (reverse). The
    // items fill the K-byte block [m0, m0 + K) where nv == K.
    const int64_t m0 = rev ? e0 - (K - 1) : e0;
    unsigned rb = 0;
    if (nv == K && is_aligned<VB>(p.reset + m0)) {
      const unsigned b = load_bits<K>(p.reset + m0);
      if (!rev) {
        rb = b;
      } else {  // item k needs reset[m0 + K - k]: bit K - k of the block, k >= 1
        rb = (reverse_bits<K>(b) << 1) & low_bits<K>(K);
        if (m0 + K < p.n && byte_set(p.reset, m0 + K)) rb |= 1u;
      }
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t r = rev ? e0 - k + 1 : e0 + k;
        if (k < nv && r < p.n && byte_set(p.reset, r)) rb |= 1u << k;
      }
    }
    const unsigned valid = low_bits<K>(nv);
    it.heads = (rb | it.row_heads) & valid;
    it.keep = valid;
    if constexpr (kHasMask<C>) {
      if (p.mask != nullptr) {
        if (nv == K && is_aligned<VB>(p.mask + m0)) {
          const unsigned b = load_bits<K>(p.mask + m0);
          it.keep = rev ? reverse_bits<K>(b) : b;
        } else {
          unsigned b = 0;
#pragma unroll
          for (int k = 0; k < K; ++k) {
            if (k < nv && byte_set(p.mask, rev ? e0 - k : e0 + k)) b |= 1u << k;
          }
          it.keep = b;
        }
        it.keep &= valid;
      }
    }
    return it;
  }

  // The fold of the items from their last head (all of them if none), and whether they hold
  // a head, in W (each item widened). A row start with an initial value starts its row from
  // start(initial): the fold from that head is prefixed with it (the rows of the row starts
  // are j_first, j_first +- 1, ... in scan order).
  static __device__ __forceinline__ seg_t fold(const P& p, const E (&h)[K], const Items& it) {
    int64_t pos = it.l0;
    auto w = Walk<W>::begin(CW::widen(lift(h[0], it.keep & 1u, pos)));
#pragma unroll
    for (int k = 1; k < K; ++k) {
      if constexpr (C::indexed) pos = next_pos(p, pos);
      const carry_t x = CW::widen(lift(h[k], (it.keep >> k) & 1u, pos));
      if ((it.heads >> k) & 1u) {
        w = Walk<W>::begin(x);
      } else {
        w.push(x);
      }
    }
    seg_t r{w.value(), it.heads != 0};
    if (p.dst.initial != nullptr && it.heads != 0) {
      const int last = 31 - __clz(static_cast<int>(it.heads));
      if ((it.row_heads >> last) & 1u) {
        const int64_t row = it.j_first + (p.reverse ? -1 : 1) * (__popc(it.row_heads) - 1);
        r.s = W::combine(CW::widen(p.dst.line_start(row)), r.s);
      }
    }
    return r;
  }

  // The aggregate of scan positions [0, len) of a chunk whose memory is [a, a + len), as
  // SegmentedCombine folds them: warp w folds positions [w, w + 1) * len_w, len_w = steps *
  // kWarpItems (len <= kWarps * len_w), a warp-tile of K consecutive positions per lane at a
  // time (loaded as vectors, no transpose), the lanes' folds by a warp scan; warp 0 then
  // folds the warps'. Block-wide (one barrier); the result is valid in warp 0.
  static __device__ __forceinline__ seg_t reduce(Storage& st, const P& p, int64_t a, int64_t len,
                                                 int64_t steps) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const bool rev = p.reverse;
    seg_t run = SC::identity();
    // The warp's steps last to first, up to the first (from the end) that holds a head:
    // SegmentedCombine drops whatever precedes a head, so the steps before it are not read.
    // H200, 2^28 float32 cumsum reset= (h200-2026-11-28-last-head.md): uniform 1..64
    // 54.0% -> 58.5% of the floor, 1..4096 53.7% -> 54.7%, one segment 50.3% -> 50.6%.
    // Stops that need the whole block (a barrier) were faster where chunks hold heads and
    // slower on one segment (the barrier alone: 50.6% -> 48.9%): the chunk's last head found
    // first from the reset bytes, the fold from it spread over the block (47.1%); pieces
    // in rounds from the chunk's end, all warps stopping after a round with a head (48.8%,
    // but 1..4096 59.7%). An int counter: an int64 one cost float32's kernel an 8-byte
    // stack frame and 0.7 points on one segment.
#pragma unroll 1
    for (int s = static_cast<int>(steps) - 1; s >= 0; --s) {
      const int64_t q0 = (warp * steps + s) * kWarpItems + lane * K;
      const int nv = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(K, len - q0)));
      const int64_t e0 = rev ? a + len - 1 - q0 : a + q0;
      const int64_t m0 = rev ? e0 - (K - 1) : e0;
      E h[K];
      bool vec = nv == K && is_aligned<VI>(p.in + m0);
      if constexpr (C::arity == 2) vec = vec && is_aligned<VI>(p.coeff + m0);
      if (vec) {
        using V = Vec<in_t, VI>;
        V xv[K / VI];
        V av[C::arity == 2 ? K / VI : 1];
#pragma unroll
        for (int j = 0; j < K / VI; ++j) {
          xv[j] = *reinterpret_cast<const V*>(p.in + m0 + j * VI);
          if constexpr (C::arity == 2) av[j] = *reinterpret_cast<const V*>(p.coeff + m0 + j * VI);
        }
        // Memory element m0 + m is item m (reverse: K - 1 - m), placed by two loops with
        // constant indices: h[] indexed by a value known only at run time (rev) lived in local
        // memory, a stack frame the whole kernel paid for, its scans too (ptxas: 64-128 bytes
        // of stack per thread; the flat kernels then ran at ~80% of their floor where chunks
        // start with a head and ~50% where they reduce first, ~93% and ~61-66% without it, H100,
        // float32 cumsum, bench_segmented's classes).
        const auto elem = [&](int m) {
          E v;
          if constexpr (C::arity == 2) {
            v.a = av[m / VI].v[m % VI];
            v.x = xv[m / VI].v[m % VI];
          } else {
            v = xv[m / VI].v[m % VI];
          }
          return v;
        };
        if (rev) {
#pragma unroll
          for (int m = 0; m < K; ++m) h[K - 1 - m] = elem(m);
        } else {
#pragma unroll
          for (int m = 0; m < K; ++m) h[m] = elem(m);
        }
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) {
          h[k] = E{};  // (not kept)
          if (k < nv) {
            const int64_t at = rev ? e0 - k : e0 + k;
            if constexpr (C::arity == 2) {
              h[k].a = p.coeff[at];
              h[k].x = p.in[at];
            } else {
              h[k] = p.in[at];
            }
          }
        }
      }
      const Items it = items_at(p, e0, nv);
      const seg_t mine = nv > 0 ? fold(p, h, it) : SC::identity();
      const seg_t tot = shfl_idx(warp_inclusive_scan<SC>(mine, 0u, lane), kWarpSize - 1);
      run = s == steps - 1 ? tot : SC::combine(tot, run);
      if (run.head) break;  // (warp-uniform: the lanes' scan's total in every lane)
    }
    if (lane == 0) st.warp_agg[warp] = run;
    __syncthreads();
    seg_t agg = SC::identity();
    if (warp == 0) {
      const seg_t v = lane < kWarps ? st.warp_agg[lane] : SC::identity();
      agg = shfl_idx(warp_inclusive_scan<SC>(v, 0u, lane), kWarps - 1);
    }
    return agg;
  }

  // Scans the tile [lo, lo + nt) from `carry` (the state before it; unused where the tile's
  // first element is a head), writes the results and returns the state after the tile (both
  // carries). Block-wide.
  static __device__ __forceinline__ carry_t scan(Storage& st, const P& p, int64_t lo, int nt,
                                                 const carry_t& carry) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int tid = threadIdx.x;
    const bool rev = p.reverse;
    const bool full = nt == kTile;
    const int wq = warp * kWarpItems;  // the warp's first scan position in the tile
    // (memory offset of the warp's part of a full tile)
    const int r0 = rev ? kTile - wq - kWarpItems : wq;

    // Striped loads into the warp's buffer, each thread then takes K consecutive items.
    E* xb = &st.ex[warp].in[0];
    __syncwarp();  // the previous tile's reads of the buffer are done
    bool vec_in = full && is_aligned<VI>(p.in + lo);
    if constexpr (C::arity == 2) vec_in = vec_in && is_aligned<VI>(p.coeff + lo);
    if (vec_in) {
      using V = Vec<in_t, VI>;
      V xv[K / VI];
      V av[C::arity == 2 ? K / VI : 1];
#pragma unroll
      for (int j = 0; j < K / VI; ++j) {
        const int64_t at = lo + r0 + (j * kWarpSize + lane) * VI;
        xv[j] = *reinterpret_cast<const V*>(p.in + at);
        if constexpr (C::arity == 2) av[j] = *reinterpret_cast<const V*>(p.coeff + at);
      }
#pragma unroll
      for (int j = 0; j < K / VI; ++j) {
#pragma unroll
        for (int t = 0; t < VI; ++t) {
          const int u = (j * kWarpSize + lane) * VI + t;
          E v;
          if constexpr (C::arity == 2) {
            v.a = av[j].v[t];
            v.x = xv[j].v[t];
          } else {
            v = xv[j].v[t];
          }
          xb[slot(rev ? kWarpItems - 1 - u : u)] = v;
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const int u = j * kWarpSize + lane;
        const int q = wq + u;
        if (q < nt) {
          const int64_t at = lo + (rev ? nt - 1 - q : q);
          E v;
          if constexpr (C::arity == 2) {
            v.a = p.coeff[at];
            v.x = p.in[at];
          } else {
            v = p.in[at];
          }
          xb[slot(u)] = v;
        }
      }
    }
    // The thread's items: scan positions tid * K + k of the tile.
    const int nv = std::max(0, std::min(K, nt - tid * K));
    const int64_t e0 = rev ? lo + nt - 1 - tid * K : lo + tid * K;
    const Items it = items_at(p, e0, nv);
    __syncwarp();
    E h[K];
#pragma unroll
    for (int k = 0; k < K; ++k) h[k] = xb[slot(lane * K + k)];
    // (items past the tile's end: kept 0, so identity(); no head)
    const seg_t mine = fold(p, h, it);
    carry_t total;
    const state_t before = CW::narrow(Scan::exclusive_scan(
        st.scan, mine.head, mine.s, [&](const carry_t&) { return carry; }, total));

    // The rescan from `before`, results into the buffer (the block scan's barriers ordered
    // the reads of the held elements before these writes), then striped stores.
    lowered_t* ob = &st.ex[warp].out[0];
    const bool init = p.dst.initial != nullptr;
    const int64_t dir = rev ? -1 : 1;
    auto w = Walk<C>::begin(before);
    int64_t pos = it.l0;
    // One item that is not a row start under an initial value (common.cuh's rescan_step).
    const auto step = [&](int k, bool head, const state_t& x, auto excl) -> lowered_t {
      return rescan_step<C, Sink>(w, k, head, x, before, excl);
    };
    // A thread whose items hold no row start with an initial value (without `initial`, every
    // thread; with it, all but those of a row's first item) takes a loop without that case,
    // one for exclusive and one for inclusive scans: the general loop below tests both at
    // every item, a branch an item around the row start. Measured on the H100 (bench/ab_env.py,
    // 2^28, float32 cumsum reset=, share of the floor): 61-66% -> 66-72%; float16, cummax,
    // logcumsumexp, linear_recurrence 2-4 points. The same bits.
    const auto rescan = [&](auto excl) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const state_t x = lift(h[k], (it.keep >> k) & 1u, pos);
        if constexpr (C::indexed) pos = next_pos(p, pos);
        ob[slot(lane * K + k)] = step(k, (it.heads >> k) & 1u, x, excl);
      }
    };
    if (!(init && it.row_heads != 0)) {
      if (p.exclusive) {
        rescan(std::true_type{});
      } else {
        rescan(std::false_type{});
      }
    } else {  // rows start here under initial values: it.j_first's and the rows after it
      int64_t row = it.j_first;
      state_t s_next = p.dst.line_start(row);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const state_t x = lift(h[k], (it.keep >> k) & 1u, pos);
        if constexpr (C::indexed) pos = next_pos(p, pos);
        const bool head = (it.heads >> k) & 1u;
        lowered_t y;
        if (head && ((it.row_heads >> k) & 1u)) {  // the row's start, then the item
          const state_t s = s_next;
          if ((it.row_heads >> k) >> 1) {
            row += dir;
            s_next = p.dst.line_start(row);
          }
          w = Walk<C>::begin(s);
          w.push(x);
          y = Sink::lower(p.exclusive ? s : w.value());
        } else {
          y = step(k, head, x, p.exclusive);
        }
        ob[slot(lane * K + k)] = y;
      }
    }
    __syncwarp();
    if (full && p.dst.vec_ok(lo)) {
#pragma unroll
      for (int j = 0; j < K / VO; ++j) {
        const int u = (j * kWarpSize + lane) * VO;
        lowered_t v[VO];
#pragma unroll
        for (int t = 0; t < VO; ++t) v[t] = ob[slot(rev ? kWarpItems - 1 - (u + t) : u + t)];
        p.dst.template put_vec<false>(lo + r0 + u, v);
      }
    } else {
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const int u = j * kWarpSize + lane;
        const int q = wq + u;
        if (q < nt) p.dst.put(lo + (rev ? nt - 1 - q : q), ob[slot(u)]);
      }
    }
    return total;
  }
};

// ---- the look-back over chunks (warp 0) ----

template <class C>
__device__ __forceinline__ void publish(const Status<C>& s, int64_t c, unsigned flag,
                                        const SegState<C>& v) {
  if constexpr (kPacked<C>) {
    unsigned bits;
    memcpy(&bits, &v.s, 4);
    const unsigned hi = flag | (v.head ? kHeadBit : 0u);
    detail::store_relaxed(s.words + c, (static_cast<unsigned long long>(hi) << 32) | bits);
  } else {
    detail::store_cg((flag == kInclusive ? s.inclusive : s.aggregate) + c, v);
    detail::store_release(s.flags + c, flag);
  }
}

constexpr int kReads = 4;  // predecessors per lane per round
constexpr int kWindow = kReads * kWarpSize;
constexpr int kHistory = 2 * kWindow;

// Called by the 32 lanes of warp 0 of chunk c >= 1 with its aggregate: publishes it (as
// inclusive where it holds a head), walks back to the nearest complete predecessor, folds
// what it read left to right from there (lookback.cuh's walk_back, the row look-back's own),
// publishes the inclusive prefix (if not yet) and returns the state before the chunk in
// every lane.
template <class C>
__device__ __forceinline__ SegState<C> look_back(const Status<C>& s, SegState<C>* hist,
                                                 int64_t c, const SegState<C>& agg) {
  using seg_t = SegState<C>;
  using SC = SegmentedCombine<C>;
  const int lane = threadIdx.x % kWarpSize;
  if (lane == 0) publish(s, c, agg.head ? kInclusive : kAggregate, agg);
  const auto read = [&](int depth, unsigned(&flag)[kReads], seg_t(&v)[kReads]) {
    if constexpr (kPacked<C>) {  // a flag, the head bit and the state in one load
      unsigned long long w[kReads];
#pragma unroll
      for (int u = 0; u < kReads; ++u) {
        const int64_t j = c - 1 - depth - (u * kWarpSize + lane);
        w[u] = j >= 0 ? detail::load_relaxed(s.words + j)
                      : static_cast<unsigned long long>(kInclusive) << 32;
      }
#pragma unroll
      for (int u = 0; u < kReads; ++u) {
        const int64_t j = c - 1 - depth - (u * kWarpSize + lane);
        while (((w[u] >> 32) & 3u) == kEmpty) w[u] = detail::load_relaxed(s.words + j);
        const auto hi = static_cast<unsigned>(w[u] >> 32);
        flag[u] = hi & 3u;
        const auto bits = static_cast<unsigned>(w[u]);
        v[u].s = C::identity();
        if (j >= 0) memcpy(&v[u].s, &bits, 4);
        v[u].head = (hi & kHeadBit) != 0;
      }
    } else {
#pragma unroll
      for (int u = 0; u < kReads; ++u) {
        const int64_t j = c - 1 - depth - (u * kWarpSize + lane);
        flag[u] = j >= 0 ? detail::load_acquire(s.flags + j) : kInclusive;
      }
#pragma unroll
      for (int u = 0; u < kReads; ++u) {
        const int64_t j = c - 1 - depth - (u * kWarpSize + lane);
        v[u] = SC::identity();
        if (j >= 0) {
          while (flag[u] == kEmpty) flag[u] = detail::load_acquire(s.flags + j);
          v[u] = detail::load_cg((flag[u] == kInclusive ? s.inclusive : s.aggregate) + j);
        }
      }
    }
  };
  // Complete: an inclusive prefix, or an aggregate that holds a head (its own prefix).
  const seg_t prefix = walk_back<SC, kReads, kHistory>(
      hist, read, [](unsigned flag, const seg_t& v) { return flag == kInclusive || v.head; });
  if (!agg.head && lane == 0) publish(s, c, kInclusive, lookback_combine<SC>(prefix, agg));
  return prefix;
}

template <class C, class in_t, class out_t>
__global__ void __launch_bounds__(kThreads, min_blocks<C>())
    flat_kernel(const __grid_constant__ Params<C, in_t, out_t> p,
                const __grid_constant__ Status<carry_combine_t<C>> s) {
  constexpr int K = items<C, in_t, out_t>();
  using T = Tile<C, in_t, out_t, K>;
  using W = typename T::W;  // the carries' combine (chunk states and look-back too)
  using carry_t = typename T::carry_t;
  using seg_t = typename T::seg_t;
  __shared__ typename T::Storage storage;
  __shared__ RawArray<seg_t, kHistory> hist;
  __shared__ RawArray<carry_t, 1> carry_slot;
  __shared__ int64_t next_chunk;
  constexpr int64_t kTile = T::kTile;

  for (int64_t c = blockIdx.x;;) {
    if (s.counter != nullptr) {  // chunks in the order blocks take them
      if (threadIdx.x == 0) next_chunk = static_cast<int64_t>(atomicAdd(s.counter, 1ull));
      __syncthreads();  // (the previous chunk's barriers ordered the reads of next_chunk)
      c = next_chunk;
    }
    if (c >= p.chunks) break;  // uniform
    const int64_t i0 = c * p.chunk_tiles;
    const int64_t i1 = std::min(p.tiles, i0 + p.chunk_tiles);
    // The chunk's memory [a, b), asked of L2 first (all its loads in flight, not a tile's).
    const int64_t a = (p.reverse ? p.tiles - i1 : i0) * kTile;
    const int64_t b = std::min(p.n, (p.reverse ? p.tiles - i0 : i1) * kTile);
    prefetch_l2_range(p.in + a, (b - a) * static_cast<int64_t>(sizeof(in_t)), threadIdx.x,
                      kThreads);
    prefetch_l2_range(p.reset + a, b - a, threadIdx.x, kThreads);
    if constexpr (C::arity == 2) {
      prefetch_l2_range(p.coeff + a, (b - a) * static_cast<int64_t>(sizeof(in_t)), threadIdx.x,
                        kThreads);
    }
    if constexpr (kHasMask<C>) {
      if (p.mask != nullptr) prefetch_l2_range(p.mask + a, b - a, threadIdx.x, kThreads);
    }
    // Whether the chunk's first element in scan order is a head (then it needs no carry).
    bool lead = c == 0;
    if (!lead) {
      const int64_t e = p.reverse ? b - 1 : a;  // (reverse: e + 1 < n, as c > 0)
      const int64_t l = p.outer == 1 ? e : e % p.length;
      lead = p.reverse ? l == p.length - 1 : l == 0;
      if (!lead) lead = byte_set(p.reset, p.reverse ? e + 1 : e);
    }
    carry_t carry = W::identity();
    if (!lead) {
      const seg_t agg = T::reduce(storage, p, a, b - a, p.chunk_tiles);
      if (threadIdx.x < kWarpSize) {
        const seg_t prefix = look_back<W>(s, &hist[0], c, agg);
        if (threadIdx.x == 0) carry_slot[0] = prefix.s;
      }
      __syncthreads();
      carry = carry_slot[0];
    }
#pragma unroll 1
    for (int64_t i = i0; i < i1; ++i) {
      int64_t lo;
      int nt;
      T::range(p, i, lo, nt);
      carry = T::scan(storage, p, lo, nt, carry);
    }
    if (lead && s.counter != nullptr && threadIdx.x == 0) {
      publish(s, c, kInclusive, seg_t{carry, true});
    }
    if (s.counter == nullptr) break;  // a single chunk
  }
}

// Whether a companion holds element (o, l) at o * length + l (dense in the flat sequence).
inline bool flat_dense(const SegStrides& s, int64_t outer, int64_t length) {
  return (length == 1 || s.sl == 1) && (outer == 1 || s.so == length);
}

// dst[e] = src[o * so + l * sl] for e = o * length + l < n.
template <class T>
__global__ void __launch_bounds__(256)
    densify_kernel(const T* src, SegStrides st, int64_t length, int64_t n, FastDiv32 by_length,
                   bool narrow, T* dst) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t o = narrow ? static_cast<int64_t>(by_length.div(static_cast<uint32_t>(e)))
                             : e / length;
    dst[e] = src[o * st.so + (e - o * length) * st.sl];
  }
}

// A companion in the flat layout: itself where dense, else a copy in scratch.
template <class T>
const T* flat_companion(const LaunchContext& ctx, const T* src, const SegStrides& st,
                        int64_t outer, int64_t length) {
  if (flat_dense(st, outer, length)) return src;
  const int64_t n = outer * length;
  T* dst = static_cast<T*>(ctx.scratch->allocate(n * static_cast<int64_t>(sizeof(T))));
  const bool narrow = n <= int64_t{INT32_MAX};
  const FastDiv32 by_length = narrow ? FastDiv32(static_cast<uint32_t>(length)) : FastDiv32();
  densify_kernel<T><<<grid_size(ctx, ceil_div(n, 256), 8), 256, 0, ctx.stream>>>(
      src, st, length, n, by_length, narrow, dst);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dst;
}

// Chunks of about this many bytes of input (4 resident blocks per SM; twice at 2).
constexpr int64_t kChunkBytes = 32768;

template <class C, class in_t, class out_t>
void launch(const Args<C, in_t, out_t>& a, const LaunchContext& ctx) {
  constexpr int K = items<C, in_t, out_t>();
  constexpr int64_t kTile = int64_t{kThreads} * K;
  Params<C, in_t, out_t> p{};
  p.n = a.outer * a.length;
  if (p.n == 0) return;
  p.in = a.input;
  p.reset = flat_companion(ctx, a.reset, a.reset_at, a.outer, a.length);
  p.coeff = nullptr;
  if constexpr (C::arity == 2) {
    p.coeff = flat_companion(ctx, a.coeff, a.coeff_at, a.outer, a.length);
  }
  p.mask = nullptr;
  if constexpr (kHasMask<C>) {
    if (a.mask != nullptr) p.mask = flat_companion(ctx, a.mask, a.mask_at, a.outer, a.length);
  }
  const int64_t out_bytes =
      p.n * static_cast<int64_t>(sizeof(out_t) + (a.indices != nullptr ? sizeof(int64_t) : 0));
  p.dst = OutputSink<C, out_t>{a.values, a.indices, out_bytes > kStreamingBytes,
                               nullptr,  nullptr,   nullptr,
                               a.initial};
  p.outer = a.outer;
  p.length = a.length;
  p.tiles = ceil_div(p.n, kTile);
  const int64_t tile_bytes = kTile * static_cast<int64_t>(sizeof(elem_t<C, in_t>));
  const int64_t chunk_bytes = kChunkBytes * (min_blocks<C>() == 4 ? 1 : 2);
  p.chunk_tiles = std::max<int64_t>(1, chunk_bytes / tile_bytes);
  p.chunks = ceil_div(p.tiles, p.chunk_tiles);
  p.narrow = p.n <= int64_t{INT32_MAX};
  if (p.narrow) p.by_length = FastDiv32(static_cast<uint32_t>(a.length));
  p.exclusive = a.exclusive;
  p.reverse = a.reverse;
  using W = carry_combine_t<C>;  // the look-back's states (Carry)
  Status<W> s{};
  unsigned grid = 1;
  if (p.chunks > 1) {
    if constexpr (kPacked<W>) {
      const int64_t bytes = 16 + 8 * p.chunks;  // the counter, then a word per chunk
      auto* base = static_cast<unsigned char*>(ctx.scratch->allocate(bytes));
      C10_CUDA_CHECK(cudaMemsetAsync(base, 0, bytes, ctx.stream));
      s.counter = reinterpret_cast<unsigned long long*>(base);
      s.words = reinterpret_cast<unsigned long long*>(base + 16);
    } else {
      const int64_t bytes = 16 + 4 * p.chunks;  // the counter, then a flag per chunk
      auto* base = static_cast<unsigned char*>(ctx.scratch->allocate(bytes));
      C10_CUDA_CHECK(cudaMemsetAsync(base, 0, bytes, ctx.stream));
      s.counter = reinterpret_cast<unsigned long long*>(base);
      s.flags = reinterpret_cast<unsigned*>(base + 16);
      s.aggregate = scratch_states<SegState<W>>(ctx, p.chunks);
      s.inclusive = scratch_states<SegState<W>>(ctx, p.chunks);
    }
    // One block per resident slot (they take chunks from the counter until none is left).
    static const int per_sm = [] {
      int b = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, flat_kernel<C, in_t, out_t>,
                                                        kThreads, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        b = 0;
      }
      return std::max(b, 1);
    }();
    grid = static_cast<unsigned>(std::min<int64_t>(p.chunks, ctx.sms * per_sm));
  }
  flat_kernel<C, in_t, out_t><<<grid, kThreads, 0, ctx.stream>>>(p, s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace flat
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
    seg::flat::launch(a, p.ctx);
  } else {
    seg::launch_columns(a, p.ctx);
  }
}

}  // namespace scanops::cuda
