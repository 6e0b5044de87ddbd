// scanops CUDA back end, layers 3-4 for scans along an outer dim (inner > 1).
//
// The lines are the (outer, inner) columns: element (o, l, i) at (o * length + l) * inner + i.
// Five kernel families, chosen by shape in scan_columns:
//   column_vec_kernel    single pass for fewer columns (>= 4 bands of 32 vectors, or bands
//                        whose every lane has columns): a block's tile is 128 rows (float32)
//                        x 32 vectors of columns, a lane a vector of columns, the block's
//                        warps stacked down the tile (narrower `inner`: 32 / row_lanes runs
//                        of rows side by side in a warp); tiles chained by a per-column
//                        deterministic look-back. Inputs of >= 4 bytes, `inner` a multiple
//                        of the vector width and aligned tensors; the kernels below take the
//                        rest.
//   column_scan_kernel   a thread walks one column along the scan dim carrying its state;
//                        consecutive threads take consecutive columns (coalesced), two batches
//                        of kColUnroll loads in flight. One launch, for problems with enough
//                        columns to fill the GPU (or short scans).
//   column_warp_kernel   single pass for fewer columns in many bands of 32 (>= kMinWarpBands):
//                        a block's tile is R rows x 256 columns, each warp's 32 columns chained
//                        to the tile above by the warp's own deterministic look-back.
//   column_tile_kernel   single pass for few bands (16-63): a tile is 32 columns x
//                        kColWarps * R scan positions, a warp per band of rows, a lane per
//                        column, the tile's data in registers; the tiles of a column band are
//                        chained by a per-column deterministic look-back.
//   three passes         the rest (few bands, or narrow columns the vector tiles cannot
//                        take): chunk totals
//                        (column_scan_kernel), their exclusive scan (scan_rows), rescan from
//                        the carries.
// Every path reads each element once and writes it once except the three passes (two reads);
// every carry order is fixed (run-to-run identical).
#pragma once

#include <concepts>

#include "ops/cuda/row_scan.cuh"

namespace scanops::cuda {

// A thread per column: 64-thread blocks (32768 columns fill 512 blocks, ~4 per SM),
// kColUnroll loads per batch, two batches in flight (see the kernel).
constexpr int kColThreads = 64;
constexpr int kColUnroll = 16;
constexpr int64_t kColBlocksPerSM = 32;  // grid cap (the kernel grid-strides beyond it)

// Columns (x chunks) per SM a thread per column wants: the three passes cut columns into
// chunks until there are that many.
constexpr int64_t kColThreadsWantedPerSM = 2048;
// Columns per SM from which a thread per column walks whole columns in one launch.
// Selections (cummax / cummin) take it from fewer columns: measured on the H100, (32768,
// 32768) along dim 0 and (8, 32768, 4096) along dim 1 (248 columns per SM): cummax 84-86% of
// copy a thread per column against 71-73% with column tiles, while cumsum was level (75-77%
// against 75-76%) and cumprod (float64 states) slower (37% against 43-47%).
template <class Combine>
constexpr int64_t col_whole_columns_per_sm() {
  return Combine::selects ? 192 : kColThreadsWantedPerSM;
}
constexpr int64_t kMinColChunk = 32;              // scan positions per chunk, at least

// The chunked column scan runs the kernel twice over the same chunks: Reduce writes each
// chunk's total, Scan rescans each chunk from its carry-in (the exclusive scan of the totals).
enum class Pass : int { Scan = 0, Reduce = 1 };

struct ColGeometry {
  int64_t outer;
  int64_t length;
  int64_t inner;
  int64_t chunks;     // chunks per column (1: whole columns)
  int64_t chunk_len;  // scan positions per chunk
  bool exclusive;
  bool reverse;
};

// Work item t = chunk * (outer * inner) + column, grid-stride, one per thread. With totals:
// Pass::Reduce writes the chunk's total to totals[column * chunks + chunk] (identity for the
// last chunk, whose total nothing needs), Pass::Scan starts the chunk from that slot.
// The totals are carries (Carry<Combine>: float64 for float32 linear recurrences): Reduce
// walks the chunk in the carries' combine, Scan rescans it in Combine's from the rounded
// carry (a sequential chain of at most chunk_len elements, as accurate as the loop).
template <class Combine, class Source, class Sink>
__global__ void __launch_bounds__(kColThreads, 2)
    column_scan_kernel(Source src, Sink dst, ColGeometry g,
                       typename Carry<Combine>::state_t* totals, Pass pass) {
  using state_t = typename Combine::state_t;
  using C = Carry<Combine>;
  using Wide = typename C::type;
  const int64_t columns = g.outer * g.inner;
  const int64_t work = columns * g.chunks;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < work;
       t += stride) {
    const int64_t chunk = t / columns;
    const int64_t column = t - chunk * columns;
    const int64_t o = column / g.inner;
    const int64_t i = column - o * g.inner;
    const int64_t slot = column * g.chunks + chunk;
    if (pass == Pass::Reduce && chunk == g.chunks - 1) {
      totals[slot] = Wide::identity();
      continue;
    }
    const int64_t s0 = chunk * g.chunk_len;
    const int64_t s1 = std::min(g.length, s0 + g.chunk_len);
    state_t carry =
        (pass == Pass::Scan && totals != nullptr) ? C::narrow(totals[slot]) : Combine::identity();
    // A column's first chunk starts from its initial state, in both passes: its total then
    // includes it, and the exclusive scan of the totals carries it to the later chunks (whose
    // own totals do not). (Without one, chunk 0's carry stays identity().)
    if (chunk == 0 && dst.has_initial()) carry = dst.line_start(column);
    typename C::state_t total = C::widen(carry);  // (Reduce)
    // Memory offset of scan position s0, and the step to the next scan position.
    const int64_t step = g.reverse ? -g.inner : g.inner;
    int64_t idx = (o * g.length + (g.reverse ? g.length - 1 - s0 : s0)) * g.inner + i;
    // Software pipelined: the next kColUnroll loads are issued before the current ones are
    // combined and stored, so a thread keeps up to 2 * kColUnroll loads in flight (measured
    // on the H100 against 8 loads, not pipelined: the three passes on (2^22, 64) along dim 0
    // 56% -> 62% of copy, (2^24, 8) 51% -> 58%).
    // Elements are held as the source holds them (the inputs themselves where they are
    // narrower than the states: float32 cumprod) and lifted when combined.
    using held_t = typename Source::held_t;
    auto load = [&](int64_t s, int64_t at, held_t (&x)[kColUnroll]) {
      const int m = static_cast<int>(std::min<int64_t>(kColUnroll, s1 - s));
#pragma unroll
      for (int u = 0; u < kColUnroll; ++u) {
        // (position along the column in the original order: counted, not divided out)
        x[u] = u < m ? src.hold_at(at + u * step, g.reverse ? g.length - 1 - (s + u) : s + u)
                     : Source::held_identity();
      }
    };
    held_t cur[kColUnroll];
    load(s0, idx, cur);
#pragma unroll 1
    for (int64_t s = s0; s < s1; s += kColUnroll, idx += kColUnroll * step) {
      held_t nxt[kColUnroll];
      if (s + kColUnroll < s1) load(s + kColUnroll, idx + kColUnroll * step, nxt);
      const int m = static_cast<int>(std::min<int64_t>(kColUnroll, s1 - s));
      if (pass == Pass::Reduce) {
#pragma unroll
        for (int u = 0; u < kColUnroll; ++u) {
          total = Wide::combine(total, C::widen(src.lift_held(cur[u])));
        }
      } else {
#pragma unroll
        for (int u = 0; u < kColUnroll; ++u) {
          if (u < m) {
            if (g.exclusive) dst.store(idx + u * step, carry);
            carry = Combine::combine(carry, src.lift_held(cur[u]));
            if (!g.exclusive) dst.store(idx + u * step, carry);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kColUnroll; ++u) cur[u] = nxt[u];
    }
    if (pass == Pass::Reduce) totals[slot] = total;
  }
}

// ---------------------------------------------------------------------------------------
// column_tile_kernel: tiles of kColWarps bands x kBandRows rows x 32 columns.
constexpr int kColWarps = 8;
constexpr int kColTileThreads = kColWarps * kWarpSize;
constexpr int64_t kMinColBands = 16;  // column bands (of 32 columns) the tile kernel needs

// Rows per band (per thread): 128 bytes of held elements (Source::held_t) in registers, or
// of lowered ones where those are wider (an int32 cumsum writes int64: 16 rows, which do not
// spill).
template <class Source, class Sink>
constexpr int col_band_rows() {
  constexpr int held = static_cast<int>(sizeof(typename Source::held_t));
  constexpr int lowered = static_cast<int>(sizeof(typename Sink::lowered_t));
  constexpr int size = held > lowered ? held : lowered;
  return 128 / size < 32 ? 128 / size : 32;
}

// A lane's run of R consecutive scan positions s0 + k (k < m; m may be <= 0 past the end) of
// one column, starting at element idx0, `step` elements apart: its elements are loaded into
// registers (as the source holds them) and reduced; once the carry of what precedes the run
// is known they are scanned from it and written. The two column tile kernels' lanes are such
// runs. Their carries stay in Combine (not Carry's float64 for float32 linear recurrences:
// that cost 26-29% of the tile and warp kernels' speed on an H200, 2026-11-27; the row kernels
// and the three-pass column scan carry wide).
template <class Combine, class Source, int R>
struct ColumnRun {
  using state_t = typename Combine::state_t;
  using held_t = typename Source::held_t;
  held_t x[R];
  int64_t idx0, step, s0, m;
  bool active;

  // The run of scan positions s0 + [0, R) starting at memory element idx0.
  static __device__ __forceinline__ ColumnRun at(int64_t idx0, int64_t step, int64_t s0,
                                                 int64_t length, bool active) {
    return ColumnRun{{}, idx0, step, s0, std::min<int64_t>(R, length - s0), active};
  }
  // Loads the run; returns its total (the state after its last element).
  __device__ __forceinline__ state_t load_reduce(const Source& src, int64_t length,
                                                 bool reverse) {
#pragma unroll
    for (int k = 0; k < R; ++k) {
      x[k] = (active && k < m)
                 ? src.hold_at(idx0 + k * step, reverse ? length - 1 - (s0 + k) : s0 + k)
                 : Source::held_identity();
    }
    auto w = Walk<Combine>::begin(src.lift_held(x[0]));
#pragma unroll
    for (int k = 1; k < R; ++k) w.push(src.lift_held(x[k]));
    return w.value();
  }
  template <class Sink>
  __device__ __forceinline__ void scan_store(const Source& src, const Sink& dst, state_t carry,
                                             bool exclusive) const {
    if (!active) return;
    auto w = Walk<Combine>::begin(carry);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if (k < m) {
        // (Runs, k == 0: the carry itself, as in RowTile::scan: not the run's value() of it;
        // chains keep their measured code; runs: no log1p unused.)
        constexpr bool kRuns = combine_runs<Combine>;
        const state_t before = exclusive ? (kRuns && k == 0 ? carry : w.value()) : state_t{};
        w.push(src.lift_held(x[k]));
        dst.store(idx0 + k * step, exclusive ? before : w.value());
      }
    }
  }
};

struct ColTileGeometry {
  int64_t outer, length, inner;
  int64_t col_tiles;  // per outer index: ceil(inner / 32)
  int64_t row_tiles;  // ceil(length / tile rows)
  bool exclusive;
  bool reverse;
  // column_vec_kernel: lanes across a row of a band (a power of two; 32 / row_lanes rows
  // side by side in a warp), and the warps stacked down a tile (the block's).
  int row_lanes = kWarpSize;
  int tile_warps = 8;  // (kVecTileWarps; vec_tile_geometry sets it)
};

// Work item = row tile r x column band b (b over outer x col_tiles), item = r * bands + b, taken
// in order from the status counter: a tile's predecessor (r - 1, b) was taken earlier by a
// running block, so the look-back cannot deadlock.
template <class Combine, class Source, class Sink>
__global__ void __launch_bounds__(kColTileThreads, 2)
    column_tile_kernel(Source src, Sink dst, ColTileGeometry g,
                       ChunkStatus<typename Combine::state_t> status) {
  using state_t = typename Combine::state_t;
  constexpr int R = col_band_rows<Source, Sink>();
  constexpr int kTileRows = kColWarps * R;
  constexpr int kWindow = 8;                  // predecessors read at once
  constexpr int kHistory = 4 * kWindow;       // kept for the fold
  __shared__ RawArray<state_t, kColWarps * kWarpSize> band_prefix;  // [warp][lane]
  __shared__ RawArray<state_t, kHistory * kWarpSize> history;       // [d][lane]
  __shared__ int64_t next_item;

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t bands = g.outer * g.col_tiles;
  const int64_t items = bands * g.row_tiles;

  for (;;) {
    if (threadIdx.x == 0) next_item = static_cast<int64_t>(atomicAdd(status.counter, 1ull));
    __syncthreads();
    const int64_t item = next_item;
    if (item >= items) break;
    const int64_t rt = item / bands;
    const int64_t band = item - rt * bands;
    const int64_t o = band / g.col_tiles;
    const int64_t col = (band - o * g.col_tiles) * kWarpSize + lane;
    // Scan positions of this thread: s0 + k, k < R (those < length).
    const int64_t s0 = rt * kTileRows + int64_t{warp} * R;
    auto run = ColumnRun<Combine, Source, R>::at(
        (o * g.length + (g.reverse ? g.length - 1 - s0 : s0)) * g.inner + col,
        g.reverse ? -g.inner : g.inner, s0, g.length, col < g.inner);
    band_prefix[warp * kWarpSize + lane] = run.load_reduce(src, g.length, g.reverse);
    __syncthreads();

    if (warp == 0) {
      // Per column: the bands' exclusive prefixes within the tile, and the tile's aggregate.
      state_t agg = Combine::identity();
#pragma unroll
      for (int w = 0; w < kColWarps; ++w) {
        const state_t a = band_prefix[w * kWarpSize + lane];
        band_prefix[w * kWarpSize + lane] = agg;
        agg = Combine::combine(agg, a);
      }
      // Per column: the carry from the tiles above (deterministic look-back, as lookback.cuh:
      // the sequential left fold from the nearest inclusive prefix); the first row tile's is
      // the column's initial state (it publishes only its inclusive prefix, so no walk goes
      // past it).
      state_t carry = Combine::identity();
      if (rt == 0 && col < g.inner) carry = dst.line_start(o * g.inner + col);
      if (rt > 0) {
        detail::warp_publish(status.flags + item, status.aggregate + item * kWarpSize + lane,
                             agg, kAggregate);
        int depth = 0;
        for (;;) {
          // Lane d < kWindow reads the flag of tile rt - 1 - depth - d (tiles above row 0:
          // inclusive identity).
          const int64_t r_j = rt - 1 - depth - lane;
          unsigned flag = kInclusive;
          if (lane < kWindow && r_j >= 0) {
            while ((flag = detail::load_acquire(status.flags + r_j * bands + band)) == kEmpty) {
            }
          }
          const unsigned inclusive = __ballot_sync(kFullMask, lane < kWindow && flag == kInclusive);
          const int stop = inclusive != 0 ? __ffs(static_cast<int>(inclusive)) - 1 : kWindow - 1;
          // Every lane reads its column's state of the tiles up to `stop`.
#pragma unroll
          for (int d = 0; d < kWindow; ++d) {
            if (d <= stop) {
              const int64_t r_d = rt - 1 - depth - d;
              const bool inc = (inclusive >> d) & 1u;
              state_t v = Combine::identity();
              if (r_d >= 0) {
                // Each lane acquires the flag itself (another lane read it for the ballot).
                const int64_t j = r_d * bands + band;
                const unsigned need = inc ? kInclusive : kAggregate;
                while (detail::load_acquire(status.flags + j) < need) {
                }
                v = detail::load_cg((inc ? status.inclusive : status.aggregate) + j * kWarpSize +
                                    lane);
              }
              history[(depth + d) * kWarpSize + lane] = v;
            }
          }
          depth += stop + 1;
          if (inclusive != 0) break;
          if (depth + kWindow > kHistory) depth = 0;  // start again from the nearest
        }
        carry = fold_left<Combine>(depth, [&](int d) { return history[d * kWarpSize + lane]; });
      }
      detail::warp_publish(status.flags + item, status.inclusive + item * kWarpSize + lane,
                           lookback_combine<Combine>(carry, agg), kInclusive);
      // The first band's exclusive prefix within the tile is identity(): it takes the carry
      // itself, not combine(carry, identity()), which is not the carry for every value
      // (-0.0 + 0.0 = +0.0: an initial value of -0.0 would not be an exclusive scan's first
      // output, nor would a sum that is -0.0 so far carry on as -0.0).
#pragma unroll
      for (int w = 0; w < kColWarps; ++w) {
        band_prefix[w * kWarpSize + lane] =
            w == 0 ? carry : Combine::combine(carry, band_prefix[w * kWarpSize + lane]);
      }
    }
    __syncthreads();
    run.scan_store(src, dst, band_prefix[warp * kWarpSize + lane], g.exclusive);
    // (the next item's first barrier orders these reads of band_prefix before its writes)
  }
}

namespace detail {

// A warp's wait in the windowed column look-back (column_warp_kernel, column_vec_kernel):
// the flags of the n <= 32 * kPerLane nearest tiles above, tile d's at flag_at(d), watched by
// lane d % 32. Returns `stop`, the nearest tile above that is inclusive, once every nearer
// one has published at least its aggregate. Lane d % 32 acquired tile d's flag; the closing
// __syncwarp orders that before every lane's reads of tile d's states (release -> acquire ->
// __syncwarp: causality order).
template <int kPerLane = 1, class FlagAt>
__device__ __forceinline__ int wait_window(FlagAt&& flag_at, int n) {
  static_assert(kPerLane == 1 || kPerLane == 2, "a window of up to 64 tiles");
  const int lane = threadIdx.x % kWarpSize;
  unsigned flag[kPerLane];
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) flag[u] = kEmpty;
  int stop = 0;
  for (;;) {
    unsigned long long inc = 0, ready = 0;
    bool further = true;
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      // Tiles 32u.. are read again only while every nearer one is published and none is
      // inclusive (a flag read earlier stays true: flags only rise). Measured on the H100:
      // reading all 64 each round took (32768, 32768) along dim 0 from 89% to 84% of copy.
      const int d = u * kWarpSize + lane;
      if (further && d < n && flag[u] != kInclusive) flag[u] = load_acquire(flag_at(d));
      const unsigned i = __ballot_sync(kFullMask, d < n && flag[u] == kInclusive);
      const unsigned r = __ballot_sync(kFullMask, d < n && flag[u] != kEmpty);
      further = further && i == 0 && r == __ballot_sync(kFullMask, d < n);
      inc |= static_cast<unsigned long long>(i) << (32 * u);
      ready |= static_cast<unsigned long long>(r) << (32 * u);
    }
    if (inc != 0) {
      stop = __ffsll(static_cast<long long>(inc)) - 1;  // nearest inclusive tile above
      const unsigned long long upto = stop == 63 ? ~0ull : (2ull << stop) - 1ull;
      if ((ready & upto) == upto) break;  // and every nearer one has its aggregate
    }
  }
  __syncwarp();
  return stop;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------
// column_warp_kernel: a work item is a block's tile of R scan positions x kWarpTileWarps * 32
// columns (R = col_band_rows: 128 bytes of held elements per lane in registers); warp w takes the
// item's w-th 32 columns, a lane per column. Warps are independent once the block has its
// item: each warp chains its 32 columns to the same columns of the item above by a
// per-column deterministic look-back done by the warp itself, in registers, so a warp waiting
// for its carry stalls only itself while the other resident warps keep loading (the
// column_tile_kernel below stalls its whole block on one warp's look-back).
//
// The look-back reads a window of the kWarpWindow nearest items above (a lane per item) and
// waits until one of them is inclusive and every nearer one has published at least its
// aggregate; the carry is then the sequential left fold from that inclusive prefix over the
// nearer aggregates (run-to-run identical, as lookback.cuh). It never walks beyond the
// window: a band's chain advances by up to kWarpWindow items per round of flag reads, which is
// why this kernel needs many bands (kMinWarpBands).
//
// Measured on the H100 (fp32 cumsum, share of copy): (32768, 32768) dim 0 and (8, 32768,
// 4096) dim 1 75-76% (column_tile_kernel 72-73%); with 16 bands ((2^20, 512) dim 0) 24%
// (column_tile_kernel 58%), hence kMinWarpBands. Tried and dropped: a ticket per warp instead
// of per block (the one counter's atomics cost ~0.6 ms of 3.5 on (32768, 32768)); V = 4
// columns per lane with float4 accesses (52%: 8 rows per item, the look-back per byte 4x).
constexpr int kWarpTileWarps = 8;
constexpr int kWarpTileThreads = kWarpTileWarps * kWarpSize;
constexpr int kWarpWindow = 32;
constexpr int64_t kMinWarpBands = 64;  // bands of 32 columns

template <class Combine, class Source, class Sink>
__global__ void __launch_bounds__(kWarpTileThreads, 3)
    column_warp_kernel(Source src, Sink dst, ColTileGeometry g,
                       ChunkStatus<typename Combine::state_t> status) {
  using state_t = typename Combine::state_t;
  constexpr int R = col_band_rows<Source, Sink>();
  __shared__ int64_t next_item;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t bands = g.outer * g.col_tiles;  // col_tiles: ceil(inner / kWarpTileThreads)
  const int64_t items = bands * g.row_tiles;

  for (;;) {
    if (threadIdx.x == 0) next_item = static_cast<int64_t>(atomicAdd(status.counter, 1ull));
    __syncthreads();
    const int64_t item = next_item;
    __syncthreads();  // every warp has read it before the next item's write
    if (item >= items) break;
    const int64_t rt = item / bands;
    const int64_t band = item - rt * bands;
    const int64_t o = band / g.col_tiles;
    const int64_t col = (band - o * g.col_tiles) * kWarpTileThreads + warp * kWarpSize + lane;
    // A warp whose columns are all past the end has nothing to do (nobody waits for it).
    if (__ballot_sync(kFullMask, col < g.inner) == 0) continue;
    const int64_t s0 = rt * R;  // scan positions s0 + k, k < m
    auto run = ColumnRun<Combine, Source, R>::at(
        (o * g.length + (g.reverse ? g.length - 1 - s0 : s0)) * g.inner + col,
        g.reverse ? -g.inner : g.inner, s0, g.length, col < g.inner);
    const state_t agg = run.load_reduce(src, g.length, g.reverse);
    // Status slot of this warp's 32 columns in item `it` (a flag, and a state per lane).
    auto slot = [&](int64_t it) { return it * kWarpTileWarps + warp; };

    // The first row tile starts from the column's initial state (it publishes only its
    // inclusive prefix: no walk goes past it).
    state_t carry = Combine::identity();
    if (rt == 0 && col < g.inner) carry = dst.line_start(o * g.inner + col);
    if (rt > 0) {
      detail::warp_publish(status.flags + slot(item),
                           status.aggregate + slot(item) * kWarpSize + lane, agg, kAggregate);
      // Lane d watches item rt - 1 - d of the band (d < n: the row tiles above exist).
      const int stop = detail::wait_window(
          [&](int d) { return status.flags + slot((rt - 1 - d) * bands + band); },
          static_cast<int>(std::min<int64_t>(kWarpWindow, rt)));
      carry = fold_left<Combine>(stop + 1, [&](int d) {
        const int64_t j = slot((rt - 1 - d) * bands + band);
        return detail::load_cg((d == stop ? status.inclusive : status.aggregate) + j * kWarpSize +
                               lane);
      });
    }
    if (rt + 1 < g.row_tiles) {  // the last row tile has no successor
      detail::warp_publish(status.flags + slot(item),
                           status.inclusive + slot(item) * kWarpSize + lane,
                           lookback_combine<Combine>(carry, agg), kInclusive);
    }
    run.scan_store(src, dst, carry, g.exclusive);
  }
}

// ---------------------------------------------------------------------------------------
// column_vec_kernel: a work item is a block's tile of tile_warps * R scan positions x
// 32 * V columns, V = the source's vector width (16 bytes: 4 float32 columns per lane).
// Warp w takes the tile's w-th band of R rows, a lane V adjacent columns (one vector load
// and one vector store per row); the warps' column totals are combined down the tile in
// shared memory, warp 0 chains the tile to the one above by a per-column deterministic
// look-back (a window of 64 tiles, as column_warp_kernel), and every warp scans its
// rows from its carry. Where `inner` is narrower than 32 vectors, a row takes row_lanes
// lanes (the fewest, a power of two) and a warp's 32 / row_lanes groups of lanes take
// consecutive runs of R rows (a tile of (2^24, 8) float32, one band: 16 warps x 16 runs x 16
// rows); per column, the groups' totals are scanned across the warp with shuffles before the
// warps' are combined. Measured on the H100 (bench/column_bench.cu, float32, one band: single
// chains of tiles): (2^22, 64) along dim 0 73% of copy, (2^21, 128) 73%, (2^24, 8) 64% (the
// three passes: 60% / 61% / 55%); 4 bands of (4, 2^20, 64) along dim 1 72-73%.
//
// Measured on the H100 (bench/column_bench.cu, float32 cumsum, share of copy): a copy that
// touches memory in any of these column tile patterns (1, 2 or 4 columns per lane; 8 to 32
// rows; 128 bytes to 4 KB of a row per block) runs at 97-100% of a plain copy, so the
// column scans' losses are the carries, not the access pattern. The carry's cost falls with
// the tile's height: (32768, 32768) along dim 0, 32-row tiles (column_warp_kernel, a lane per
// column) 73-76%; a lane per 4 columns with 64- or 128-row tiles 90-91%; 128 rows of 2 or 1
// columns per lane 83% / 63%; 256-row tiles (32 rows per lane: 1 block per SM) 78-79%.
// (1048576, 512) along dim 0 (4 bands of 128 columns): 128-row tiles 74%, 256-row 78%
// (the three passes: 58%).
// V states combined element by element: a lane's vector of columns as one look-back state
// (State: Vec, one aligned vector access; lanes_scan.cuh's rows of lanes take a plain array of
// any V, Lanes). The constants are those RowTile reads of a combine.
template <class Combine, int V, class State = Vec<typename Combine::state_t, V>>
struct LanesCombine {
  using state_t = State;
  static constexpr int arity = 1;
  static constexpr bool indexed = false;
  static constexpr bool selects = Combine::selects;
  static constexpr bool costly = Combine::costly;
  static __device__ __forceinline__ state_t identity() {
    state_t s;
#pragma unroll
    for (int v = 0; v < V; ++v) s.v[v] = Combine::identity();
    return s;
  }
  static __device__ __forceinline__ state_t combine(const state_t& a, const state_t& b) {
    state_t s;
#pragma unroll
    for (int v = 0; v < V; ++v) s.v[v] = Combine::combine(a.v[v], b.v[v]);
    return s;
  }
};

// Combines of (state, segment head) pairs (segmented.cuh's TileSegCombine, which runs
// column_vec_kernel for segmented columns) add two members, detected here:
//   owns_prefix(s): s does not depend on what precedes it (it holds a segment head); a tile
//     whose aggregate owns its prefix in every column publishes it as its inclusive prefix
//     before its look-back (the bits the look-back would publish: combine(carry, agg) is
//     agg), so the tiles below it do not wait for the ones above;
//   exclusive_before(before, x): the exclusive output at element x (identity() at a head).
// Every other combine compiles to the code it had before these existed.
template <class Combine>
concept HeadedCombine = requires(const typename Combine::state_t& s) {
  { Combine::owns_prefix(s) } -> std::convertible_to<bool>;
  Combine::exclusive_before(s, s);
};

template <class Combine>
__device__ __forceinline__ typename Combine::state_t exclusive_before(
    const typename Combine::state_t& before, const typename Combine::state_t& x) {
  if constexpr (HeadedCombine<Combine>) {
    return Combine::exclusive_before(before, x);
  } else {
    return before;
  }
}

// The look-back's pinned combine (pinned.cuh), lane by lane.
template <class Combine, int V, class State>
struct PinnedCombine<LanesCombine<Combine, V, State>> {
  using state_t = State;
  using P = PinnedCombine<Combine>;
  static __device__ __forceinline__ state_t combine(const state_t& a, const state_t& b) {
    state_t s;
#pragma unroll
    for (int v = 0; v < V; ++v) s.v[v] = P::combine(a.v[v], b.v[v]);
    return s;
  }
  static __device__ __forceinline__ state_t canonical(const state_t& a) {
    state_t s;
#pragma unroll
    for (int v = 0; v < V; ++v) s.v[v] = P::canonical(a.v[v]);
    return s;
  }
};

// Warps per tile: 8, two blocks per SM; 16, one block per SM, for fewer than kMinVecBands
// bands. Measured on the H100 (bench/column_bench.cu, float32 cumsum, share of copy): one
// band ((2^22, 64), (2^21, 128), (2^24, 8) along dim 0) 69% / 70% / 60% with 8 warps, 73% /
// 73% / 64% with 16 (a band is one chain of tiles: twice the bytes per link); (2^20, 512)
// (4 bands) 74-75% either way; (32768, 32768) 88% with 8, 76% with 16 (the block's wait on
// warp 0's look-back then stalls the whole SM).
constexpr int kVecTileWarps = 8;
constexpr int kVecTileWarpsFewBands = 16;
constexpr int kVecTileMaxThreads = kVecTileWarpsFewBands * kWarpSize;
constexpr int64_t kMinVecBands = 4;  // bands of 32 * V columns

// Rows per lane: 256 bytes of held elements (16 rows of 4 float32 columns, 8 rows of 4
// linear_recurrence pairs); 128 bytes where held elements or states are 16 bytes (ptxas
// spilled 240 bytes of complex64 cumprod, complex128 states, with 256).
template <class Source>
constexpr int vec_tile_rows() {
  if constexpr (requires { Source::kTileRows; }) {  // (a source that sets its own)
    return Source::kTileRows;
  } else {
    constexpr int held = static_cast<int>(sizeof(typename Source::held_t));
    constexpr int state = static_cast<int>(sizeof(typename Source::state_t));
    constexpr int r = (held >= 16 || state >= 16 ? 128 : 256) / (Source::kVec * held);
    return r < 4 ? 4 : (r > 16 ? 16 : r);
  }
}

// Rows a lane holds at a time: all R of vec_tile_rows, unless the source sets fewer
// (kHeldRows: segmented columns, whose (state, head) pairs take twice the input's
// registers; a tile of R rows keeps the look-back's latency paid per tile small against its
// bytes, and the rows are read again from L2 for the rescan).
template <class Source>
constexpr int vec_tile_held_rows() {
  if constexpr (requires { Source::kHeldRows; }) {
    return Source::kHeldRows < vec_tile_rows<Source>() ? Source::kHeldRows
                                                        : vec_tile_rows<Source>();
  } else {
    return vec_tile_rows<Source>();
  }
}

// Whether column_vec_kernel is compiled for these types: sources and sinks with the same
// vector width, inputs of 4 bytes or more, cheap combines. The others keep the kernels below:
// ptxas spilled 50-1100 bytes in this kernel for inputs of 1 or 2 bytes (8 columns per lane,
// held as their 4- or 8-byte states); selections' states are 16 bytes; logcumsumexp along
// dim 0 of (32768, 32768) fell from 41% to 16% of copy here (the block waits on warp 0's
// costly prefix and fold: the warp tiles do not wait for each other). A problem with a
// broadcast companion takes the kernel its dense twin takes (the same association: the
// same bits), gathering the companion vector by vector (hold_vec; fetching every vector
// before holding any spilled 150-1100 bytes; this way ptxas spills none but int32 masked
// sums, 192 bytes). A lane's states at most 32 bytes (the look-back window in shared memory:
// float32 inputs of a float64 linear recurrence, wide_acc, would take 64).
template <class Combine, class Source, class Sink>
constexpr bool vec_columns_compiled() {
  return Source::kVec > 1 && Source::kVec == Sink::kVec && Source::kInBytes >= 4 &&
         !Combine::selects && !Combine::indexed && !Combine::costly &&
         Source::kVec * sizeof(typename Combine::state_t) <= 32;
}

// Whether column_vec_kernel may run: compiled, and every dense tensor aligned to its vector
// with `inner` a multiple of it (then every vector a lane touches is aligned; a broadcast
// companion's gather tests its own alignment).
template <class Combine, class Source, class Sink>
bool vec_columns_ok(const Source& src, const Sink& dst, int64_t inner) {
  if constexpr (vec_columns_compiled<Combine, Source, Sink>()) {
    constexpr int V = Source::kVec;
    auto aligned = [](const void* p, int64_t bytes) {
      return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
    };
    using in_t = std::remove_cv_t<std::remove_pointer_t<decltype(src.in)>>;
    using out_t = std::remove_cv_t<std::remove_pointer_t<decltype(dst.out)>>;
    constexpr int64_t in_vec = V * static_cast<int64_t>(sizeof(in_t));
    constexpr int64_t out_vec = V * static_cast<int64_t>(sizeof(out_t));
    bool coeff_dense = true, mask_dense = true;
    if constexpr (Source::kCompanions) {
      coeff_dense = !src.at.coeff_at.layout.strided;
      mask_dense = !src.at.mask_at.layout.strided;
    }
    bool coeff_ok = true;  // (a source of one operand has no `coeff`)
    if constexpr (Combine::arity == 2) coeff_ok = !coeff_dense || aligned(src.coeff, in_vec);
    return inner % V == 0 && aligned(src.in, in_vec) && coeff_ok &&
           (!mask_dense || aligned(src.mask, V)) && aligned(dst.out, out_vec) &&
           aligned(dst.add, out_vec) && aligned(dst.mul, out_vec) && aligned(dst.mul_mask, V);
  } else {
    return false;
  }
}

// column_vec_kernel's tiles for an outer x length x inner problem: a band is 32 vectors of
// columns, or, where `inner` is narrower, the fewest lanes (a power of two) that cover a row,
// with 32 / row_lanes runs of R rows side by side in each warp (8 float32 columns: 16 runs of
// 16 rows per warp); 16 warps per tile below kMinVecBands bands, else 8.
template <class Source>
ColTileGeometry vec_tile_geometry(int64_t outer, int64_t length, int64_t inner,
                                  ScanFlags flags) {
  constexpr int V = Source::kVec;
  int lanes = kWarpSize;
  while (lanes > 1 && int64_t{lanes / 2} * V >= inner) lanes /= 2;
  const int64_t col_tiles = ceil_div(inner, int64_t{lanes} * V);
  const int warps = outer * col_tiles < kMinVecBands ? kVecTileWarpsFewBands : kVecTileWarps;
  const int64_t rows = int64_t{warps} * (kWarpSize / lanes) * vec_tile_rows<Source>();
  return ColTileGeometry{outer, length, inner, col_tiles, ceil_div(length, rows),
                         flags.exclusive, flags.reverse, lanes, warps};
}

// Whether column_vec_kernel's tiles g suit their problem: two row tiles or more, and
// kMinVecBands bands or more unless every lane of a band has columns (one band is a single
// chain of tiles: its rate is bounded by the bytes per tile).
template <int V>
bool vec_tiles_fit(const ColTileGeometry& g) {
  const bool full_bands = g.inner % (int64_t{g.row_lanes} * V) == 0;
  return g.row_tiles > 1 && (g.outer * g.col_tiles >= kMinVecBands || full_bands);
}

// The source a tile of outer index o reads: a source with at_outer (a copy that reads that
// outer index's companions: segmented.cuh's VecSegSource) gives it, any other is itself.
template <class Source>
__device__ __forceinline__ decltype(auto) source_at_outer(const Source& src, int64_t o) {
  if constexpr (requires { src.at_outer(o); }) {
    return src.at_outer(o);
  } else {
    return (src);  // (a reference: no copy)
  }
}

template <class Combine, class Source, class Sink>
__global__ void __launch_bounds__(kVecTileMaxThreads, 1)  // (128 registers, as 256 x 2)
    column_vec_kernel(Source src, Sink dst, ColTileGeometry g,
                      ChunkStatus<typename LanesCombine<Combine, Source::kVec>::state_t> status) {
  using state_t = typename Combine::state_t;
  using held_t = typename Source::held_t;
  using lowered_t = typename Sink::lowered_t;
  constexpr int V = Source::kVec;
  constexpr int R = vec_tile_rows<Source>();
  // A lane's V columns are one state of the warp's scans and of the status (LanesCombine:
  // combined column by column).
  using Lanes = LanesCombine<Combine, V>;
  using lanes_t = typename Lanes::state_t;
  const int L = g.row_lanes;  // lanes across a row; a warp's rows side by side: 32 / L
  const int warps = g.tile_warps;  // (blockDim.x / 32)
  const int64_t tile_rows = int64_t{warps} * (kWarpSize / L) * R;
  __shared__ RawArray<state_t, kVecTileWarpsFewBands * kWarpSize * V> part;  // [warp][lane][v]
  // The look-back's window: 64 tiles, 31 where a lane's states are 32 bytes (static shared
  // memory: at most 48 KB with `part`). In one band (a narrow or 128-column scan) every tile
  // in flight waits on the one above, so the band advances by at most a window of tiles per
  // round of the look-back: measured on the H100 (bench/column_bench.cu, (2^22, 64) along dim 0),
  // a window of 32 tiles 55% of copy, 64 tiles 70%.
  constexpr int kWindowFit =
      static_cast<int>((48 * 1024 - sizeof(part) - 64) / (kWarpSize * sizeof(lanes_t)));
  constexpr int kWindow = kWindowFit < 2 * kWarpSize ? kWindowFit : 2 * kWarpSize;
  static_assert(kWindow >= 16, "the look-back window");
  __shared__ RawArray<lanes_t, kWindow * kWarpSize> window;  // [d][lane]
  __shared__ int64_t next_item;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t bands = g.outer * g.col_tiles;  // col_tiles: ceil(inner / (32 * V))
  const int64_t items = bands * g.row_tiles;

  for (;;) {
    if (threadIdx.x == 0) next_item = static_cast<int64_t>(atomicAdd(status.counter, 1ull));
    __syncthreads();
    const int64_t item = next_item;
    __syncthreads();  // (every thread has read it, and the last item's `part`, before writes)
    if (item >= items) break;
    const int64_t rt = item / bands;
    const int64_t band = item - rt * bands;
    const int64_t o = band / g.col_tiles;
    const int64_t col = ((band - o * g.col_tiles) * L + lane % L) * V;
    const bool active = col < g.inner;  // (inner is a multiple of V)
    decltype(auto) tsrc = source_at_outer(src, o);
    const int64_t s0 = rt * tile_rows + (int64_t{warp} * (kWarpSize / L) + lane / L) * R;
    const int m = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(R, g.length - s0)));
    const int64_t step = g.reverse ? -g.inner : g.inner;
    const int64_t idx0 = (o * g.length + (g.reverse ? g.length - 1 - s0 : s0)) * g.inner + col;

    // The lane's R x V elements (the compiler issues every vector's loads first), held in
    // batches of RH rows: RH == R (every source but the segmented one) holds them all from
    // the fold to the rescan; RH < R folds the rows a batch at a time and, after the
    // look-back, reads them again (from L2) to rescan them (vec_tile_held_rows).
    constexpr int RH = vec_tile_held_rows<Source>();
    static_assert(R % RH == 0, "whole batches");
    auto load_rows = [&](int k0, held_t(&xb)[RH][V]) {
#pragma unroll
      for (int k = 0; k < RH; ++k) {
        if (active && k0 + k < m) {
          const int64_t p = g.reverse ? g.length - 1 - (s0 + k0 + k) : s0 + k0 + k;
          int64_t pos[V];  // (read by indexed combines only)
#pragma unroll
          for (int v = 0; v < V; ++v) pos[v] = p;
          tsrc.hold_vec(idx0 + (k0 + k) * step, pos, xb[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < RH; ++k) {
        if (!(active && k0 + k < m)) {
#pragma unroll
          for (int v = 0; v < V; ++v) xb[k][v] = Source::held_identity();
        }
      }
    };
    held_t x[RH][V];
    load_rows(0, x);
    lanes_t total;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      total.v[v] = src.lift_held(x[0][v]);
#pragma unroll
      for (int k = 1; k < RH; ++k) total.v[v] = Combine::combine(total.v[v], src.lift_held(x[k][v]));
    }
    if constexpr (RH < R) {
#pragma unroll 1
      for (int k0 = RH; k0 < m; k0 += RH) {
        load_rows(k0, x);
#pragma unroll
        for (int v = 0; v < V; ++v) {
#pragma unroll
          for (int k = 0; k < RH; ++k) {
            total.v[v] = Combine::combine(total.v[v], src.lift_held(x[k][v]));
          }
        }
      }
    }
    // Narrow bands (L < 32): the warp's 32 / L groups of lanes hold consecutive runs of R
    // rows; per column, the groups' exclusive prefixes within the warp (lane l's group
    // prefix), and the warp's total (its last group's inclusive one).
    lanes_t group_prefix = Lanes::identity();
    if (L < kWarpSize) {
      const lanes_t inclusive = warp_strided_inclusive_scan<Lanes>(total, L, lane);
      group_prefix = shfl_up(inclusive, L);
      total = shfl_idx(inclusive, kWarpSize - L + lane % L);
    }
#pragma unroll
    for (int v = 0; v < V; ++v) part[(warp * kWarpSize + lane) * V + v] = total.v[v];
    __syncthreads();

    if (warp == 0) {
      // Per column: the warps' exclusive prefixes within the tile, and the tile's aggregate
      // (in a narrow band, the lanes of a column hold the same).
      lanes_t agg;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        agg.v[v] = Combine::identity();
        for (int w = 0; w < warps; ++w) {
          const int j = (w * kWarpSize + lane) * V + v;
          const state_t a = part[j];
          part[j] = agg.v[v];
          agg.v[v] = Combine::combine(agg.v[v], a);
        }
      }
      auto slot = [&](lanes_t* base, int64_t it) { return base + it * kWarpSize + lane; };
      // In a narrow band the 32 / L lanes of a column hold the same states: its first lane
      // (lane < L) publishes and copies them, the others read that lane's copy (lane % L).
      const bool lead = lane < L;
      lanes_t carry = Lanes::identity();
      if (rt == 0 && active && dst.has_initial()) {  // the columns' initial states
#pragma unroll
        for (int v = 0; v < V; ++v) carry.v[v] = dst.line_start(o * g.inner + col + v);
      }
      // (HeadedCombine: whether every active column's aggregate owns its prefix; warp-uniform.)
      bool own = false;
      if constexpr (HeadedCombine<Combine>) {
        bool mine = true;
#pragma unroll
        for (int v = 0; v < V; ++v) mine = mine && Combine::owns_prefix(agg.v[v]);
        own = rt > 0 && __all_sync(0xffffffffu, mine || !active);
      }
      if (rt > 0) {
        if (own) {
          detail::warp_publish(status.flags + item, slot(status.inclusive, item),
                               lookback_combine<Lanes>(Lanes::identity(), agg), kInclusive, lead);
        } else {
          detail::warp_publish(status.flags + item, slot(status.aggregate, item), agg,
                               kAggregate, lead);
        }
        // Lane d watches item rt - 1 - d of the band (d < n: the row tiles above exist).
        const int stop = detail::wait_window<(kWindow + kWarpSize - 1) / kWarpSize>(
            [&](int d) { return status.flags + (rt - 1 - d) * bands + band; },
            static_cast<int>(std::min<int64_t>(kWindow, rt)));
        // The window's states, every one in flight at once (copied to shared memory without
        // registers), then folded there. Measured on the H100 (bench/column_bench.cu, the one
        // band of (2^22, 64) along dim 0, whose windows are full): loading them 4 at a time
        // into registers (8 spilled), one L2 round trip per 4 tiles, 36% of copy; this way
        // (with a window of 32), 55%.
        if (lead) {
          for (int d = 0; d <= stop; ++d) {
            const int64_t j = (rt - 1 - d) * bands + band;
            detail::copy_async_cg(&window[d * kWarpSize + lane],
                                  slot(d == stop ? status.inclusive : status.aggregate, j));
          }
        }
        detail::copy_async_wait();
        __syncwarp();  // the lead lanes' copies, visible to the others
        const int from = lane % L;
        carry = fold_left<Lanes, 4>(stop + 1, [&](int d) { return window[d * kWarpSize + from]; });
      }
      if (rt + 1 < g.row_tiles && !own) {  // the last row tile has no successor
        detail::warp_publish(status.flags + item, slot(status.inclusive, item),
                             lookback_combine<Lanes>(carry, agg), kInclusive, lead);
      }
#pragma unroll
      for (int v = 0; v < V; ++v) {
        for (int w = 0; w < warps; ++w) {  // (the first warp's prefix: the carry itself, as above)
          const int j = (w * kWarpSize + lane) * V + v;
          part[j] = w == 0 ? carry.v[v] : Combine::combine(carry.v[v], part[j]);
        }
      }
    }
    __syncthreads();

    if (active) {
      state_t carry[V];
#pragma unroll
      for (int v = 0; v < V; ++v) carry[v] = part[(warp * kWarpSize + lane) * V + v];
      if (L < kWarpSize && lane >= L) {  // the warp's groups before this lane's
#pragma unroll
        for (int v = 0; v < V; ++v) carry[v] = Combine::combine(carry[v], group_prefix.v[v]);
      }
      auto scan_store = [&](auto epilogue) {
        auto rescan = [&](int k0) {
#pragma unroll
          for (int k = 0; k < RH; ++k) {
            if (k0 + k < m) {
              lowered_t y[V];
#pragma unroll
              for (int v = 0; v < V; ++v) {
                const state_t e = src.lift_held(x[k][v]);
                const state_t before = exclusive_before<Combine>(carry[v], e);
                carry[v] = Combine::combine(carry[v], e);
                y[v] = Sink::lower(g.exclusive ? before : carry[v]);
              }
              dst.template put_vec<decltype(epilogue)::value>(idx0 + (k0 + k) * step, y);
            }
          }
        };
        if constexpr (RH < R) {
#pragma unroll 1
          for (int k0 = 0; k0 < m; k0 += RH) {
            load_rows(k0, x);
            rescan(k0);
          }
        } else {
          rescan(0);
        }
      };
      // The epilogue's test once per tile, not in every vector's store. Measured on the H100
      // (bench/column_bench.cu, (32768, 32768) float32 cumsum along dim 0): 84% of copy with
      // OutputSink::put_vec testing it per store, 90% this way (a plain float4 sink: 90.6%).
      if (dst.has_epilogue()) {
        scan_store(std::true_type{});
      } else {
        scan_store(std::false_type{});
      }
    }
  }
}

// Enqueues column_vec_kernel over the tiles g (vec_tiles_fit, vec_columns_ok: the caller's).
template <class Combine, class Source, class Sink>
void launch_column_vec(const LaunchContext& ctx, const Source& src, const Sink& dst,
                       const ColTileGeometry& g) {
  const int64_t items = g.outer * g.col_tiles * g.row_tiles;
  const auto status =
      make_chunk_status<typename LanesCombine<Combine, Source::kVec>::state_t>(ctx, items,
                                                                               kWarpSize);
  column_vec_kernel<Combine, Source, Sink>
      <<<grid_size(ctx, items, kVecTileWarpsFewBands / g.tile_warps), g.tile_warps * kWarpSize,
         0, ctx.stream>>>(src, dst, g, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Scans the columns of an outer x length x inner problem along length.
template <class Combine, class Source, class Sink>
void scan_columns(const LaunchContext& ctx, const Source& src, const Sink& dst, int64_t outer,
                  int64_t length, int64_t inner, ScanFlags flags) {
  using state_t = typename Combine::state_t;          // (the tile kernels' look-back states)
  using carry_t = typename Carry<Combine>::state_t;  // (the three passes' chunk totals)
  const int64_t columns = outer * inner;
  const int64_t wanted = ctx.sms * kColThreadsWantedPerSM;
  const bool tiles = columns < ctx.sms * col_whole_columns_per_sm<Combine>();
  constexpr int64_t kTileRows = kColWarps * col_band_rows<Source, Sink>();
  // The tile kernel wants many column bands in flight: with few, its tiles chain down each
  // band one after another (measured on the H100: the 2 bands of (2^22, 64) along dim 0 at
  // 25% of copy speed; the three passes reached 51% on (2^24, 8) along dim 0).
  const int64_t bands = outer * ceil_div(inner, kWarpSize);
  constexpr int64_t kWarpRows = col_band_rows<Source, Sink>();
  if constexpr (vec_columns_compiled<Combine, Source, Sink>()) {
    const ColTileGeometry g = vec_tile_geometry<Source>(outer, length, inner, flags);
    if (tiles && vec_tiles_fit<Source::kVec>(g) && vec_columns_ok<Combine>(src, dst, inner)) {
      launch_column_vec<Combine>(ctx, src, dst, g);
      return;
    }
  }
  if (tiles && inner >= kWarpSize && length > kWarpRows && bands >= kMinWarpBands) {
    const ColTileGeometry g{outer, length, inner, ceil_div(inner, kWarpTileThreads),
                           ceil_div(length, kWarpRows), flags.exclusive, flags.reverse};
    const int64_t items = outer * g.col_tiles * g.row_tiles;
    const auto status =
        make_chunk_status<state_t>(ctx, items * kWarpTileWarps, kWarpSize);  // per warp
    column_warp_kernel<Combine, Source, Sink>
        <<<grid_size(ctx, items, 4), kWarpTileThreads, 0, ctx.stream>>>(src, dst, g, status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  if (tiles && inner >= kWarpSize && length > kTileRows && bands >= kMinColBands) {
    const ColTileGeometry g{outer, length, inner, ceil_div(inner, kWarpSize),
                           ceil_div(length, kTileRows), flags.exclusive, flags.reverse};
    const int64_t items = outer * g.col_tiles * g.row_tiles;
    const auto status = make_chunk_status<state_t>(ctx, items, kWarpSize);
    column_tile_kernel<Combine, Source, Sink>
        <<<grid_size(ctx, items, kColBlocksPerSM), kColTileThreads, 0, ctx.stream>>>(src, dst, g,
                                                                                     status);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  int64_t chunk_len = length;
  if (tiles && length >= 2 * kMinColChunk) {
    chunk_len = std::max(kMinColChunk, ceil_div(length, ceil_div(wanted, columns)));
  }
  const ColGeometry g{outer,     length,          inner,        ceil_div(length, chunk_len),
                      chunk_len, flags.exclusive, flags.reverse};
  auto launch = [&](carry_t* totals, Pass pass) {
    column_scan_kernel<Combine, Source, Sink>
        <<<grid_size(ctx, ceil_div(columns * g.chunks, kColThreads), kColBlocksPerSM), kColThreads,
           0, ctx.stream>>>(src, dst, g, totals, pass);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };

  if (g.chunks == 1) {
    launch(nullptr, Pass::Scan);
    return;
  }
  // The chunk totals and their scan in the carries' combine (Carry: float64 for float32
  // linear recurrences).
  using Wide = carry_combine_t<Combine>;
  carry_t* totals = scratch_states<carry_t>(ctx, columns * g.chunks);
  launch(totals, Pass::Reduce);
  // Per column, the exclusive forward scan of its chunk totals: rows of g.chunks states.
  scan_rows<Wide>(ctx, StateSource<Wide>{totals}, StateSink<Wide>{totals}, columns, g.chunks,
                  ScanFlags{/*exclusive=*/true, /*reverse=*/false});
  launch(totals, Pass::Scan);
}

}  // namespace scanops::cuda
