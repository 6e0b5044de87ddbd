// The kernel-level experiments' launch of scanops' row kernel (bench/row_items_bench.cu,
// bench/linrec_blocks_bench.cu): the mode scan_rows (ops/cuda/row_scan.cuh) picks
// (row_geometry, with the switches below), with the items per thread forced. Not part of the
// library; include after bench/micro_common.cuh.
//   CHUNK=k            k tiles per look-back chunk (else lookback_chunk_tiles)
//   PACKED_MIN_ROWS=k  whole rows packed into a tile only where k or more fit (the library: 2)
//   CARVEOUT=p         the L1 / shared memory split, a percentage of shared memory
//   LOOKBACK_TENTHS=k  long rows in look-back chunks only where fewer than k / 10 rows a
//                      resident block (the library: lookback_tenths; 0: never)
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
  static const int chunk = getenv("CHUNK") ? atoi(getenv("CHUNK")) : 0;
  static const int64_t tenths =
      getenv("LOOKBACK_TENTHS") ? atoll(getenv("LOOKBACK_TENTHS")) : -1;
  arena.used = 0;
  int64_t items = 0;
  const RowGeometry g = row_geometry<Combine, Source, Sink, kItems>(
      ctx, rows, length, ScanFlags{false, reverse}, items, min_rows, chunk, tenths);
  ChunkStatus<state_t> status{};
  if (g.lookback) status = make_chunk_status<state_t>(ctx, items);
  if (getenv("CARVEOUT")) {
    cudaFuncSetAttribute(row_scan_kernel<Combine, Source, Sink, kItems>,
                         cudaFuncAttributePreferredSharedMemoryCarveout, atoi(getenv("CARVEOUT")));
  }
  row_scan_kernel<Combine, Source, Sink, kItems>
      <<<grid_size(ctx, items, kRowBlocksPerSM), kRowThreads, 0, ctx.stream>>>(src, dst, g, status);
}

}  // namespace scanops::bench
