// scanops CUDA back end, layers 3-4 for scans along an outer dim (inner > 1).
//
// The lines are the (outer, inner) columns: element (o, l, i) at (o * length + l) * inner + i.
// Three kernel families, chosen by shape in scan_columns:
//   column_scan_kernel   a thread walks one column along the scan dim carrying its state;
//                        consecutive threads take consecutive columns (coalesced), kColUnroll
//                        loads issued before they are combined. One launch, for problems with
//                        enough columns to fill the GPU (or short scans).
//   column_tile_kernel   single pass for few wide columns (inner >= 32): a tile is 32 columns
//                        x kColTileRows scan positions, a warp per band of rows, a lane per
//                        column, the tile's data in registers; the tiles of a column band are
//                        chained by a per-column deterministic look-back (each element read
//                        once, written once; the carry order is fixed: run-to-run identical).
//   three passes         few narrow columns (inner < 32): chunk totals (column_scan_kernel),
//                        their exclusive scan (scan_rows), rescan from the carries.
#pragma once

#include "ops/cuda/row_scan.cuh"

namespace scanops::cuda {

constexpr int kColThreads = 256;
constexpr int kColUnroll = 8;
constexpr int64_t kColBlocksPerSM = 32;           // grid cap (the kernel grid-strides beyond it)
constexpr int64_t kColThreadsWantedPerSM = 2048;  // columns x chunks below which to chunk
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
__global__ void __launch_bounds__(kColThreads, 4)
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
#pragma unroll 1
    for (int64_t s = s0; s < s1; s += kColUnroll, idx += kColUnroll * step) {
      const int m = static_cast<int>(std::min<int64_t>(kColUnroll, s1 - s));
      state_t x[kColUnroll];
#pragma unroll
      for (int u = 0; u < kColUnroll; ++u) {
        // (position along the column in the original order: counted, not divided out)
        x[u] = u < m ? src.load_at(idx + u * step, g.reverse ? g.length - 1 - (s + u) : s + u)
                     : Combine::identity();
      }
      if (pass == Pass::Reduce) {
#pragma unroll
        for (int u = 0; u < kColUnroll; ++u) carry = Combine::combine(carry, x[u]);
        continue;
      }
#pragma unroll
      for (int u = 0; u < kColUnroll; ++u) {
        if (u < m) {
          if (g.exclusive) dst.store(idx + u * step, carry);
          carry = Combine::combine(carry, x[u]);
          if (!g.exclusive) dst.store(idx + u * step, carry);
        }
      }
    }
    if (pass == Pass::Reduce) totals[slot] = carry;
  }
}

// ---------------------------------------------------------------------------------------
// column_tile_kernel: tiles of kColWarps bands x kBandRows rows x 32 columns.
constexpr int kColWarps = 8;
constexpr int kColTileThreads = kColWarps * kWarpSize;
constexpr int64_t kMinColBands = 16;  // column bands (of 32 columns) the tile kernel needs

// Rows per band (per thread): 128 bytes of states in registers.
template <class state_t>
constexpr int col_band_rows() {
  return 128 / static_cast<int>(sizeof(state_t)) < 32 ? 128 / static_cast<int>(sizeof(state_t))
                                                       : 32;
}

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
  constexpr int R = col_band_rows<state_t>();
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
    const bool active = col < g.inner;
    // Scan positions of this thread: s0 + k, k < R (those < length).
    const int64_t s0 = rt * kTileRows + int64_t{warp} * R;
    const int64_t step = g.reverse ? -g.inner : g.inner;
    const int64_t idx0 = (o * g.length + (g.reverse ? g.length - 1 - s0 : s0)) * g.inner + col;
    const int64_t m = std::min<int64_t>(R, g.length - s0);  // may be <= 0 in the last tile

    state_t x[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      x[k] = (active && k < m)
                 ? src.load_at(idx0 + k * step, g.reverse ? g.length - 1 - (s0 + k) : s0 + k)
                 : Combine::identity();
    }
#pragma unroll
    for (int k = 1; k < R; ++k) x[k] = Combine::combine(x[k - 1], x[k]);
    band_prefix[warp * kWarpSize + lane] = x[R - 1];
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
        detail::store_cg(status.aggregate + item * kWarpSize + lane, agg);
        __threadfence();
        __syncwarp();
        if (lane == 0) detail::store_release(status.flags + item, kAggregate);
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
      detail::store_cg(status.inclusive + item * kWarpSize + lane, Combine::combine(carry, agg));
      __threadfence();
      __syncwarp();
      if (lane == 0) detail::store_release(status.flags + item, kInclusive);
#pragma unroll
      for (int w = 0; w < kColWarps; ++w) {
        band_prefix[w * kWarpSize + lane] =
            Combine::combine(carry, band_prefix[w * kWarpSize + lane]);
      }
    }
    __syncthreads();
    const state_t prefix = band_prefix[warp * kWarpSize + lane];
    if (active) {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        if (k < m) {
          dst.store(idx0 + k * step,
                    g.exclusive ? (k == 0 ? prefix : Combine::combine(prefix, x[k - 1]))
                                : Combine::combine(prefix, x[k]));
        }
      }
    }
    // (the next item's first barrier orders these reads of band_prefix before its writes)
  }
}

// Scans the columns of an outer x length x inner problem along length.
template <class Combine, class Source, class Sink>
void scan_columns(const LaunchContext& ctx, const Source& src, const Sink& dst, int64_t outer,
                  int64_t length, int64_t inner, ScanFlags flags) {
  using state_t = typename Combine::state_t;
  const int64_t columns = outer * inner;
  const int64_t wanted = ctx.sms * kColThreadsWantedPerSM;
  constexpr int64_t kTileRows = kColWarps * col_band_rows<state_t>();
  // The tile kernel wants many column bands in flight: with few, its tiles chain down each
  // band one after another (measured on the H100: the 2 bands of (2^22, 64) along dim 0 at
  // 25% of copy speed; the three passes reached 51% on (2^24, 8) along dim 0).
  const int64_t bands = outer * ceil_div(inner, kWarpSize);
  if (columns < wanted && inner >= kWarpSize && length > kTileRows && bands >= kMinColBands) {
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
  if (columns < wanted && length >= 2 * kMinColChunk) {
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
  scan_rows<Combine>(ctx, StateSource<state_t>{totals}, StateSink<state_t>{totals}, columns,
                     g.chunks, ScanFlags{/*exclusive=*/true, /*reverse=*/false});
  launch(totals, Pass::Scan);
}

}  // namespace scanops::cuda
