// scanops CUDA back end: narrow columns as rows of lanes.
//
// A problem (outer, length, inner) with a few columns (2 <= inner <= kMaxLanes) is, for each
// outer index, one line of `length` consecutive rows of `inner` elements. The row kernels
// (row_scan.cuh: packed rows, block per row, look-back chunks) scan such a line with a row as
// one element whose state is the K = inner columns' states side by side (RowLanesCombine:
// combined column by column), read and written as K consecutive elements (LanesSource /
// LanesSink). Every column is still a sequential fold of its own elements in scan order; the
// association of a column's elements is the row kernel's over the line's rows.
//
// Why: the column kernels spread narrow columns thin. Measured on the H100 (float32 cumsum
// of (2^26 / k, k) along dim 0, share of a copy, column kernels -> rows of lanes): k = 2
// 17% -> 60%, 3 21% -> 51% (reverse exclusive), 4 14% -> 57%, 5 28% -> 57%, 6 33% -> 52%,
// 7 33% -> 38%; (4, 2^22, 4) along dim 1 15% -> 59%; float16 (2^24, 4) 17% -> 60%; cumprod
// 14% -> 53% (docs/benchmarks/h100-2026-11-27-narrow-columns.md). The column kernels there:
// the three passes for k = 2, 3, 5-7 (a warp's loads spread over 32 / k chunks), the vector
// column tiles for k = 4 (one band: a single chain of tiles). The row look-back reads the
// line's memory in order, 16 bytes a lane at k = 4.
//
// Taken for sums and products of float32 / float64 / float16 / bfloat16 (input and output of
// one dtype) with no mask or companion (the backward fusions' epilogue: yes), dense pointers
// aligned to their row
// (Lanes' alignment), where the column kernels would take tiles or the three passes (few
// lines; many lines take a thread per column, whose loads are coalesced) and where the
// measurements in docs/benchmarks show the rows faster (launch_scan.cuh: takes_lanes).
#pragma once

#include <type_traits>

#include "ops/cuda/column_scan.cuh"
#include "ops/cuda/row_scan.cuh"

namespace scanops::cuda {

// At most 7 columns: 8 float32 columns (32-byte rows, 4 rows a thread) measured 28-29% of
// copy as lanes against 29% / 63% for the vector column tiles ((2^23, 8) / (2^24, 8) along
// dim 0, H100): they keep the column kernels.
constexpr int kMaxLanes = 7;

// K elements of T side by side: aligned as one vector access where K * sizeof(T) is a power
// of two of at most 16 bytes (4 float32, 2 float64, 8 float16: one 16-byte load), else as T.
template <class T, int K>
constexpr int lanes_align() {
  constexpr int b = static_cast<int>(sizeof(T)) * K;
  return (b & (b - 1)) == 0 && b <= 16 ? b : static_cast<int>(alignof(T));
}
template <class T, int K>
struct alignas(lanes_align<T, K>()) Lanes {
  T v[K];
};

// K columns' states combined column by column: column_scan.cuh's LanesCombine on a plain
// array (Vec needs a power of two).
template <class Combine, int K>
using RowLanesCombine = LanesCombine<Combine, K, Lanes<typename Combine::state_t, K>>;

// Row r of the line: the K input elements at in + r * K, held as read, lifted column by
// column (arity-1 unindexed combines: a lift is a conversion).
template <class Combine, class in_t, int K>
struct LanesSource {
  using L = RowLanesCombine<Combine, K>;
  using state_t = typename L::state_t;
  using held_t = Lanes<in_t, K>;
  static constexpr int kVec = 1;
  static constexpr bool kCompanions = false;
  static constexpr int kInBytes = sizeof(held_t);
  const in_t* in;
  // lift_held(held_identity()) is identity(): the input value that lifts to it (0 for sums,
  // 1 for products), as InputSource holds an absent element.
  static __device__ __forceinline__ held_t held_identity() {
    held_t h;
#pragma unroll
    for (int k = 0; k < K; ++k) h.v[k] = static_cast<in_t>(Combine::value(Combine::identity()));
    return h;
  }
  __device__ __forceinline__ state_t lift_held(const held_t& h) const {
    state_t s;
#pragma unroll
    for (int k = 0; k < K; ++k) s.v[k] = Combine::template lift<in_t>(h.v[k]);
    return s;
  }
  __device__ __forceinline__ held_t hold_at(int64_t r, int64_t /*pos*/) const {
    return reinterpret_cast<const held_t*>(in)[r];
  }
  __device__ __forceinline__ void prefetch_l2(int64_t r, int64_t n, int t, int nt) const {
    prefetch_l2_range(in + r * K, n * static_cast<int64_t>(sizeof(held_t)), t, nt);
  }
};

// Rows of lanes keep the row kernels' code without the prefetch ahead (row_prefetches_ahead:
// with it, float32 cumprod along dim 0 of (N/4, 4) went from 42% to 39% of copy on the H200).
template <class Combine, class in_t, int K>
struct row_prefetch_opt_out<LanesSource<Combine, in_t, K>> : std::true_type {};

// Row r's K outputs at out + r * K; line o's initial values at initial + o * K (DeviceProblem:
// line (o, i) at o * inner + i). The backward fusions' epilogue (add, mul, mul_mask: element
// i of the problem at i): apply_epilogue, as every sink.
template <class Combine, class out_t, int K>
struct LanesSink {
  using L = RowLanesCombine<Combine, K>;
  using state_t = typename L::state_t;
  using lowered_t = Lanes<out_t, K>;
  using value_t = out_t;
  static constexpr int kVec = 1;
  static constexpr bool kMulNext = false;
  static constexpr bool kMaskPre = false;
  out_t* out;
  const out_t* initial = nullptr;
  const out_t* add = nullptr;
  const out_t* mul = nullptr;
  const bool* mul_mask = nullptr;
  __device__ __forceinline__ bool has_initial() const { return initial != nullptr; }
  __device__ __forceinline__ state_t line_start(int64_t line) const {
    if (initial == nullptr) return L::identity();
    state_t s;
#pragma unroll
    for (int k = 0; k < K; ++k) s.v[k] = Combine::start(initial[line * K + k]);
    return s;
  }
  __device__ __forceinline__ void prefetch_initial(int64_t line, int64_t n, int t, int nt) const {
    if (initial != nullptr) {
      prefetch_l2_range(initial + line * K, n * K * static_cast<int64_t>(sizeof(out_t)), t, nt);
    }
  }
  static __device__ __forceinline__ lowered_t lower(const state_t& s) {
    lowered_t y;
#pragma unroll
    for (int k = 0; k < K; ++k) y.v[k] = static_cast<out_t>(Combine::value(s.v[k]));
    return y;
  }
  __device__ __forceinline__ void put(int64_t r, const lowered_t& y) const {
    if (add == nullptr && mul == nullptr && mul_mask == nullptr) {
      reinterpret_cast<lowered_t*>(out)[r] = y;
      return;
    }
    lowered_t z;
#pragma unroll
    for (int k = 0; k < K; ++k) z.v[k] = apply_epilogue(y.v[k], r * K + k, add, mul, mul_mask);
    reinterpret_cast<lowered_t*>(out)[r] = z;
  }
  __device__ __forceinline__ void store(int64_t r, const state_t& s) const { put(r, lower(s)); }
};

// The combines and dtypes compiled for it (see the header comment).
template <class Combine>
struct lanes_combine : std::false_type {};
template <class acc_t>
struct lanes_combine<SumCombine<acc_t>> : std::bool_constant<std::is_floating_point_v<acc_t>> {};
template <class acc_t>
struct lanes_combine<ProdCombine<acc_t>> : std::bool_constant<std::is_floating_point_v<acc_t>> {};
template <class Combine, class in_t, class out_t>
inline constexpr bool kLanesCompiled =
    lanes_combine<Combine>::value && std::is_same_v<in_t, out_t> &&
    (std::is_same_v<in_t, float> || std::is_same_v<in_t, double> ||
     std::is_same_v<in_t, c10::Half> || std::is_same_v<in_t, c10::BFloat16>);

template <class Combine, class in_t, class out_t, int K>
void scan_lanes_k(const DeviceProblem& p) {
  using L = RowLanesCombine<Combine, K>;
  const LanesSource<Combine, in_t, K> src{static_cast<const in_t*>(p.input)};
  const LanesSink<Combine, out_t, K> dst{static_cast<out_t*>(p.output),
                                         static_cast<const out_t*>(p.initial),
                                         static_cast<const out_t*>(p.add),
                                         static_cast<const out_t*>(p.mul), p.mul_mask};
  scan_rows<L>(p.ctx, src, dst, p.outer, p.length, p.flags);
}

// Whether p's pointers suit Lanes<T, K> (aligned to it).
template <class T, int K>
bool lanes_aligned(const DeviceProblem& p) {
  constexpr uintptr_t a = lanes_align<T, K>();
  const auto ok = [](const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % a == 0; };
  return ok(p.input) && ok(p.output) && ok(p.initial) && ok(p.add) && ok(p.mul);
}

// Scans p as rows of p.inner lanes if it can (2 <= inner <= kMaxLanes, row states of at most
// 32 bytes, aligned pointers); false if not.
template <class Combine, class in_t, class out_t>
bool scan_lanes(const DeviceProblem& p) {
  bool done = false;
  const auto as = [&](auto k) {
    constexpr int K = decltype(k)::value;
    // Row states of at most 32 bytes (the look-back's history of 64-byte states overflows the
    // static shared memory: float64 sums of 8 columns).
    if constexpr (K * sizeof(typename Combine::state_t) <= 32) {
      if (p.inner == K && lanes_aligned<in_t, K>(p) && lanes_aligned<out_t, K>(p)) {
        scan_lanes_k<Combine, in_t, out_t, K>(p);
        done = true;
      }
    }
  };
  as(std::integral_constant<int, 2>{});
  as(std::integral_constant<int, 3>{});
  as(std::integral_constant<int, 4>{});
  as(std::integral_constant<int, 5>{});
  as(std::integral_constant<int, 6>{});
  as(std::integral_constant<int, 7>{});
  return done;
}

}  // namespace scanops::cuda
