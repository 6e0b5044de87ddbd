// scanops CUDA back end, layers 2-4 for lines of contiguous elements (inner == 1, and the
// chunk totals of the three-pass column scan).
//
//   RowTile           the per-tile agent: a block scans kTile consecutive elements held in
//                     registers (kItems per thread), continuing from a carry it asks for
//                     once the tile is reduced (CUB's prefix-callback pattern)
//   row_scan_kernel   a launch in one of three modes:
//                       packed:    a work item is a tile of whole short rows (segmented)
//                       rows:      a work item is a row, its tiles walked carrying the state
//                       look-back: a work item is a chunk of a few tiles of a long row
//                                  (about 64 KB of input): the chunk is reduced, its carry
//                                  comes from its predecessors by deterministic decoupled
//                                  look-back (lookback.cuh), then it is rescanned from the
//                                  carry. Each element is read twice (the second time from
//                                  L2 while it holds the chunk) and written once.
//   scan_rows         host dispatch among the three
//
// A tile is a memory range [lo, lo + n), n <= kTile, read in *scan order*: scan position q
// is at lo + q, or at lo + n - 1 - q for reverse scans. Whole short rows reversed together
// are each reversed (in reversed row order, which does not matter: rows are independent),
// so packed tiles reverse the same way.
//
// Hand-written rather than cub::BlockLoad/BlockScan/BlockStore: one tile agent serves
// segmented (packed short rows), reverse, exclusive and masked/affine inputs with any
// trivially copyable state, and the look-back keeps a fixed association order (run-to-run
// reproducible), which cub::DeviceScan 3.0 does not. The tile shape follows CUB's measured
// one (warp-striped vector loads, a warp transpose through padded shared memory, 128 bytes of
// input per thread per tile, SCANOPS_ROW_BYTES).
#pragma once

#include "ops/cuda/block_scan.cuh"
#include "ops/cuda/lookback.cuh"

namespace scanops::cuda {

// The chunk prefixes of a look-back line (row_scan_kernel's look-back mode): Carry's, except
// float32 logcumsumexp (float16 / bfloat16 too, which accumulate in float32), whose chunk
// prefixes are float64 values (LseChainCombine). Each chunk then starts from its prefix
// rounded once to float32, instead of from the end of a chain of float32 roundings: late in
// a line a chunk's log-add-exp moves the running value by less than its ulp, and float32
// rounding drops (or doubles) that increment chunk after chunk. Measured on the H200
// (bench/lse_error.py, 1-D 2^24, max error relative to max(|ref|, 1)): N(0, 10^2) 6.2e-7 and
// U(-80, 80) 6.7e-7 with float32 prefixes, against torch's 3.6e-7 to 6.5e-7; 1.9e-7 and
// 2.5e-7 with these (H100 the same; speed level). The threads' walks, block scans and tile
// totals stay float32; only a chunk's aggregate is widened.
template <class Combine>
struct LookbackCarry {
  using type = carry_combine_t<Combine>;
  using state_t = typename type::state_t;
  static __device__ __forceinline__ state_t widen(const state_t& s) { return s; }
  static __device__ __forceinline__ state_t narrow(const state_t& s) { return s; }
};

// The look-back's combine of float32 logcumsumexp: a float64 running value, each step's
// increment log1p(exp(min - max)) computed in float32 (one expf and one log1pf, as the
// float32 combine) and added in float64. The increment is at most log 2 and accurate to an
// ulp of itself, and a step raises the running value by at least its increment, so the chain's
// error is bounded by about 2^-23 of how far the line's value rises (float32 prefixes: half an
// ulp of the value at every step). Float64 exp and log1p in the fold were measured instead
// (H200, 1-D 2^28 float32 logcumsumexp): 1.69 -> 3.13 ms, the walk's dependent combines on
// the chain of chunks.
struct LseChainCombine {
  using state_t = double;
  static __host__ __device__ double identity() { return -std::numeric_limits<double>::infinity(); }
};
template <>
struct PinnedCombine<LseChainCombine> {
  using state_t = double;
  static __device__ __forceinline__ double combine(double a, double b) {
    if (a != a) return a;
    if (b != b) return b;
    const double mn = a < b ? a : b;
    const double mx = a < b ? b : a;
    if (mn == mx && !(mn - mn == 0.0)) return mn;  // two equal infinities
    // mn - mx <= 0, rounded to float32 (its float64 rounding is far below that)
    const float d = __double2float_rn(__dsub_rn(mn, mx));
    return __dadd_rn(mx, static_cast<double>(lse_log1p(lse_exp(d))));
  }
  static __device__ __forceinline__ double canonical(double s) { return pinned::canonical(s); }
};

template <>
struct LookbackCarry<LogAddExpCombine<float>> {
  using type = LseChainCombine;
  using state_t = double;
  static __device__ __forceinline__ state_t widen(float s) { return s; }
  static __device__ __forceinline__ float narrow(double s) { return __double2float_rn(s); }
};

constexpr int kRowThreads = 256;
constexpr int kRowWarps = kRowThreads / kWarpSize;
#ifndef SCANOPS_ROW_BYTES
// Input bytes per thread per tile (per input tensor). Measured on the H100 (fp32 rows of
// 32768): 128 bytes (32 floats, 2 blocks of 256 threads per SM) reached 95% of copy speed.
#define SCANOPS_ROW_BYTES 128
#endif

// Look-back chunks of combines with runs (logcumsumexp): this many tiles (128 KB of float32
// or float64 input), their threads' aggregates kept in shared memory from the chunk's reduce
// to its scan (row_scan_kernel). Measured on the H100 (bench_gpu, float32 logcumsumexp, share
// of copy, 1-D 2^28 / (64, 2^22)): runs with 2-tile chunks recomputing the aggregates 24% /
// 27%, keeping them 27% / 30%; 4 tiles 33-34% / 34%; 6 and 8 tiles 33-34% (torch eager 35%
// / 6%); 1 tile 17% / 19%.
constexpr int kRunChunkTiles = 4;

constexpr int pow2_floor(int v) { return v <= 1 ? 1 : 2 * pow2_floor(v / 2); }

// Items (consecutive scan positions) per thread for a Source/Sink pair: SCANOPS_ROW_BYTES of
// each input per thread, at most kRowStateBytes of held elements in registers and of held or
// lowered elements in the transposition buffer, at most SCANOPS_ROW_MAX_ITEMS (the tile takes
// up to 64: the segment heads are a 64-bit mask), at least one vector access of the source
// and of the sink.
//
// kRowStateBytes: 128 for arithmetic combines (fp32 cumsum: 32 items, 2 blocks per SM, 97% of
// copy). Selections (cummax / cummin) write three times the bytes they read, and more
// resident blocks hide that better than longer tiles: measured on the H100 with
// bench/row_items_bench.cu, (32768, 32768) fp32 rows, (value, int32 position) states:
// 8 items and 4 blocks per SM 88% of copy, 16 items and 3 blocks 86%, 16 items and 2 blocks
// 79%; (2^24, 64) rows 86% / 81% / 69%.
// A tile holds input elements, not states, where the combine lifts by a plain conversion
// (InputSource::held_t), so a float32 cumprod (float64 states) takes 32 items as cumsum does,
// and a bfloat16 cumsum 64 (128 bytes of input) instead of 32.
template <class Combine>
constexpr int kRowStateBytes = Combine::selects ? 64 : 128;
#ifndef SCANOPS_ROW_MAX_ITEMS
// At most 32 items: 64 bfloat16 items per thread spilled registers (an element narrower than
// 32 bits still takes a register of its own).
#define SCANOPS_ROW_MAX_ITEMS 32
#endif

template <class Combine, class Source, class Sink>
constexpr int row_items() {
  constexpr int held = static_cast<int>(sizeof(typename Source::held_t));
  constexpr int lowered = static_cast<int>(sizeof(typename Sink::lowered_t));
  constexpr int by_input = SCANOPS_ROW_BYTES / Source::kInBytes;
  constexpr int by_state = kRowStateBytes<Combine> / (held > lowered ? held : lowered);
  constexpr int v = pow2_floor(by_input < by_state ? by_input : by_state);
  constexpr int lo = Source::kVec > Sink::kVec ? Source::kVec : Sink::kVec;
  return v > SCANOPS_ROW_MAX_ITEMS ? SCANOPS_ROW_MAX_ITEMS : v < lo ? lo : v;
}

__device__ __forceinline__ int padded(int e) { return e + (e >> 5); }

// Geometry of a row_scan_kernel launch over `rows` lines of `length` contiguous elements.
struct RowGeometry {
  int64_t rows;
  int64_t length;
  int rows_per_tile;  // > 0: packed mode (length <= kTile), whole rows per tile
  bool lookback;      // look-back mode: a work item is a chunk of chunk_tiles tiles
  bool exclusive;
  bool reverse;
  int chunk_tiles = 1;
};

template <class Combine, class Source, class Sink, int kItems>
struct RowTile {
  using state_t = typename Combine::state_t;
  // The carries (Carry, above): the threads' aggregates, the block scan over them and
  // the tiles' totals are in Wide (float64 for float32 linear recurrences); each thread
  // rescans its items in Combine from its rounded prefix.
  using C = Carry<Combine>;
  using Wide = typename C::type;
  using carry_t = typename Wide::state_t;
  using held_t = typename Source::held_t;
  using lowered_t = typename Sink::lowered_t;
  using heads_t = std::conditional_t<(kItems > 32), unsigned long long, unsigned>;
  using Scan = BlockScan<Wide, kRowThreads>;
  static constexpr int kWarpItems = kWarpSize * kItems;
  static constexpr int kTile = kRowThreads * kItems;
  // A warp's transposition buffer, padded with one element per 32 so that both the striped
  // and the blocked access patterns are free of bank conflicts.
  static constexpr int kWarpExchange = kWarpItems + kWarpItems / kWarpSize;
  static_assert(kItems <= 64 && kItems % Source::kVec == 0 && kItems % Sink::kVec == 0);
  // A thread walks its items as a run (Combine::runs: logcumsumexp of real types) rather than
  // a chain of combines: on the H100, (32768, 32768) float32 logcumsumexp rows went from 42%
  // of copy (an exp and a log1p on the chain per item, twice) to 50%, 1-D 19% -> 24%.
  static constexpr bool kRuns = combine_runs<Combine>;
  // Partial tiles (n < kTile) of whole vectors loaded and stored as vectors, as full tiles are,
  // for linear recurrences (two inputs) only; every other combine reads and writes them
  // element by element (striped, coalesced). Measured on the H200 (bench/ab_env.py, 2^28
  // float32, rows whose tiles are not full, share of the floor; h200-2026-11-29-partial-tiles.md):
  // linear_recurrence rows of 1100 / 1536 / 3000 31% / 30% / 30% -> 56% / 55% / 57%, and
  // masked_cumsum rows of 1100 43% -> 65%, but cumsum 75% -> 61% (rows of 1100), cumprod 67%
  // -> 55%, cummax 51% -> 45%, float16 cumsum 42% -> 20%, and with the path compiled in, rows
  // that never take it slower too (float32 cumsum rows of 50257, unaligned: 83% -> 31%;
  // float16 rows of 64, full tiles: 56% -> 50%). A branch a vector (and the vector across n
  // element by element) lost more: float32 cumsum rows of 1100 76% -> 52%.
  static constexpr bool kPartialVec = Combine::arity == 2 && !Source::kCompanions;
  // MaskPreSink's mask vectors of a full tile, one per vector store of the lane (none for
  // the other sinks).
  static constexpr int kMaskVecs = Sink::kMaskPre ? kItems / Sink::kVec : 0;
  struct MaskVecs {
    Vec<bool, Sink::kVec> v[kMaskVecs > 0 ? kMaskVecs : 1];
  };

  // A warp's buffer holds its held elements on the way in and its lowered ones on the way
  // out, at the same address (the element sizes may differ).
  union WarpExchange {
    RawArray<held_t, kWarpExchange> held;
    RawArray<lowered_t, kWarpExchange> lowered;
  };
  struct Storage {
    WarpExchange exchange[kRowWarps];
    typename Scan::Storage scan;
  };

  // Scans the tile [lo, lo + n). seg > 0: a segment (row) starts at every scan position that
  // is a multiple of seg and the carry is not used; seg == 0: one segment, continued from
  // carry_op(tile aggregate) (see BlockScan::exclusive_scan). Writes the inclusive or
  // exclusive results. Returns the state after the tile's last element: the carry of the
  // line's next tile. Block-wide (barriers inside): every thread calls it with the same
  // arguments. Positions along the line (indexed combines): memory element lo + m is at
  // m % seg (seg > 0: whole rows start at lo) or pos0 + m (seg == 0), counted here instead
  // of divided out of each offset. seg > 0: pos0 is the index of the tile's first row in scan
  // order (its rows are pos0, pos0 + 1, ..., or pos0, pos0 - 1, ... for a reverse scan), read
  // only for the rows' initial values.
  // Initial values (Sink::has_initial(), packed rows only: a line's carry is its caller's):
  // a segment head starts its row from Sink::line_start(row) (the exclusive value written
  // there), then takes the head's element, instead of starting from the element (see below:
  // no division and no load at a head of the reduce walk). Tiles of one line (seg == 0) have
  // no heads.
  // Each thread reduces its items, the block scans the thread aggregates, and each thread
  // rescans its items from its prefix (CUB's reduce-then-scan within a thread): registers
  // hold the held elements and a running state, never kItems states.
  // carry_op, the returned state and thread_agg are carries (carry_t, see Carry).
  template <class CarryOp>
  static __device__ carry_t scan(Storage& st, const Source& src, const Sink& dst, int64_t lo, int n,
                                 int seg, int64_t pos0, CarryOp&& carry_op, bool reverse,
                                 bool exclusive, const carry_t* thread_agg = nullptr) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int wq = warp * kWarpItems;   // the warp's first scan position in the tile
    const int q0 = wq + lane * kItems;  // the thread's first scan position

    // Coalesced striped load into the warp's buffer, then each thread takes kItems
    // consecutive positions (positions past n hold identity).
    held_t* hbuf = &st.exchange[warp].held[0];
    __syncwarp();  // the warp's reads of the previous tile's buffer are done
    load_striped(src, hbuf, lo, n, seg, pos0, wq, reverse, lane);
    __syncwarp();
    held_t h[kItems];
#pragma unroll
    for (int k = 0; k < kItems; ++k) h[k] = hbuf[padded(lane * kItems + k)];
    // MaskPreSink: the mask vectors of the lane's stores (store_striped's offsets), loaded now,
    // in flight during the scan.
    MaskVecs mk;
    if constexpr (Sink::kMaskPre) {
      if (n == kTile && dst.vec_ok(lo)) {
        const int64_t m0 = lo + (reverse ? kTile - wq - kWarpItems : wq);
#pragma unroll
        for (int j = 0; j < kMaskVecs; ++j) {
          mk.v[j] = *reinterpret_cast<const Vec<bool, Sink::kVec>*>(
              dst.mul_mask + m0 + (j * kWarpSize + lane) * Sink::kVec);
        }
      }
    }

    heads_t heads = 0;  // bit k: a segment starts at position q0 + k
    if (seg > 0) {
      int r = q0 % seg;
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        if (r == 0 && q0 + k < n) heads |= heads_t{1} << k;
        r = r + 1 == seg ? 0 : r + 1;
      }
    }

    // The thread's aggregate from its last head on, the block-wide scan of the aggregates
    // (its barriers also order every read of the held buffer before the lowered writes that
    // share its memory), then the rescan from the prefix the thread's items continue.
    lowered_t* obuf = &st.exchange[warp].lowered[0];
    carry_t total;
    // Packed rows with initial values (uniform): a head starts its row from the row's start
    // state. The thread's heads are rows j_first, j_first + 1, ... in scan order (one division
    // a thread, shared with the heads' q0 % seg; none a head). The reduce walk is the one
    // without initial values: the aggregate from the last head on is then prefixed with that
    // head's start (one load a thread); the rescan loads
    // the next head's start as soon as the previous one is taken (in flight over the items
    // between two heads; rows of 64 were 36% slower with a load and a division at each head,
    // H200, 2026-11-27).
    const bool head_init = seg > 0 && dst.has_initial();
    const int j_first = head_init ? q0 / seg + (q0 % seg != 0 ? 1 : 0) : 0;
    const auto row_start = [&](int j) -> state_t {
      return dst.line_start(reverse ? pos0 - j : pos0 + j);
    };
    const auto count_heads = [](heads_t v) -> int {
      if constexpr (sizeof(heads_t) == 8) {
        return __popcll(static_cast<unsigned long long>(v));
      } else {
        return __popc(static_cast<unsigned>(v));
      }
    };
    int j_next = j_first;
    state_t s_next = Combine::identity();
    if (head_init && heads != 0) s_next = row_start(j_next);
    // (Walk: a chain of combines, or Combine's runs, see kRuns.)
    carry_t agg;
    if (thread_agg != nullptr) {  // (seg == 0) the thread's aggregate as reduce found it
      agg = thread_agg[threadIdx.x];
    } else {
      auto r = Walk<Wide>::begin(C::widen(src.lift_held(h[0])));
#pragma unroll
      for (int k = 1; k < kItems; ++k) {
        const carry_t x = C::widen(src.lift_held(h[k]));
        if ((heads >> k) & 1u) {
          r = Walk<Wide>::begin(x);
        } else {
          r.push(x);
        }
      }
      agg = r.value();
      if (head_init && heads != 0) {
        // (seg >= kItems: one head, the first one's start, loaded above)
        agg = Wide::combine(
            C::widen(seg >= kItems ? s_next : row_start(j_first + count_heads(heads) - 1)), agg);
      }
    }
    const state_t prefix =
        C::narrow(Scan::exclusive_scan(st.scan, heads != 0, agg, carry_op, total));
    auto w = Walk<Combine>::begin(prefix);
    // Rows at least kItems long put at most one head in a thread's items: the walk restarts
    // from that head's start s (begin(s), a select of the walk's state) and every item then
    // takes its element the same way (push), with no branch an item; the exclusive value
    // at the head is s. The same combines in the same order as the general loop below: the
    // same bits, except that float32 / float16 / bfloat16 linear recurrences round some
    // elements differently (the compiler contracts a multiply-add differently; their summed
    // error against float64 measured 1% lower, the maximum the same). The general loop's
    // branch an item, with the next head's load in it, made (2^20, 64) rows 6-15% slower with
    // initial values than without (docs/benchmarks/gpu-2026-11-28-rows-initial-backward.md).
    const auto store = [&]() {
      __syncwarp();
      if constexpr (Sink::kMulNext) {
        store_striped_next(dst, obuf, lo, n, seg, pos0, wq, reverse, lane);
      } else {
        store_striped(dst, obuf, lo, n, wq, reverse, lane, mk);
      }
    };
    if (head_init && seg >= kItems) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const bool head = (heads >> k) & 1u;
        lowered_t y{};
        if (exclusive) {  // (runs, k == 0: the prefix itself, as below)
          y = Sink::lower(head ? s_next : (combine_runs<Combine> && k == 0) ? prefix : w.value());
        }
        if (head) w = Walk<Combine>::begin(s_next);
        w.push(src.lift_held(h[k]));
        if (!exclusive) y = Sink::lower(w.value());
        obuf[padded(lane * kItems + k)] = y;
      }
      store();
      return total;
    }
    // One item that is not a row start under an initial value (common.cuh's rescan_step).
    const auto step = [&](int k, bool head, const state_t& x, auto excl) -> lowered_t {
      return rescan_step<Combine, Sink>(w, k, head, x, prefix, excl);
    };
    // Without initial values, logcumsumexp (runs) and cummax / cummin (indexed) rescan in a
    // loop without the row start's case, one for exclusive and one for inclusive scans: the
    // general loop below tests both at every item. H200, bench/ab_env.py (2^28 float32, best
    // of 7, the two loops against the general one in one library, same bits): rows of 64
    // logcumsumexp 46.6% -> 49.8% of the floor, cummax 67.7% -> 70.9%. The other combines
    // were level (0.99-1.01x; narrow-column cumprod 1.02x) with more registers in every
    // kernel: they keep the general loop (docs/benchmarks/h200-2026-11-28-row-split.md).
    if constexpr (kRuns || Combine::indexed) {
      if (!head_init) {
        const auto rescan = [&](auto excl) {
#pragma unroll
          for (int k = 0; k < kItems; ++k) {
            obuf[padded(lane * kItems + k)] = step(k, (heads >> k) & 1u, src.lift_held(h[k]), excl);
          }
        };
        if (exclusive) {
          rescan(std::true_type{});
        } else {
          rescan(std::false_type{});
        }
        store();
        return total;
      }
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const bool head = (heads >> k) & 1u;
      const state_t x = src.lift_held(h[k]);
      lowered_t y;
      if (head && head_init) {  // the row's start, then its first element
        const state_t s = s_next;
        if (((heads >> k) >> 1) != 0) s_next = row_start(++j_next);  // the next head's
        w = Walk<Combine>::begin(s);
        w.push(x);
        y = Sink::lower(exclusive ? s : w.value());
      } else {
        y = step(k, head, x, exclusive);
      }
      obuf[padded(lane * kItems + k)] = y;
    }
    store();
    return total;
  }

  // The combined state of the tile [lo, lo + n) of one line (seg == 0) in scan order, as
  // scan would return it from an identity carry (a carry: in Wide); writes nothing.
  // Block-wide. thread_agg (runs only): each thread's aggregate is kept there for scan.
  static __device__ carry_t reduce(Storage& st, const Source& src, int64_t lo, int n, int64_t pos0,
                                   bool reverse, carry_t* thread_agg = nullptr) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    held_t* hbuf = &st.exchange[warp].held[0];
    const int wq = warp * kWarpItems;
    __syncwarp();
    load_striped(src, hbuf, lo, n, 0, pos0, wq, reverse, lane);
    __syncwarp();
    auto w = Walk<Wide>::begin(C::widen(src.lift_held(hbuf[padded(lane * kItems)])));
#pragma unroll
    for (int k = 1; k < kItems; ++k) {
      w.push(C::widen(src.lift_held(hbuf[padded(lane * kItems + k)])));
    }
    const carry_t a = w.value();
    if (thread_agg != nullptr) thread_agg[threadIdx.x] = a;
    carry_t total;
    Scan::exclusive_scan(st.scan, false, a, [](const carry_t&) { return Wide::identity(); },
                         total);
    return total;
  }

 private:
  // The position along its line of the tile's memory element lo + m (see scan).
  static __device__ __forceinline__ int64_t position(int m, int seg, int64_t pos0) {
    return seg > 0 ? m % seg : pos0 + m;
  }

  // A lane's vectors of held elements (vector j at warp offset (j * 32 + lane) * V, in memory
  // order) placed at their scan positions in the warp's buffer.
  template <int V>
  static __device__ __forceinline__ void place_vectors(held_t* xbuf,
                                                       const held_t (&v)[kItems / V][V],
                                                       bool reverse, int lane) {
#pragma unroll
    for (int j = 0; j < kItems / V; ++j) {
      const int u = (j * kWarpSize + lane) * V;
#pragma unroll
      for (int t = 0; t < V; ++t) {
        xbuf[padded(reverse ? kWarpItems - 1 - (u + t) : u + t)] = v[j][t];
      }
    }
  }

  // Lane `lane` loads the warp's scan positions wq + j * 32 + lane (striped): coalesced in
  // either direction. Full tiles at aligned offsets load kVec consecutive memory elements
  // per access instead (striped by vector; all issued before the first is used), placed at
  // their scan positions.
  static __device__ __forceinline__ void load_striped(const Source& src, held_t* xbuf, int64_t lo,
                                                      int n, int seg, int64_t pos0, int wq,
                                                      bool reverse, int lane) {
    if constexpr (Source::kVec > 1) {
      constexpr int V = Source::kVec;
      if (n == kTile && src.vec_ok(lo)) {  // uniform over the block
        // The warp's positions occupy memory [lo + r0, lo + r0 + kWarpItems).
        const int r0 = reverse ? kTile - wq - kWarpItems : wq;
        // With broadcast companions every vector is fetched before any is held
        // (InputSource::fetch_vec).
        typename Source::Fetched f[Source::kCompanions ? kItems / V : 1];
        if constexpr (Source::kCompanions) {
          if (seg == 0) {  // the tile lies inside one row
            const auto c = src.cursor(lo);
            typename Source::Shift sh;
            if (src.line_shift(lo, c, sh)) {  // (1, N) rows: the dense loads, shifted
#pragma unroll
              for (int j = 0; j < kItems / V; ++j) {
                src.fetch_vec_shifted(lo + r0 + (j * kWarpSize + lane) * V, sh, f[j]);
              }
            } else {
#pragma unroll
              for (int j = 0; j < kItems / V; ++j) {
                src.fetch_vec_in_line(lo, r0 + (j * kWarpSize + lane) * V, c, f[j]);
              }
            }
          } else if (src.packed_ok(seg)) {  // packed rows with a (1, N) companion
#pragma unroll
            for (int j = 0; j < kItems / V; ++j) {
              src.fetch_vec_packed(lo, r0 + (j * kWarpSize + lane) * V, f[j]);
            }
          } else {
#pragma unroll
            for (int j = 0; j < kItems / V; ++j) {
              src.fetch_vec(lo + r0 + (j * kWarpSize + lane) * V, f[j]);
            }
          }
        }
        held_t v[kItems / V][V];
#pragma unroll
        for (int j = 0; j < kItems / V; ++j) {
          const int m = r0 + (j * kWarpSize + lane) * V;
          int64_t pos[V] = {};
          if constexpr (Combine::indexed) {
            pos[0] = position(m, seg, pos0);
#pragma unroll
            for (int t = 1; t < V; ++t) {  // (a row may start inside the vector)
              pos[t] = (seg > 0 && pos[t - 1] + 1 == seg) ? 0 : pos[t - 1] + 1;
            }
          }
          if constexpr (Source::kCompanions) {
            src.hold_fetched(f[j], pos, v[j]);
          } else {
            src.hold_vec(lo + m, pos, v[j]);
          }
        }
        place_vectors(xbuf, v, reverse, lane);
        return;
      }
      if constexpr (kPartialVec) {
        // A partial tile (packed rows that leave its end empty, a row's last tile) of whole
        // vectors (n % V == 0): the full tile's vectors at the same places relative to the
        // tile's end in scan order (memory [lo + r0, ...), r0 < 0 possible for reverse scans);
        // a vector outside [0, n) loads the tile's first vector instead (in bounds, from L1)
        // and holds identity, so that every load is issued before the first is used, without
        // a branch (kPartialVec says where and why).
        if (n % V == 0 && src.vec_ok(lo)) {
          static_assert(!Combine::indexed, "kPartialVec: positions are not computed");
          const int r0 = reverse ? n - wq - kWarpItems : wq;
          held_t v[kItems / V][V];
#pragma unroll
          for (int j = 0; j < kItems / V; ++j) {
            const int m = r0 + (j * kWarpSize + lane) * V;
            const bool in = m >= 0 && m < n;
            const int64_t pos[V] = {};
            src.hold_vec(lo + (in ? m : 0), pos, v[j]);
#pragma unroll
            for (int t = 0; t < V; ++t) v[j][t] = in ? v[j][t] : Source::held_identity();
          }
          place_vectors(xbuf, v, reverse, lane);
          return;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int e = j * kWarpSize + lane;
      const int q = wq + e;
      const int m = reverse ? n - 1 - q : q;
      held_t x = Source::held_identity();
      if (q < n) {
        if constexpr (Combine::indexed) {
          x = src.hold_at(lo + m, position(m, seg, pos0));
        } else {
          x = src.hold_at(lo + m, 0);
        }
      }
      xbuf[padded(e)] = x;
    }
  }

  // The V lowered elements of a warp's buffer stored at memory offset u of the warp's part of a
  // full tile (striped by vector, in either direction).
  template <int V>
  static __device__ __forceinline__ void gather_vec(const lowered_t* xbuf, int u, bool reverse,
                                                    lowered_t (&v)[V]) {
#pragma unroll
    for (int t = 0; t < V; ++t) v[t] = xbuf[padded(reverse ? kWarpItems - 1 - (u + t) : u + t)];
  }

  // The mirror image of load_striped, for positions < n.
  static __device__ __forceinline__ void store_striped(const Sink& dst, const lowered_t* xbuf,
                                                       int64_t lo, int n, int wq, bool reverse,
                                                       int lane, const MaskVecs& mk) {
    if constexpr (Sink::kVec > 1) {
      constexpr int V = Sink::kVec;
      if (n == kTile && dst.vec_ok(lo)) {
        const int64_t m0 = lo + (reverse ? kTile - wq - kWarpItems : wq);
        if constexpr (Sink::kEpiPre) {  // every operand loaded before the first store
          typename Sink::Operands ops[kItems / V];
#pragma unroll
          for (int j = 0; j < kItems / V; ++j) ops[j] = dst.operands(m0 + (j * kWarpSize + lane) * V);
#pragma unroll
          for (int j = 0; j < kItems / V; ++j) {
            const int u = (j * kWarpSize + lane) * V;
            lowered_t v[V];
            gather_vec(xbuf, u, reverse, v);
            dst.put_vec_ops(m0 + u, v, ops[j]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < kItems / V; ++j) {
            const int u = (j * kWarpSize + lane) * V;
            lowered_t v[V];
            gather_vec(xbuf, u, reverse, v);
            if constexpr (Sink::kMaskPre) {
              dst.put_vec_pre(m0 + u, v, mk.v[j]);
            } else {
              dst.put_vec(m0 + u, v);
            }
          }
        }
        return;
      }
      if constexpr (kPartialVec && !Sink::kEpiPre && !Sink::kMaskPre) {
        // A partial tile of whole vectors: load_striped's vectors (there), those inside [0, n).
        if (n % V == 0 && dst.vec_ok(lo)) {
          const int r0 = reverse ? n - wq - kWarpItems : wq;
#pragma unroll
          for (int j = 0; j < kItems / V; ++j) {
            const int u = (j * kWarpSize + lane) * V;
            const int m = r0 + u;
            if (m >= 0 && m < n) {
              lowered_t v[V];
              gather_vec(xbuf, u, reverse, v);
              dst.put_vec(lo + m, v);
            }
          }
          return;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int e = j * kWarpSize + lane;
      const int q = wq + e;
      if (q < n) dst.put(reverse ? lo + (n - 1 - q) : lo + q, xbuf[padded(e)]);
    }
  }

  // store_striped for a sink whose values are multiplied by mul at the next scan position
  // (MulNextSink: cumprod's backward reads the forward's output in place of its
  // exclusive products). Memory element lo + m is at line position m % seg (seg > 0) or
  // pos0 + m (see scan); the last position of a line in scan order takes dst.fill(). A full tile's
  // vectors take their factors from a vector load of mul_next at their own offset and one
  // element past it (the neighbouring lane's, from L1), placed one position on.
  static __device__ __forceinline__ void store_striped_next(const Sink& dst, const lowered_t* xbuf,
                                                            int64_t lo, int n, int seg,
                                                            int64_t pos0, int wq, bool reverse,
                                                            int lane) {
    using out_t = typename Sink::value_t;
    const int next = dst.next;  // -1 for reverse scans, +1 for forward ones
    const auto last = [&](int m) {
      const int64_t p = seg > 0 ? m % seg : pos0 + m;
      return reverse ? p == 0 : p == dst.line - 1;
    };
    const auto factor = [&](int m) {
      return last(m) ? dst.fill() : dst.mul_next[lo + m + next];
    };
    if constexpr (Sink::kVec > 1) {
      constexpr int V = Sink::kVec;
      constexpr int J = kItems / V;
      if (n == kTile && dst.vec_ok(lo)) {
        const int w0 = reverse ? kTile - wq - kWarpItems : wq;
        // Every operand of the thread's J vector stores is loaded before the first store:
        // a load is not moved above an earlier store that may alias it (see MaskPreSink),
        // so loads next to their stores made each store wait on its own loads, one vector
        // after the other. M: the vector's factors less one, E: the one from the next vector
        // (or fill()), A: the epilogue's add (the sink's only operand: mul is mul_next here).
        Vec<out_t, V> M[J], A[J];
        out_t E[J];
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const int m = w0 + (j * kWarpSize + lane) * V;
          M[j] = *reinterpret_cast<const Vec<out_t, V>*>(dst.mul_next + lo + m);
          E[j] = factor(next > 0 ? m + V - 1 : m);
          if (dst.add != nullptr) A[j] = *reinterpret_cast<const Vec<out_t, V>*>(dst.add + lo + m);
        }
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const int u = (j * kWarpSize + lane) * V;
          lowered_t v[V];
          gather_vec(xbuf, u, reverse, v);
          const int m = w0 + u;  // the vector's first element, lo + m
          out_t f[V];
          if (next > 0) {
#pragma unroll
            for (int t = 0; t < V; ++t) f[t] = t + 1 < V ? M[j].v[t + 1] : E[j];
          } else {
#pragma unroll
            for (int t = 0; t < V; ++t) f[t] = t > 0 ? M[j].v[t - 1] : E[j];
          }
          // The line positions of the vector's elements (one division at most).
          int64_t p = seg > 0 ? m % seg : pos0 + m;
#pragma unroll
          for (int t = 0; t < V; ++t) {
            if (reverse ? p == 0 : p == dst.line - 1) f[t] = dst.fill();
            p = (seg > 0 && p + 1 == seg) ? 0 : p + 1;
          }
          dst.put_vec_next(lo + m, v, f, A[j]);
        }
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int e = j * kWarpSize + lane;
      const int q = wq + e;
      if (q < n) {
        const int m = reverse ? n - 1 - q : q;
        dst.put(lo + m, xbuf[padded(e)], factor(m), dst.second_out());
      }
    }
  }
};

// Resident blocks per SM the register allocation must allow: 4 (64 registers a thread) while
// kItems held or lowered elements take at most 16 registers of 32 bits (no spills for the
// selections' 8 items), else 2 (128 registers), so as not to spill (see kRowStateBytes for
// the measurements). An element narrower than 4 bytes still takes a register.
// Exception: 2-byte outputs from held elements of <= 4 bytes (float16 / bfloat16 holding
// float32) take 32 items, a 16 KB tile of input: at 2 blocks per SM too few bytes are in
// flight. At 4 blocks (64 registers, a few bytes of spill) bench/row_items_bench.cu measured
// on the H100, (32768, 32768) rows, share of copy: bfloat16 71% -> 95%, float16 85% -> 95%
// (3 blocks: 87% / 96%); float32 rows stay at 2 (95.5-96.5% at 2, 3 or 4 blocks) and 1-D
// float32 look-back rows lose with more (70% at 2, 61-63% at 3-4). Sources with broadcast
// companions keep 2 (at 64 registers their index fields spilled ~350 bytes).
//
// Exception: the float32 linear recurrence's forward kernel (float64 carries; 16 items, 120
// registers at 2 blocks) runs 3 blocks per SM (80 registers, 16 bytes of stack), without the
// prefetch ahead (row_prefetches_ahead: 2-block kernels only). Measured on the H200
// (bench/linrec_blocks_bench.cu, kernel level, share of a 12-byte copy): rows of 4096 (rows
// mode) 80% -> 90%, of 8192 87% -> 94%, of 65536 89% -> 93%, of 64 (packed) 81% -> 88%, rows
// of 2048 (packed) 66% -> 76%, one line (look-back) 45% -> 49%. 16 items at 3 blocks beat 8
// at 4 (62 registers) on rows of 64 (80%) and along one line (45%).
// The backward writing both gradients (MulNextSink<..., true>) runs 3 blocks per SM too (80
// registers, 56 bytes of stack): H200, bench/ab_env.py, 2^28 float32 linear_recurrence
// fwd+bwd, share of a 32-byte copy: rows of 4096 91.2% -> 93.7%, of 2048 81.6% -> 85.1%, of
// 64 81.7% -> 85.0%, of 65536 90.0-90.7% -> 91.3-91.6%.
// row_three_blocks: the (source, sink) pairs that run 3 blocks per SM; lse_grad.cu adds
// logcumsumexp's one-scan backward (its measurements there).
template <class Source, class Sink>
struct row_three_blocks : std::false_type {};
template <>
struct row_three_blocks<InputSource<AffineCombine<float>, float>,
                        OutputSink<AffineCombine<float>, float>> : std::true_type {};
template <>
struct row_three_blocks<InputSource<AffineCombine<float>, float>,
                        MulNextSink<AffineCombine<float>, float, true>> : std::true_type {};
template <class Source, class Sink, int kItems>
constexpr int row_min_blocks() {
  using held_t = typename Source::held_t;
  using lowered_t = typename Sink::lowered_t;
  if (row_three_blocks<Source, Sink>::value) return 3;
  if (sizeof(lowered_t) < 4 && sizeof(held_t) <= 4 && !Source::kCompanions) return 4;
  return kItems * ((std::max(sizeof(held_t), sizeof(lowered_t)) + 3) / 4) <= 16 ? 4 : 2;
}
template <class Source, class Sink, int kItems>
constexpr int kRowMinBlocks = row_min_blocks<Source, Sink, kItems>();

// Whether row_scan_kernel asks L2 for the next work item / tile (see kAhead there): the
// 2-block kernels, but not two of them at the 128-register cap whose code the prefetch
// changed for the worse in the modes that do not run it (H200, bench/ab_env.py, the library
// before and after): rows of lanes (row_prefetch_opt_out, lanes_scan.cuh; float32 cumprod
// along dim 0 of (N/4, 4), a look-back line: 42% -> 39% of copy) and linear_recurrence's
// backward, which writes both gradients (MulNextSink<..., true>: fwd+bwd of (N/4096, 4096)
// rows, 79% -> 76%). Without it their kernels are the ones before.
template <class Source>
struct row_prefetch_opt_out : std::false_type {};  // specialized: lanes_scan.cuh
template <class Sink>
struct writes_second_product : std::false_type {};
template <class Combine, class out_t>
struct writes_second_product<MulNextSink<Combine, out_t, true>> : std::true_type {};
template <class Source, class Sink, int kItems>
constexpr bool row_prefetches_ahead() {
  return kRowMinBlocks<Source, Sink, kItems> == 2 && !row_prefetch_opt_out<Source>::value &&
         !writes_second_product<Sink>::value;
}

// Work items: packed mode, tile t holds rows [t * R, t * R + R), a segment head at every row
// start; rows mode, item r is row r, scanned tile by tile carrying the state (both grid-
// stride); look-back mode, item c is tile c % T of row c / T (T tiles per row), taken in
// order from status.counter.
template <class Combine, class Source, class Sink, int kItems>
__global__ void __launch_bounds__(kRowThreads, kRowMinBlocks<Source, Sink, kItems>)
    row_scan_kernel(Source src, Sink dst, RowGeometry g,
                    ChunkStatus<typename LookbackCarry<Combine>::state_t> status) {
  using Tile = RowTile<Combine, Source, Sink, kItems>;
  // Every state here is a carry (Carry; float64 for float32 linear
  // recurrences): the tiles' totals, a line's carry from tile to tile; the look-back's
  // states are LookbackCarry's (float64 for float32 logcumsumexp too).
  using C = Carry<Combine>;
  using Wide = typename C::type;
  using state_t = typename Wide::state_t;
  using LC = LookbackCarry<Combine>;
  using LWide = typename LC::type;
  using lb_state_t = typename LWide::state_t;
  constexpr int kTile = Tile::kTile;
  // Overlap a chunk's look-back with the second read of its first tile: packed states
  // (one L2 round trip a round, see LookBack::begin) in kernels of 2 blocks per SM.
  // Measured on the H100 (bench/row_items_bench.cu, float32 cumsum, share of copy): 1-D
  // 2^30 76% -> 78%, (64, 2^22) 75% -> 75-76%; at 4 blocks per SM (float16 / bfloat16) the
  // registers it keeps spilled: rows 95% -> 90%, 1-D 69-71% -> 64-66%.
  constexpr bool kOverlap =
      lookback_packs<lb_state_t> && kRowMinBlocks<Source, Sink, kItems> == 2;
  // Packed and rows modes ask L2 for the block's next work item / the row's next tile while
  // the current one is scanned, so that a block keeps its next tile's loads in flight (at 2
  // blocks per SM one tile of loads a block was too little). Measured on the H200 (2^28
  // float32, bench/ab_env.py, one library, the distance an experiment switch): packed rows of
  // 64 cumsum 82% -> 85% of copy, cummax 71% -> 73%, linear_recurrence rows of 2048-4096
  // (packed: a row a tile) 80% -> 81.5%, rows of 8192 82% -> 85%; rows mode, rows of 16384
  // cumsum 91.5% -> 95%, cumprod 90% -> 93%, linear_recurrence rows of 65536 84% -> 89%.
  // Two or three items ahead were slower than one (packed rows of 64 cumsum: 75% / 66%); the
  // next row's first tile asked at a row's last tile gained nothing. The 4-block kernels
  // (2-byte inputs) lost with it (float16 rows of 64: 56% -> 55%), so only the 2-block kernels
  // prefetch (row_prefetches_ahead). Before / after on every bench case:
  // docs/benchmarks/h200-2026-11-28-row-prefetch.md (one look-back line of logcumsumexp,
  // which does not run it, 1% slower).
  constexpr bool kAhead = row_prefetches_ahead<Source, Sink, kItems>();
  __shared__ typename Tile::Storage storage;
  __shared__ typename LookBack<LWide>::Storage lookback_storage;
  __shared__ int64_t next_item;
  __shared__ RawArray<state_t, 1> chunk_carry;
  // Runs: the threads' aggregates of a look-back chunk's tiles, from its reduce to its scan
  // (an exp per element less; see kRunChunkTiles).
  constexpr int kKeptTiles = Tile::kRuns ? kRunChunkTiles : 0;
  __shared__ RawArray<state_t, kKeptTiles * kRowThreads + 1> kept_agg;

  const bool packed = g.rows_per_tile > 0;
  const int64_t row_tiles = ceil_div(g.length, kTile);
  const int64_t row_chunks = ceil_div(row_tiles, g.chunk_tiles);
  const int64_t items =
      packed ? ceil_div(g.rows, g.rows_per_tile) : g.lookback ? g.rows * row_chunks : g.rows;
  const auto no_carry = [](const state_t&) { return Wide::identity(); };

  for (int64_t item = blockIdx.x;; item += gridDim.x) {
    if (g.lookback) {  // chunks in the order blocks take them, not by block index
      if (threadIdx.x == 0) next_item = static_cast<int64_t>(atomicAdd(status.counter, 1ull));
      __syncthreads();  // (the previous chunk's barriers ordered the reads of next_item)
      item = next_item;
    }
    if (item >= items) break;  // uniform over the block

    if (packed) {
      // Packed item i: rows [r, r + item_rows(i, r)) (rows_per_tile, fewer in the last item).
      const auto item_rows = [&](int64_t i, int64_t& r) {
        r = i * g.rows_per_tile;
        return static_cast<int>(std::min<int64_t>(g.rows_per_tile, g.rows - r));
      };
      int64_t r0;
      const int rows = item_rows(item, r0);
      const int n = rows * static_cast<int>(g.length);
      // The tile's rows' initial values, asked of L2 while the tile loads (read at the heads).
      dst.prefetch_initial(r0, rows, threadIdx.x, kRowThreads);
      if (kAhead && item + gridDim.x < items) {
        int64_t r1;
        const int rows1 = item_rows(item + gridDim.x, r1);
        src.prefetch_l2(r1 * g.length, rows1 * g.length, threadIdx.x, kRowThreads);
      }
      Tile::scan(storage, src, dst, r0 * g.length, n, static_cast<int>(g.length),
                 g.reverse ? r0 + rows - 1 : r0, no_carry, g.reverse, g.exclusive);
      continue;
    }
    // A row's tiles [t0, t1), walked carrying the state from `carry`: a row starts from its
    // initial state (rows mode here; look-back mode: the first chunk's prefix, below).
    int64_t row = item, t0 = 0, t1 = row_tiles;
    state_t carry = g.lookback ? Wide::identity() : C::widen(dst.line_start(row));
    // kOverlap: the walk's first round is in flight while the chunk's first tile is read
    // again, and completes in that tile's carry callback.
    LookBack<LWide> lb{status, item, 0};
    typename LookBack<LWide>::Pending pending{};
    state_t agg = Wide::identity();
    bool carry_pending = false;
    const auto tile_range = [&](int64_t t, int64_t& lo, int& n, int64_t& pos0) {
      const int64_t s = t * kTile;
      n = static_cast<int>(std::min<int64_t>(kTile, g.length - s));
      pos0 = g.reverse ? g.length - s - n : s;
      lo = row * g.length + pos0;
    };
    // A line's first chunk starts from the row's initial state (LookBack::finish calls it
    // there only: one load per line).
    const auto line_start = [&]() { return LC::widen(C::widen(dst.line_start(row))); };
    if (g.lookback) {
      // The chunk's tiles are reduced (a first read), its carry found by look-back over the
      // chunks' totals, then they are scanned from it (a second read, served by L2: a
      // chunk is a few tens of KB). The look-back's wait, which stalls the block as long as
      // a tile's own memory traffic, is paid once per chunk instead of once per tile.
      row = item / row_chunks;
      t0 = (item - row * row_chunks) * g.chunk_tiles;
      t1 = std::min<int64_t>(row_tiles, t0 + g.chunk_tiles);
      // The whole chunk is asked of L2 first, so its first read has all of it in flight
      // rather than a tile at a time (1-D float32 cumsum: 66% -> 70% of copy).
      {
        int64_t lo_a, lo_b, unused;
        int n_a, n_b;
        tile_range(t0, lo_a, n_a, unused);
        tile_range(t1 - 1, lo_b, n_b, unused);
        const int64_t lo = std::min(lo_a, lo_b);  // (reverse scans walk memory downwards)
        const int64_t hi = std::max(lo_a + n_a, lo_b + n_b);
        src.prefetch_l2(lo, hi - lo, threadIdx.x, kRowThreads);
      }
#pragma unroll 1
      for (int64_t t = t0; t < t1; ++t) {
        int64_t lo, pos0;
        int n;
        tile_range(t, lo, n, pos0);
        state_t* keep = nullptr;
        if constexpr (kKeptTiles > 0) keep = &kept_agg[(t - t0) * kRowThreads];
        agg = Wide::combine(agg, Tile::reduce(storage, src, lo, n, pos0, g.reverse, keep));
      }
      lb.first = row * row_chunks;
      if constexpr (kOverlap) {
        if (threadIdx.x < kWarpSize) pending = lb.begin(LC::widen(agg));
        carry_pending = true;
      } else {
        if (threadIdx.x < kWarpSize) {
          const lb_state_t p =
              lb.warp_exclusive_prefix(lookback_storage, LC::widen(agg), line_start);
          if (threadIdx.x == 0) chunk_carry[0] = LC::narrow(p);
        }
        __syncthreads();
        carry = chunk_carry[0];
      }
    }
#pragma unroll 1
    for (int64_t t = t0; t < t1; ++t) {
      int64_t lo, pos0;
      int n;
      tile_range(t, lo, n, pos0);
      if (kAhead && !g.lookback && t + 1 < t1) {  // (look-back chunks prefetch whole, above)
        int64_t lo1, unused;
        int n1;
        tile_range(t + 1, lo1, n1, unused);
        src.prefetch_l2(lo1, n1, threadIdx.x, kRowThreads);
      }
      carry = Tile::scan(
          storage, src, dst, lo, n, 0, pos0,
          [&](const state_t&) {
            if constexpr (kOverlap) {
              if (carry_pending) {
                return LC::narrow(lb.finish(lookback_storage, pending, LC::widen(agg), line_start));
              }
            }
            return carry;
          },
          g.reverse, g.exclusive,
          (kKeptTiles > 0 && g.lookback) ? &kept_agg[(t - t0) * kRowThreads] : nullptr);
      carry_pending = false;
    }
  }
}

constexpr int64_t kRowBlocksPerSM = 32;   // grid cap (the kernel grid-strides beyond it)
constexpr int64_t kMaxRowModeTiles = 4;   // rows of at most this many tiles: block per row
// Long rows go to look-back chunks only where there are fewer rows than 3/10 of the resident
// blocks (kRowMinBlocks an SM; 4/10 for 4-block kernels): with fewer, most SMs would idle in
// rows mode. Rows mode reads each element once and has no look-back wait, so it wins from
// about a quarter to two fifths of the block slots on. Measured on the H200
// (bench/row_items_bench.cu, look-back against rows mode, share of copy; 132 SMs): float32
// cumsum (2 blocks an SM) rows of 131072: 64 rows 56% / 50%, 80 51% / 57%, 128 57% / 72%;
// (512, 65536) 60% / 83%, (1500, 65536) 64% / 88%; float32 cumprod 80 rows 48% / 50%, 128
// 49% / 64%; float32 linear_recurrence (3 blocks; shares of an 8-byte copy, 2/3 of the true
// ones) 96 rows 32% / 31%, 128 29% / 38%, 700 33% / 58%; float16 cumsum (4 blocks) 128 rows
// 45% / 40%, 160 47% / 49%, 512 50% / 71%; cummax (float32, int32 positions, 4 blocks) 160
// rows 38% / 36%, 224 45% / 45%, 300 43% / 54%.
// The threshold was 16 rows an SM (2112 rows on the H200), from before the rows mode's
// prefetch of the next tile (row_prefetches_ahead).
template <class Source, class Sink, int kItems>
constexpr int64_t lookback_tenths() {
  return kRowMinBlocks<Source, Sink, kItems> == 4 ? 4 : 3;
}

// Tiles per look-back chunk: about SCANOPS_LOOKBACK_CHUNK_BYTES of input per 2 resident
// blocks of an SM. A block stalls in the look-back for about as long as one tile's own memory
// traffic takes (few blocks fit on an SM; the walk's loads wait behind the streaming
// traffic): one look-back per chunk instead of per tile amortises it, and the chunks of all
// resident blocks must stay in L2 until their second read. Measured on the H100
// (bench/row_items_bench.cu, 1-D 2^30, share of copy): float32 cumsum (2 blocks per SM)
// 1 tile per chunk 49%, 2 tiles (64 KB) 63%, more tiles no better (4: 61%); cummax
// (2048-element tiles) 1 tile 25%, 8 tiles (64 KB) 58%, 16 tiles 61%; float16 / bfloat16
// (16 KB tiles, 4 blocks per SM, packed status) 32 KB chunks 69-71%, 64 KB 59-61%, while
// cummax (4 blocks per SM, unpacked status) takes 64 KB (61%) over 32 KB (56%): chunks are
// halved for packed states at 4 blocks per SM.
// Without the look-back's wait (carries wrong, for the measurement only) the float32 kernel
// reads its 64 KB chunks twice at 92-93% of copy: the wait, not the second read, is the cost.
#ifndef SCANOPS_LOOKBACK_CHUNK_BYTES
#define SCANOPS_LOOKBACK_CHUNK_BYTES 65536
#endif
template <class Combine, class Source, class Sink, int kItems>
int lookback_chunk_tiles(int64_t tile) {
  if constexpr (combine_runs<Combine>) return kRunChunkTiles;
  constexpr bool halve =
      lookback_packs<typename LookbackCarry<Combine>::state_t> &&
      kRowMinBlocks<Source, Sink, kItems> == 4;
  const int64_t t = SCANOPS_LOOKBACK_CHUNK_BYTES / (halve ? 2 : 1) / (tile * Source::kInBytes);
  return static_cast<int>(std::max<int64_t>(1, t));
}

// The mode of a row_scan_kernel launch of kItems items a thread over `rows` lines of `length`
// contiguous elements, and its work items (`items`). Whole rows are packed into a tile where
// min_packed_rows or more fit (the library: 2); a look-back chunk holds chunk_tiles tiles (0:
// lookback_chunk_tiles); long rows take look-back chunks where there are fewer than tenths /
// 10 rows a resident block (-1: lookback_tenths). bench/row_launch.cuh calls it with its
// switches.
template <class Combine, class Source, class Sink, int kItems>
RowGeometry row_geometry(const LaunchContext& ctx, int64_t rows, int64_t length,
                         ScanFlags flags, int64_t& items, int64_t min_packed_rows = 2,
                         int chunk_tiles = 0, int64_t tenths = -1) {
  constexpr int64_t kTile = int64_t{kRowThreads} * kItems;
  RowGeometry g{rows, length, 0, false, flags.exclusive, flags.reverse};
  items = rows;
  const int64_t row_tiles = ceil_div(length, kTile);
  // Short rows: whole rows packed into segmented tiles, where two or more fit a tile. A row of
  // more than half a tile is scanned in rows mode (a block a row, a row start's state as its
  // carry), not alone in a packed tile with its heads: H200 (bench/linrec_blocks_bench.cu,
  // kernel level, share of copy), float32 cumsum rows of 8192 (one tile) 85% -> 92.5%,
  // linear_recurrence rows of 4096 72% -> 80% (at 2 blocks per SM; 81% -> 90% at 3).
  if (min_packed_rows * length <= kTile) {
    g.rows_per_tile = static_cast<int>(kTile / length);
    items = ceil_div(rows, g.rows_per_tile);
  } else if (rows * 10 < (tenths >= 0 ? tenths : lookback_tenths<Source, Sink, kItems>()) *
                             kRowMinBlocks<Source, Sink, kItems> * ctx.sms &&
             row_tiles > kMaxRowModeTiles) {
    // Too few rows to fill the GPU: every chunk of tiles is a work item, chained by look-back.
    g.lookback = true;
    g.chunk_tiles = chunk_tiles > 0
                        ? chunk_tiles
                        : lookback_chunk_tiles<Combine, Source, Sink, kItems>(kTile);
    items = rows * ceil_div(row_tiles, g.chunk_tiles);
  }
  return g;
}

// Launches row_scan_kernel over g's work items. Packed and rows modes need no scratch and no
// memset; look-back mode allocates its status (a flag and two states per chunk, or one 64-bit
// word for 4-byte states) and zeroes it.
template <class Combine, class Source, class Sink, int kItems>
void launch_row_tiles(const LaunchContext& ctx, const Source& src, const Sink& dst,
                      const RowGeometry& g, int64_t items) {
  using state_t = typename LookbackCarry<Combine>::state_t;  // the look-back's
  ChunkStatus<state_t> status{};
  if (g.lookback) status = make_chunk_status<state_t>(ctx, items);
  row_scan_kernel<Combine, Source, Sink, kItems>
      <<<grid_size(ctx, items, kRowBlocksPerSM), kRowThreads, 0, ctx.stream>>>(src, dst, g, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Scans `rows` lines of `length` contiguous elements (line r starts at element r * length).
template <class Combine, class Source, class Sink>
void scan_rows(const LaunchContext& ctx, const Source& src, const Sink& dst, int64_t rows,
               int64_t length, ScanFlags flags) {
  constexpr int kItems = row_items<Combine, Source, Sink>();
  int64_t items = 0;
  const RowGeometry g = row_geometry<Combine, Source, Sink, kItems>(ctx, rows, length, flags,
                                                                     items);
  launch_row_tiles<Combine, Source, Sink, kItems>(ctx, src, dst, g, items);
}

}  // namespace scanops::cuda
