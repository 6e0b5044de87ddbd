// scanops CPU back end: segmented scans (Segments::reset), every combine kind and dtype, over
// the walk of ops/segmented.h.
//
// Work is split by shape only (never by the thread count), so the bits do not depend on the
// number of threads: units of (outer index, block of up to kColumns columns, chunk of
// positions). A unit walks its positions in scan order and, at each, its columns (consecutive
// in memory). Lines are cut into chunks only when there are fewer than kMinUnits units of
// whole lines; then a first pass takes each chunk's total (SegmentedCombine), a serial pass per
// line combines them into each chunk's carry, and a second walk writes every chunk from its
// carry (the input read twice). Float32 / float64 / float16 / bfloat16 sums, products, linear
// recurrences, cummax / cummin and logcumsumexp (rows and columns) walk on the AVX2 kernels of
// scan_cpu_segmented_avx2.h where the CPU has them (vec_ok); float16 / bfloat16 convert at the
// loads and stores and keep the generic walk's bits (float16 rows of sums, products and linear
// recurrences walk in its order, seg_row_seq; bfloat16 ones keep the generic walk: kVecRows),
// but for logcumsumexp (the online form's association, as float32 / float64). Int64 sums of
// int64 columns take the column kernel in int64 lanes.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/scan_cpu.h"
#include "ops/cpu/scan_cpu_kernels.h"  // the AVX2 kernels' lanes and dispatch, the memory policy
#include "ops/dispatch.h"
#include "ops/segmented.h"

#if defined(SCANOPS_AVX2_KERNELS)
namespace scanops {
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "ops/cpu/scan_cpu_segmented_avx2.h"
#pragma GCC pop_options
}  // namespace scanops
#endif

namespace scanops::cpu {
namespace {

constexpr int64_t kColumns = 64;           // columns a unit walks side by side
constexpr int64_t kMinUnits = 64;          // whole lines when there are at least this many units
constexpr int64_t kChunkElements = 1 << 16;  // elements of a unit when lines are cut
constexpr int64_t kGrainElements = 1 << 15;  // elements a parallel task takes at least

// The combines with AVX2 segmented kernels (scan_cpu_segmented_avx2.h): their float64 states.
template <class C>
struct SegVecOp {
  using type = void;
};
#if defined(SCANOPS_AVX2_KERNELS)
template <>
struct SegVecOp<SumCombine<double>> {
  using type = avx2::SumOp;
};
template <>
struct SegVecOp<ProdCombine<double>> {
  using type = avx2::ProdOp;
};
template <>
struct SegVecOp<AffineCombine<double>> {
  using type = avx2::AffineOp;
};
#endif

// float16 / bfloat16 in and out (the kernels convert at their loads and stores)
template <class T>
constexpr bool kHalfType = std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>;
// the element types of the vector kernels
template <class T>
constexpr bool kVecType = std::is_same_v<T, float> || std::is_same_v<T, double> || kHalfType<T>;

// The vector kernels' op for elements of type T: float16 / bfloat16 linear recurrences take
// the generic walk's unfused multiply-add (AffineMulAddOp), to keep its bits.
template <class C, class T>
struct SegVecOpOf {
  using type = typename SegVecOp<C>::type;
};
#if defined(SCANOPS_AVX2_KERNELS)
template <class T>
struct SegVecOpOf<AffineCombine<double>, T> {
  using type = std::conditional_t<kHalfType<T>, avx2::AffineMulAddOp, avx2::AffineOp>;
};
// int64 sums of int64 elements (columns only: vec_ok)
template <>
struct SegVecOpOf<SumCombine<int64_t>, int64_t> {
  using type = avx2::I64SumOp;
};

// The vector kernels of float16 need F16C besides AVX2 and FMA (checked as use_avx2 checks
// its flags; every AVX2 CPU has it, the check costs nothing).
bool use_f16c() {
  static const bool ok = use_avx2() && __builtin_cpu_supports("f16c");
  return ok;
}
#endif

// cummax / cummin with an int64 position (the segmented walk's state)
template <class C>
struct SegExt : std::false_type {};
template <class T, bool kMax>
struct SegExt<ExtremumCombine<T, kMax, int64_t>> : std::true_type {
  static constexpr bool max = kMax;
};

template <class C, class in_t, class out_t>
struct SegRunner {
  using Args = SegmentedArgs<C, in_t, out_t>;
  using seg_t = typename Args::seg_t;
  using VecOp = typename SegVecOpOf<C, in_t>::type;
  // int64 sums of int64 in and out: the column kernel only (I64SumOp)
  static constexpr bool kInt = std::is_same_v<C, SumCombine<int64_t>> && std::is_same_v<in_t, int64_t>;
  // float32 / float64 / float16 / bfloat16 in and out, a combine with a vector kernel; kInt
  static constexpr bool kVec =
      !std::is_void_v<VecOp> && std::is_same_v<in_t, out_t> && (kVecType<in_t> || kInt);
  // ... and its rows (inner == 1): not int64 (no row kernel in int64 lanes) nor bfloat16. A
  // bfloat16 row keeps the generic walk: it has to walk in the generic walk's order to keep its
  // bits (seg_row_seq, as float16), and the generic walk's bfloat16 conversions are a shift and
  // a few integer operations already: the order-preserving walk measured the same for cumsum
  // (8.2-8.6 ms against 8.6, 2^22, 1 thread) and 13% slower for linear_recurrence (15.9-16.0
  // against 13.5-14.1), where float16 gains 2.1x and 1.6x (c10's software float16 conversions).
  static constexpr bool kVecRows = kVec && !kInt && !std::is_same_v<in_t, c10::BFloat16>;
  static constexpr int kComps = std::is_same_v<typename C::state_t, double> ? 1 : 2;
  // logcumsumexp of float32 / float64 / float16 / bfloat16 rows and columns: the online form
  // (scan_cpu_segmented_avx2.h)
  static constexpr bool kVecLse = std::is_same_v<C, LogAddExpCombine<double>> && std::is_same_v<in_t, out_t> &&
                                  kVecType<in_t>;

  // cummax / cummin of float32 / float64 / float16 / bfloat16 rows and columns
  // (scan_cpu_segmented_avx2.h)
  static constexpr bool kVecExt = SegExt<C>::value && std::is_same_v<in_t, out_t> && kVecType<in_t>;

  // The CPU has the vector kernels of in_t: AVX2 and FMA (use_avx2(), the unsegmented
  // kernels' dispatch), F16C too for float16.
  static bool vec_cpu() {
#if defined(SCANOPS_AVX2_KERNELS)
    if constexpr (std::is_same_v<in_t, c10::Half>) return use_f16c();
#endif
    return use_avx2();
  }

  // Whether the vector kernels take this problem: the CPU has them (vec_cpu) and the
  // companions are read with unit strides (rows: along the length; columns: across them, the
  // reset flags also broadcast); else the generic walk.
  static bool vec_ok(const Args& a) {
    if constexpr (kVecExt || kVecLse) {  // rows and columns, no mask or coefficients
      if (!vec_cpu()) return false;
      return a.inner == 1 ? a.reset_at.sl == 1 : (a.reset_at.si == 0 || a.reset_at.si == 1);
    } else if constexpr (!kVec) {
      return false;
    } else {
      if (!vec_cpu()) return false;
      if (a.inner == 1) {
        if constexpr (!kVecRows) return false;
        return a.reset_at.sl == 1 && (a.mask == nullptr || a.mask_at.sl == 1) &&
               (a.coeff == nullptr || a.coeff_at.sl == 1);
      }
      return (a.reset_at.si == 0 || a.reset_at.si == 1) && (a.mask == nullptr || a.mask_at.si == 1) &&
             (a.coeff == nullptr || a.coeff_at.si == 1);
    }
  }

  // walk_row on the vector kernel (vec_ok)
  template <bool kWrite>
  static seg_t vec_row(const Args& a, int64_t o, int64_t k0, int64_t k1, seg_t r) {
#if defined(SCANOPS_AVX2_KERNELS)
    if constexpr (kVecExt) {
      const int64_t n = a.length;
      avx2::seg_ext_row<in_t, SegExt<C>::max>(a.input + o * n, a.values + o * n, a.indices + o * n,
                                               a.reset + o * a.reset_at.so, n, a.reverse, a.exclusive, kWrite, k0,
                                               k1, a.initial == nullptr, r.s.v, r.s.i, r.head);
    }
    if constexpr (kVecLse) {
      const int64_t n = a.length;
      avx2::seg_lse_row<in_t>(a.input + o * n, a.values + o * n, a.reset + o * a.reset_at.so, n, a.reverse,
                              a.exclusive, kWrite, k0, k1, a.initial == nullptr, r.s, r.head);
    }
    if constexpr (kVecRows) {
      const int64_t n = a.length;
      const avx2::SegRow<in_t> p{a.input + o * n,
                                 a.coeff != nullptr ? a.coeff + o * a.coeff_at.so : nullptr,
                                 a.mask != nullptr ? a.mask + o * a.mask_at.so : nullptr,
                                 a.reset + o * a.reset_at.so, a.values + o * n, n};
      if constexpr (kHalfType<in_t>) {  // the generic walk's order (seg_row_seq)
        avx2::seg_row_seq<VecOp, in_t>(p, a.reverse, a.exclusive, kWrite, k0, k1, a.initial == nullptr, r.s,
                                       r.head);
      } else {
        avx2::seg_row<VecOp, in_t>(p, a.reverse, a.exclusive, kWrite, k0, k1, a.initial == nullptr, r.s, r.head);
      }
    }
#endif
    return r;
  }

  // Columns [i0, i1) of outer index o, positions [k0, k1), on the vector kernel (vec_ok),
  // from the states r[i - i0].
  template <bool kWrite>
  static void vec_cols(const Args& a, int64_t o, int64_t i0, int64_t i1, int64_t k0, int64_t k1, seg_t* r) {
#if defined(SCANOPS_AVX2_KERNELS)
    if constexpr (kVecExt) {
      const int64_t w = i1 - i0, n = a.length, inner = a.inner;
      in_t M[kColumns];
      int64_t I[kColumns];
      bool Hd[kColumns];
      for (int64_t j = 0; j < w; ++j) {
        M[j] = r[j].s.v;
        I[j] = r[j].s.i;
        Hd[j] = r[j].head;
      }
      const int64_t base = o * n * inner + i0;
      avx2::seg_ext_col<in_t, SegExt<C>::max>(a.input + base, a.values + base, a.indices + base,
                                               a.reset + o * a.reset_at.so + i0 * a.reset_at.si, n, inner,
                                               a.reset_at.sl, a.reset_at.si, a.reverse, a.exclusive, kWrite, w,
                                               k0, k1, a.initial == nullptr, M, I, Hd);
      for (int64_t j = 0; j < w; ++j) {
        r[j].s.v = M[j];
        r[j].s.i = I[j];
        r[j].head = Hd[j];
      }
    }
    if constexpr (kVecLse) {
      const int64_t w = i1 - i0;
      double S[kColumns];
      bool Hd[kColumns];
      for (int64_t j = 0; j < w; ++j) {
        S[j] = r[j].s;
        Hd[j] = r[j].head;
      }
      const int64_t base = o * a.length * a.inner + i0;
      avx2::seg_lse_col<in_t, kColumns>(a.input + base, a.values + base,
                                        a.reset + o * a.reset_at.so + i0 * a.reset_at.si, a.length, a.inner,
                                        a.reset_at.sl, a.reset_at.si, a.reverse, a.exclusive, kWrite, w, k0, k1,
                                        a.initial == nullptr, S, Hd);
      for (int64_t j = 0; j < w; ++j) {
        r[j].s = S[j];
        r[j].head = Hd[j];
      }
    }
    if constexpr (kVec) {
      const int64_t w = i1 - i0, n = a.length, inner = a.inner;
      double L[kComps * kColumns], H[kColumns];
      for (int64_t j = 0; j < w; ++j) {
        if constexpr (kInt) {  // the int64 state as bits (I64SumOp)
          std::memcpy(L + j, &r[j].s, 8);
        } else if constexpr (kComps == 1) {
          L[j] = r[j].s;
        } else {
          L[j] = r[j].s.a;
          L[w + j] = r[j].s.b;
        }
        const uint64_t hb = r[j].head ? ~uint64_t(0) : 0;
        std::memcpy(H + j, &hb, 8);
      }
      const avx2::SegCols<in_t> p{a.input + o * n * inner + i0,
                                  a.coeff != nullptr ? a.coeff + o * a.coeff_at.so + i0 : nullptr,
                                  a.mask != nullptr ? a.mask + o * a.mask_at.so + i0 : nullptr,
                                  a.reset + o * a.reset_at.so + i0 * a.reset_at.si,
                                  a.values + o * n * inner + i0,
                                  n, inner, a.coeff_at.sl, a.mask_at.sl, a.reset_at.sl, a.reset_at.si};
      avx2::seg_col<VecOp, in_t>(p, a.reverse, a.exclusive, kWrite, w, k0, k1, a.initial == nullptr, L, H);
      for (int64_t j = 0; j < w; ++j) {
        if constexpr (kInt) {
          std::memcpy(&r[j].s, L + j, 8);
        } else if constexpr (kComps == 1) {
          r[j].s = L[j];
        } else {
          r[j].s = {L[j], L[w + j]};
        }
        uint64_t hb;
        std::memcpy(&hb, H + j, 8);
        r[j].head = hb != 0;
      }
    }
#endif
  }

  // Where a head is not known from the flags' word (positions with and without heads), a
  // head may select the element's own state against the combine of the running state with
  // it (both computed, then a select: no branch on the flags, which are as unpredictable as
  // the segment lengths). Exact for every combine: the selected value is the one the branch
  // takes, bit for bit. It wins only where the combine is a select already (cummax /
  // cummin); sums, products and affine maps keep the branch (a select puts a combine and a
  // select on every element's chain, a branch only its mispredictions; measured in
  // docs/benchmarks/segmented-cpu-2026-11-27.md).
  static constexpr bool kSelect = C::selects;
  template <class S>
  static S select(bool h, const S& a, const S& b) {  // h ? a : b
    if constexpr (sizeof(S) % 8 == 0 && std::is_trivially_copyable_v<S>) {
      constexpr size_t W = sizeof(S) / 8;
      uint64_t wa[W], wb[W];
      std::memcpy(wa, &a, sizeof(S));
      std::memcpy(wb, &b, sizeof(S));
      const uint64_t m = uint64_t(0) - uint64_t(h);
      for (size_t j = 0; j < W; ++j) wa[j] = (wa[j] & m) | (wb[j] & ~m);
      S r;
      std::memcpy(&r, wa, sizeof(S));
      return r;
    } else {
      return h ? a : b;
    }
  }

  // Rows (inner == 1): SegmentedArgs::step's walk with the offsets stepped along the row
  // instead of computed from (o, l, i) per element, and the running state in a local (the
  // generic walk keeps it in the column block's array). The same results as
  // SegmentedArgs::lift / head / write: a change there is a change here. Where the reset
  // flags are contiguous along the row they are read 8 at a time: a word of zeros has no
  // head (the common case for long segments: no per-element test at all).
  template <bool kWrite>
  static seg_t walk_row(const Args& a, int64_t o, int64_t k0, int64_t k1, seg_t r) {
    using state_t = typename C::state_t;
    const int64_t n = a.length;
    const int64_t dl = a.reverse ? -1 : 1;
    const in_t* in = a.input + o * n;
    out_t* out = a.values + o * n;
    int64_t* idx = a.indices != nullptr ? a.indices + o * n : nullptr;
    const bool* rs = a.reset + o * a.reset_at.so;
    const int64_t rsl = a.reset_at.sl;
    const bool* m = a.mask != nullptr ? a.mask + o * a.mask_at.so : nullptr;
    const int64_t msl = a.mask_at.sl;
    const in_t* cf = a.coeff != nullptr ? a.coeff + o * a.coeff_at.so : nullptr;
    const int64_t csl = a.coeff_at.sl;
    const bool exclusive = a.exclusive;
    const auto write = [&](int64_t l, const state_t& s) {
      if constexpr (kWrite) {
        out[l] = static_cast<out_t>(C::value(s));
        if constexpr (C::indexed) idx[l] = C::index(s);
      }
    };
    const auto lift = [&](int64_t l) -> state_t {
      if constexpr (C::arity == 2) {
        return C::template lift<in_t>(cf[l * csl], in[l]);
      } else if constexpr (C::indexed) {
        return C::template lift<in_t>(in[l], l);
      } else {
        return (m != nullptr && !m[l * msl]) ? C::identity() : C::template lift<in_t>(in[l]);
      }
    };
    // one position without a head
    const auto plain = [&](int64_t l) {
      const state_t x = lift(l);
      if (exclusive) write(l, r.s);
      r.s = C::combine(r.s, x);
      if (!exclusive) write(l, r.s);
    };
    // one position that is a head (no dependence on the running state: the select's
    // chain would cost a combine and a select an element where every element is a head)
    const auto head = [&](int64_t l) {
      const state_t x = lift(l);
      if (exclusive) write(l, C::identity());
      r.s = x;
      r.head = true;
      if (!exclusive) write(l, r.s);
    };
    // one position that may be a head
    const auto any = [&](int64_t l, bool h) {
      const state_t x = lift(l);
      if constexpr (kSelect) {
        if (exclusive) write(l, select(h, C::identity(), r.s));
        r.s = select(h, x, C::combine(r.s, x));
        r.head = r.head || h;
      } else if (h) {
        if (exclusive) write(l, C::identity());
        r.s = x;
        r.head = true;
      } else {
        if (exclusive) write(l, r.s);
        r.s = C::combine(r.s, x);
      }
      if (!exclusive) write(l, r.s);
    };
    int64_t k = k0;
    int64_t l = a.pos(k0);
    if (k == 0 && k < k1) {  // the line's first position: a head unless the line has an initial value
      any(l, a.initial == nullptr);
      ++k;
      l += dl;
    }
    if (rsl == 1) {
      // flags of positions l .. l + 7 in scan order: forward rs[l .. l + 7], reverse
      // rs[l + 1 - 7 .. l + 1] (the head of memory position l is rs[l + 1]), one word
      const int64_t woff = a.reverse ? -6 : 0;
      constexpr uint64_t kAllHeads = 0x0101010101010101ull;  // (bool true is 1)
      for (; k + 8 <= k1; k += 8, l += 8 * dl) {
        uint64_t w;
        std::memcpy(&w, rs + l + woff, 8);
        if (w == 0) {
          for (int j = 0; j < 8; ++j) plain(l + j * dl);
        } else if (w == kAllHeads) {
          for (int j = 0; j < 8; ++j) head(l + j * dl);
        } else {
          for (int j = 0; j < 8; ++j) {
            const int64_t lj = l + j * dl;
            any(lj, rs[a.reverse ? lj + 1 : lj]);
          }
        }
      }
    }
    for (; k < k1; ++k, l += dl) any(l, rs[(a.reverse ? l + 1 : l) * rsl]);
    return r;
  }

  static void run(const ScanProblem& p) {
    const ProblemData<in_t, out_t> d(p);
    Args a;
    a.input = d.input;
    a.coeff = d.coeff;
    a.coeff_at = segment_strides(p.in.coeff, p.shape);
    a.mask = d.mask;
    a.mask_at = segment_strides(p.in.mask, p.shape);
    a.reset = p.segments.reset.t.const_data_ptr<bool>();
    a.reset_at = segment_strides(p.segments.reset, p.shape);
    a.values = d.values;
    a.indices = d.indices;
    a.initial = d.initial;
    a.outer = p.shape.outer;
    a.length = p.shape.length;
    a.inner = p.shape.inner;
    a.exclusive = p.spec.flags.exclusive;
    a.reverse = p.spec.flags.reverse;

    // The output's first-touch page faults as the unsegmented kernels take them (huge pages
    // where the policy allows): on the 2-core VM they were half the time of a 1-D 2^24
    // float32 segmented cumsum at one thread (55 ms, 9.5 unsegmented).
    const int64_t numel = a.outer * a.length * a.inner;
    advise_huge_pages(a.values, numel * static_cast<int64_t>(sizeof(out_t)));
    if (a.indices != nullptr) advise_huge_pages(a.indices, numel * static_cast<int64_t>(sizeof(int64_t)));
    const bool vec = vec_ok(a);
    const int64_t cols = std::min<int64_t>(a.inner, kColumns);
    const int64_t blocks = (a.inner + cols - 1) / cols;
    const int64_t lines_units = a.outer * blocks;
    int64_t chunk = a.length;
    if (lines_units < kMinUnits) {
      chunk = std::max<int64_t>(kChunkElements / cols, 256);
      chunk = std::min(chunk, a.length);
    }
    const int64_t chunks = (a.length + chunk - 1) / chunk;
    const int64_t units = lines_units * chunks;
    // Units per task: at least kGrainElements elements, so that a small problem runs on the
    // calling thread (waking the pool costs more than its scan: 57 us against 4 us for a (3, 6)
    // cumsum with the cores busy). The split stays the shape's: the bits do not change.
    const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, chunk * cols));
    // unit u: chunk c of column block b of outer index o
    const auto unit = [&](int64_t u, int64_t& o, int64_t& i0, int64_t& i1, int64_t& c) {
      c = u % chunks;
      const int64_t ob = u / chunks;
      o = ob / blocks;
      i0 = (ob % blocks) * cols;
      i1 = std::min(i0 + cols, a.inner);
    };
    // carries[(o * chunks + c) * inner + i]: the state chunk c of line (o, i) starts from
    std::vector<seg_t> carries;
    if (chunks > 1) {
      carries.resize(static_cast<size_t>(a.outer * chunks * a.inner));
      at::parallel_for(0, units, grain, [&](int64_t b, int64_t e) {
        seg_t r[kColumns];
        for (int64_t u = b; u < e; ++u) {
          int64_t o, i0, i1, c;
          unit(u, o, i0, i1, c);
          for (int64_t i = i0; i < i1; ++i) r[i - i0] = SegmentedCombine<C>::identity();
          const int64_t k1 = std::min(a.length, (c + 1) * chunk);
          if (a.inner == 1) {
            r[0] = vec ? vec_row<false>(a, o, c * chunk, k1, r[0]) : walk_row<false>(a, o, c * chunk, k1, r[0]);
          } else if (vec) {
            vec_cols<false>(a, o, i0, i1, c * chunk, k1, r);
          } else {
            for (int64_t k = c * chunk; k < k1; ++k) {
              for (int64_t i = i0; i < i1; ++i) a.template step<false>(o, k, i, r[i - i0]);
            }
          }
          for (int64_t i = i0; i < i1; ++i) carries[(o * chunks + c) * a.inner + i] = r[i - i0];
        }
      });
      // totals -> carries, one line at a time (a serial fold: chunks is small)
      at::parallel_for(0, a.outer * a.inner, 64, [&](int64_t b, int64_t e) {
        for (int64_t li = b; li < e; ++li) {
          const int64_t o = li / a.inner, i = li % a.inner;
          seg_t carry = a.line_start(o, i);
          for (int64_t c = 0; c < chunks; ++c) {
            seg_t& t = carries[(o * chunks + c) * a.inner + i];
            const seg_t total = t;
            t = carry;
            carry = SegmentedCombine<C>::combine(carry, total);
          }
        }
      });
    }
    at::parallel_for(0, units, grain, [&](int64_t b, int64_t e) {
      seg_t r[kColumns];
      for (int64_t u = b; u < e; ++u) {
        int64_t o, i0, i1, c;
        unit(u, o, i0, i1, c);
        for (int64_t i = i0; i < i1; ++i) {
          r[i - i0] = chunks > 1 ? carries[(o * chunks + c) * a.inner + i] : a.line_start(o, i);
        }
        const int64_t k1 = std::min(a.length, (c + 1) * chunk);
        if (a.inner == 1) {
          vec ? vec_row<true>(a, o, c * chunk, k1, r[0]) : walk_row<true>(a, o, c * chunk, k1, r[0]);
          continue;
        }
        if (vec) {
          vec_cols<true>(a, o, i0, i1, c * chunk, k1, r);
          continue;
        }
        for (int64_t k = c * chunk; k < k1; ++k) {
          for (int64_t i = i0; i < i1; ++i) a.template step<true>(o, k, i, r[i - i0]);
        }
      }
    });
  }
};

}  // namespace

void scan_segmented(const ScanProblem& p) {
  dispatch_scan<SegRunner, /*kWide=*/true>(p);
}

// One pass over the offsets where segments are short (average under kRowSplitLength rows):
// a task takes segments [b0, b1), checks that its offsets p[b0..b1] never decrease and lie in
// [0, total], then zeroes rows [p[b0], p[b1]) and sets their heads (the offsets, still in
// cache, read once from memory: length-1 segments read 8 bytes of offsets a row). Tasks share
// only their boundary offset, so no two write one byte. Where segments are long the rows are
// split instead (a task's rows, zeroed, and the heads among them found by a binary search;
// the offsets checked in a pass of their own, B << total): one long segment is no longer one
// task's memset. The mask is a function of the offsets only, whatever the thread count; its
// pages are advised huge as the scans' outputs are (a 2^26 mask on the 2-core VM: 30 ms of
// 4 KiB page faults).
bool segment_heads(const at::Tensor& offsets, int64_t total, const at::Tensor& heads) {
  constexpr int64_t kRowSplitLength = 64;
  bool* h = heads.mutable_data_ptr<bool>();
  advise_huge_pages(h, total);
  bool result = true;
  AT_DISPATCH_INDEX_TYPES(offsets.scalar_type(), "scanops::_segment_heads", [&] {
    const index_t* p = offsets.const_data_ptr<index_t>();
    const int64_t n = offsets.numel();  // B + 1 >= 1
    if (p[0] != 0 || static_cast<int64_t>(p[n - 1]) != total) {
      result = false;
      return;
    }
    std::atomic<bool> ok{true};
    if ((n - 1) * kRowSplitLength > total) {
      at::parallel_for(0, n - 1, int64_t(1) << 14, [&](int64_t b0, int64_t b1) {
        bool good = p[b0] >= 0 && static_cast<int64_t>(p[b1]) <= total;
        for (int64_t b = b0; b < b1; ++b) good &= p[b] <= p[b + 1];
        if (!good) {
          ok.store(false, std::memory_order_relaxed);
          return;
        }
        const int64_t lo = p[b0], hi = p[b1];
        if (hi > lo) std::memset(h + lo, 0, static_cast<size_t>(hi - lo));  // (h: null if total 0)
        for (int64_t b = b0; b < b1; ++b) {
          if (p[b] < hi) h[p[b]] = true;
        }
      });
      result = ok.load();
      return;
    }
    at::parallel_for(1, n, int64_t(1) << 16, [&](int64_t b, int64_t e) {
      bool good = true;
      for (int64_t i = b; i < e; ++i) good &= p[i - 1] <= p[i];
      if (!good) ok.store(false, std::memory_order_relaxed);
    });
    if (!ok.load()) {
      result = false;
      return;
    }
    at::parallel_for(0, total, int64_t(1) << 20, [&](int64_t r0, int64_t r1) {
      std::memset(h + r0, 0, static_cast<size_t>(r1 - r0));
      // the first offset >= r0 (the offsets are checked: sorted)
      int64_t b = std::lower_bound(p, p + n, static_cast<index_t>(r0)) - p;
      for (; b < n && p[b] < r1; ++b) h[p[b]] = true;
    });
  });
  return result;
}

}  // namespace scanops::cpu

namespace scanops {
// The CPU back end's JaggedOffsetsFn: heads by cpu::segment_heads (which checks the offsets);
// as_long by one pass that checks and widens (int32 offsets; int64 ones are copied).
bool jagged_offsets_cpu(const at::Tensor& offsets, int64_t total, at::Tensor* heads,
                        at::Tensor* as_long) {
  if (heads != nullptr && !cpu::segment_heads(offsets, total, *heads)) return false;
  if (as_long == nullptr) return true;
  bool result = true;
  AT_DISPATCH_INDEX_TYPES(offsets.scalar_type(), "scanops::_segment_offsets", [&] {
    const index_t* p = offsets.const_data_ptr<index_t>();
    int64_t* q = as_long->mutable_data_ptr<int64_t>();
    const int64_t n = offsets.numel();  // B + 1 >= 1
    if (p[0] != 0 || static_cast<int64_t>(p[n - 1]) != total) {
      result = false;
      return;
    }
    std::atomic<bool> ok{true};
    at::parallel_for(0, n, int64_t(1) << 16, [&](int64_t b0, int64_t b1) {
      bool good = true;
      for (int64_t b = b0; b < b1; ++b) {
        q[b] = p[b];
        if (b > 0) good &= p[b - 1] <= p[b];
      }
      if (!good) ok.store(false, std::memory_order_relaxed);
    });
    result = ok.load();
  });
  return result;
}
}  // namespace scanops
