// The kernel-level experiments' launch of scanops' row kernel (bench/row_items_bench.cu,
// bench/linrec_blocks_bench.cu): the mode scan_rows (ops/cuda/row_scan.cuh) picks, with the
// items per thread forced. Not part of the library; include after bench/micro_common.cuh.
//   CHUNK=k            k tiles per look-back chunk (else lookback_chunk_tiles)
//   PACKED_MIN_ROWS=k  whole rows packed into a tile only where k or more fit (the library: 2)
//   CARVEOUT=p         the L1 / shared memory split, a percentage of shared memory
#pragma once

#include <cstdlib>

#include "bench/micro_common.cuh"
#include "ops/cuda/row_scan.cuh"

namespace scanops::bench {

template <class Combine, int kItems, class Source, class Sink>
void launch_rows(const cuda::LaunchContext& ctx, Arena& arena, const Source& src, const Sink& dst,
                 int64_t rows, int64_t length, bool reverse = false) {
  using namespace scanops::cuda;
  using state_t = typename LookbackCarry<Combine>::state_t;
  static const int64_t min_rows =
      getenv("PACKED_MIN_ROWS") ? atoll(getenv("PACKED_MIN_ROWS")) : 2;
  arena.used = 0;
  constexpr int64_t kTile = int64_t{kRowThreads} * kItems;
  RowGeometry g{rows, length, 0, false, false, reverse};
  ChunkStatus<state_t> status{};
  int64_t items = rows;
  const int64_t row_tiles = ceil_div(length, kTile);
  if (length * min_rows <= kTile) {
    g.rows_per_tile = static_cast<int>(kTile / length);
    items = ceil_div(rows, g.rows_per_tile);
  } else if (rows < ctx.sms * kRowsWantedPerSM && row_tiles > kMaxRowModeTiles) {
    g.lookback = true;
    g.chunk_tiles = getenv("CHUNK") ? atoi(getenv("CHUNK"))
                                    : lookback_chunk_tiles<Combine, Source, Sink, kItems>(kTile);
    items = rows * ceil_div(row_tiles, g.chunk_tiles);
    status = make_chunk_status<state_t>(ctx, items);
  }
  if (getenv("CARVEOUT")) {
    cudaFuncSetAttribute(row_scan_kernel<Combine, Source, Sink, kItems>,
                         cudaFuncAttributePreferredSharedMemoryCarveout, atoi(getenv("CARVEOUT")));
  }
  row_scan_kernel<Combine, Source, Sink, kItems>
      <<<grid_size(ctx, items, kRowBlocksPerSM), kRowThreads, 0, ctx.stream>>>(src, dst, g, status);
}

}  // namespace scanops::bench
