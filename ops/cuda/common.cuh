// scanops CUDA back end, layer 0: what every layer shares.
//
//   grid_size     grid sizes for grid-stride kernels
//   RawArray      shared-memory storage for states without running constructors
//   sources/sinks how kernels read elements as states and write states back:
//     InputSource<Combine, in_t>  the problem's input (and coefficients), lifted, masked
//     OutputSink<Combine, out_t>  the problem's output, Combine::value cast to out_t
//     StateSource / StateSink     an array of states (chunk totals of the column scans)
//   Sources and sinks offer scalar access at any offset and, where kVec > 1, aligned
//   vector access of kVec consecutive elements (16 bytes at most).
//   The row tile keeps elements between its load and its scan as `held_t` and results between
//   its scan and its store as `lowered_t`: the input and output elements themselves where the
//   lift and the cast are plain conversions (so a float32 cumprod or a bfloat16 cumsum holds
//   4- or 2-byte elements, not its float64 / float32 states), the states otherwise.
#pragma once

#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/cuda/scan_cuda.h"

namespace scanops::cuda {

constexpr int kWarpSize = 32;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Combine::runs where a combine has it (logcumsumexp of real types, ops/combine.h), else false.
template <class C, class = void>
struct CombineRuns : std::false_type {};
template <class C>
struct CombineRuns<C, std::void_t<decltype(C::runs)>> : std::bool_constant<C::runs> {};
template <class C>
constexpr bool combine_runs = CombineRuns<C>::value;

// One thread's walk over consecutive elements (lifted states) in scan order: begin(s) starts
// it from a state, push(x) takes the next element, value() is the state after the last one.
// A chain of Combine::combine, or Combine's runs where it has them (combine_runs: no combine
// chain through the elements). The tile agents' per-thread loops are written once on it.
template <class Combine, bool = combine_runs<Combine>>
struct Walk {
  using state_t = typename Combine::state_t;
  state_t s;
  static __device__ __forceinline__ Walk begin(const state_t& x) { return Walk{x}; }
  __device__ __forceinline__ void push(const state_t& x) { s = Combine::combine(s, x); }
  __device__ __forceinline__ state_t value() const { return s; }
};
template <class Combine>
struct Walk<Combine, true> {
  using state_t = typename Combine::state_t;
  typename Combine::run_t r;
  static __device__ __forceinline__ Walk begin(const state_t& x) { return Walk{Combine::run_begin(x)}; }
  __device__ __forceinline__ void push(const state_t& x) { Combine::run_push(r, x); }
  __device__ __forceinline__ state_t value() const { return Combine::run_value(r); }
};

// The float32 run (logcumsumexp of float32, and of float16 / bfloat16, which accumulate in
// float32) with the special-function units' ex2 / lg2 instead of the libdevice expf / log1pf
// (each ~10-25 instructions; with them the kernels were compute bound at 34-52% of a copy on
// the H100: an exp per element in a tile's reduce walk, an exp and a log1p in its rescan).
// Same (m, t) form as LogAddExpCombine::run_push / run_value, m kept in natural units:
//   push:  d = x - m, a = 2^(-|d| log2 e) (ex2.approx.ftz), a new maximum t' = (1 + t) a,
//          else t' = t + a;
//   value: m + ln 2 * lg2(1 + t) (lg2.approx.ftz).
// Error, in natural-log units (the output's absolute error; the output is >= m and within
// log(pushes + 1) of it, so relative to max(|y|, 1) it is the same figure or smaller):
//   * d = x - m is exact when x and m are within a factor 2 (Sterbenz), else rounds to
//     0.5 ulp(d) (as the old form's); -|d| log2 e rounds to 0.5 ulp (rel. 2^-24), which is a
//     relative error |d| ln2 2^-24 of a = 2^(-|d| log2 e): it adds at most
//     a |d| 2^-24 <= 2^-24 / e to t (the max of a*|d| is 1/e): below 2^-25;
//   * ex2.approx.ftz.f32: a relative error of 2 ulp (2^-22, CUDA's documented bound for its
//     fast exp2f) against the 1 ulp of expf, so at
//     most 2^-23 more in log(1 + t) (each summand of t is off by 2^-22 of itself, and
//     log(1 + t) passes a relative error of t on scaled by t / (1 + t) < 1); summands below
//     2^-126 flush to 0 (less than 2^-126 of the 1 they are added to);
//   * 1 + t rounds to 0.5 ulp: 2^-24 in the log (the old form's log1p kept t's low bits;
//     here an output just above m loses them: an absolute 6e-8);
//   * lg2.approx.ftz.f32 on [1, 2): absolute error below 2^-22.6 (CUDA's __log2f), times
//     ln 2: 1.1e-7; above 2, relative 2 ulp of lg2(1 + t) <= log2(pushes + 1).
// Together below ~3e-7 absolute (~2.5 ulp of 1) on top of the old form's rounding, per walk
// (each output is one walk's value; the block scan and look-back between walks stay the
// accurate combine). test/python/test_lse_accuracy_cuda.py measures it against torch's own
// CUDA logcumsumexp (docs/benchmarks/logcumsumexp-2026-11-27.md: the table). Every operation
// is spelled with a rounding intrinsic (no contraction chosen per site: the reduce and the
// rescan walks of a tile give the same bits, and runs are reproducible). sm_90 SASS of the
// float32 row kernel: ~7 instructions an element in the reduce walk and ~13 in the rescan (one
// MUFU.EX2, and a MUFU.LG2 for the output), against ~20 and ~60-90 with expf / log1pf.
// Special values as LogAddExpCombine::run_push: x == m (two equal infinities included)
// adds 1 (an all -inf run stays -inf: value -inf + finite), +-inf differences give a = 0
// (ex2(-inf) = +0), NaN x makes a and then t NaN, and a NaN t or m makes the value NaN.
__device__ __forceinline__ float lse_ex2_ftz(float z) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(z));
  return r;
}
__device__ __forceinline__ float lse_lg2_ftz(float u) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(u));
  return r;
}
template <>
struct Walk<LogAddExpCombine<float>, true> {
  using state_t = float;
  float m;  // the running maximum (natural units)
  float t;  // sum of exp(x - m) over the walk, less the maximum's own 1
  static __device__ __forceinline__ Walk begin(float x) { return Walk{x, 0.0f}; }
  __device__ __forceinline__ void push(float x) {
    constexpr float kLog2e = 1.4426950408889634f;
    const float d = __fsub_rn(x, m);
    const float a = x == m ? 1.0f : lse_ex2_ftz(__fmul_rn(-fabsf(d), kLog2e));
    const bool up = d > 0.0f;                     // a new maximum: t' = t a + a
    t = __fmaf_rn(t, up ? a : 1.0f, a);           // else t' = t + a (exact t * 1)
    m = up ? x : m;
  }
  __device__ __forceinline__ float value() const {
    constexpr float kLn2 = 0.6931471805599453f;
    return __fmaf_rn(lse_lg2_ftz(__fadd_rn(1.0f, t)), kLn2, m);
  }
};

// One rescan item of a tile agent's thread walk `w` that is not a row start under an initial
// value: a head restarts the walk from its element (the exclusive value there is the
// identity); returns the item's lowered output. `first`: the thread's carry in, the exclusive
// value of item k == 0 for runs. `excl`: a bool, or std::true_type / std::false_type for a
// loop without the test. (Runs, k == 0: `first` itself, not w.value(): a run's value() of
// its begin() state is not that state bit for bit: logcumsumexp's online (m, t) gives
// m + log1p(0), and -0.0 + 0 = +0.0, an initial -0.0's exclusive output. A chain's value()
// is its state: the code stays the one measured, as the select in every kernel cost the
// packed rows 3-8% on an H200, 2026-11-27.)
template <class Combine, class Sink, class Excl>
__device__ __forceinline__ typename Sink::lowered_t rescan_step(
    Walk<Combine>& w, int k, bool head, const typename Combine::state_t& x,
    const typename Combine::state_t& first, Excl excl) {
  typename Sink::lowered_t y{};
  if (excl) {
    if constexpr (combine_runs<Combine>) {
      y = Sink::lower(head ? Combine::identity() : k == 0 ? first : w.value());
    } else {
      y = Sink::lower(head ? Combine::identity() : w.value());
    }
  }
  if (head) {
    w = Walk<Combine>::begin(x);
  } else {
    w.push(x);
  }
  if (!excl) y = Sink::lower(w.value());
  return y;
}

// The carries of a scan: the totals of runs of elements (a thread's run in a tile, a chunk
// of a column) and everything folded from them across threads, tiles and chunks (block
// scans, look-backs, the scan of chunk totals), as distinct from the per-element walk that
// rescans a run from its carry. Carry<Combine>::type is the combine they accumulate in,
// widen() lifts a state into it and narrow() rounds a carry back for the rescan. The row,
// column and segmented kernels (row_scan.cuh, column_scan.cuh, segmented.cuh) all keep it.
// Invariant: a kernel reduces its runs with Carry's combine (each element widened) and
// rescans each run in Combine's own state_t from narrow(carry); so a float32 linear
// recurrence is accurate to the sequential float32 chain of at most one run from a carry
// that is itself rounded once from float64.
// Float32 affine maps (linear_recurrence of float32 / float16 / bfloat16) carry in float64:
// products of float32 coefficients just below 1, 1 - k 2^-24, drop their positive term
// k m 2^-48 at every rounding while it is under half an ulp, so every run's product is biased
// low and the bias compounds along the chain of carries. Measured: fuzz seed 101 case 12366
// ((98303, 5) along dim 0, the three passes, |a| in (exp(-4e-5), 1)), max error 0.054 against
// a float64 reference where a sequential float32 loop has 0.0023; a numpy emulation of the
// kernels' association (2^20 elements, a = exp(-U(0, 4e-5))): float32 runs of 32 / 16 / 8
// 25x / 12x / 6x the loop's error, float32 runs with float64 carries no better, float64 runs
// and carries 0.1x. The segmented kernels had the same drift until they kept it too (the
// offsets form of that case, offsets [0, 13807, 38021, 98303], reverse: 0.055). Every other
// combine carries in itself.
template <class Combine>
struct Carry {
  using type = Combine;
  using state_t = typename Combine::state_t;
  static constexpr bool kWide = false;
  static __host__ __device__ __forceinline__ state_t widen(const state_t& s) { return s; }
  static __host__ __device__ __forceinline__ state_t narrow(const state_t& s) { return s; }
};
template <>
struct Carry<AffineCombine<float>> {
  using type = AffineCombine<double>;
  using state_t = AffineState<double>;
  static constexpr bool kWide = true;
  static __host__ __device__ __forceinline__ state_t widen(const AffineState<float>& s) {
    return {static_cast<double>(s.a), static_cast<double>(s.b)};
  }
  static __host__ __device__ __forceinline__ AffineState<float> narrow(const state_t& s) {
    return {static_cast<float>(s.a), static_cast<float>(s.b)};
  }
};
template <class Combine>
using carry_combine_t = typename Carry<Combine>::type;

// A grid of `blocks` blocks, capped at `per_sm` blocks per SM (the kernels grid-stride).
inline unsigned grid_size(const LaunchContext& ctx, int64_t blocks, int64_t per_sm) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, ctx.sms * per_sm)));
}

// Scratch memory for n states.
template <class state_t>
state_t* scratch_states(const LaunchContext& ctx, int64_t n) {
  return static_cast<state_t*>(ctx.scratch->allocate(n * static_cast<int64_t>(sizeof(state_t))));
}

// N objects of T in shared memory, constructed by assignment (a __shared__ variable may not
// have a non-trivial constructor, and future states may have one).
template <class T, int N>
struct alignas(T) RawArray {
  unsigned char bytes[N * sizeof(T)];
  __device__ __forceinline__ T& operator[](int i) { return reinterpret_cast<T*>(bytes)[i]; }
};

// kVec consecutive elements of T as one (aligned) memory access.
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Elements per vector access for T: 16 bytes, at most 8 elements (the row agent's items per
// thread must be a multiple).
template <class T>
constexpr int vec_width() {
  return sizeof(T) >= 16 ? 1 : std::min<int>(8, 16 / sizeof(T));
}

template <int V, class T>
__device__ __forceinline__ bool is_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * V) == 0;
}

// A vector store, marked evict-first in L2 (st.global.cs) when `streaming`: outputs much
// larger than L2 are not read back soon, and normal stores evict lines a kernel still
// needs (the look-back chunks' second read). Measured on the H100, 1-D float32 cumsum of
// 2^30: 62.8% -> 66.2% of copy; (32768, 32768) cummax rows 88% -> 91%; cumsum rows 97%
// either way.
template <class V>
__device__ __forceinline__ void store_vec_hinted(V* p, const V& v, bool streaming) {
  if constexpr (sizeof(V) == 16 || sizeof(V) == 8) {
    if (streaming) {
      using W = std::conditional_t<sizeof(V) == 16, int4, int2>;
      W w;
      memcpy(&w, &v, sizeof(V));
      __stcs(reinterpret_cast<W*>(p), w);
      return;
    }
  }
  *p = v;
}

// A vector load cached in L2 only (ld.global.cg), for streams read once beside a broadcast
// companion that is read again and again (a (1, N) mask or coefficient row): the stream
// does not evict the companion's lines from L1. Measured on the H100
// (bench/row_items_bench.cu, (32768, 32768) float32 masked cumsum with a (1, N) mask read
// in place, share of the copy of the input and output, three rounds, each companion vector
// gathered by fetch_vec_in_line): 82-86% with plain loads, 87.4-87.5% (ld.global.cg),
// 86.8-86.9% (ld.global.lu); ld.global.cs 76%; the mask through ld.global.nc changed nothing
// (81-83%). A dense mask: 86-87% (9 bytes an element). bench_gpu.py with the library: 79% ->
// 87% (torch.compile 87%); with fetch_vec_shifted, below, 96%.
template <class V>
__device__ __forceinline__ V load_vec_cg(const V* p) {
  if constexpr (sizeof(V) == 16 || sizeof(V) == 8) {
    using W = std::conditional_t<sizeof(V) == 16, int4, int2>;
    const W w = __ldcg(reinterpret_cast<const W*>(p));
    V v;
    memcpy(&v, &w, sizeof(V));
    return v;
  } else {
    return *p;
  }
}

// Asks L2 for the 128-byte lines of [p, p + bytes): thread t of nt takes every nt-th line (a
// hint: no registers held, nothing waited for).
__device__ __forceinline__ void prefetch_l2_range(const void* p, int64_t bytes, int t, int nt) {
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{127};
  const auto end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes);
  for (uintptr_t a = first + uintptr_t{128} * t; a < end; a += uintptr_t{128} * nt) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
  }
}

// Division by a fixed divisor d >= 1 of dividends n < 2^32 with a multiply-high, an add and
// a shift (Granlund and Montgomery's round-up method): q = (mulhi(n, magic) + n) >> shift with
// shift = ceil(log2 d), magic = floor(2^32 (2^shift - d) / d) + 1, the add done in 64 bits.
struct FastDiv32 {
  uint32_t d = 1, magic = 1;
  int shift = 0;
  FastDiv32() = default;
  explicit FastDiv32(uint32_t divisor) : d(divisor) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return static_cast<uint32_t>((uint64_t{__umulhi(n, magic)} + n) >> shift);
  }
};

// (CompanionIndex) base[at + t * step] for t < V: a vector load (step 1, aligned), one load
// (step 0) or V strided loads.
template <int V, class T>
__device__ __forceinline__ void companion_run(const T* base, int64_t at, int64_t step,
                                              T (&out)[V]) {
  if (step == 1 && is_aligned<V>(base + at)) {
    const auto v = *reinterpret_cast<const Vec<T, V>*>(base + at);
#pragma unroll
    for (int t = 0; t < V; ++t) out[t] = v.v[t];
  } else if (step == 0) {
    const T x = base[at];
#pragma unroll
    for (int t = 0; t < V; ++t) out[t] = x;
  } else {
#pragma unroll
    for (int t = 0; t < V; ++t) out[t] = base[at + t * step];
  }
}

// Offsets into a companion tensor (CompanionLayout): the element's own offset for a dense
// companion; for one broadcast in place, the offset from the element's canonical coordinates
// (o, l, i): two fast divisions for the first of a run of consecutive elements (gather), then
// steps. Paid only by broadcast companions, which read far fewer bytes instead.
struct CompanionIndex {
  CompanionLayout layout;
  int64_t length = 1, inner = 1;
  FastDiv32 by_inner{}, by_length{};  // used while e and length * inner fit in 31 bits
  bool narrow = false;

  CompanionIndex() = default;
  CompanionIndex(const CompanionLayout& l, int64_t length_, int64_t inner_, int64_t numel)
      : layout(l), length(length_), inner(inner_) {
    narrow = numel <= INT32_MAX;
    if (narrow) {
      by_inner = FastDiv32(static_cast<uint32_t>(inner));
      by_length = FastDiv32(static_cast<uint32_t>(length));
    }
  }
  __device__ __forceinline__ void coords(int64_t e, int64_t& o, int64_t& l, int64_t& i) const {
    if (narrow) {
      const auto e32 = static_cast<uint32_t>(e);
      const uint32_t q = by_inner.div(e32);
      const uint32_t o32 = by_length.div(q);
      i = e32 - q * static_cast<uint32_t>(inner);
      l = q - o32 * static_cast<uint32_t>(length);
      o = o32;
    } else {
      const int64_t q = e / inner;
      i = e - q * inner;
      o = q / length;
      l = q - o * length;
    }
  }
  __device__ __forceinline__ int64_t operator()(int64_t e) const {
    if (!layout.strided) return e;
    int64_t o, l, i;
    coords(e, o, l, i);
    return o * layout.so + l * layout.sl + i * layout.si;
  }
  // base[offset] for the V consecutive elements e .. e + V - 1 of a broadcast companion (V
  // divides the problem's vector width: e is a multiple of V). Where the run stays inside
  // one line of the innermost dim it is a vector load (companion stride 1, aligned), one
  // load (stride 0: a row mask along a column, a column mask along a row) or V strided
  // loads; runs that wrap step the coordinates.
  template <int V, class T>
  __device__ __forceinline__ void gather(const T* base, int64_t e, T (&out)[V]) const {
    int64_t o, l, i;
    coords(e, o, l, i);
    int64_t at = o * layout.so + l * layout.sl + i * layout.si;
    const bool rows = inner == 1;  // consecutive elements step l, else i
    if ((rows ? l + V <= length : i + V <= inner)) {
      companion_run<V>(base, at, rows ? layout.sl : layout.si, out);
      return;
    }
#pragma unroll
    for (int t = 0; t < V; ++t) {
      out[t] = base[at];
      if (++i < inner) {
        at += layout.si;
        continue;
      }
      i = 0;  // the next element starts the next scan position, or the next outer index
      if (++l < length) {
        at += layout.sl - (inner - 1) * layout.si;
      } else {
        l = 0;
        at = ++o * layout.so;
      }
    }
  }
};

// The problem's input as states: lift(in[i]) (lift(coeff[i], in[i]) for arity-2 combines,
// lift(in[i], position along the line) for indexed ones), identity() where mask[i] is false.
// Both loads are issued before the mask is tested.
// kBroadcast: the mask or the coefficients may be broadcast companions read in place
// (CompanionIndex); false (every dense problem) compiles none of that code and carries none
// of its fields. Measured on the H100: a run-time branch on the layout inside the vector
// loads took dense masked_cumsum rows from 96% to 57% of copy; with the branch compiled out
// but the two (unused) CompanionIndex fields still in the dense source, cumprod rows fell
// from 97% to 88%, float16 rows from 85% to 67%, (32768, 32768) along dim 0 from 76% to 39%
// (bench/row_items_bench.cu and bench_gpu.py, d502a79 against 14b5a2b).
template <class Combine, class in_t, bool kBroadcast = false>
struct InputSource {
  using state_t = typename Combine::state_t;
  static constexpr int kVec = vec_width<in_t>();
  static constexpr bool kCompanions = kBroadcast;  // (tile shapes may depend on it)
  static constexpr int kInBytes = sizeof(in_t);                          // per input tensor
  // Arity-1, unindexed combines of inputs of 4 bytes or more hold the input element itself (a
  // masked-off one as the input value that lifts to identity(): 0 for sums, 1 for products,
  // -inf for logaddexp); the others hold the lifted state. Measured on the H100
  // (bench/row_items_bench.cu, (32768, 32768) rows, share of copy): float32 cumprod (float64
  // states) 82% -> 97% holding the floats (32 items per thread instead of 16); float16 cumsum
  // 73% holding halves (32 items; 78% with 64, which spill registers) against 87% holding its
  // float32 states, bfloat16 73-79% either way: narrow inputs keep holding states
  // (SCANOPS_HOLD_NARROW=1 holds them, for such experiments).
#ifndef SCANOPS_HOLD_NARROW
#define SCANOPS_HOLD_NARROW 0
#endif
  static constexpr bool kHoldsInput = Combine::arity == 1 && !Combine::indexed &&
                                      (sizeof(in_t) >= 4 || SCANOPS_HOLD_NARROW);
  using held_t = std::conditional_t<kHoldsInput, in_t, state_t>;
  const in_t* in;
  const in_t* coeff;  // arity 2 only
  const bool* mask;   // nullptr: no mask
  bool scaled = false;  // arity 2: lift_scaled (the input times its coefficient)
  // Where coeff / mask hold element i when broadcast in place (kBroadcast only: the dense
  // instantiation carries none of it, not even its bytes).
  struct Companions {
    CompanionIndex coeff_at, mask_at;
  };
  struct NoCompanions {};
  std::conditional_t<kBroadcast, Companions, NoCompanions> at{};
  // x: the input element, a: its coefficient (ignored for arity 1), pos: its position along
  // its line (indexed combines only).
  __device__ __forceinline__ state_t lift(in_t x, in_t a, int64_t pos) const {
    if constexpr (Combine::arity == 2) {
      return scaled ? Combine::template lift_scaled<in_t>(a, x) : Combine::template lift<in_t>(a, x);
    } else if constexpr (Combine::indexed) {
      return Combine::template lift<in_t>(x, pos);
    } else {
      return Combine::template lift<in_t>(x);
    }
  }
  // held_t: what a masked-off or absent element is held as; lift_held(held_identity())
  // is identity().
  static __device__ __forceinline__ held_t held_identity() {
    if constexpr (kHoldsInput) {
      return static_cast<in_t>(Combine::value(Combine::identity()));
    } else {
      return Combine::identity();
    }
  }
  __device__ __forceinline__ held_t hold(in_t x, in_t a, bool keep, int64_t pos) const {
    if constexpr (kHoldsInput) {
      return keep ? x : held_identity();
    } else {
      return keep ? lift(x, a, pos) : Combine::identity();
    }
  }
  __device__ __forceinline__ state_t lift_held(const held_t& h) const {
    if constexpr (kHoldsInput) {
      return Combine::template lift<in_t>(h);
    } else {
      return h;
    }
  }
  // Element i, which sits at position pos of its line. Kernels count positions as they walk
  // (dividing them out of offsets cost measurable time at cummax's rates).
  __device__ __forceinline__ held_t hold_at(int64_t i, int64_t pos) const {
    in_t a{};
    if constexpr (kBroadcast) {
      if constexpr (Combine::arity == 2) a = coeff[at.coeff_at(i)];
      const in_t x = in[i];
      return hold(x, a, mask == nullptr || mask[at.mask_at(i)], pos);
    } else {
      if constexpr (Combine::arity == 2) a = coeff[i];
      const in_t x = in[i];
      return hold(x, a, mask == nullptr || mask[i], pos);
    }
  }
  __device__ __forceinline__ state_t load_at(int64_t i, int64_t pos) const {
    return lift_held(hold_at(i, pos));
  }
  // Prefetches elements [i, i + n) of every input into L2 (thread t of nt).
  __device__ __forceinline__ void prefetch_l2(int64_t i, int64_t n, int t, int nt) const {
    prefetch_l2_range(in + i, n * static_cast<int64_t>(sizeof(in_t)), t, nt);
    bool coeff_dense = true, mask_dense = true;
    if constexpr (kBroadcast) {
      coeff_dense = !at.coeff_at.layout.strided;
      mask_dense = !at.mask_at.layout.strided;
    }
    if constexpr (Combine::arity == 2) {
      if (coeff_dense) prefetch_l2_range(coeff + i, n * static_cast<int64_t>(sizeof(in_t)), t, nt);
    }
    if (mask != nullptr && mask_dense) prefetch_l2_range(mask + i, n, t, nt);
  }
  // Whether hold_vec may be used at element offset i.
  // (A broadcast companion is read element by element inside hold_vec.)
  __device__ __forceinline__ bool vec_ok(int64_t i) const {
    if constexpr (kBroadcast) {
      return is_aligned<kVec>(in + i) &&
             (Combine::arity == 1 || at.coeff_at.layout.strided || is_aligned<kVec>(coeff + i)) &&
             (mask == nullptr || at.mask_at.layout.strided || is_aligned<kVec>(mask + i));
    } else {
      return is_aligned<kVec>(in + i) && (Combine::arity == 1 || is_aligned<kVec>(coeff + i)) &&
             (mask == nullptr || is_aligned<kVec>(mask + i));
    }
  }
  // Elements i .. i + kVec - 1 in two steps: fetch_vec issues the loads of the input and its
  // companions, hold_fetched makes the held elements of them. With broadcast companions a
  // tile fetches all its vectors before it holds the first, so that every load is in flight
  // at once: a companion's gather branches (CompanionIndex::gather), and the compiler does
  // not move the next vector's loads above the branches of the previous one, nor above a use
  // of its loaded values. Measured on the H100 (bench_gpu.py, (32768, 32768) rows, share of
  // copy): masked_cumsum with a (1, N) / (M, 1) mask read in place 65% / 68% with one vector
  // fetched and held at a time, 78-82% / 94-95% with this and fetch_vec_in_line.
  struct Fetched {
    Vec<in_t, kVec> x, a;  // a: arity 2 only
    Vec<bool, kVec> m;     // unread where mask == nullptr
  };
  __device__ __forceinline__ void fetch_vec(int64_t i, Fetched& f) const {
    using V = Vec<in_t, kVec>;
    f.x = *reinterpret_cast<const V*>(in + i);
    if constexpr (!kBroadcast) {  // (the dense loads exactly as before broadcasts existed)
      if constexpr (Combine::arity == 2) f.a = *reinterpret_cast<const V*>(coeff + i);
    } else if constexpr (Combine::arity == 2) {
      if (!at.coeff_at.layout.strided) {
        f.a = *reinterpret_cast<const V*>(coeff + i);
      } else {
        at.coeff_at.gather(coeff, i, f.a.v);
      }
    }
    if constexpr (!kBroadcast) {
      if (mask != nullptr) f.m = *reinterpret_cast<const Vec<bool, kVec>*>(mask + i);
    } else if (mask != nullptr) {
      if (!at.mask_at.layout.strided) {
        f.m = *reinterpret_cast<const Vec<bool, kVec>*>(mask + i);
      } else {
        at.mask_at.gather(mask, i, f.m.v);
      }
    }
  }
  // A tile of elements [lo, lo + n) inside one line of contiguous elements (inner == 1: the
  // row kernels' rows and look-back chunks): a broadcast companion's offset of element
  // lo + m is cursor(lo) + m * sl, so the tile finds its companions' coordinates once
  // (fetch_vec_in_line) instead of dividing them out of every vector's offset (gather).
  struct Cursor {
    int64_t coeff_at = 0, mask_at = 0;
  };
  __device__ __forceinline__ Cursor cursor(int64_t lo) const {
    Cursor c;
    if constexpr (kBroadcast) {
      if constexpr (Combine::arity == 2) c.coeff_at = at.coeff_at(lo);
      if (mask != nullptr) c.mask_at = at.mask_at(lo);
    }
    return c;
  }
  // fetch_vec of elements lo + m .. lo + m + kVec - 1 of such a tile (kBroadcast only).
  __device__ __forceinline__ void fetch_vec_in_line(int64_t lo, int m, const Cursor& c,
                                                    Fetched& f) const {
    using V = Vec<in_t, kVec>;
    const int64_t i = lo + m;
    // (the input through L2 only: see load_vec_cg)
    f.x = load_vec_cg(reinterpret_cast<const V*>(in + i));
    if constexpr (kBroadcast) {
      if constexpr (Combine::arity == 2) {
        if (!at.coeff_at.layout.strided) {
          f.a = *reinterpret_cast<const V*>(coeff + i);
        } else {
          const int64_t sl = at.coeff_at.layout.sl;
          companion_run<kVec>(coeff, c.coeff_at + m * sl, sl, f.a.v);
        }
      }
      if (mask != nullptr) {
        if (!at.mask_at.layout.strided) {
          f.m = *reinterpret_cast<const Vec<bool, kVec>*>(mask + i);
        } else {
          const int64_t sl = at.mask_at.layout.sl;
          companion_run<kVec>(mask, c.mask_at + m * sl, sl, f.m.v);
        }
      }
    }
  }
  // A tile inside one line (as fetch_vec_in_line) whose broadcast companions step by one
  // element along the line (sl == 1: a (1, N) mask or coefficient row read by every row) or
  // are dense: the companion of element lo + m is at element lo + m + shift, the same shift
  // for the whole tile, so the tile reads it with the dense source's vector loads
  // (fetch_vec_shifted) instead of a run per vector (companion_run's stride and alignment
  // tests, a 64-bit offset each). line_shift finds the shifts and whether they apply (every
  // companion vector aligned: the input's vectors are, and the shift is a multiple of kVec).
  struct Shift {
    int64_t coeff = 0, mask = 0;
  };
  __device__ __forceinline__ bool line_shift(int64_t lo, const Cursor& c, Shift& sh) const {
    if constexpr (kBroadcast) {
      if constexpr (Combine::arity == 2) {
        if (at.coeff_at.layout.strided) {
          if (at.coeff_at.layout.sl != 1) return false;
          sh.coeff = c.coeff_at - lo;
        }
        if (!is_aligned<kVec>(coeff + lo + sh.coeff)) return false;
      }
      if (mask != nullptr) {
        if (at.mask_at.layout.strided) {
          if (at.mask_at.layout.sl != 1) return false;
          sh.mask = c.mask_at - lo;
        }
        if (!is_aligned<kVec>(mask + lo + sh.mask)) return false;
      }
    }
    return true;
  }
  // fetch_vec of elements i .. i + kVec - 1 of such a tile, the input through L2 only (see
  // load_vec_cg). Measured on the H100 (bench/row_items_bench.cu, (32768, 32768) float32
  // rows, share of the copy of input and output, three rounds each, interleaved): masked
  // cumsum with a (1, N) mask 81-85% -> 96.4-96.5% (a dense mask: 86.5%, its 9 bytes an
  // element), (M, 1) 96-97% either way; linear_recurrence with a (1, N) row of coefficients
  // 76% -> 77% (its 128 KB row does not stay in L1: 17% of L1 sectors hit).
  __device__ __forceinline__ void fetch_vec_shifted(int64_t i, const Shift& sh, Fetched& f) const {
    using V = Vec<in_t, kVec>;
    f.x = load_vec_cg(reinterpret_cast<const V*>(in + i));
    if constexpr (Combine::arity == 2) f.a = *reinterpret_cast<const V*>(coeff + i + sh.coeff);
    if (mask != nullptr) f.m = *reinterpret_cast<const Vec<bool, kVec>*>(mask + i + sh.mask);
  }
  // A packed tile of whole rows of `seg` elements starting at lo (row kernels' short rows)
  // whose broadcast companions are the same for every row (so == 0) and step by one element
  // along it (sl == 1: a (1, N) mask or coefficient row): the companion of element lo + u is
  // at u % seg, one fast division per vector (fetch_vec_packed) instead of the coordinates'
  // two and a run's stride and alignment tests (fetch_vec). packed_ok says whether it
  // applies (every vector inside one row and aligned). Measured on the H100
  // (bench/row_items_bench.cu, (2^20, 64) float32 rows, share of the copy of input and
  // output): masked cumsum with a (1, 64) mask 71% -> 81-82% (a dense mask: 86-87%),
  // linear_recurrence with a (1, 64) row of coefficients 58% -> 65-66% (dense: 64-65%). Also
  // taking (M, 1) columns (sl == 0) in the same function, a test of the companion's step per
  // vector, gave them 69% -> 78-79% but the (1, N) rows only 78-79% / 61-62%: not used.
  __device__ __forceinline__ bool packed_ok(int seg) const {
    if constexpr (kBroadcast) {
      if (seg % kVec != 0) return false;
      const auto row_only = [](const CompanionIndex& c) {
        return !c.layout.strided || (c.narrow && c.layout.so == 0 && c.layout.sl == 1);
      };
      if constexpr (Combine::arity == 2) {
        if (!row_only(at.coeff_at) || !is_aligned<kVec>(coeff)) return false;
      }
      if (mask != nullptr && (!row_only(at.mask_at) || !is_aligned<kVec>(mask))) return false;
      return true;
    } else {
      return false;
    }
  }
  __device__ __forceinline__ void fetch_vec_packed(int64_t lo, int u, Fetched& f) const {
    using V = Vec<in_t, kVec>;
    const int64_t i = lo + u;
    f.x = load_vec_cg(reinterpret_cast<const V*>(in + i));
    if constexpr (kBroadcast) {
      const auto at_row = [&](const CompanionIndex& c) {  // (so == 0, sl == 1) or dense
        return c.layout.strided
                   ? static_cast<int64_t>(u - c.by_length.div(u) * static_cast<uint32_t>(c.length))
                   : i;
      };
      if constexpr (Combine::arity == 2) f.a = *reinterpret_cast<const V*>(coeff + at_row(at.coeff_at));
      if (mask != nullptr) f.m = *reinterpret_cast<const Vec<bool, kVec>*>(mask + at_row(at.mask_at));
    }
  }
  // Both steps at once (dense sources: the compiler already issues every vector's loads
  // first).
  __device__ __forceinline__ void hold_vec(int64_t i, const int64_t (&pos)[kVec],
                                           held_t (&out)[kVec]) const {
    Fetched f{};
    fetch_vec(i, f);
    hold_fetched(f, pos, out);
  }
  // The held elements of a fetched vector at positions pos[0 ..] (read by indexed combines
  // only).
  __device__ __forceinline__ void hold_fetched(const Fetched& f, const int64_t (&pos)[kVec],
                                               held_t (&out)[kVec]) const {
#pragma unroll
    for (int t = 0; t < kVec; ++t) {
      out[t] = hold(f.x.v[t], f.a.v[t], mask == nullptr || f.m.v[t], pos[t]);
    }
  }
};

// The backward fusions' epilogue of element i (each pointer optional): mul[i] * (y + add[i]),
// or mul_mask[i] * ..., each step rounded to out_t as ATen's elementwise ops round it. Every
// sink applies it through here, so that a fused backward and the plain scan with the
// epilogue applied after it give the same bits (test_fused_backward.py).
template <class out_t>
__device__ __forceinline__ out_t apply_epilogue(out_t y, int64_t i, const out_t* add,
                                                const out_t* mul, const bool* mul_mask) {
  if (add != nullptr) y = static_cast<out_t>(y + add[i]);
  if (mul != nullptr) y = static_cast<out_t>(mul[i] * y);
  if (mul_mask != nullptr) y = static_cast<out_t>(static_cast<out_t>(mul_mask[i]) * y);
  return y;
}

// The problem's output: value(state) cast to out_t (and, for indexed combines, index(state)
// to the int64 indices). Unindexed combines lower a state to its out_t element before the
// store; indexed ones keep the state (lowered_t) until the store writes both outputs.
// The backward passes' epilogue (unindexed only): apply_epilogue.
template <class Combine, class out_t>
struct OutputSink {
  using state_t = typename Combine::state_t;
  using lowered_t = std::conditional_t<Combine::indexed, state_t, out_t>;
  static constexpr int kVec = vec_width<out_t>();
  using value_t = out_t;
  static constexpr bool kMulNext = false;  // see MulNextSink
  static constexpr bool kMaskPre = false;  // see MaskPreSink
  static constexpr bool kEpiPre = false;   // see EpiPreSink
  out_t* out;
  int64_t* indices = nullptr;  // indexed combines only
  bool streaming = false;      // vector stores evict-first (outputs larger than L2)
  const out_t* add = nullptr;
  const out_t* mul = nullptr;
  const bool* mul_mask = nullptr;
  // The lines' initial values (DeviceProblem::initial: line (o, i) at o * inner + i), or
  // nullptr. A kernel param: read once per line (per tile, column or chunk) by line_start,
  // never per element; the test is uniform.
  const out_t* initial = nullptr;

  __device__ __forceinline__ bool has_initial() const { return initial != nullptr; }
  // The state line `line` starts from: Combine::start(initial[line]), or identity().
  __device__ __forceinline__ state_t line_start(int64_t line) const {
    if (initial != nullptr) return Combine::start(initial[line]);
    return Combine::identity();
  }
  // Asks L2 for the initial values of lines [line, line + n) (thread t of nt).
  __device__ __forceinline__ void prefetch_initial(int64_t line, int64_t n, int t, int nt) const {
    if (initial != nullptr) {
      prefetch_l2_range(initial + line, n * static_cast<int64_t>(sizeof(out_t)), t, nt);
    }
  }

  static __device__ __forceinline__ out_t cast(const state_t& s) {
    return static_cast<out_t>(Combine::value(s));
  }
  static __device__ __forceinline__ lowered_t lower(const state_t& s) {
    if constexpr (Combine::indexed) {
      return s;
    } else {
      return cast(s);
    }
  }
  __device__ __forceinline__ bool has_epilogue() const {
    return add != nullptr || mul != nullptr || mul_mask != nullptr;
  }
  __device__ __forceinline__ out_t epilogue(out_t y, int64_t i) const {
    if constexpr (!Combine::indexed && !std::is_same_v<out_t, bool>) {
      y = apply_epilogue(y, i, add, mul, mul_mask);
    }
    return y;
  }
  __device__ __forceinline__ void put(int64_t i, const lowered_t& y) const {
    if constexpr (Combine::indexed) {
      out[i] = cast(y);
      indices[i] = Combine::index(y);
    } else {
      out[i] = has_epilogue() ? epilogue(y, i) : y;
    }
  }
  // put, then the written value multiplied by f (MulNextSink's factor: f * (y + add)), or,
  // with f_out, the product written there and the value itself to out.
  __device__ __forceinline__ void put(int64_t i, const lowered_t& y, out_t f,
                                      out_t* f_out) const {
    if constexpr (!Combine::indexed && !std::is_same_v<out_t, bool>) {
      const out_t v = has_epilogue() ? epilogue(y, i) : y;
      if (f_out != nullptr) {
        out[i] = v;
        f_out[i] = static_cast<out_t>(f * v);
      } else {
        out[i] = static_cast<out_t>(f * v);
      }
    }
  }
  __device__ __forceinline__ void store(int64_t i, const state_t& s) const { put(i, lower(s)); }
  // put_vec where mul_mask is the only epilogue operand, its vector k loaded by the caller
  // (MaskPreSink). (Loading the R mask vectors of a column_vec_kernel lane before its first
  // store the same way made every column_vec_kernel spill, 40-328 bytes: not done.)
  __device__ __forceinline__ void put_vec_mask(int64_t i, const out_t (&s)[kVec],
                                               const Vec<bool, kVec>& k) const {
    Vec<out_t, kVec> y;
#pragma unroll
    for (int t = 0; t < kVec; ++t) y.v[t] = static_cast<out_t>(static_cast<out_t>(k.v[t]) * s[t]);
    store_vec_hinted(reinterpret_cast<Vec<out_t, kVec>*>(out + i), y, streaming);
  }
  __device__ __forceinline__ bool vec_ok(int64_t i) const {
    if constexpr (Combine::indexed) {
      if (!is_aligned<kVec>(indices + i)) return false;
    } else {
      if ((add != nullptr && !is_aligned<kVec>(add + i)) ||
          (mul != nullptr && !is_aligned<kVec>(mul + i)) ||
          (mul_mask != nullptr && !is_aligned<kVec>(mul_mask + i))) {
        return false;
      }
    }
    return is_aligned<kVec>(out + i);
  }
  // kEpilogue = false: the caller knows has_epilogue() is false (a kernel that tests it once
  // per tile rather than once per vector: column_vec_kernel).
  template <bool kEpilogue = true>
  __device__ __forceinline__ void put_vec(int64_t i, const lowered_t (&s)[kVec]) const {
    Vec<out_t, kVec> y;
#pragma unroll
    for (int t = 0; t < kVec; ++t) {
      if constexpr (Combine::indexed) {
        y.v[t] = cast(s[t]);
      } else {
        y.v[t] = s[t];
      }
    }
    if constexpr (kEpilogue && !Combine::indexed && !std::is_same_v<out_t, bool>) {
      if (has_epilogue()) {  // vector loads of the epilogue's operands
        Vec<out_t, kVec> a{}, m{};
        Vec<bool, kVec> k{};
        if (add != nullptr) a = *reinterpret_cast<const Vec<out_t, kVec>*>(add + i);
        if (mul != nullptr) m = *reinterpret_cast<const Vec<out_t, kVec>*>(mul + i);
        if (mul_mask != nullptr) k = *reinterpret_cast<const Vec<bool, kVec>*>(mul_mask + i);
#pragma unroll
        for (int t = 0; t < kVec; ++t) {
          if (add != nullptr) y.v[t] = static_cast<out_t>(y.v[t] + a.v[t]);
          if (mul != nullptr) y.v[t] = static_cast<out_t>(m.v[t] * y.v[t]);
          if (mul_mask != nullptr) y.v[t] = static_cast<out_t>(static_cast<out_t>(k.v[t]) * y.v[t]);
        }
      }
    }
    store_vec_hinted(reinterpret_cast<Vec<out_t, kVec>*>(out + i), y, streaming);
    if constexpr (Combine::indexed) {  // kVec int64s: 16-byte stores
      constexpr int kPair = kVec >= 2 ? 2 : 1;
#pragma unroll
      for (int t = 0; t < kVec; t += kPair) {
        Vec<int64_t, kPair> w;
#pragma unroll
        for (int u = 0; u < kPair; ++u) w.v[u] = Combine::index(s[t + u]);
        store_vec_hinted(reinterpret_cast<Vec<int64_t, kPair>*>(indices + i + t), w, streaming);
      }
    }
  }
};

// An OutputSink whose values are also multiplied by a multiplier at the next scan position
// (ScanProblem::shift_mul): mul_next[i + next] for element i, fill() for the last element
// of a line of `line` elements; next = +1 (forward scans) or -1 (reverse). kSecond: the
// products go to `second` and the values themselves to out (ScanProblem::second), fill() 0;
// else fill() 1. The row kernels compute the factors (RowTile::store_striped_next) and pass
// them to put as `f` and to put_vec_next. kSecond a compile-time choice: with a run-time one (a test of
// `second` per store) cumprod fwd+bwd measured 64% of its copies on the H100, 69% without it.
// A type of its own, so that the forward kernels' code and parameters stay as they are (a
// run-time test of mul_next in every row store cost the look-back rows 2-5% on the H100).
template <class Combine, class out_t, bool kSecond>
struct MulNextSink : OutputSink<Combine, out_t> {
  using Base = OutputSink<Combine, out_t>;
  static constexpr bool kMulNext = true;
  static __device__ __forceinline__ out_t fill() { return out_t(kSecond ? 0 : 1); }
  __device__ __forceinline__ out_t* second_out() const { return kSecond ? second : nullptr; }
  static_assert(!Combine::indexed && !std::is_same_v<out_t, bool>);
  const out_t* mul_next = nullptr;
  out_t* second = nullptr;  // kSecond only
  int64_t line = 0;
  int next = 0;
  __device__ __forceinline__ bool vec_ok(int64_t i) const {
    return Base::vec_ok(i) && is_aligned<Base::kVec>(mul_next + i) &&
           (!kSecond || is_aligned<Base::kVec>(second + i));
  }
  // Base::put_vec(i, s)'s values (add, then mul_mask; mul is nullptr in this sink, and the add
  // operand a is loaded by the caller where add is set), each multiplied by its factor f:
  // the products to second_out() and the values to out, or (no second) the products to out.
  __device__ __forceinline__ void put_vec_next(int64_t i, const out_t (&s)[Base::kVec],
                                               const out_t (&f)[Base::kVec],
                                               const Vec<out_t, Base::kVec>& a) const {
    constexpr int V = Base::kVec;
    Vec<out_t, V> y;
#pragma unroll
    for (int t = 0; t < V; ++t) y.v[t] = s[t];
    if (this->add != nullptr) {
#pragma unroll
      for (int t = 0; t < V; ++t) y.v[t] = static_cast<out_t>(y.v[t] + a.v[t]);
    }
    if (this->mul_mask != nullptr) {
      const Vec<bool, V> k = *reinterpret_cast<const Vec<bool, V>*>(this->mul_mask + i);
#pragma unroll
      for (int t = 0; t < V; ++t) y.v[t] = static_cast<out_t>(static_cast<out_t>(k.v[t]) * y.v[t]);
    }
    Vec<out_t, V> z;
#pragma unroll
    for (int t = 0; t < V; ++t) z.v[t] = static_cast<out_t>(f[t] * y.v[t]);
    if constexpr (kSecond) {
      store_vec_hinted(reinterpret_cast<Vec<out_t, V>*>(second + i), z, this->streaming);
      store_vec_hinted(reinterpret_cast<Vec<out_t, V>*>(this->out + i), y, this->streaming);
    } else {
      store_vec_hinted(reinterpret_cast<Vec<out_t, V>*>(this->out + i), z, this->streaming);
    }
  }
};

// An OutputSink whose only epilogue is mul_mask (masked_cumsum's backward: dx = mask * scan),
// for the row kernels, which load a full tile's mask vectors after its input
// (RowTile::scan) and hand them to put_vec_pre: no load at store time. put_vec loads each
// vector's operands next to its store, and a load is not moved above an earlier store that
// may alias it, so a thread's 8 stores waited on 8 loads one after the other. Partial tiles
// take put, which reads mul_mask.
template <class Combine, class out_t>
struct MaskPreSink : OutputSink<Combine, out_t> {
  using Base = OutputSink<Combine, out_t>;
  static constexpr bool kMaskPre = true;
  static_assert(!Combine::indexed && !std::is_same_v<out_t, bool>);
  __device__ __forceinline__ void put_vec_pre(int64_t i, const out_t (&s)[Base::kVec],
                                              const Vec<bool, Base::kVec>& k) const {
    this->put_vec_mask(i, s, k);
  }
};

// An OutputSink with a fused epilogue (add, mul, mul_mask: the backward passes of
// logcumsumexp and cummax / cummin along rows), for the row kernels: RowTile::store_striped
// loads every operand of a thread's vector stores (operands) before the first of them
// (put_vec_ops), as MulNextSink's store_striped_next does. put_vec loads each vector's
// operands next to its store, and a load is not moved above an earlier store that may alias
// it: a thread's stores waited on their loads one vector after another. A type of its own,
// as MaskPreSink, so that the forward kernels (OutputSink) keep their code.
template <class Combine, class out_t>
struct EpiPreSink : OutputSink<Combine, out_t> {
  using Base = OutputSink<Combine, out_t>;
  static constexpr bool kEpiPre = true;
  static constexpr int V = Base::kVec;
  static_assert(!Combine::indexed && !std::is_same_v<out_t, bool>);
  struct Operands {
    Vec<out_t, V> a, m;
    Vec<bool, V> k;
  };
  __device__ __forceinline__ Operands operands(int64_t i) const {
    Operands o{};
    if (this->add != nullptr) o.a = *reinterpret_cast<const Vec<out_t, V>*>(this->add + i);
    if (this->mul != nullptr) o.m = *reinterpret_cast<const Vec<out_t, V>*>(this->mul + i);
    if (this->mul_mask != nullptr) o.k = *reinterpret_cast<const Vec<bool, V>*>(this->mul_mask + i);
    return o;
  }
  // Base::put_vec(i, s) with the operands loaded: the same operations in the same order.
  __device__ __forceinline__ void put_vec_ops(int64_t i, const out_t (&s)[V], const Operands& o) const {
    Vec<out_t, V> y;
#pragma unroll
    for (int t = 0; t < V; ++t) {
      out_t v = s[t];
      if (this->add != nullptr) v = static_cast<out_t>(v + o.a.v[t]);
      if (this->mul != nullptr) v = static_cast<out_t>(o.m.v[t] * v);
      if (this->mul_mask != nullptr) v = static_cast<out_t>(static_cast<out_t>(o.k.v[t]) * v);
      y.v[t] = v;
    }
    store_vec_hinted(reinterpret_cast<Vec<out_t, V>*>(this->out + i), y, this->streaming);
  }
};

// An array of states read and written as they are (no vector access: these arrays are small).
// A StateSource and a StateSink may share one array: kernels read each element before
// writing it, and only from the block that writes it.
template <class Combine>
struct StateSource {
  using state_t = typename Combine::state_t;
  using held_t = state_t;
  static constexpr int kVec = 1;
  static constexpr bool kCompanions = false;
  static constexpr int kInBytes = sizeof(state_t);
  const state_t* p;
  static __device__ __forceinline__ held_t held_identity() { return Combine::identity(); }
  __device__ __forceinline__ state_t lift_held(const held_t& h) const { return h; }
  __device__ __forceinline__ held_t hold_at(int64_t i, int64_t /*pos*/) const { return p[i]; }
  __device__ __forceinline__ state_t load_at(int64_t i, int64_t /*pos*/) const { return p[i]; }
  __device__ __forceinline__ void prefetch_l2(int64_t i, int64_t n, int t, int nt) const {
    prefetch_l2_range(p + i, n * static_cast<int64_t>(sizeof(state_t)), t, nt);
  }
};

template <class Combine>
struct StateSink {
  using state_t = typename Combine::state_t;
  using lowered_t = state_t;
  static constexpr int kVec = 1;
  static constexpr bool kMulNext = false;
  static constexpr bool kMaskPre = false;
  state_t* p;
  // (no initial values: the chunk totals' scans start from identity())
  static constexpr bool has_initial() { return false; }
  static __device__ __forceinline__ state_t line_start(int64_t) { return Combine::identity(); }
  static __device__ __forceinline__ void prefetch_initial(int64_t, int64_t, int, int) {}
  static __device__ __forceinline__ lowered_t lower(const state_t& s) { return s; }
  __device__ __forceinline__ void put(int64_t i, const lowered_t& s) const { p[i] = s; }
  __device__ __forceinline__ void store(int64_t i, const state_t& s) const { p[i] = s; }
};

}  // namespace scanops::cuda
