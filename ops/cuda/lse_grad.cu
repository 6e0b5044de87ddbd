// scanops CUDA back end: logcumsumexp's backward as one scan of the row or column kernels
// (row_scan.cuh, column_scan.cuh) with LogScaledSumCombine (ops/lse_grad.h): reads x, y and
// g, writes dx, 16 bytes an element for float32. It replaces the composite fused backward (a clamp
// of y, the factors exp(y[k-1] - y[k]) and exp(x - y) as three elementwise passes, then a
// linear recurrence over them accumulating in float64: 44 bytes an element and the float64
// scan's registers); measured in docs/benchmarks/h200-2026-11-29-lse-backward.md.
#include "ops/cuda/lse_grad.h"

#include "ops/cuda/column_scan.cuh"
#include "ops/cuda/row_scan.cuh"
#include "ops/lse_grad.h"

namespace scanops::cuda {

// The look-back's combine with its bits pinned (pinned.cuh): the one FMA spelled out.
template <>
struct PinnedCombine<LogScaledSumCombine<float>> {
  using state_t = LogScaledSumState<float>;
  static __device__ __forceinline__ state_t combine(const state_t& f, const state_t& g) {
    const float d = f.y == g.y ? 0.0f : __fsub_rn(f.y, g.y);
    const float e = lse_exp(d < 0.0f ? d : -d);
    if (d >= 0.0f) return {g.y, __fmaf_rn(e, f.q, g.q)};
    return {f.y, __fmaf_rn(e, g.q, f.q)};
  }
  static __device__ __forceinline__ state_t canonical(const state_t& s) {
    return {pinned::canonical(s.y), pinned::canonical(s.q)};
  }
};

namespace {

using LseCombine = LogScaledSumCombine<float>;

// The output dx[j] = exp(x[j] - Y) Q of the state (Y, Q) at j, and exactly 0 at the element
// that reaches no output (an exclusive scan's last in scan order: position `unreached` of
// every line, -1 for none; tested only where Y is +inf, as there it holds the identity).
// Lowers nothing: the state reaches the store (lowered_t), where x is read. Every x vector of a thread's stores is loaded before the first
// store (kEpiPre, as EpiPreSink: a load is not moved above an earlier store that may alias it).
struct LseGradSink : OutputSink<LseCombine, float> {
  using Base = OutputSink<LseCombine, float>;
  using state_t = LogScaledSumState<float>;
  using lowered_t = state_t;
  static constexpr bool kEpiPre = true;
  static constexpr int V = Base::kVec;
  const float* x = nullptr;
  int64_t length = 1;
  int64_t unreached = -1;
  struct Operands {
    Vec<float, V> x;
  };
  static __device__ __forceinline__ lowered_t lower(const state_t& s) { return s; }
  // dx of the element of input xv and state s; at_unreached(): whether the element is at
  // position `unreached` of its line (asked only where Y is +inf).
  template <class AtUnreached>
  __device__ __forceinline__ float grad(float xv, const state_t& s, AtUnreached&& at_unreached) const {
    if (s.y == __int_as_float(0x7f800000) && unreached >= 0 && at_unreached()) return 0.0f;
    return lse_exp(xv - s.y) * s.q;
  }
  // Element i of a row problem (inner == 1): at position i % length.
  __device__ __forceinline__ float grad(int64_t i, float xv, const state_t& s) const {
    return grad(xv, s, [&] { return i % length == unreached; });
  }
  __device__ __forceinline__ bool vec_ok(int64_t i) const {
    return is_aligned<V>(out + i) && is_aligned<V>(x + i);
  }
  __device__ __forceinline__ void put(int64_t i, const lowered_t& s) const { out[i] = grad(i, x[i], s); }
  __device__ __forceinline__ Operands operands(int64_t i) const {
    return {*reinterpret_cast<const Vec<float, V>*>(x + i)};
  }
  __device__ __forceinline__ void put_vec_ops(int64_t i, const lowered_t (&s)[V],
                                              const Operands& o) const {
    Vec<float, V> d;
#pragma unroll
    for (int t = 0; t < V; ++t) d.v[t] = grad(i + t, o.x.v[t], s[t]);
    store_vec_hinted(reinterpret_cast<Vec<float, V>*>(out + i), d, streaming);
  }
};

// The column kernels' sink (they store element by element through store()): element i sits at
// position (i / inner) % length. A type of its own: the same test in the row kernels' sink
// (an inner of 1) cost their rows 2-3% (H200, bench/lse_backward_ab.py, 2^28 float32, rows
// of 64 / 4096 / 16384: 1.436-1.441 -> 1.468, 1.134-1.137 -> 1.175, 1.117-1.119 -> 1.153 ms).
struct LseGradColumnSink : LseGradSink {
  int64_t inner = 1;
  __device__ __forceinline__ void store(int64_t i, const state_t& s) const {
    out[i] = grad(x[i], s, [&] { return (i / inner) % length == unreached; });
  }
};

}  // namespace

// 3 blocks per SM (row_scan.cuh, row_three_blocks): 80 registers and 8 bytes of stack, where 2
// take 119. H200 (bench/lse_grad_bench.cu, kernel level, share of a copy of 16 bytes an
// element, 2 -> 3 blocks): rows of 16384 70% -> 80%, of 4096 67% -> 79%, of 64 (packed) 59% ->
// 70%, 64 rows of 2^20 (look-back) 42% -> 48%, one line of 2^26 41% -> 46%.
template <>
struct row_three_blocks<InputSource<LseCombine, float>, LseGradSink> : std::true_type {};

void launch_lse_grad(const LaunchContext& ctx, const LseGradArgs& a) {
  const InputSource<LseCombine, float> src{a.g, a.y, nullptr};
  LseGradSink dst{};
  dst.out = a.dx;
  dst.x = a.x;
  dst.length = a.length;
  dst.unreached = a.exclusive ? (a.reverse ? 0 : a.length - 1) : -1;
  // outputs of more than 256 MB take evict-first stores, as launch_scan.cuh's (store_vec_hinted)
  dst.streaming = a.outer * a.length * a.inner * int64_t{sizeof(float)} > (int64_t{256} << 20);
  // the other direction: the sum runs over the outputs after each element in scan order
  const ScanFlags back{a.exclusive, !a.reverse};
  if (a.inner == 1) {
    scan_rows<LseCombine>(ctx, src, dst, a.outer, a.length, back);
  } else {  // (the column kernels; a costly combine takes no vector tiles)
    LseGradColumnSink cdst{dst};
    cdst.inner = a.inner;
    scan_columns<LseCombine>(ctx, src, cdst, a.outer, a.length, a.inner, back);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace scanops::cuda
