// scanops CUDA back end, layers 3-4 for scans along an outer dim (inner > 1).
//
// The lines are the (outer, inner) columns: element (o, l, i) at (o * length + l) * inner + i.
// Four kernel families, chosen by shape in scan_columns:
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
//   three passes         the rest (few bands, or inner < 32): chunk totals
//                        (column_scan_kernel), their exclusive scan (scan_rows), rescan from
//                        the carries.
// Every path reads each element once and writes it once except the three passes (two reads);
// every carry order is fixed (run-to-run identical).
#pragma once

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
template <class Combine, class Source, class Sink>
__global__ void __launch_bounds__(kColThreads, 2)
    column_scan_kernel(Source src, Sink dst, ColGeometry g, typename Combine::state_t* totals,
                       Pass pass) {
  using state_t = typename Combine::state_t;
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
      totals[slot] = Combine::identity();
      continue;
    }
    const int64_t s0 = chunk * g.chunk_len;
    const int64_t s1 = std::min(g.length, s0 + g.chunk_len);
    state_t carry = (pass == Pass::Scan && totals != nullptr) ? totals[slot] : Combine::identity();
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
        for (int u = 0; u < kColUnroll; ++u) carry = Combine::combine(carry, src.lift_held(cur[u]));
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
    if (pass == Pass::Reduce) totals[slot] = carry;
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
// runs.
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
    state_t total = src.lift_held(x[0]);
#pragma unroll
    for (int k = 1; k < R; ++k) total = Combine::combine(total, src.lift_held(x[k]));
    return total;
  }
  template <class Sink>
  __device__ __forceinline__ void scan_store(const Source& src, const Sink& dst, state_t carry,
                                             bool exclusive) const {
    if (!active) return;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if (k < m) {
        const state_t before = carry;
        carry = Combine::combine(carry, src.lift_held(x[k]));
        dst.store(idx0 + k * step, exclusive ? before : carry);
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
      // the sequential left fold from the nearest inclusive prefix).
      state_t carry = Combine::identity();
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
                           Combine::combine(carry, agg), kInclusive);
#pragma unroll
      for (int w = 0; w < kColWarps; ++w) {
        band_prefix[w * kWarpSize + lane] =
            Combine::combine(carry, band_prefix[w * kWarpSize + lane]);
      }
    }
    __syncthreads();
    run.scan_store(src, dst, band_prefix[warp * kWarpSize + lane], g.exclusive);
    // (the next item's first barrier orders these reads of band_prefix before its writes)
  }
}

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

    state_t carry = Combine::identity();
    if (rt > 0) {
      detail::warp_publish(status.flags + slot(item),
                           status.aggregate + slot(item) * kWarpSize + lane, agg, kAggregate);
      // Lane d watches item rt - 1 - d of the band (d < n: the row tiles above exist).
      const int n = static_cast<int>(std::min<int64_t>(kWarpWindow, rt));
      const unsigned* watched = status.flags + slot((rt - 1 - lane) * bands + band);
      unsigned flag = kEmpty;
      int stop = 0;
      for (;;) {
        if (lane < n && flag != kInclusive) flag = detail::load_acquire(watched);
        const unsigned inc = __ballot_sync(kFullMask, lane < n && flag == kInclusive);
        const unsigned ready = __ballot_sync(kFullMask, lane < n && flag != kEmpty);
        if (inc != 0) {
          stop = __ffs(static_cast<int>(inc)) - 1;  // nearest inclusive item above
          const unsigned upto = stop == 31 ? kFullMask : (2u << stop) - 1u;
          if ((ready & upto) == upto) break;  // and every nearer one has its aggregate
        }
      }
      // Lane d acquired item d's flag; the barrier orders that before every lane's reads of
      // item d's state (release -> acquire -> __syncwarp: causality order).
      __syncwarp();
      carry = fold_left<Combine>(stop + 1, [&](int d) {
        const int64_t j = slot((rt - 1 - d) * bands + band);
        return detail::load_cg((d == stop ? status.inclusive : status.aggregate) + j * kWarpSize +
                               lane);
      });
    }
    if (rt + 1 < g.row_tiles) {  // the last row tile has no successor
      detail::warp_publish(status.flags + slot(item),
                           status.inclusive + slot(item) * kWarpSize + lane,
                           Combine::combine(carry, agg), kInclusive);
    }
    run.scan_store(src, dst, carry, g.exclusive);
  }
}

// Scans the columns of an outer x length x inner problem along length.
template <class Combine, class Source, class Sink>
void scan_columns(const LaunchContext& ctx, const Source& src, const Sink& dst, int64_t outer,
                  int64_t length, int64_t inner, ScanFlags flags) {
  using state_t = typename Combine::state_t;
  const int64_t columns = outer * inner;
  const int64_t wanted = ctx.sms * kColThreadsWantedPerSM;
  const bool tiles = columns < ctx.sms * col_whole_columns_per_sm<Combine>();
  constexpr int64_t kTileRows = kColWarps * col_band_rows<Source, Sink>();
  // The tile kernel wants many column bands in flight: with few, its tiles chain down each
  // band one after another (measured on the H100: the 2 bands of (2^22, 64) along dim 0 at
  // 25% of copy speed; the three passes reached 51% on (2^24, 8) along dim 0).
  const int64_t bands = outer * ceil_div(inner, kWarpSize);
  constexpr int64_t kWarpRows = col_band_rows<Source, Sink>();
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
  auto launch = [&](state_t* totals, Pass pass) {
    column_scan_kernel<Combine, Source, Sink>
        <<<grid_size(ctx, ceil_div(columns * g.chunks, kColThreads), kColBlocksPerSM), kColThreads,
           0, ctx.stream>>>(src, dst, g, totals, pass);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };

  if (g.chunks == 1) {
    launch(nullptr, Pass::Scan);
    return;
  }
  state_t* totals = scratch_states<state_t>(ctx, columns * g.chunks);
  launch(totals, Pass::Reduce);
  // Per column, the exclusive forward scan of its chunk totals: rows of g.chunks states.
  scan_rows<Combine>(ctx, StateSource<Combine>{totals}, StateSink<Combine>{totals}, columns,
                     g.chunks, ScanFlags{/*exclusive=*/true, /*reverse=*/false});
  launch(totals, Pass::Scan);
}

}  // namespace scanops::cuda
