// A kernel-level experiment, not part of the library: scans along an outer dim (columns) of
// float32, (outer, length, inner) along length. Times, against a device copy of the same bytes
// (one floor, measured interleaved, best of `reps`):
//   lib          scanops' scan_columns as the library picks it (ops/cuda/column_scan.cuh)
//   pattern      copies (no scan) that touch memory as a column tile does: a lane V columns
//                (a V-wide vector per row), R rows; WC warps across, WR warps down a block
//   colvec       a column scan in that layout: each lane reduces its V x R elements, warps of a
//                block combine down (WR > 1) in shared memory, the block's WC warps chain their
//                columns to the tile above by a per-column deterministic look-back, then scan
// Results of lib and colvec are checked against a sequential reference (integer-valued inputs:
// every sum is exact, whatever the association).
//
// Build (no GPU needed), then run on the GPU machine:
//   nvcc -std=c++20 --expt-relaxed-constexpr -O3 -gencode arch=compute_90,code=sm_90 -I. \
//        -I<site-packages>/torch/include -o build-micro/column_bench bench/column_bench.cu
//   build-micro/column_bench [outer] [length] [inner] [reps]

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/micro_common.cuh"
#include "ops/cuda/column_scan.cuh"

using namespace scanops;
using namespace scanops::cuda;
using scanops::bench::Arena;
using scanops::bench::time_ms;

namespace {


template <int V>
using VecF = Vec<float, V>;

template <int V>
__device__ __forceinline__ void stcs_vec(float* p, const VecF<V>& v) {
  if constexpr (V == 4) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(v.v[0], v.v[1], v.v[2], v.v[3]));
  } else if constexpr (V == 2) {
    __stcs(reinterpret_cast<float2*>(p), make_float2(v.v[0], v.v[1]));
  } else {
    __stcs(p, v.v[0]);
  }
}

// Minimal source / sink (plain float32 cumsum) for the library's column_vec_kernel: tells the
// kernel's own cost from InputSource / OutputSink's.
struct PlainSource {
  using state_t = float;
  using held_t = float;
  static constexpr int kVec = 4;
  const float* in;
  static __device__ __forceinline__ float held_identity() { return 0.f; }
  __device__ __forceinline__ float lift_held(float h) const { return h; }
  __device__ __forceinline__ void hold_vec(int64_t i, const int64_t (&)[4], float (&out)[4]) const {
    const auto v = *reinterpret_cast<const Vec<float, 4>*>(in + i);
#pragma unroll
    for (int t = 0; t < 4; ++t) out[t] = v.v[t];
  }
};
struct PlainSink {
  using lowered_t = float;
  float* out;
  static __device__ __forceinline__ float lower(float s) { return s; }
  __device__ __forceinline__ bool has_epilogue() const { return false; }
  template <bool kEpilogue>
  __device__ __forceinline__ void put_vec(int64_t i, const float (&s)[4]) const {
    __stcs(reinterpret_cast<float4*>(out + i), make_float4(s[0], s[1], s[2], s[3]));
  }
};

struct Geo {
  int64_t outer, length, inner;
  int64_t col_tiles;  // per outer index
  int64_t row_tiles;
};

// Copy in the tile pattern: block b takes item b (row tile major).
template <int V, int R, int WC, int WR, bool kCs>
__global__ void __launch_bounds__(256) pattern_kernel(const float* in, float* out, Geo g) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wc = warp % WC, wr = warp / WC;
  const int64_t bands = g.outer * g.col_tiles;
  const int64_t item = blockIdx.x;
  const int64_t rt = item / bands, band = item - rt * bands;
  const int64_t o = band / g.col_tiles;
  const int64_t col = ((band - o * g.col_tiles) * WC * 32 + wc * 32 + lane) * V;
  if (col >= g.inner) return;
  const int64_t s0 = (rt * WR + wr) * R;
  VecF<V> x[R];
#pragma unroll
  for (int k = 0; k < R; ++k) {
    if (s0 + k < g.length)
      x[k] = *reinterpret_cast<const VecF<V>*>(in + (o * g.length + s0 + k) * g.inner + col);
  }
#pragma unroll
  for (int k = 0; k < R; ++k) {
    if (s0 + k < g.length) {
      float* p = out + (o * g.length + s0 + k) * g.inner + col;
      if (kCs) {
        stcs_vec<V>(p, x[k]);
      } else {
        *reinterpret_cast<VecF<V>*>(p) = x[k];
      }
    }
  }
}

template <int V>
struct Status {
  unsigned long long* counter;
  unsigned* flags;        // per (item, wc)
  VecF<V>* aggregate;     // per (item, wc, lane)
  VecF<V>* inclusive;
};


// The column scan (cumsum) in the tile layout, single pass, deterministic look-back per warp
// column group (window of 32 tiles above, as column_warp_kernel).
template <int V, int R, int WC, int WR, bool kCs>
__global__ void __launch_bounds__(256, (V * R <= 64 ? 2 : 1))
    colvec_kernel(const float* in, float* out, Geo g, Status<V> st) {
  constexpr int kWindow = 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wc = warp % WC, wr = warp / WC;
  __shared__ int64_t next_item;
  __shared__ float part[WR > 1 ? WR * WC * 32 * V : 1];
  const int64_t bands = g.outer * g.col_tiles;
  const int64_t items = bands * g.row_tiles;
  for (;;) {
    if (threadIdx.x == 0) next_item = static_cast<int64_t>(atomicAdd(st.counter, 1ull));
    __syncthreads();
    const int64_t item = next_item;
    __syncthreads();
    if (item >= items) break;
    const int64_t rt = item / bands, band = item - rt * bands;
    const int64_t o = band / g.col_tiles;
    const int64_t col = ((band - o * g.col_tiles) * WC * 32 + wc * 32 + lane) * V;
    const bool active = col < g.inner;
    const int64_t s0 = (rt * WR + wr) * R;
    const int m = static_cast<int>(std::min<int64_t>(R, g.length - s0));
    const int64_t base = (o * g.length + s0) * g.inner + col;
    VecF<V> x[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if (active && k < m) {
        x[k] = *reinterpret_cast<const VecF<V>*>(in + base + k * g.inner);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) x[k].v[v] = 0.f;
      }
    }
    float agg[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      agg[v] = x[0].v[v];
#pragma unroll
      for (int k = 1; k < R; ++k) agg[v] += x[k].v[v];
    }
    float carry[V];
    auto slot = [&](int64_t it) { return it * WC + wc; };
    auto lookback = [&](const float (&a)[V]) {
      // a: this warp column group's tile aggregate per lane; sets carry (the library's
      // publish and window wait; the fold left to right from the inclusive prefix).
#pragma unroll
      for (int v = 0; v < V; ++v) carry[v] = 0.f;
      const bool any = __ballot_sync(kFullMask, active) != 0;
      if (!any) return;
      auto state = [&](VecF<V>* base, int64_t it) { return base + slot(it) * 32 + lane; };
      VecF<V> mine;
#pragma unroll
      for (int v = 0; v < V; ++v) mine.v[v] = a[v];
      if (rt > 0) {
        detail::warp_publish(st.flags + slot(item), state(st.aggregate, item), mine, kAggregate);
        const int stop = detail::wait_window([&](int d) { return st.flags + slot((rt - 1 - d) * bands + band); },
                                             static_cast<int>(std::min<int64_t>(kWindow, rt)));
        for (int d = stop; d >= 0; --d) {
          const VecF<V> h = detail::load_cg(
              state(d == stop ? st.inclusive : st.aggregate, (rt - 1 - d) * bands + band));
#pragma unroll
          for (int v = 0; v < V; ++v) carry[v] += h.v[v];
        }
      }
      if (rt + 1 < g.row_tiles) {
        VecF<V> inc;
#pragma unroll
        for (int v = 0; v < V; ++v) inc.v[v] = carry[v] + a[v];
        detail::warp_publish(st.flags + slot(item), state(st.inclusive, item), inc, kInclusive);
      }
    };
    if constexpr (WR == 1) {
      lookback(agg);
    } else {
      float* mine = part + ((wr * WC + wc) * 32 + lane) * V;
#pragma unroll
      for (int v = 0; v < V; ++v) mine[v] = agg[v];
      __syncthreads();
      if (wr == 0) {
        float tot[V];
#pragma unroll
        for (int v = 0; v < V; ++v) tot[v] = 0.f;
#pragma unroll
        for (int r = 0; r < WR; ++r) {
          float* p = part + ((r * WC + wc) * 32 + lane) * V;
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const float t = p[v];
            p[v] = tot[v];
            tot[v] += t;
          }
        }
        lookback(tot);
#pragma unroll
        for (int r = 0; r < WR; ++r) {
          float* p = part + ((r * WC + wc) * 32 + lane) * V;
#pragma unroll
          for (int v = 0; v < V; ++v) p[v] = carry[v] + p[v];
        }
      }
      __syncthreads();
#pragma unroll
      for (int v = 0; v < V; ++v) carry[v] = mine[v];
    }
#pragma unroll
    for (int k = 0; k < R; ++k) {
      if (active && k < m) {
        VecF<V> y;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          carry[v] += x[k].v[v];
          y.v[v] = carry[v];
        }
        float* p = out + base + k * g.inner;
        if (kCs) {
          stcs_vec<V>(p, y);
        } else {
          *reinterpret_cast<VecF<V>*>(p) = y;
        }
      }
    }
  }
}

template <int V, int R, int WC, int WR, bool kCs>
void launch_colvec(const LaunchContext& ctx, Arena& arena, const float* in, float* out,
                   int64_t outer, int64_t length, int64_t inner) {
  arena.used = 0;
  Geo g{outer, length, inner, ceil_div(inner, int64_t{WC} * 32 * V), ceil_div(length, int64_t{WR} * R)};
  const int64_t items = outer * g.col_tiles * g.row_tiles;
  const int64_t slots = items * WC;
  auto* b = static_cast<unsigned char*>(arena.allocate(16 + 4 * slots));
  cudaMemsetAsync(b, 0, 16 + 4 * slots, ctx.stream);
  Status<V> st{reinterpret_cast<unsigned long long*>(b), reinterpret_cast<unsigned*>(b + 16),
               static_cast<VecF<V>*>(arena.allocate(slots * 32 * V * 4)),
               static_cast<VecF<V>*>(arena.allocate(slots * 32 * V * 4))};
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, colvec_kernel<V, R, WC, WR, kCs>, 256, 0);
  static bool said = false;
  if (!said) printf("colvec V%d R%d WC%d WR%d: %d blocks per SM\n", V, R, WC, WR, per_sm), said = true;
  colvec_kernel<V, R, WC, WR, kCs>
      <<<grid_size(ctx, items, per_sm), 256, 0, ctx.stream>>>(in, out, g, st);
}

template <int V, int R, int WC, int WR, bool kCs>
void launch_pattern(const LaunchContext& ctx, const float* in, float* out, int64_t outer,
                    int64_t length, int64_t inner) {
  Geo g{outer, length, inner, ceil_div(inner, int64_t{WC} * 32 * V), ceil_div(length, int64_t{WR} * R)};
  const int64_t items = outer * g.col_tiles * g.row_tiles;
  pattern_kernel<V, R, WC, WR, kCs><<<items, 256, 0, ctx.stream>>>(in, out, g);
}

// The library's column_vec_kernel as scan_columns launches it, with `per_sm` blocks per SM.
template <class Combine, class Src, class Snk>
void launch_vec(const LaunchContext& ctx, Arena& arena, const Src& src, const Snk& dst,
                int per_sm, int64_t outer, int64_t length, int64_t inner) {
  arena.used = 0;
  const ColTileGeometry g = vec_tile_geometry<Src>(outer, length, inner, ScanFlags{false, false});
  const int64_t items = outer * g.col_tiles * g.row_tiles;
  const auto status = make_chunk_status<typename LanesCombine<Combine, Src::kVec>::state_t>(
      ctx, items, kWarpSize);
  column_vec_kernel<Combine, Src, Snk>
      <<<grid_size(ctx, items, per_sm), g.tile_warps * kWarpSize, 0, ctx.stream>>>(src, dst, g, status);
}

__global__ void fill_kernel(float* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = static_cast<float>(static_cast<int>((i * 2654435761ull >> 7) % 7) - 3);
  }
}

__global__ void ref_kernel(const float* in, float* ref, int64_t outer, int64_t length, int64_t inner) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= outer * inner) return;
  const int64_t o = c / inner, i = c - o * inner;
  float s = 0;
  for (int64_t l = 0; l < length; ++l) {
    const int64_t e = (o * length + l) * inner + i;
    s += in[e];
    ref[e] = s;
  }
}

__global__ void diff_kernel(const float* a, const float* b, int64_t n, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (a[i] != b[i]) atomicAdd(bad, 1ull);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t outer = argc > 1 ? atoll(argv[1]) : 1;
  const int64_t length = argc > 2 ? atoll(argv[2]) : 32768;
  const int64_t inner = argc > 3 ? atoll(argv[3]) : 32768;
  const int reps = argc > 4 ? atoi(argv[4]) : 5;
  const int64_t n = outer * length * inner;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  Arena arena(n + (int64_t{64} << 20));  // n bytes: status of 1/4 of a float input at most
  const LaunchContext ctx{stream, prop.multiProcessorCount, &arena};

  float *in = nullptr, *out = nullptr, *ref = nullptr;
  unsigned long long* bad = nullptr;
  cudaMalloc(&in, n * 4);
  cudaMalloc(&out, n * 4);
  cudaMalloc(&ref, n * 4);
  cudaMalloc(&bad, 8);
  fill_kernel<<<4096, 256, 0, stream>>>(in, n);
  ref_kernel<<<ceil_div(outer * inner, 256), 256, 0, stream>>>(in, ref, outer, length, inner);

  struct Case {
    std::string name;
    bool checked;
    std::function<void()> run;
  };
  std::vector<Case> cases;
  using Sum = SumCombine<float>;
  cases.push_back({"lib scan_columns", true, [&] {
                     arena.used = 0;
                     scan_columns<Sum>(ctx, InputSource<Sum, float>{in, nullptr, nullptr},
                                       OutputSink<Sum, float>{out, nullptr, n * 4 > (int64_t{256} << 20)}, outer, length, inner,
                                       ScanFlags{false, false});
                   }});
  for (int per_sm : {1, 2}) {
    cases.push_back({"lib column_vec_kernel grid " + std::to_string(per_sm), true, [&, per_sm] {
                       launch_vec<Sum>(ctx, arena, InputSource<Sum, float>{in, nullptr, nullptr},
                                       OutputSink<Sum, float>{out, nullptr, true}, per_sm, outer,
                                       length, inner);
                     }});
  }
  cases.push_back({"lib column_vec_kernel plain", true, [&] {
                     launch_vec<Sum>(ctx, arena, PlainSource{in}, PlainSink{out}, 2, outer,
                                     length, inner);
                   }});
#define PAT(V, R, WC, WR, CS)                                                              \
  cases.push_back({"pattern V" #V " R" #R " WC" #WC " WR" #WR " cs" #CS, false,           \
                   [&] { launch_pattern<V, R, WC, WR, CS>(ctx, in, out, outer, length, inner); }});
#define COL(V, R, WC, WR, CS)                                                              \
  cases.push_back({"colvec V" #V " R" #R " WC" #WC " WR" #WR " cs" #CS, true, [&] {       \
                     launch_colvec<V, R, WC, WR, CS>(ctx, arena, in, out, outer, length, inner); \
                   }});
  if (argc > 5 && atoi(argv[5]) != 0) {  // the prototypes and a pattern copy
    PAT(4, 16, 1, 8, true)
    COL(1, 32, 8, 1, true)
    COL(4, 16, 1, 8, true)
  }
#undef PAT
#undef COL

  std::vector<float> best(cases.size(), 1e30f);
  std::vector<unsigned long long> mism(cases.size(), 0);
  float floor8 = 1e30f, hi8 = 0;
  for (int r = 0; r < reps; ++r) {
    const float f = time_ms([&] { cudaMemcpyAsync(ref == nullptr ? out : out, in, n * 4, cudaMemcpyDeviceToDevice, stream); }, stream);
    floor8 = std::min(floor8, f), hi8 = std::max(hi8, f);
    for (size_t c = 0; c < cases.size(); ++c) {
      cudaMemsetAsync(out, 0xff, n * 4, stream);
      best[c] = std::min(best[c], time_ms(cases[c].run, stream));
      if (cases[c].checked) {
        cudaMemsetAsync(bad, 0, 8, stream);
        diff_kernel<<<4096, 256, 0, stream>>>(out, ref, n, bad);
        unsigned long long h = 0;
        cudaMemcpyAsync(&h, bad, 8, cudaMemcpyDeviceToHost, stream);
        cudaStreamSynchronize(stream);
        mism[c] += h;
      }
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  printf("%s outer %lld length %lld inner %lld reps %d (%s)\n", prop.name, (long long)outer,
         (long long)length, (long long)inner, reps, cudaGetErrorString(err));
  printf("floor (copy of %lld MiB) %.3f ms (spread %.1f%%)\n", (long long)(n * 4 >> 20), floor8,
         100 * (hi8 / floor8 - 1));
  for (size_t c = 0; c < cases.size(); ++c) {
    printf("%-34s %8.3f ms  %5.1f%% of copy  %s\n", cases[c].name.c_str(), best[c],
           100 * floor8 / best[c],
           cases[c].checked ? (mism[c] == 0 ? "exact" : "MISMATCH") : "");
    if (mism[c]) printf("   mismatches: %llu\n", mism[c]);
  }
  return err == cudaSuccess ? 0 : 1;
}
