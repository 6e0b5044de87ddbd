// scanops CUDA back end, layers 3-4 for scans along an outer dim (inner > 1).
//
// The lines are the (outer, inner) columns: element (o, l, i) at (o * length + l) * inner + i.
// A thread walks one column (or one chunk of it) along the scan dim carrying its state;
// consecutive threads take consecutive columns, so every step is a coalesced access across
// the warp, and kColUnroll loads are issued before they are combined. With too few columns
// to fill the GPU the scan dim is chunked and done in three passes, the chunk totals being
// scanned by the row machinery (they are short rows: one per column).
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
        x[u] = u < m ? src.load(idx + u * step) : Combine::identity();
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

// Scans the columns of an outer x length x inner problem along length.
template <class Combine, class Source, class Sink>
void scan_columns(const LaunchContext& ctx, const Source& src, const Sink& dst, int64_t outer,
                  int64_t length, int64_t inner, ScanFlags flags) {
  using state_t = typename Combine::state_t;
  const int64_t columns = outer * inner;
  const int64_t wanted = ctx.sms * kColThreadsWantedPerSM;
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
