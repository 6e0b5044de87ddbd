// scanops: AVX2 + FMA kernels of the CPU back end (float32 / float64 inputs, float64 lanes).
//
// Included by scan_cpu_kernels.h only, inside `#pragma GCC target("avx2,fma")`: every function
// defined here is compiled for AVX2 + FMA, whatever the library's baseline flags are, and is
// only called after the run-time check in scan_cpu_kernels.h (`cpu_has_avx2()`). Nothing here is
// inline-able into baseline code (GCC refuses to inline a target function into a caller
// without the target), so no AVX2 instruction can run on a CPU without it.
//
// Why not at::vec::Vectorized<T>: the library is compiled once with the compiler's default
// flags, so Vectorized<float> here is ATen's generic (array-of-scalars, SSE2) fallback: ATen's
// own kernels get AVX2 through per-capability compilation that an outside library does not
// share. The kernels below use the AVX2 intrinsics directly (cross-lane shifts, float->double
// conversion, streaming stores), which at::vec does not expose for this build anyway.
//
// The arithmetic (see scan_cpu_kernels.h, "Arithmetic"): a line is cut into fixed blocks (in scan
// order, from the line's start); inside a block, the local prefix L is computed from the
// block's own elements only: groups of 8 elements = two vectors of 4 float64 lanes, each
// scanned in registers (two log steps: shift by 1 lane, shift by 2 lanes), the second offset
// by the first's last lane, then offset by L; then 4-element and single-element tails. The
// output is value(combine(C, L)) with C the block's carry-in (value(L) in a line's first
// block). The same function computes a block's total (write = false), so a block scanned by
// another thread from its carry-in gives the bits a one-thread run gives.
//
// cummax / cummin (float32 / float64; rows: ext_row_impl, columns: ext_col_walk_impl) select
// an element and round nothing: their lanes are the input's own type, states (value, int64
// position), and any walk or association gives torch's bits.
#pragma once

namespace avx2 {

// Everything below is small and must inline into the hot loops (GCC otherwise keeps some of
// these calls, passing vector states through the stack).
#define SCANOPS_AI inline __attribute__((always_inline))
#define SCANOPS_AIL __attribute__((always_inline))

// ---- vector states: K float64 vectors (K = 1 for Sum / Prod, 2 for Affine (A, B)) ----------
template <int K>
struct VS {
  __m256d c[K];
};

static SCANOPS_AI __m256d bcast_last(__m256d x) { return _mm256_permute4x64_pd(x, 0xFF); }
static SCANOPS_AI __m256d rev4(__m256d x) { return _mm256_permute4x64_pd(x, 0x1B); }
// [id, x0, x1, x2]
static SCANOPS_AI __m256d shift1(__m256d x, __m256d id) {
  return _mm256_blend_pd(_mm256_permute4x64_pd(x, 0x90), id, 0x1);
}
// [id, id, x0, x1]
static SCANOPS_AI __m256d shift2(__m256d x, __m256d id) { return _mm256_permute2f128_pd(x, id, 0x02); }

struct SumOp {
  static constexpr int K = 1;
  using S = double;
  static SCANOPS_AI VS<1> id() { return {{_mm256_setzero_pd()}}; }
  static SCANOPS_AI __m256d idc(int) { return _mm256_setzero_pd(); }
  static SCANOPS_AI VS<1> comb(const VS<1>& a, const VS<1>& b) { return {{_mm256_add_pd(a.c[0], b.c[0])}}; }
  static SCANOPS_AI __m256d value(const VS<1>& s) { return s.c[0]; }
  static SCANOPS_AI VS<1> bcast(S s) { return {{_mm256_set1_pd(s)}}; }
  static SCANOPS_AI S lane0(const VS<1>& v) { return _mm256_cvtsd_f64(v.c[0]); }
  static SCANOPS_AI S scomb(S a, S b) { return a + b; }
  static SCANOPS_AI double svalue(S s) { return s; }
  static SCANOPS_AI S sid() { return 0.0; }
  static SCANOPS_AI S sstart(double v) { return v; }  // Combine::start
  static SCANOPS_AI VS<1> vstart(__m256d v) { return {{v}}; }  // bcast(sstart(v)), v broadcast
  static SCANOPS_AI void to_comps(S s, double* d, int64_t w, int64_t j) { d[j] = s; (void)w; }
  static SCANOPS_AI S from_comps(const double* d, int64_t w, int64_t j) { (void)w; return d[j]; }
};

struct ProdOp {
  static constexpr int K = 1;
  using S = double;
  static SCANOPS_AI VS<1> id() { return {{_mm256_set1_pd(1.0)}}; }
  static SCANOPS_AI __m256d idc(int) { return _mm256_set1_pd(1.0); }
  static SCANOPS_AI VS<1> comb(const VS<1>& a, const VS<1>& b) { return {{_mm256_mul_pd(a.c[0], b.c[0])}}; }
  static SCANOPS_AI __m256d value(const VS<1>& s) { return s.c[0]; }
  static SCANOPS_AI VS<1> bcast(S s) { return {{_mm256_set1_pd(s)}}; }
  static SCANOPS_AI S lane0(const VS<1>& v) { return _mm256_cvtsd_f64(v.c[0]); }
  static SCANOPS_AI S scomb(S a, S b) { return a * b; }
  static SCANOPS_AI double svalue(S s) { return s; }
  static SCANOPS_AI S sid() { return 1.0; }
  static SCANOPS_AI S sstart(double v) { return v; }  // Combine::start
  static SCANOPS_AI VS<1> vstart(__m256d v) { return {{v}}; }  // bcast(sstart(v)), v broadcast
  static SCANOPS_AI void to_comps(S s, double* d, int64_t w, int64_t j) { d[j] = s; (void)w; }
  static SCANOPS_AI S from_comps(const double* d, int64_t w, int64_t j) { (void)w; return d[j]; }
};

// combine(f, g) = (g.a * f.a, g.a * f.b + g.b): "f, then g". The scalar form uses the same
// fused multiply-add as the vector form.
struct AffineOp {
  static constexpr int K = 2;
  using S = AffineState<double>;
  static SCANOPS_AI VS<2> id() { return {{_mm256_set1_pd(1.0), _mm256_setzero_pd()}}; }
  static SCANOPS_AI __m256d idc(int k) { return k == 0 ? _mm256_set1_pd(1.0) : _mm256_setzero_pd(); }
  static SCANOPS_AI VS<2> comb(const VS<2>& f, const VS<2>& g) {
    return {{_mm256_mul_pd(g.c[0], f.c[0]), _mm256_fmadd_pd(g.c[0], f.c[1], g.c[1])}};
  }
  static SCANOPS_AI __m256d value(const VS<2>& s) { return s.c[1]; }
  static SCANOPS_AI VS<2> bcast(S s) { return {{_mm256_set1_pd(s.a), _mm256_set1_pd(s.b)}}; }
  static SCANOPS_AI S lane0(const VS<2>& v) { return {_mm256_cvtsd_f64(v.c[0]), _mm256_cvtsd_f64(v.c[1])}; }
  static SCANOPS_AI S scomb(S f, S g) { return {g.a * f.a, __builtin_fma(g.a, f.b, g.b)}; }
  static SCANOPS_AI double svalue(S s) { return s.b; }
  static SCANOPS_AI S sid() { return {1.0, 0.0}; }
  static SCANOPS_AI S sstart(double v) { return {1.0, v}; }  // Combine::start: h[-1] = v
  static SCANOPS_AI VS<2> vstart(__m256d v) { return {{_mm256_set1_pd(1.0), v}}; }
  static SCANOPS_AI void to_comps(S s, double* d, int64_t w, int64_t j) { d[j] = s.a; d[w + j] = s.b; }
  static SCANOPS_AI S from_comps(const double* d, int64_t w, int64_t j) { return {d[j], d[w + j]}; }
};

template <class Op>
static SCANOPS_AI VS<Op::K> vshift1(const VS<Op::K>& v) {
  VS<Op::K> r;
  for (int k = 0; k < Op::K; ++k) r.c[k] = shift1(v.c[k], Op::idc(k));
  return r;
}
template <class Op>
static SCANOPS_AI VS<Op::K> vshift2(const VS<Op::K>& v) {
  VS<Op::K> r;
  for (int k = 0; k < Op::K; ++k) r.c[k] = shift2(v.c[k], Op::idc(k));
  return r;
}
template <class Op>
static SCANOPS_AI VS<Op::K> vbcast_last(const VS<Op::K>& v) {
  VS<Op::K> r;
  for (int k = 0; k < Op::K; ++k) r.c[k] = bcast_last(v.c[k]);
  return r;
}
template <class Op>
static SCANOPS_AI VS<Op::K> vrev(const VS<Op::K>& v) {
  VS<Op::K> r;
  for (int k = 0; k < Op::K; ++k) r.c[k] = rev4(v.c[k]);
  return r;
}
// Inclusive in-register scan of 4 lanes (lane 0 first in scan order).
template <class Op>
static SCANOPS_AI VS<Op::K> scan4(VS<Op::K> v) {
  v = Op::comb(vshift1<Op>(v), v);
  v = Op::comb(vshift2<Op>(v), v);
  return v;
}

// Reverse scans keep the memory lane order: scan-order lane k is memory lane 3 - k, so every
// shift / broadcast is mirrored (no lane reversal on load and store). The operations and their
// operands are the same as scanning reversed lanes: same bits.
template <bool kRev>
static SCANOPS_AI __m256d dshift1(__m256d x, __m256d id) {
  if constexpr (kRev) {
    return _mm256_blend_pd(_mm256_permute4x64_pd(x, 0xF9), id, 0x8);  // [x1, x2, x3, id]
  } else {
    return shift1(x, id);
  }
}
template <bool kRev>
static SCANOPS_AI __m256d dshift2(__m256d x, __m256d id) {
  if constexpr (kRev) {
    return _mm256_permute2f128_pd(x, id, 0x21);  // [x2, x3, id, id]
  } else {
    return shift2(x, id);
  }
}
template <bool kRev>
static SCANOPS_AI __m256d dbcast_last(__m256d x) {
  if constexpr (kRev) {
    return _mm256_permute4x64_pd(x, 0x00);
  } else {
    return bcast_last(x);
  }
}
// Exclusive from inclusive: shift by one scan position. `prev` is the previous group's
// inclusive vector (or a broadcast of the value before the group): its last lane in scan
// order enters (lane 3 forward, lane 0 reverse). One lane-crossing vperm2f128 and an
// in-lane shuffle (the former vpermpd + blend + vpermpd broadcast cost exclusive scans ~15%
// over inclusive at 1 thread).
template <bool kRev>
static SCANOPS_AI __m256d dshift_in(__m256d o, __m256d prev) {
  if constexpr (kRev) {  // [o1, o2, o3, prev0]
    return _mm256_shuffle_pd(o, _mm256_permute2f128_pd(o, prev, 0x21), 0x5);
  } else {  // [prev3, o0, o1, o2]
    return _mm256_shuffle_pd(_mm256_permute2f128_pd(prev, o, 0x21), o, 0x5);
  }
}
template <class Op, bool kRev>
static SCANOPS_AI VS<Op::K> dscan4(VS<Op::K> v) {
  VS<Op::K> t;
  for (int k = 0; k < Op::K; ++k) t.c[k] = dshift1<kRev>(v.c[k], Op::idc(k));
  v = Op::comb(t, v);
  for (int k = 0; k < Op::K; ++k) t.c[k] = dshift2<kRev>(v.c[k], Op::idc(k));
  v = Op::comb(t, v);
  return v;
}
template <class Op, bool kRev>
static SCANOPS_AI VS<Op::K> vdbcast_last(const VS<Op::K>& v) {
  VS<Op::K> r;
  for (int k = 0; k < Op::K; ++k) r.c[k] = dbcast_last<kRev>(v.c[k]);
  return r;
}

// ---- loads and stores ---------------------------------------------------------------------
static SCANOPS_AI __m256d load4(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
static SCANOPS_AI __m256d load4(const double* p) { return _mm256_loadu_pd(p); }
static SCANOPS_AI double load1(const float* p) { return static_cast<double>(*p); }
static SCANOPS_AI double load1(const double* p) { return *p; }
// *p in all 4 lanes (a broadcast load)
static SCANOPS_AI __m256d load1x4(const float* p) { return _mm256_cvtps_pd(_mm_broadcast_ss(p)); }
static SCANOPS_AI __m256d load1x4(const double* p) { return _mm256_broadcast_sd(p); }

template <bool kNT>
static SCANOPS_AI void store4(float* p, __m256d v) {
  const __m128 f = _mm256_cvtpd_ps(v);
  if constexpr (kNT) _mm_stream_ps(p, f); else _mm_storeu_ps(p, f);
}
template <bool kNT>
static SCANOPS_AI void store4(double* p, __m256d v) {
  if constexpr (kNT) _mm256_stream_pd(p, v); else _mm256_storeu_pd(p, v);
}
static SCANOPS_AI void store1(float* p, double v) { *p = static_cast<float>(v); }
static SCANOPS_AI void store1(double* p, double v) { *p = v; }

// Lane mask (all ones where mask[i] != 0) of 4 bools.
static SCANOPS_AI __m256d mask4(const bool* m) {
  int32_t bits;
  std::memcpy(&bits, m, 4);
  const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(bits));
  return _mm256_castsi256_pd(_mm256_cmpgt_epi64(b, _mm256_setzero_si256()));
}

// Elements idx..idx+3 (memory order) lifted to states; masked-off lanes become identity.
template <class Op, class T, bool kMask>
static SCANOPS_AI VS<Op::K> lift4(const T* in, const T* coeff, const bool* mask, int64_t idx) {
  VS<Op::K> v;
  if constexpr (Op::K == 2) {
    v.c[0] = load4(coeff + idx);
    v.c[1] = load4(in + idx);
  } else {
    v.c[0] = load4(in + idx);
  }
  if constexpr (kMask) {
    const __m256d keep = mask4(mask + idx);
    for (int k = 0; k < Op::K; ++k) v.c[k] = _mm256_blendv_pd(Op::idc(k), v.c[k], keep);
  }
  return v;
}
template <class Op, class T, bool kMask>
static SCANOPS_AI typename Op::S lift1(const T* in, const T* coeff, const bool* mask, int64_t idx) {
  if constexpr (kMask) {
    if (!mask[idx]) return Op::sid();
  }
  if constexpr (Op::K == 2) {
    return {load1(coeff + idx), load1(in + idx)};
  } else {
    return load1(in + idx);
  }
}

template <class T>
struct Ptrs {
  const T* in;
  const T* coeff;
  const bool* mask;
  T* out;
};

// ---- rows ---------------------------------------------------------------------------------
// Software prefetch of the inputs this many bytes ahead of the walk, in scan order. The row
// walks are compute bound only while their input is in the caches: on the 2-core EPYC VM a
// block walked from memory took 0.50 ns an element (float32 sum, inclusive, with a carry)
// against 0.39-0.43 from L2, and the affine walk (two inputs) 0.92 against 0.60; the
// hardware prefetchers alone left the loads waiting. With a prefetch 2 KiB ahead (one per
// group of 8 elements) the walks from memory took 0.42 (sum), 0.50 (exclusive, 0.57
// before), 0.41 (reverse, 0.52), 0.38 (prod, 0.46), 0.65 (affine); 1 KiB ahead was less
// effective for the sums, 8 KiB for the affine walk (0.97-0.99). A prefetch has no effect on
// the results, and one past the end of the input does not fault.
constexpr int64_t kPrefetchBytes = 2048;
template <class T>
static SCANOPS_AI void prefetch_at(const T* base, int64_t idx) {
  // (address arithmetic in integers: idx may lie past either end of the row)
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) + uintptr_t(idx) * sizeof(T)),
               _MM_HINT_T0);
}

// Scan positions [s0, s1) of the row starting at element `row` (length n). Returns the local
// total of the block. kCarry: outputs are value(combine(C, local)), local from the identity;
// else the local prefix starts from C (the identity, or a line's start state: a one-block row
// of a problem with an initial value, rows_short), outputs value(local), and the returned
// total includes C.
template <class Op, class T, bool kRev, bool kMask, bool kExcl, bool kWrite, bool kCarry, bool kNT>
static typename Op::S row_block_impl(const Ptrs<T>& p, int64_t row, int64_t n, int64_t s0, int64_t s1,
                                     typename Op::S C, int64_t pf_next = 0) {
  using V = VS<Op::K>;
  using S = typename Op::S;
  const V Cv = Op::bcast(C);
  V L = kCarry ? Op::id() : Cv;  // (!kCarry: C is the identity but for a line's start state)
  __m256d prev = _mm256_set1_pd(Op::svalue(C));
  // memory index of the first element of a group of 4 at scan position s
  auto at4 = [&](int64_t s) SCANOPS_AIL { return kRev ? row + n - 4 - s : row + s; };
  auto load = [&](int64_t s) SCANOPS_AIL {
    return lift4<Op, T, kMask>(p.in, p.coeff, p.mask, at4(s));
  };
  // the inputs kPrefetchBytes ahead of the group at scan position s. A reverse row shorter
  // than that distance is walked downwards but rows are taken upwards (rows_short, the
  // parallel loops over rows): kPrefetchBytes below would be rows already read, so it
  // prefetches the rows above instead (2-core VM, (2^20, 64) reverse rows: 64-66% -> see
  // design.md, "CPU: input prefetch in the row walks").
  constexpr int64_t D = kPrefetchBytes / int64_t(sizeof(T));
  // pf_next != 0: the prefetch is that many elements from the element read instead (the
  // chained scans' rescans: the block the worker takes next, see Scheduler::rows).
  const int64_t pf = pf_next != 0 ? pf_next : (kRev && n >= D ? -D : D);
  auto prefetch = [&](int64_t s) SCANOPS_AIL {
    const int64_t a = at4(s) + pf;
    prefetch_at(p.in, a);
    if constexpr (Op::K == 2) prefetch_at(p.coeff, a);
    if constexpr (kMask) {  // (the next run's mask too: a line holds 64 of its bytes)
      if (pf_next != 0 && (s & 63) == 0) prefetch_at(p.mask, a);
    }
  };
  auto emit = [&](int64_t s, const V& R) SCANOPS_AIL {
    __m256d o = Op::value(kCarry ? Op::comb(Cv, R) : R);
    if constexpr (kExcl) {
      const __m256d e = dshift_in<kRev>(o, prev);
      prev = o;
      o = e;
    }
    store4<kNT>(p.out + at4(s), o);
  };
  int64_t s = s0;
  if constexpr (!kWrite) {
    // Totals only: the same tree as the scan's last lanes, without the other lanes.
    // scan4's lane 3 is comb(comb(x0, x1), comb(x2, x3)); P1's offset last lane is
    // comb(P0[3], P1[3]); L = comb(L, that) -- exactly the write loop's L.
    // (no prefetch: this loop is bound by the memory reads themselves, 0.20 ns an element
    // from memory against 0.15 from L2, and prefetching measured no faster)
    for (; s + 8 <= s1; s += 8) {
      const V v = load(s), w = load(s + 4);
      V a, b, h, u, z;
      // (v, w in scan-order lanes; reverse: memory lanes, mirrored)
      for (int k = 0; k < Op::K; ++k) {
        if constexpr (kRev) {
          a.c[k] = _mm256_unpackhi_pd(v.c[k], w.c[k]);  // [v2, w2, v0, w0] in scan lanes
          b.c[k] = _mm256_unpacklo_pd(v.c[k], w.c[k]);  // [v3, w3, v1, w1]
        } else {
          a.c[k] = _mm256_unpacklo_pd(v.c[k], w.c[k]);  // [v0, w0, v2, w2]
          b.c[k] = _mm256_unpackhi_pd(v.c[k], w.c[k]);  // [v1, w1, v3, w3]
        }
      }
      const V pr = Op::comb(a, b);  // forward: [c(v0,v1), c(w0,w1), c(v2,v3), c(w2,w3)]
      for (int k = 0; k < Op::K; ++k) h.c[k] = _mm256_permute2f128_pd(pr.c[k], pr.c[k], 0x01);
      const V r = kRev ? Op::comb(h, pr) : Op::comb(pr, h);  // [P0[3], P1[3], ...]
      for (int k = 0; k < Op::K; ++k) {
        u.c[k] = _mm256_permute4x64_pd(r.c[k], 0x00);
        z.c[k] = _mm256_permute4x64_pd(r.c[k], 0x55);
      }
      L = Op::comb(L, Op::comb(u, z));
    }
  }
  for (; s + 8 <= s1; s += 8) {
    prefetch(s);
    const V P0 = dscan4<Op, kRev>(load(s));
    V P1 = dscan4<Op, kRev>(load(s + 4));
    P1 = Op::comb(vdbcast_last<Op, kRev>(P0), P1);
    if constexpr (kWrite) {
      emit(s, Op::comb(L, P0));
      emit(s + 4, Op::comb(L, P1));
    }
    L = Op::comb(L, vdbcast_last<Op, kRev>(P1));
  }
  if (s + 4 <= s1) {
    const V P0 = dscan4<Op, kRev>(load(s));
    if constexpr (kWrite) emit(s, Op::comb(L, P0));
    L = Op::comb(L, vdbcast_last<Op, kRev>(P0));
    s += 4;
  }
  S l = Op::lane0(L);
  // the value before the tail: the last lane in scan order of prev (a broadcast if no group)
  double pv = _mm256_cvtsd_f64(kRev ? prev : _mm256_permute4x64_pd(prev, 0xFF));
  for (; s < s1; ++s) {
    const int64_t idx = kRev ? row + n - 1 - s : row + s;
    l = Op::scomb(l, lift1<Op, T, kMask>(p.in, p.coeff, p.mask, idx));
    if constexpr (kWrite) {
      const double o = Op::svalue(kCarry ? Op::scomb(C, l) : l);
      store1(p.out + idx, kExcl ? pv : o);
      pv = o;
    }
  }
  return l;
}

// Rows of length 4 (one vector each), two rows per step: the same arithmetic as
// row_block_impl's 4-element group on a one-block row. kInit: row o starts from the state
// Op::sstart(init[o]) (a problem with an initial value), as row_block_impl from C.
// float32 initial values are converted to float64 kInitChunk at a time into a buffer (one
// vcvtps2pd per 4 rows) that each row then reads with a broadcast load (a load-port uop
// only): a broadcast and a conversion per row (vcvtps2pd ymm, a shuffle-port uop) added one
// uop to the ~6 of the row's shuffles and conversions, which bound this loop (2-core EPYC VM,
// 1 thread, (2^22, 4) float32: +12-17% with an initial value against without).
constexpr int64_t kInitChunk = 64;
template <class Op, class T, bool kRev, bool kMask, bool kExcl, bool kNT, bool kInit = false>
static void rows4_impl(const Ptrs<T>& p, int64_t o0, int64_t o1, const T* init = nullptr) {
  using V = VS<Op::K>;
  const __m256d first = _mm256_set1_pd(Op::svalue(Op::sid()));
  // iv: the row's initial value in all 4 lanes (kInit; value(sstart(v)) = v)
  auto one = [&](int64_t o, [[maybe_unused]] __m256d iv) SCANOPS_AIL {
    const int64_t row = o * 4;
    const V v = lift4<Op, T, kMask>(p.in, p.coeff, p.mask, row);
    if constexpr (kInit) {
      __m256d r = Op::value(Op::comb(Op::vstart(iv), dscan4<Op, kRev>(v)));
      if constexpr (kExcl) r = dshift_in<kRev>(r, iv);
      store4<kNT>(p.out + row, r);
    } else {
      __m256d r = Op::value(Op::comb(Op::id(), dscan4<Op, kRev>(v)));
      if constexpr (kExcl) r = dshift_in<kRev>(r, first);
      store4<kNT>(p.out + row, r);
    }
  };
  auto iv_of = [&](int64_t o) SCANOPS_AIL {
    if constexpr (kInit) {
      return load1x4(init + o);
    } else {
      return first;
    }
  };
  int64_t o = o0;
  if constexpr (kInit && std::is_same_v<T, float>) {
    alignas(32) double buf[kInitChunk];
    for (; o + kInitChunk <= o1; o += kInitChunk) {
      for (int64_t k = 0; k < kInitChunk; k += 4) _mm256_store_pd(buf + k, load4(init + o + k));
      for (int64_t k = 0; k < kInitChunk; k += 2) {
        one(o + k, _mm256_broadcast_sd(buf + k));
        one(o + k + 1, _mm256_broadcast_sd(buf + k + 1));
      }
    }
  }
  for (; o + 2 <= o1; o += 2) {
    one(o, iv_of(o));
    one(o + 1, iv_of(o + 1));
  }
  for (; o < o1; ++o) one(o, iv_of(o));
}

// ---- columns ------------------------------------------------------------------------------
// Columns [i0, i0 + w) of outer index o, scan positions [s0, s1). L (K * w doubles,
// component-major) is the running local state, updated; C (same layout) the carry-in or
// nullptr (kCarry false).
// pf_off != 0: the walk prefetches its columns' input pf_off elements from each row it reads, a
// line at a time (col_prefetch_rows rows ahead, or the chained scans' next run); past the
// input's ends it prefetches what it will not read, which does not fault.
// col_prefetch_rows: narrow walks only (w <= kColPrefetchMaxWidth columns), 512 elements
// ahead (kPrefetchBytes of float32). 2-core VM, 1 thread, A/B twice (ms): (2^20, 64) dim 0
// cumsum 109, 112 -> 95, 96; exclusive 104, 106 -> 95, 95; masked 112, 115 -> 104, 104;
// linear_recurrence 142, 138 -> 128, 125. Walks of 1024-2048 columns, one row ahead, were
// level or slower ((4096, 16384) dim 0 linear_recurrence 138, 134 -> 145, 148; the middle
// dim's 125, 131 -> 140, 139): their rows are long runs the hardware prefetchers follow.
constexpr int64_t kColPrefetchMaxWidth = 256;
static SCANOPS_AI int64_t col_prefetch_rows(int64_t w) {
  return w <= kColPrefetchMaxWidth ? std::max<int64_t>(2, 512 / std::max<int64_t>(1, w)) : 0;
}

template <class Op, class T, bool kMask, bool kExcl, bool kWrite, bool kCarry, bool kNT>
static void col_walk_impl(const Ptrs<T>& p, int64_t n, int64_t inner, bool rev, int64_t o, int64_t i0,
                          int64_t w, int64_t s0, int64_t s1, double* L, const double* C, int64_t pf_off = 0) {
  using V = VS<Op::K>;
  using S = typename Op::S;
  const int64_t step = rev ? -inner : inner;
  int64_t base = (o * n + (rev ? n - 1 - s0 : s0)) * inner + i0;
  constexpr int64_t kLine = 64 / int64_t(sizeof(T));
  for (int64_t s = s0; s < s1; ++s, base += step) {
    if (pf_off != 0) {
      const int64_t a = base + pf_off;
      for (int64_t j = 0; j < w; j += kLine) {
        prefetch_at(p.in, a + j);
        if constexpr (Op::K == 2) prefetch_at(p.coeff, a + j);
      }
    }
    int64_t j = 0;
    for (; j + 4 <= w; j += 4) {
      const V x = lift4<Op, T, kMask>(p.in, p.coeff, p.mask, base + j);
      V l;
      for (int k = 0; k < Op::K; ++k) l.c[k] = _mm256_loadu_pd(L + k * w + j);
      auto outv = [&](const V& st) SCANOPS_AIL {
        if constexpr (kCarry) {
          V c;
          for (int k = 0; k < Op::K; ++k) c.c[k] = _mm256_loadu_pd(C + k * w + j);
          return Op::value(Op::comb(c, st));
        } else {
          return Op::value(st);
        }
      };
      if constexpr (kWrite && kExcl) store4<kNT>(p.out + base + j, outv(l));
      l = Op::comb(l, x);
      if constexpr (kWrite && !kExcl) store4<kNT>(p.out + base + j, outv(l));
      for (int k = 0; k < Op::K; ++k) _mm256_storeu_pd(L + k * w + j, l.c[k]);
    }
    for (; j < w; ++j) {
      const S x = lift1<Op, T, kMask>(p.in, p.coeff, p.mask, base + j);
      S l = Op::from_comps(L, w, j);
      auto outs = [&](const S& st) SCANOPS_AIL {
        if constexpr (kCarry) {
          return Op::svalue(Op::scomb(Op::from_comps(C, w, j), st));
        } else {
          return Op::svalue(st);
        }
      };
      if constexpr (kWrite && kExcl) store1(p.out + base + j, outs(l));
      l = Op::scomb(l, x);
      if constexpr (kWrite && !kExcl) store1(p.out + base + j, outs(l));
      Op::to_comps(l, L, w, j);
    }
  }
}

// ---- complex sums, rows ------------------------------------------------------------------
// A complex element is two consecutive T (re, im); complex64 accumulates in complex<double>
// (torch's CPU accumulation type, at::acc_type<c10::complex<float>, false>), complex128 in
// itself. A vector of 4 float64 lanes holds two elements [re0, im0, re1, im1]: a complex sum
// is the lane-wise sum of (re, im) pairs, so the in-register scan is one shift by two lanes
// (one element). A group of 4 elements = two such vectors: P0 = scan(v0), P1 = scan(v1) +
// last(P0), outputs L + P (then C + that with a carry-in), L = L + last(P1); then a 2-element
// group and a single-element tail (128-bit). Reverse scans mirror the shifts in memory order,
// as for the real kernels. The same function computes a block's total (write = false).
struct CplxS {
  double re, im;
};
static SCANOPS_AI __m128d cs_load(const CplxS& s) { return _mm_set_pd(s.im, s.re); }
static SCANOPS_AI CplxS cs_store(__m128d v) {
  CplxS s;
  _mm_storel_pd(&s.re, v);
  _mm_storeh_pd(&s.im, v);
  return s;
}
// Two complex elements at p (4 T) as 4 float64 lanes.
static SCANOPS_AI __m128d cload1(const float* p) {
  return _mm_cvtps_pd(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p))));
}
static SCANOPS_AI __m128d cload1(const double* p) { return _mm_loadu_pd(p); }
static SCANOPS_AI void cstore1(float* p, __m128d v) {
  _mm_store_sd(reinterpret_cast<double*>(p), _mm_castps_pd(_mm_cvtpd_ps(v)));
}
static SCANOPS_AI void cstore1(double* p, __m128d v) { _mm_storeu_pd(p, v); }
// Lanes [m0, m0, m1, m1] (all ones where the element's mask is set).
static SCANOPS_AI __m256d cmask2(const bool* m) {
  const int32_t b0 = m[0] ? 1 : 0, b1 = m[1] ? 1 : 0;
  const int32_t bits = b0 | (b0 << 8) | (b1 << 16) | (b1 << 24);
  const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(bits));
  return _mm256_castsi256_pd(_mm256_cmpgt_epi64(b, _mm256_setzero_si256()));
}
// shift by one element in scan order, zero entering
template <bool kRev>
static SCANOPS_AI __m256d cshift(__m256d x) {
  return kRev ? _mm256_permute2f128_pd(x, x, 0x81) : _mm256_permute2f128_pd(x, x, 0x08);
}
// the last element in scan order, in both halves
template <bool kRev>
static SCANOPS_AI __m256d cbcast_last(__m256d x) {
  return kRev ? _mm256_permute2f128_pd(x, x, 0x00) : _mm256_permute2f128_pd(x, x, 0x11);
}
// exclusive from inclusive: [last(prev), o0] forward, [o1, first-in-memory(prev)] reverse
template <bool kRev>
static SCANOPS_AI __m256d cshift_in(__m256d o, __m256d prev) {
  return kRev ? _mm256_permute2f128_pd(o, prev, 0x21) : _mm256_permute2f128_pd(prev, o, 0x21);
}

// Scan positions [s0, s1) (elements) of the complex row starting at element `row` (length n);
// p's pointers are to T (two per element). Returns the block's local total.
template <class T, bool kRev, bool kMask, bool kExcl, bool kWrite, bool kCarry, bool kNT>
static CplxS crow_block_impl(const Ptrs<T>& p, int64_t row, int64_t n, int64_t s0, int64_t s1, CplxS C) {
  const __m128d c1 = cs_load(C);
  const __m256d Cv = _mm256_broadcast_pd(&c1);
  // !kCarry: the local sum starts from C (the identity, or a one-block row's start state, as
  // row_block_impl)
  __m256d L = kCarry ? _mm256_setzero_pd() : Cv;
  __m256d prev = Cv;
  // element index of the first of the 2 elements of a vector at scan position s
  auto at2 = [&](int64_t s) SCANOPS_AIL { return kRev ? row + n - 2 - s : row + s; };
  auto load = [&](int64_t s) SCANOPS_AIL {
    const int64_t e = at2(s);
    __m256d v = load4(p.in + 2 * e);
    if constexpr (kMask) v = _mm256_and_pd(v, cmask2(p.mask + e));
    return v;
  };
  auto scan = [&](__m256d v) SCANOPS_AIL { return _mm256_add_pd(cshift<kRev>(v), v); };
  auto emit = [&](int64_t s, __m256d R) SCANOPS_AIL {
    __m256d o = kCarry ? _mm256_add_pd(Cv, R) : R;
    if constexpr (kExcl) {
      const __m256d e = cshift_in<kRev>(o, prev);
      prev = o;
      o = e;
    }
    store4<kNT>(p.out + 2 * at2(s), o);
  };
  int64_t s = s0;
  for (; s + 4 <= s1; s += 4) {
    const __m256d P0 = scan(load(s));
    const __m256d P1 = _mm256_add_pd(cbcast_last<kRev>(P0), scan(load(s + 2)));
    if constexpr (kWrite) {
      emit(s, _mm256_add_pd(L, P0));
      emit(s + 2, _mm256_add_pd(L, P1));
    }
    L = _mm256_add_pd(L, cbcast_last<kRev>(P1));
  }
  if (s + 2 <= s1) {
    const __m256d P0 = scan(load(s));
    if constexpr (kWrite) emit(s, _mm256_add_pd(L, P0));
    L = _mm256_add_pd(L, cbcast_last<kRev>(P0));
    s += 2;
  }
  __m128d l = _mm256_castpd256_pd128(L);
  // the element before the tail: the last one in scan order of prev
  __m128d pv = kRev ? _mm256_castpd256_pd128(prev) : _mm256_extractf128_pd(prev, 1);
  for (; s < s1; ++s) {
    const int64_t e = kRev ? row + n - 1 - s : row + s;
    __m128d x = cload1(p.in + 2 * e);
    if constexpr (kMask) {
      if (!p.mask[e]) x = _mm_setzero_pd();
    }
    l = _mm_add_pd(l, x);
    if constexpr (kWrite) {
      const __m128d o = kCarry ? _mm_add_pd(c1, l) : l;
      cstore1(p.out + 2 * e, kExcl ? pv : o);
      pv = o;
    }
  }
  return cs_store(l);
}

// ---- cummax / cummin, rows (float32 / float64) ----------------------------------------------
// A selection rounds nothing, so any walk gives torch's bits; this one is branch-light for the
// common case. The line is walked in groups of one vector (8 floats / 4 doubles) from the
// running state (m, mi): if no element of the group wins against m (max: x >= m, min: x <= m,
// or x is NaN; one compare pair and a movemask), every output of the group -- inclusive or
// exclusive -- is (m, mi): two broadcast vector stores of the values, 2 or 1 of the int64
// indices. Otherwise (ext_group) an in-register scan of (value, offset) pairs, log2 of the
// width compare/blend steps with torch's rule, is combined with the running state. Random
// data changes the running extremum O(log n) times per line: nearly every group takes the
// first path; monotone data takes the second on every group (measured 19% slower than the
// scalar walk for float32, see docs/design.md; walking winner groups element by element
// was slower still on short rows).
static SCANOPS_AI __m256 vset1(float v) { return _mm256_set1_ps(v); }
static SCANOPS_AI __m256d vset1(double v) { return _mm256_set1_pd(v); }
static SCANOPS_AI __m256 vloadu(const float* p) { return _mm256_loadu_ps(p); }
static SCANOPS_AI __m256d vloadu(const double* p) { return _mm256_loadu_pd(p); }
template <bool kNT>
static SCANOPS_AI void vstore(float* p, __m256 v) {
  if constexpr (kNT) _mm256_stream_ps(p, v); else _mm256_storeu_ps(p, v);
}
template <bool kNT>
static SCANOPS_AI void vstore(double* p, __m256d v) {
  if constexpr (kNT) _mm256_stream_pd(p, v); else _mm256_storeu_pd(p, v);
}
template <bool kNT>
static SCANOPS_AI void istore(int64_t* p, __m256i v) {
  if constexpr (kNT) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
}
// bit k set where x[k] wins against m (or is NaN)
template <bool kMax>
static SCANOPS_AI int wins_mask(__m256 x, __m256 m) {
  const __m256 w = _mm256_or_ps(_mm256_cmp_ps(x, m, kMax ? _CMP_GE_OQ : _CMP_LE_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_movemask_ps(w);
}
template <bool kMax>
static SCANOPS_AI int wins_mask(__m256d x, __m256d m) {
  const __m256d w =
      _mm256_or_pd(_mm256_cmp_pd(x, m, kMax ? _CMP_GE_OQ : _CMP_LE_OQ), _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
  return _mm256_movemask_pd(w);
}

// A group that has a winner: an in-register scan of (value, offset in the group) pairs over
// the vector (log steps; the lane entering a shift is the identity, which every element beats),
// then combined with the running state (mv, iv) (broadcasts). Writes the group's outputs
// (exclusive: shifted by one, the running state entering) and advances (mv, iv) to the last
// lane in scan order. `pbase` is the position of scan offset 0 (forward: s; reverse: n-1-s).
template <bool kMax>
static SCANOPS_AI __m256 win8(__m256 later, __m256 earlier) {
  return _mm256_or_ps(_mm256_cmp_ps(later, earlier, kMax ? _CMP_GE_OQ : _CMP_LE_OQ),
                      _mm256_cmp_ps(later, later, _CMP_UNORD_Q));
}
template <bool kMax>
static SCANOPS_AI __m256d win4(__m256d later, __m256d earlier) {
  return _mm256_or_pd(_mm256_cmp_pd(later, earlier, kMax ? _CMP_GE_OQ : _CMP_LE_OQ),
                      _mm256_cmp_pd(later, later, _CMP_UNORD_Q));
}
// shift by D lanes in scan order (reverse: toward lower memory lanes), `fill` entering
template <bool kRev, int D>
static SCANOPS_AI __m256 sh8(__m256 x, __m256 fill) {
  if constexpr (D == 4) {
    return kRev ? _mm256_permute2f128_ps(x, fill, 0x31) : _mm256_permute2f128_ps(x, fill, 0x02);
  } else if constexpr (D == 2) {
    return kRev ? _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(2, 3, 4, 5, 6, 7, 7, 7)), fill, 0xC0)
                : _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 0, 0, 1, 2, 3, 4, 5)), fill, 0x03);
  } else {
    return kRev ? _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 7)), fill, 0x80)
                : _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6)), fill, 0x01);
  }
}
template <bool kRev, int D>
static SCANOPS_AI __m256d sh4(__m256d x, __m256d fill) {
  if constexpr (D == 2) {
    return kRev ? _mm256_permute2f128_pd(x, fill, 0x31) : _mm256_permute2f128_pd(x, fill, 0x02);
  } else {
    return kRev ? _mm256_blend_pd(_mm256_permute4x64_pd(x, 0xF9), fill, 0x8)
                : _mm256_blend_pd(_mm256_permute4x64_pd(x, 0x90), fill, 0x1);
  }
}
template <bool kMax, bool kRev, bool kExcl, bool kWrite, bool kNT>
static SCANOPS_AI void ext_group(__m256 x, float* out, int64_t* idx, int64_t pbase, __m256& mv, __m256i& iv) {
  const __m256 fill = _mm256_set1_ps(kMax ? -__builtin_inff() : __builtin_inff());
  __m256 v = x;
  __m256 k = _mm256_castsi256_ps(kRev ? _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0)
                                      : _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  auto step = [&](auto D) SCANOPS_AIL {
    const __m256 a = sh8<kRev, decltype(D)::value>(v, fill);
    const __m256 ka = sh8<kRev, decltype(D)::value>(k, k);
    const __m256 sel = win8<kMax>(v, a);
    v = _mm256_blendv_ps(a, v, sel);
    k = _mm256_blendv_ps(ka, k, sel);
  };
  step(std::integral_constant<int, 1>{});
  step(std::integral_constant<int, 2>{});
  step(std::integral_constant<int, 4>{});
  const __m256 sel = win8<kMax>(v, mv);
  const __m256 vo = _mm256_blendv_ps(mv, v, sel);
  const __m256i ki = _mm256_castps_si256(k), si = _mm256_castps_si256(sel);
  const __m256i base = _mm256_set1_epi64x(pbase);
  auto pos = [&](__m128i k4) SCANOPS_AIL {
    const __m256i k64 = _mm256_cvtepi32_epi64(k4);
    return kRev ? _mm256_sub_epi64(base, k64) : _mm256_add_epi64(base, k64);
  };
  const __m256i lo = _mm256_blendv_epi8(iv, pos(_mm256_castsi256_si128(ki)), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(si)));
  const __m256i hi = _mm256_blendv_epi8(iv, pos(_mm256_extracti128_si256(ki, 1)), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(si, 1)));
  if constexpr (kWrite) {
    if constexpr (kExcl) {
      vstore<kNT>(out, sh8<kRev, 1>(vo, mv));
      if constexpr (kRev) {
        istore<kNT>(idx, _mm256_blend_epi32(_mm256_permute4x64_epi64(lo, 0xF9), _mm256_permute4x64_epi64(hi, 0x00), 0xC0));
        istore<kNT>(idx + 4, _mm256_blend_epi32(_mm256_permute4x64_epi64(hi, 0xF9), iv, 0xC0));
      } else {
        istore<kNT>(idx, _mm256_blend_epi32(_mm256_permute4x64_epi64(lo, 0x90), iv, 0x03));
        istore<kNT>(idx + 4, _mm256_blend_epi32(_mm256_permute4x64_epi64(hi, 0x90), _mm256_permute4x64_epi64(lo, 0xFF), 0x03));
      }
    } else {
      vstore<kNT>(out, vo);
      istore<kNT>(idx, lo);
      istore<kNT>(idx + 4, hi);
    }
  }
  if constexpr (kRev) {
    mv = _mm256_permutevar8x32_ps(vo, _mm256_setzero_si256());
    iv = _mm256_permute4x64_epi64(lo, 0x00);
  } else {
    mv = _mm256_permutevar8x32_ps(vo, _mm256_set1_epi32(7));
    iv = _mm256_permute4x64_epi64(hi, 0xFF);
  }
}
template <bool kMax, bool kRev, bool kExcl, bool kWrite, bool kNT>
static SCANOPS_AI void ext_group(__m256d x, double* out, int64_t* idx, int64_t pbase, __m256d& mv, __m256i& iv) {
  const __m256d fill = _mm256_set1_pd(kMax ? -__builtin_inf() : __builtin_inf());
  __m256d v = x;
  __m256d k = _mm256_castsi256_pd(kRev ? _mm256_setr_epi64x(3, 2, 1, 0) : _mm256_setr_epi64x(0, 1, 2, 3));
  auto step = [&](auto D) SCANOPS_AIL {
    const __m256d a = sh4<kRev, decltype(D)::value>(v, fill);
    const __m256d ka = sh4<kRev, decltype(D)::value>(k, k);
    const __m256d sel = win4<kMax>(v, a);
    v = _mm256_blendv_pd(a, v, sel);
    k = _mm256_blendv_pd(ka, k, sel);
  };
  step(std::integral_constant<int, 1>{});
  step(std::integral_constant<int, 2>{});
  const __m256d sel = win4<kMax>(v, mv);
  const __m256d vo = _mm256_blendv_pd(mv, v, sel);
  const __m256i base = _mm256_set1_epi64x(pbase), k64 = _mm256_castpd_si256(k);
  const __m256i p = kRev ? _mm256_sub_epi64(base, k64) : _mm256_add_epi64(base, k64);
  const __m256i io = _mm256_blendv_epi8(iv, p, _mm256_castpd_si256(sel));
  if constexpr (kWrite) {
    if constexpr (kExcl) {
      vstore<kNT>(out, sh4<kRev, 1>(vo, mv));
      istore<kNT>(idx, _mm256_castpd_si256(sh4<kRev, 1>(_mm256_castsi256_pd(io), _mm256_castsi256_pd(iv))));
    } else {
      vstore<kNT>(out, vo);
      istore<kNT>(idx, io);
    }
  }
  if constexpr (kRev) {
    mv = _mm256_permute4x64_pd(vo, 0x00);
    iv = _mm256_permute4x64_epi64(io, 0x00);
  } else {
    mv = _mm256_permute4x64_pd(vo, 0xFF);
    iv = _mm256_permute4x64_epi64(io, 0xFF);
  }
}

// One element of a scalar cummax / cummin walk (rows shorter than a vector, the tails of the
// row and column walks): x at position pos against the running (m, mi), the rule of
// ExtremumCombine::wins (x wins if x is NaN or, m not NaN, x >= m for max / x <= m for min;
// the ordered compare is false for a NaN m: win8 / win4's rule); writes the state before
// (exclusive) or after (inclusive) the element to *out / *idx.
// Branchless: the win is a compare mask (cmpss / cmpsd), the value a blend of x's and m's
// bits and the index a masked select, so the result is exactly the branch's (the same
// predicate, the winner's bits copied). The branch it replaces is a coin toss on random data
// (rows of 4: the 2nd to 4th elements win 1/2, 1/3, 1/4 of the time; a random `initial` makes
// the 1st one too) and its mispredictions were most of a short row's time.
template <bool kMax>
static SCANOPS_AI __m128 win1(__m128 later, __m128 earlier) {
  return _mm_or_ps(_mm_cmp_ss(later, earlier, kMax ? _CMP_GE_OQ : _CMP_LE_OQ), _mm_cmp_ss(later, later, _CMP_UNORD_Q));
}
template <bool kMax>
static SCANOPS_AI __m128d win1(__m128d later, __m128d earlier) {
  return _mm_or_pd(_mm_cmp_sd(later, earlier, kMax ? _CMP_GE_OQ : _CMP_LE_OQ), _mm_cmp_sd(later, later, _CMP_UNORD_Q));
}
// (memcpy: the column walk's running values are an int64 buffer's bytes, no typed access)
static SCANOPS_AI __m128 sload1(const float* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return _mm_set_ss(v);
}
static SCANOPS_AI __m128d sload1(const double* p) {
  double v;
  std::memcpy(&v, p, sizeof v);
  return _mm_set_sd(v);
}
static SCANOPS_AI void sstore1(float* p, __m128 x) {
  const float v = _mm_cvtss_f32(x);
  std::memcpy(p, &v, sizeof v);
}
static SCANOPS_AI void sstore1(double* p, __m128d x) {
  const double v = _mm_cvtsd_f64(x);
  std::memcpy(p, &v, sizeof v);
}
static SCANOPS_AI __m128 low128(__m256 x) { return _mm256_castps256_ps128(x); }
static SCANOPS_AI __m128d low128(__m256d x) { return _mm256_castpd256_pd128(x); }
static SCANOPS_AI int64_t smask1(__m128 w) { return _mm_cvtsi128_si32(_mm_castps_si128(w)); }  // 0 or -1
static SCANOPS_AI int64_t smask1(__m128d w) { return _mm_cvtsi128_si64(_mm_castpd_si128(w)); }
static SCANOPS_AI __m128 sblend1(__m128 a, __m128 b, __m128 w) { return _mm_blendv_ps(a, b, w); }
static SCANOPS_AI __m128d sblend1(__m128d a, __m128d b, __m128d w) { return _mm_blendv_pd(a, b, w); }
// m: the running value in lane 0 (the other lanes are ignored).
template <class T, bool kMax, bool kExcl, bool kWrite, class V>
static SCANOPS_AI void ext_scalar_step(const T* x, int64_t pos, V& m, int64_t& mi, T* out, int64_t* idx) {
  if constexpr (kWrite && kExcl) {
    sstore1(out, m);
    *idx = mi;
  }
  const V xv = sload1(x);
  const V w = win1<kMax>(xv, m);
  m = sblend1(m, xv, w);
  mi ^= (mi ^ pos) & smask1(w);  // (not `w ? pos : mi`: GCC 12 makes that a branch)
  if constexpr (kWrite && !kExcl) {
    sstore1(out, m);
    *idx = mi;
  }
}

// Scan positions [s0, s1) of the row starting at element `row` (length n), from the running
// state st (the identity: the lowest / highest value and index -1); returns the state after
// the block. kWrite: write the values and indices (exclusive: the state before each element).
template <class T, bool kMax, bool kRev, bool kExcl, bool kWrite, bool kNT>
static IndexedState<T> ext_row_impl(const T* in, T* out, int64_t* idx, int64_t row, int64_t n, int64_t s0,
                                    int64_t s1, IndexedState<T> st) {
  constexpr int64_t W = 32 / sizeof(T);
  auto mv = vset1(st.v);
  auto iv = _mm256_set1_epi64x(st.i);
  int64_t s = s0;
  for (; s + W <= s1; s += W) {
    const int64_t at = kRev ? row + n - W - s : row + s;
    const auto x = vloadu(in + at);
    if (wins_mask<kMax>(x, mv) == 0) {
      if constexpr (kWrite) {
        vstore<kNT>(out + at, mv);
        for (int64_t k = 0; k < W; k += 4) istore<kNT>(idx + at + k, iv);
      }
      continue;
    }
    ext_group<kMax, kRev, kExcl, kWrite, kNT>(x, out + at, idx + at, kRev ? n - 1 - s : s, mv, iv);
  }
  auto m = low128(mv);
  int64_t mi = _mm_cvtsi128_si64(_mm256_castsi256_si128(iv));
  for (; s < s1; ++s) {
    const int64_t pos = kRev ? n - 1 - s : s;
    ext_scalar_step<T, kMax, kExcl, kWrite>(in + row + pos, pos, m, mi, out + row + pos, idx + row + pos);
  }
  T mo;
  sstore1(&mo, m);
  return {mo, mi};
}

// ---- cummax / cummin, columns (float32 / float64) -------------------------------------------
// Columns [i0, i0 + w) of outer index o, scan positions [s0, s1) (rev: positions n-1-s, in the
// original order). Every SIMD lane is its own column, so a step is one compare per lane, no
// in-register scan: load the element x and the lane's running value m, sel = x wins against m
// (max: x >= m, min: x <= m, or x is NaN: ExtremumCombine::wins and the row kernel's rule; the
// identity (-inf / +inf, -1) loses against every element), blend the value and the int64
// position (two 4 x int64 vectors per 8 floats, one per 4 doubles), write the state after the
// element (inclusive) or before it (exclusive), keep it for the next row. Columns past the
// last whole vector take the same rule one at a time. The running state is Lv (w values of T,
// packed) and Li (w positions), in memory between rows (w <= 2048 columns: in L1 / L2).
template <bool kMax>
static SCANOPS_AI __m256 col_sel(__m256 x, __m256 m) { return win8<kMax>(x, m); }
template <bool kMax>
static SCANOPS_AI __m256d col_sel(__m256d x, __m256d m) { return win4<kMax>(x, m); }
static SCANOPS_AI __m256 vblend(__m256 a, __m256 b, __m256 sel) { return _mm256_blendv_ps(a, b, sel); }
static SCANOPS_AI __m256d vblend(__m256d a, __m256d b, __m256d sel) { return _mm256_blendv_pd(a, b, sel); }
static SCANOPS_AI __m256i iloadu(const int64_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
template <class T, bool kMax, bool kExcl, bool kWrite, bool kNT>
static void ext_col_walk_impl(const T* in, T* out, int64_t* idx, int64_t n, int64_t inner, bool rev, int64_t o,
                              int64_t i0, int64_t w, int64_t s0, int64_t s1, T* Lv, int64_t* Li) {
  constexpr int64_t W = 32 / sizeof(T);
  const int64_t step = rev ? -inner : inner;
  int64_t base = (o * n + (rev ? n - 1 - s0 : s0)) * inner + i0;
  for (int64_t s = s0; s < s1; ++s, base += step) {
    const int64_t pos = rev ? n - 1 - s : s;
    const __m256i pv = _mm256_set1_epi64x(pos);
    int64_t j = 0;
    for (; j + W <= w; j += W) {
      const auto x = vloadu(in + base + j);
      const auto m = vloadu(Lv + j);
      const auto sel = col_sel<kMax>(x, m);
      const auto mn = vblend(m, x, sel);
      vstore<false>(Lv + j, mn);
      if constexpr (kWrite) vstore<kNT>(out + base + j, kExcl ? m : mn);
      if constexpr (sizeof(T) == 4) {
        const __m256i si = _mm256_castps_si256(sel);
        const __m256i a = iloadu(Li + j), b = iloadu(Li + j + 4);
        const __m256i na = _mm256_blendv_epi8(a, pv, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(si)));
        const __m256i nb = _mm256_blendv_epi8(b, pv, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(si, 1)));
        istore<false>(Li + j, na);
        istore<false>(Li + j + 4, nb);
        if constexpr (kWrite) {
          istore<kNT>(idx + base + j, kExcl ? a : na);
          istore<kNT>(idx + base + j + 4, kExcl ? b : nb);
        }
      } else {
        const __m256i a = iloadu(Li + j);
        const __m256i na = _mm256_blendv_epi8(a, pv, _mm256_castpd_si256(sel));
        istore<false>(Li + j, na);
        if constexpr (kWrite) istore<kNT>(idx + base + j, kExcl ? a : na);
      }
    }
    for (; j < w; ++j) {  // (Lv is the int64 buffer's bytes: sload1 / sstore1 copy them)
      auto m = sload1(Lv + j);
      int64_t mi = Li[j];
      ext_scalar_step<T, kMax, kExcl, kWrite>(in + base + j, pos, m, mi, out + base + j, idx + base + j);
      sstore1(Lv + j, m);
      Li[j] = mi;
    }
  }
}

static SCANOPS_AI void sfence() { _mm_sfence(); }

#undef SCANOPS_AI
#undef SCANOPS_AIL
}  // namespace avx2
