// scanops CUDA back end, layers 2-4 for lines of contiguous elements (inner == 1, and the
// chunk totals of the column scans).
//
//   RowTile           the per-tile agent: a block scans kTile consecutive elements
//   row_scan_kernel   a launch in one of three modes:
//                       packed:    a work item is a tile of whole short rows (segmented)
//                       rows:      a work item is a row, its tiles walked carrying the state
//                       look-back: a work item is a chunk of a long row: its tiles are
//                                  reduced, its carry found by decoupled look-back
//                                  (lookback.cuh), then its tiles rescanned from the carry
//                                  (chunks are small, for the second read to hit L2)
//   scan_rows         host dispatch among the three
//
// A tile is a memory range [lo, lo + n), n <= kTile, read in *scan order*: scan position q
// is at lo + q, or at lo + n - 1 - q for reverse scans. Whole short rows reversed together
// are each reversed (in reversed row order, which does not matter: rows are independent),
// so packed tiles reverse the same way.
#pragma once

#include "ops/cuda/block_scan.cuh"
#include "ops/cuda/lookback.cuh"

namespace scanops::cuda {

constexpr int kRowThreads = 256;
constexpr int kRowItems = 8;  // consecutive scan positions per thread
constexpr int kRowWarps = kRowThreads / kWarpSize;
constexpr int kWarpItems = kWarpSize * kRowItems;
constexpr int kTile = kRowThreads * kRowItems;
// A warp's transposition buffer, padded with one state per 32 so that both the striped and
// the blocked access patterns are free of bank conflicts.
constexpr int kWarpExchange = kWarpItems + kWarpItems / kWarpSize;
__device__ __forceinline__ int padded(int e) { return e + (e >> 5); }

// Geometry of a row_scan_kernel launch over `rows` lines of `length` contiguous elements.
struct RowGeometry {
  int64_t rows;
  int64_t length;
  int rows_per_tile;  // > 0: packed mode (length <= kTile), whole rows per tile
  int chunk_tiles;    // > 0: look-back mode, tiles per chunk
  bool exclusive;
  bool reverse;
};

template <class Combine, class Source, class Sink>
struct RowTile {
  using state_t = typename Combine::state_t;
  using Scan = BlockScan<Combine, kRowThreads>;
  static_assert(kRowItems % Source::kVec == 0 && kRowItems % Sink::kVec == 0);

  struct Storage {
    RawArray<state_t, kRowWarps * kWarpExchange> exchange;
    typename Scan::Storage scan;
  };

  // Scans the tile [lo, lo + n). seg > 0: a segment (row) starts at every scan position that
  // is a multiple of seg and `carry` is not used; seg == 0: one segment, continued from
  // `carry`. Writes the (inclusive or exclusive) results when `write`. Returns the state
  // after the tile's last element: the carry of the line's next tile.
  // Block-wide (barriers inside): every thread calls it with the same arguments.
  static __device__ state_t scan(Storage& st, const Source& src, const Sink& dst, int64_t lo, int n,
                                 int seg, const state_t& carry, bool reverse, bool exclusive,
                                 bool write) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    state_t* xbuf = &st.exchange[warp * kWarpExchange];
    const int wq = warp * kWarpItems;      // the warp's first scan position in the tile
    const int q0 = wq + lane * kRowItems;  // the thread's first scan position

    // Coalesced striped load into the warp's buffer, then each thread takes kRowItems
    // consecutive positions (positions past n are identity).
    __syncwarp();  // the warp's reads of the previous tile's buffer are done
    load_striped(src, xbuf, lo, n, wq, reverse, lane);
    __syncwarp();
    state_t x[kRowItems];
#pragma unroll
    for (int k = 0; k < kRowItems; ++k) x[k] = xbuf[padded(lane * kRowItems + k)];

    unsigned heads = 0;  // bit k: a segment starts at position q0 + k
    if (seg > 0) {
      int r = q0 % seg;
#pragma unroll
      for (int k = 0; k < kRowItems; ++k) {
        if (r == 0 && q0 + k < n) heads |= 1u << k;
        r = r + 1 == seg ? 0 : r + 1;
      }
    }

    // Thread-local inclusive segmented scan, then the block-wide scan of thread aggregates.
#pragma unroll
    for (int k = 1; k < kRowItems; ++k) {
      if (!((heads >> k) & 1u)) x[k] = Combine::combine(x[k - 1], x[k]);
    }
    state_t total;
    const state_t prefix =
        Scan::exclusive_scan(st.scan, heads != 0, x[kRowItems - 1], carry, total);
    if (!write) return total;

    // Items before the thread's first head continue the preceding threads' segment.
    const unsigned open = heads != 0 ? (heads & (0u - heads)) - 1u : (1u << kRowItems) - 1u;
#pragma unroll
    for (int k = 0; k < kRowItems; ++k) {
      if ((open >> k) & 1u) x[k] = Combine::combine(prefix, x[k]);
    }
    if (exclusive) {  // shift by one within the segment; a head's exclusive value is identity
#pragma unroll
      for (int k = kRowItems - 1; k > 0; --k) {
        x[k] = ((heads >> k) & 1u) ? Combine::identity() : x[k - 1];
      }
      x[0] = (heads & 1u) ? Combine::identity() : prefix;
    }

    // Back through the buffer (each thread rewrites only its own slots) to a striped store.
#pragma unroll
    for (int k = 0; k < kRowItems; ++k) xbuf[padded(lane * kRowItems + k)] = x[k];
    __syncwarp();
    store_striped(dst, xbuf, lo, n, wq, reverse, lane);
    return total;
  }

 private:
  // Lane `lane` loads the warp's scan positions wq + j * 32 + lane (striped): coalesced in
  // either direction. Full tiles at aligned offsets load kVec consecutive memory elements
  // per access instead (striped by vector), placed at their scan positions.
  static __device__ __forceinline__ void load_striped(const Source& src, state_t* xbuf, int64_t lo,
                                                      int n, int wq, bool reverse, int lane) {
    if constexpr (Source::kVec > 1) {
      constexpr int V = Source::kVec;
      if (n == kTile && src.vec_ok(lo)) {  // uniform over the block
        // The warp's positions occupy memory [m0, m0 + kWarpItems).
        const int64_t m0 = lo + (reverse ? kTile - wq - kWarpItems : wq);
#pragma unroll
        for (int j = 0; j < kRowItems / V; ++j) {
          const int u = (j * kWarpSize + lane) * V;
          state_t v[V];
          src.load_vec(m0 + u, v);
#pragma unroll
          for (int t = 0; t < V; ++t) {
            xbuf[padded(reverse ? kWarpItems - 1 - (u + t) : u + t)] = v[t];
          }
        }
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < kRowItems; ++j) {
      const int e = j * kWarpSize + lane;
      const int q = wq + e;
      xbuf[padded(e)] = q < n ? src.load(reverse ? lo + (n - 1 - q) : lo + q) : Combine::identity();
    }
  }

  // The mirror image of load_striped, for positions < n.
  static __device__ __forceinline__ void store_striped(const Sink& dst, state_t* xbuf, int64_t lo,
                                                       int n, int wq, bool reverse, int lane) {
    if constexpr (Sink::kVec > 1) {
      constexpr int V = Sink::kVec;
      if (n == kTile && dst.vec_ok(lo)) {
        const int64_t m0 = lo + (reverse ? kTile - wq - kWarpItems : wq);
#pragma unroll
        for (int j = 0; j < kRowItems / V; ++j) {
          const int u = (j * kWarpSize + lane) * V;
          state_t v[V];
#pragma unroll
          for (int t = 0; t < V; ++t) {
            v[t] = xbuf[padded(reverse ? kWarpItems - 1 - (u + t) : u + t)];
          }
          dst.store_vec(m0 + u, v);
        }
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < kRowItems; ++j) {
      const int e = j * kWarpSize + lane;
      const int q = wq + e;
      if (q < n) dst.store(reverse ? lo + (n - 1 - q) : lo + q, xbuf[padded(e)]);
    }
  }
};

// Resident blocks per SM the register allocation must allow (3: 80 registers a thread;
// states of more than 8 bytes get 2, to hold kRowItems of them without spilling).
template <class state_t>
constexpr int kRowMinBlocks = sizeof(state_t) > 8 ? 2 : 3;

// Work items: packed mode, tile t holds rows [t * R, t * R + R), a segment head at every row
// start; rows mode, item r is row r, scanned tile by tile carrying the state (both grid-
// stride); look-back mode, item c is chunk c % C of row c / C (C chunks per row), taken in
// order from status.counter.
template <class Combine, class Source, class Sink>
__global__ void __launch_bounds__(kRowThreads, kRowMinBlocks<typename Combine::state_t>)
    row_scan_kernel(Source src, Sink dst, RowGeometry g,
                    ChunkStatus<typename Combine::state_t> status) {
  using Tile = RowTile<Combine, Source, Sink>;
  using state_t = typename Combine::state_t;
  __shared__ typename Tile::Storage storage;
  __shared__ typename LookBack<Combine>::Storage lookback_storage;
  __shared__ int64_t next_chunk;

  const bool packed = g.rows_per_tile > 0;
  const bool lookback = g.chunk_tiles > 0;
  const int64_t chunk_len = int64_t{kTile} * g.chunk_tiles;
  const int64_t row_chunks = lookback ? ceil_div(g.length, chunk_len) : 1;
  const int64_t items = packed ? ceil_div(g.rows, g.rows_per_tile) : g.rows * row_chunks;

  for (int64_t item = blockIdx.x;; item += gridDim.x) {
    if (lookback) {  // chunks in the order blocks take them, not by block index
      if (threadIdx.x == 0) next_chunk = static_cast<int64_t>(atomicAdd(status.counter, 1ull));
      __syncthreads();  // (the previous chunk's barriers ordered the reads of next_chunk)
      item = next_chunk;
    }
    if (item >= items) break;  // uniform over the block

    // The item: scan positions [s0, s1) of a line of `span` elements at memory `base`.
    int64_t base, span, s0 = 0, s1, first_chunk = 0;
    int seg = 0;
    if (packed) {
      const int64_t r0 = item * g.rows_per_tile;
      base = r0 * g.length;
      span = s1 = std::min<int64_t>(g.rows_per_tile, g.rows - r0) * g.length;
      seg = static_cast<int>(g.length);
    } else {
      const int64_t row = item / row_chunks;
      first_chunk = row * row_chunks;
      base = row * g.length;
      span = g.length;
      s0 = (item - first_chunk) * chunk_len;
      s1 = lookback ? std::min(g.length, s0 + chunk_len) : g.length;
    }
    // A look-back chunk takes two passes over its tiles: the first reduces them (to the
    // chunk's aggregate), the second scans them from the carry the look-back returns.
    state_t carry = Combine::identity();
    for (int pass = lookback ? 0 : 1; pass < 2; ++pass) {
      if (lookback && pass == 1) {
        carry =
            LookBack<Combine>{status, item, first_chunk}.exclusive_prefix(lookback_storage, carry);
      }
#pragma unroll 1
      for (int64_t s = s0; s < s1; s += kTile) {
        const int n = static_cast<int>(std::min<int64_t>(kTile, s1 - s));
        const int64_t lo = base + (g.reverse ? span - s - n : s);
        carry = Tile::scan(storage, src, dst, lo, n, seg, carry, g.reverse, g.exclusive,
                           /*write=*/pass == 1);
      }
    }
  }
}

constexpr int64_t kRowBlocksPerSM = 32;    // grid cap (the kernel grid-strides beyond it)
constexpr int64_t kRowsWantedPerSM = 16;   // rows per SM below which long rows use look-back
constexpr int64_t kChunksWantedPerSM = 8;  // look-back chunks per SM, at least (else smaller)
constexpr int64_t kMaxChunkTiles = 8;
// Input bytes of a look-back chunk, at most: the blocks in flight should keep their chunks
// in L2 between the reduce and the rescan (132 SMs x 3 blocks x 64 KiB = 25 MiB on H100).
constexpr int64_t kMaxChunkBytes = 64 << 10;

// Scans `rows` lines of `length` contiguous elements (line r starts at element r * length).
template <class Combine, class Source, class Sink>
void scan_rows(const LaunchContext& ctx, const Source& src, const Sink& dst, int64_t rows,
               int64_t length, ScanFlags flags) {
  using state_t = typename Combine::state_t;
  RowGeometry g{rows, length, 0, 0, flags.exclusive, flags.reverse};
  ChunkStatus<state_t> status{};
  int64_t items = rows;
  if (length <= kTile) {  // short rows: whole rows packed into segmented tiles
    g.rows_per_tile = static_cast<int>(kTile / length);
    items = ceil_div(rows, g.rows_per_tile);
  } else if (rows < ctx.sms * kRowsWantedPerSM) {  // too few rows to fill the GPU
    const int64_t tiles = rows * ceil_div(length, kTile);
    const int64_t by_bytes = kMaxChunkBytes / (kTile * Source::kElementBytes);
    const int64_t by_count = tiles / (ctx.sms * kChunksWantedPerSM);
    g.chunk_tiles =
        static_cast<int>(std::clamp<int64_t>(std::min(by_bytes, by_count), 1, kMaxChunkTiles));
    items = rows * ceil_div(length, int64_t{kTile} * g.chunk_tiles);
    status = make_chunk_status<state_t>(ctx, items);
  }
  row_scan_kernel<Combine, Source, Sink>
      <<<grid_size(ctx, items, kRowBlocksPerSM), kRowThreads, 0, ctx.stream>>>(src, dst, g, status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace scanops::cuda
