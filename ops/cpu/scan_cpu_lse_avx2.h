// scanops: the AVX2 + FMA logcumsumexp kernels of the CPU back end (float32 / float64 inputs,
// float64 lanes: float32 accumulates in float64, as torch's CPU kernel does with
// at::acc_type<float, /*is_cuda=*/false> = double).
//
// Included by scan_cpu_kernels.h only, after scan_cpu_avx2.h and inside the same
// `#pragma GCC target("avx2,fma")` region (it uses that header's lane shifts, loads, stores and
// AffineOp); called only after the run-time check `use_avx2()`.
//
// The "online" formulation. The running log-sum-exp of a line is kept as a state (m, t): m the
// running maximum, t = sum over the elements so far of exp(x_j - m), less the 1 of the element
// that is the maximum; the value is m + log1p(t). An element x updates it by
//   x >  m:  m' = x, t' = (1 + t) * a          a = exp(min(x, m) - max(x, m)) = exp(-|x - m|)
//   x <= m:  m' = m, t' = t + a
// i.e. t' = A t + a with A = a or 1: one exp per element on the data (x and the running max,
// not the running sum), no log in the dependency chain, and the log1p only for the output.
// (torch's combine, max + log1p(exp(min - max)), puts an exp and a log1p into the chain from
// one element to the next: latency bound at ~100 cycles an element.) Keeping t rather than
// the sum 1 + t keeps the small values exact (log1p, not log(1 + t)): the result is as
// accurate as torch's, see docs/design.md for the measured errors.
//
// Special values, as torch's sequential rule: the identity is (-inf, 0) (value -inf + 0 =
// -inf, the exclusive first output); equal operands (both -inf or both +inf included) give
// a = 1, so an all -inf prefix keeps m = -inf (value -inf, never NaN; t only counts, finite,
// and is reset by the first finite element, whose A = exp(-inf) = 0); +inf makes m = +inf and
// the value +inf; a NaN element makes a = NaN, hence t and every later value NaN (the running
// maximum skips NaN: it is computed on x with NaN read as -inf).
//
// Rows (inner == 1): a group of 4 elements (scan order: memory order, or mirrored lanes for
// reverse scans, as the other row kernels) is one vector: the running maximum is an in-register
// prefix max combined with the carried m, the factors (A, a) follow lane-wise, and t is an
// in-register scan of the affine maps t -> A t + a (AffineOp's dscan4) applied to the carried
// t. Only m and t are carried from group to group (a max, an FMA and a broadcast each), so
// consecutive groups overlap; the exps and log1ps are independent. Tails (fewer than 4
// elements, only at a line's end) run the same vector code on a buffer padded with -inf
// (later in scan order than every real element: they change no output).
// A block is walked from its carry-in state (the state after the previous block), never from
// the identity: with blocks that are multiples of 4 elements long, every output is exactly the
// one-pass walk's, whatever the blocking and the thread count (the Scheduler's chained scan
// computes a block's carry-out by a walk without outputs from its carry-in: LseKernel).
//
// Columns (inner > 1): a lane per column, the same update per element without any in-register
// scan; the states (m, t) of w columns live in the Scheduler's column buffers between calls.
// The exps and log1ps of 8 vectors (several vectors of a row, or several rows of narrow
// columns) run in lockstep, as the rows' (lse_col_walk_impl).
//
// exp and log1p (lse_expv, lse_log1pv): own vector code, not at::vec (this library is compiled
// without ATen's CPU_CAPABILITY flags, so at::vec::Vectorized<double> is the scalar fallback;
// libtorch_cpu.so does export Sleef's vector functions, but as an undocumented symbol set that
// differs by build and platform), and inlined into the loops. Both are the classical argument
// reductions with Taylor coefficients; errors measured against long double (see docs/design.md).
//   exp(d), d <= 0 or NaN: d = k ln2 + r, |r| <= ln2/2 (k ln2_hi exact, FMA reduction), e^r by
//     its Taylor polynomial of degree 13 (truncation < 5e-18 relative), scaled by 2^k as
//     2^(k>>1) 2^(k-(k>>1)) so that subnormal results round once; d < -746 gives 0.
//   log1p(t), t >= 0 or NaN: fdlibm's reduction 1 + t = 2^k (1 + f), sqrt(2)/2 <= 1 + f < sqrt(2),
//     with the correction c/u for the rounding of u = 1 + t (c/u by a 12-bit reciprocal: it is
//     below 2^-53 of a result >= 0.34), f = t exactly when k = 0; log(1 + f) = f - f^2/2 +
//     s (f^2/2 + R(s^2)), s = f / (2 + f), R by the atanh series 2 s^2/3 + ... + 2 s^20/21
//     (truncation < 1e-18 relative).
#pragma once

namespace avx2 {

#define SCANOPS_AI inline __attribute__((always_inline))

struct LseState {
  double m;  // running maximum (-inf: nothing finite yet)
  double t;  // sum of exp(x - m) over the elements, less the maximum's own 1
};

static SCANOPS_AI __m256d lse_pow2(__m128i e) {  // 2^e, e in [-1022, 1023]
  return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm_add_epi32(e, _mm_set1_epi32(1023))), 52));
}

// exp(d) for d <= 0 (or NaN: NaN), of NV vectors in place. d < -745.5 (-inf included: every
// walk from the identity, m = -inf, takes one, and every -inf element) gives +0 through a zero
// scale factor: the result, 0.35 * 2^-1074 and below, rounded to +0 before as well, but
// through a subnormal product, a microcode assist of ~100+ cycles on x86 without FTZ (rows of
// 4 without initial, 1 thread: 593 ms against 328 with a finite initial value, 16-core Xeon).
// The vectors run in lockstep (each
// step for all of them, then the next): the degree-13 polynomial is a chain of 11 FMAs per
// vector, and in lockstep NV of them are in flight without filling the out-of-order window
// (lse_block_total, cache-resident, 2-core VM, float32: 1.56 ns an element one vector at a
// time, 1.12 with NV = 8). The arithmetic of a lane is the same for every NV (the same bits).
template <int NV>
static SCANOPS_AI void lse_expv(__m256d* dv) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2, low 21 mantissa bits cleared
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
  constexpr double f[14] = {1.0, 1.0, 2.0, 6.0, 24.0, 120.0, 720.0, 5040.0, 40320.0, 362880.0, 3628800.0,
                            39916800.0, 479001600.0, 6227020800.0};  // j!, exact
  __m256d kd[NV], r[NV], p[NV], lo[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __m256d x = _mm256_max_pd(_mm256_set1_pd(-746.0), dv[v]);  // vmaxpd returns d if it is NaN
    lo[v] = _mm256_cmp_pd(x, _mm256_set1_pd(-745.5), _CMP_LT_OQ);     // (false for NaN)
    kd[v] = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[v] = _mm256_fnmadd_pd(kd[v], _mm256_set1_pd(kLn2Hi), x);  // exact
    r[v] = _mm256_fnmadd_pd(kd[v], _mm256_set1_pd(kLn2Lo), r[v]);
    p[v] = _mm256_set1_pd(1.0 / f[13]);
  }
#pragma GCC unroll 16
  for (int j = 12; j >= 2; --j) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) p[v] = _mm256_fmadd_pd(p[v], r[v], _mm256_set1_pd(1.0 / f[j]));
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __m256d u = _mm256_add_pd(_mm256_set1_pd(1.0), _mm256_fmadd_pd(_mm256_mul_pd(r[v], r[v]), p[v], r[v]));
    const __m128i k = _mm256_cvtpd_epi32(kd[v]);  // [-1077, 0]
    const __m128i k1 = _mm_srai_epi32(k, 1);
    // (lo: the second factor, 2^-538 there, is +0: u 2^k1 is normal, so the product is +0
    // without a subnormal operand or result)
    dv[v] = _mm256_mul_pd(_mm256_mul_pd(u, lse_pow2(k1)), _mm256_andnot_pd(lo[v], lse_pow2(_mm_sub_epi32(k, k1))));
  }
}

// log1p(t) for t >= 0 (-0: -0; NaN: NaN), t < 2^52, of NV vectors in place, in lockstep as
// lse_expv (each vector's own arithmetic, the same for every NV).
template <int NV>
static SCANOPS_AI void lse_log1pv(__m256d* tv) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const __m256d one = _mm256_set1_pd(1.0);
  __m256d kd[NV], cl[NV], f[NV], hfsq[NV], s[NV], z[NV], R[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __m256d t = tv[v];
    const __m256d u = _mm256_add_pd(t, one);
    // u = 2^k m, m in [sqrt(2)/2, sqrt(2)): shift the exponent so that sqrt(2) starts a binade
    const __m256i ix = _mm256_add_epi64(_mm256_castpd_si256(u),
                                        _mm256_set1_epi64x(0x3ff0000000000000LL - 0x3fe6a09e667f3bcdLL));
    const __m256i k = _mm256_sub_epi64(_mm256_srli_epi64(ix, 52), _mm256_set1_epi64x(0x3ff));
    const __m256d m = _mm256_castsi256_pd(_mm256_add_epi64(_mm256_and_si256(ix, _mm256_set1_epi64x(0x000fffffffffffffLL)),
                                                           _mm256_set1_epi64x(0x3fe6a09e667f3bcdLL)));
    kd[v] = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(k, _mm256_set1_epi64x(0x4330000000000000LL))),
                          _mm256_set1_pd(4503599627370496.0));  // k >= 0 as double
    const __m256d k0 = _mm256_cmp_pd(kd[v], _mm256_setzero_pd(), _CMP_EQ_OQ);
    // c = 1 + t - u exactly (fdlibm's two forms), then c / u
    __m256d c = _mm256_blendv_pd(_mm256_sub_pd(t, _mm256_sub_pd(u, one)), _mm256_sub_pd(one, _mm256_sub_pd(u, t)),
                                 _mm256_cmp_pd(kd[v], _mm256_set1_pd(2.0), _CMP_GE_OQ));
    c = _mm256_mul_pd(c, _mm256_cvtps_pd(_mm_rcp_ps(_mm256_cvtpd_ps(u))));
    c = _mm256_andnot_pd(k0, c);                                 // k = 0: no correction,
    f[v] = _mm256_blendv_pd(_mm256_sub_pd(m, one), t, k0);       // f = t exactly
    cl[v] = _mm256_fmadd_pd(kd[v], _mm256_set1_pd(kLn2Lo), c);  // k ln2_lo + c
    hfsq[v] = _mm256_mul_pd(_mm256_set1_pd(0.5), _mm256_mul_pd(f[v], f[v]));
    s[v] = _mm256_div_pd(f[v], _mm256_add_pd(_mm256_set1_pd(2.0), f[v]));
    z[v] = _mm256_mul_pd(s[v], s[v]);
    R[v] = _mm256_set1_pd(2.0 / 21.0);
  }
#pragma GCC unroll 16
  for (int j = 9; j >= 1; --j) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) R[v] = _mm256_fmadd_pd(R[v], z[v], _mm256_set1_pd(2.0 / (2 * j + 1)));
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __m256d Rz = _mm256_mul_pd(R[v], z[v]);
    __m256d r = _mm256_fmadd_pd(s[v], _mm256_add_pd(hfsq[v], Rz), cl[v]);
    r = _mm256_add_pd(_mm256_sub_pd(r, hfsq[v]), f[v]);
    r = _mm256_fmadd_pd(kd[v], _mm256_set1_pd(kLn2Hi), r);
    // t = +-0 or NaN: t itself (log1p(-0) = -0: a start state's t, LseKernel::start; +0: the
    // bits of r; NaN: that NaN). One compare (equal or unordered) as the NaN test alone was.
    tv[v] = _mm256_blendv_pd(r, tv[v], _mm256_cmp_pd(tv[v], _mm256_setzero_pd(), _CMP_EQ_UQ));
  }
}

static SCANOPS_AI __m256d lse_log1p(__m256d t) {
  lse_log1pv<1>(&t);
  return t;
}

// The argument d of the per-element factor a = exp(d) (lse_expv) and the mask x > mp (x: the
// element, xs: x with NaN read as -inf, mp: the running maximum before the element,
// mx = max(xs, mp)).
static SCANOPS_AI __m256d lse_factor_arg(__m256d x, __m256d xs, __m256d nan, __m256d mp, __m256d mx, __m256d& gt) {
  __m256d d = _mm256_sub_pd(_mm256_min_pd(xs, mp), mx);
  d = _mm256_andnot_pd(_mm256_cmp_pd(xs, mp, _CMP_EQ_OQ), d);  // equal (infinities too): exp(0) = 1
  d = _mm256_blendv_pd(d, x, nan);                             // NaN element: a = NaN
  gt = _mm256_cmp_pd(xs, mp, _CMP_GT_OQ);
  return d;
}

static SCANOPS_AI __m256d lse_value(__m256d m, __m256d t) { return _mm256_add_pd(m, lse_log1p(t)); }

// The running maximum and the factors of NV consecutive groups of 4 elements x[0, NV) (scan
// order; lanes in scan order, mirrored for kRev) from the carried maximum mp (a broadcast,
// advanced): stores the maxima the outputs use (after each element; exclusive: before it) to
// vm and the affine maps t -> A t + a to vA, va (4 doubles a group each). The maxima are a
// chain from group to group; the exps run in lockstep (lse_expv).
template <bool kRev, bool kExcl, int NV>
static SCANOPS_AI void lse_group_factors(const __m256d* x, __m256d& mp, double* vm, double* vA, double* va) {
  const __m256d ninf = _mm256_set1_pd(-__builtin_inf());
  __m256d d[NV], gt[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __m256d nan = _mm256_cmp_pd(x[v], x[v], _CMP_UNORD_Q);
    const __m256d xs = _mm256_blendv_pd(x[v], ninf, nan);
    __m256d M = _mm256_max_pd(xs, dshift1<kRev>(xs, ninf));
    M = _mm256_max_pd(M, dshift2<kRev>(M, ninf));
    M = _mm256_max_pd(M, mp);                   // running max after each element
    const __m256d Mp = dshift_in<kRev>(M, mp);  // ... and before it
    d[v] = lse_factor_arg(x[v], xs, nan, Mp, M, gt[v]);
    _mm256_store_pd(vm + 4 * v, kExcl ? Mp : M);
    mp = dbcast_last<kRev>(M);
  }
  lse_expv<NV>(d);
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    _mm256_store_pd(vA + 4 * v, _mm256_blendv_pd(_mm256_set1_pd(1.0), d[v], gt[v]));
    _mm256_store_pd(va + 4 * v, d[v]);
  }
}

// A block's total (lse_block_total) in its parts: m the block's maximum (NaN read as -inf),
// t the sum of exp(x - m) over the elements below m, k the count of elements equal to m.
struct LseTotalSums {
  double m, t, k;
};

// The maximum of elements [lo, hi) of `in`, NaN read as -inf (-inf for none); nan: whether
// there is a NaN. Four accumulators of 16 elements, then the lanes in a fixed order, then the
// elements past the last 16 (every caller takes the maximum this way: the same bits, the sign
// of a zero maximum included).
template <class T>
static double lse_block_max(const T* in, int64_t lo, int64_t hi, bool& nan) {
  const __m256d ninf = _mm256_set1_pd(-__builtin_inf());
  __m256d mv[4] = {ninf, ninf, ninf, ninf}, nanv = _mm256_setzero_pd();
  int64_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    for (int u = 0; u < 4; ++u) {
      const __m256d x = load4(in + i + 4 * u);
      const __m256d xn = _mm256_cmp_pd(x, x, _CMP_UNORD_Q);
      nanv = _mm256_or_pd(nanv, xn);
      mv[u] = _mm256_max_pd(mv[u], _mm256_blendv_pd(x, ninf, xn));
    }
  }
  double m = -__builtin_inf();
  nan = _mm256_movemask_pd(nanv) != 0;
  alignas(32) double lanes[4];
  for (int u = 0; u < 4; ++u) {
    _mm256_store_pd(lanes, mv[u]);
    for (double v : lanes) m = v > m ? v : m;
  }
  for (int64_t j = i; j < hi; ++j) {
    const double x = static_cast<double>(in[j]);
    if (x != x) {
      nan = true;
    } else if (x > m) {
      m = x;
    }
  }
  return m;
}

// 16 NC elements p[0, 16 NC) (memory order) of a total's sum against the block's maximum m (a
// broadcast, finite): exp(x - m) added to sv[u] for the elements p[16 c + 4u, 16 c + 4u + 4)
// below m (c = 0, ..., NC - 1 in turn), 1 to kv for those equal to m. The 4 NC exps in
// lockstep (lse_expv); the additions in the order of NC calls with NC = 1.
template <int NC, class T>
static SCANOPS_AI void lse_total_add(const T* p, __m256d m, __m256d* sv, __m256d& kv) {
  __m256d x[4 * NC], e[4 * NC];
#pragma GCC unroll 8
  for (int v = 0; v < 4 * NC; ++v) {
    x[v] = load4(p + 4 * v);
    e[v] = _mm256_sub_pd(x[v], m);  // x <= m: exp <= 1 (x = -inf: 0)
  }
  lse_expv<4 * NC>(e);
#pragma GCC unroll 8
  for (int v = 0; v < 4 * NC; ++v) {
    const __m256d eq = _mm256_cmp_pd(x[v], m, _CMP_EQ_OQ);
    sv[v % 4] = _mm256_add_pd(sv[v % 4], _mm256_andnot_pd(eq, e[v]));
    kv = _mm256_add_pd(kv, _mm256_and_pd(eq, _mm256_set1_pd(1.0)));
  }
}

// The lanes of v[0, nv) added in order (vector by vector, lane 0 first), from 0.
static inline double lse_lanes_sum(const __m256d* v, int nv = 4) {
  alignas(32) double lanes[4];
  double r = 0;
  for (int u = 0; u < nv; ++u) {
    _mm256_store_pd(lanes, v[u]);
    for (double l : lanes) r += l;
  }
  return r;
}

// The total's state from its parts (m finite).
static inline LseState lse_total_finish(const LseTotalSums& s) { return {s.m, (s.k - 1.0) + s.t}; }

// Scan positions [s0, s1) of the row starting at element `row` (length n), walked from the
// state st; returns the state after s1. kWrite: write the outputs (exclusive: the value before
// each element). s0 and every block boundary are multiples of 4 from the row's start.
// A chunk of up to kG groups runs in three loops whose iterations are independent but for a
// max or an FMA: the maxima and exps, the scans of t, the log1ps and stores (one loop doing
// all three per group measured 3x slower: its ~150-cycle chain per group exceeds the
// out-of-order window). The exps and log1ps of kL groups run in lockstep (lse_expv,
// lse_log1pv: the same arithmetic per element; a walk with outputs, cache-resident, 2-core VM,
// float32: 5.1 ns an element one group at a time, 3.6 with kL = 8, 4.0 with 16). A last group
// of r < 4 elements (only at a line's end) is read from a buffer padded with -inf (later in
// scan order than the real elements: no output changes).
// kTot (a walk with outputs over whole chunks, (s1 - s0) % 64 == 0): also the sums of the
// block's total, tot->t and tot->k, against its maximum tot->m (finite, lse_block_max), in the
// order of lse_block_total (memory order, 32 elements at a time, whatever the scan direction):
// its exps beside the t scans (measured: 4.5 ns an element, where the walk and a separate
// lse_block_total take 3.6 + 1.1 + 0.1 for the maximum).
template <class T, bool kRev, bool kExcl, bool kWrite, bool kNT, bool kTot = false>
static LseState lse_row_impl(const T* in, T* out, int64_t row, int64_t n, int64_t s0, int64_t s1, LseState st,
                             LseTotalSums* tot = nullptr) {
  constexpr int64_t kG = 16;
  constexpr int kL = 8;  // groups whose exps / log1ps run in lockstep (lse_expv, lse_log1pv)
  alignas(32) double bm[4 * kG], bA[4 * kG], bt[4 * kG];
  __m256d mp = _mm256_set1_pd(st.m), tp = _mm256_set1_pd(st.t);
  auto at = [&](int64_t s) { return kRev ? row + n - 4 - s : row + s; };  // a group's first element
  [[maybe_unused]] const T* tin = nullptr;  // kTot: the total's next 64 elements (memory order)
  [[maybe_unused]] __m256d tm, sv[4], kv;
  if constexpr (kTot) {
    tin = in + (kRev ? row + n - s1 : row + s0);
    tm = _mm256_set1_pd(tot->m);
    sv[0] = sv[1] = sv[2] = sv[3] = kv = _mm256_setzero_pd();
  }
  for (int64_t s = s0; s < s1; s += 4 * kG) {
    const int64_t len = std::min(s1 - s, 4 * kG), full = len / 4, r = len % 4;
    const int64_t lo = kRev ? row + n - s - len : row + s + 4 * full;  // the partial group's elements
    const int64_t off = kRev ? 4 - r : 0;                              // ... in its buffer
    int64_t g = 0;
    for (; g + kL <= full; g += kL) {
      __m256d x[kL];
      for (int v = 0; v < kL; ++v) x[v] = load4(in + at(s + 4 * (g + v)));
      lse_group_factors<kRev, kExcl, kL>(x, mp, bm + 4 * g, bA + 4 * g, bt + 4 * g);
    }
    for (; g < full; ++g) {
      const __m256d x = load4(in + at(s + 4 * g));
      lse_group_factors<kRev, kExcl, 1>(&x, mp, bm + 4 * g, bA + 4 * g, bt + 4 * g);
    }
    if (r > 0) {
      const T ninf = -std::numeric_limits<T>::infinity();
      T xb[4] = {ninf, ninf, ninf, ninf};
      std::memcpy(xb + off, in + lo, static_cast<size_t>(r) * sizeof(T));
      const __m256d x = load4(xb);
      lse_group_factors<kRev, kExcl, 1>(&x, mp, bm + 4 * full, bA + 4 * full, bt + 4 * full);
    }
    const int64_t ng = full + (r > 0);
    auto tscan = [&](int64_t g) {
      VS<2> v{{_mm256_load_pd(bA + 4 * g), _mm256_load_pd(bt + 4 * g)}};
      v = dscan4<AffineOp, kRev>(v);
      const __m256d tn = _mm256_fmadd_pd(v.c[0], tp, v.c[1]);
      if constexpr (kWrite) _mm256_store_pd(bt + 4 * g, kExcl ? dshift_in<kRev>(tn, tp) : tn);
      tp = dbcast_last<kRev>(tn);
    };
    if constexpr (kTot) {
      // ng = kG: the total's 32 elements at a time (8 groups of the walk), as lse_block_total
      for (int64_t g = 0; g < kG; g += 8) {
        for (int v = 0; v < 8; ++v) tscan(g + v);
        lse_total_add<2>(tin + 4 * g, tm, sv, kv);
      }
      tin += 4 * kG;
    } else {
      for (int64_t g = 0; g < ng; ++g) tscan(g);
    }
    if constexpr (kWrite) {
      int64_t g = 0;
      for (; g + kL <= full; g += kL) {
        __m256d y[kL];
        for (int v = 0; v < kL; ++v) y[v] = _mm256_load_pd(bt + 4 * (g + v));
        lse_log1pv<kL>(y);
        for (int v = 0; v < kL; ++v)
          store4<kNT>(out + at(s + 4 * (g + v)), _mm256_add_pd(_mm256_load_pd(bm + 4 * (g + v)), y[v]));
      }
      for (; g < full; ++g)
        store4<kNT>(out + at(s + 4 * g), lse_value(_mm256_load_pd(bm + 4 * g), _mm256_load_pd(bt + 4 * g)));
      if (r > 0) {
        T yb[4];
        store4<false>(yb, lse_value(_mm256_load_pd(bm + 4 * full), _mm256_load_pd(bt + 4 * full)));
        std::memcpy(out + lo, yb + off, static_cast<size_t>(r) * sizeof(T));
      }
    }
  }
  if constexpr (kTot) {
    tot->t = lse_lanes_sum(sv);
    tot->k = lse_lanes_sum(&kv, 1);
  }
  return {_mm256_cvtsd_f64(mp), _mm256_cvtsd_f64(tp)};
}

// Columns: the states of V vectors of 4 columns (Lm, Lt from column j0; kPart: the last vector
// has only rc < 4 columns, its other lanes read 0 and are not written back).
template <int V, bool kPart>
static SCANOPS_AI void lse_col_load(const double* Lm, const double* Lt, int64_t j0, int64_t rc, __m256d* m,
                                    __m256d* t) {
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    if (kPart && v == V - 1) {
      alignas(32) double mb[4] = {0, 0, 0, 0}, tb[4] = {0, 0, 0, 0};
      std::memcpy(mb, Lm + j0 + 4 * v, static_cast<size_t>(rc) * sizeof(double));
      std::memcpy(tb, Lt + j0 + 4 * v, static_cast<size_t>(rc) * sizeof(double));
      m[v] = _mm256_load_pd(mb);
      t[v] = _mm256_load_pd(tb);
    } else {
      m[v] = _mm256_loadu_pd(Lm + j0 + 4 * v);
      t[v] = _mm256_loadu_pd(Lt + j0 + 4 * v);
    }
  }
}
template <int V, bool kPart>
static SCANOPS_AI void lse_col_save(double* Lm, double* Lt, int64_t j0, int64_t rc, const __m256d* m,
                                    const __m256d* t) {
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    if (kPart && v == V - 1) {
      alignas(32) double mb[4], tb[4];
      _mm256_store_pd(mb, m[v]);
      _mm256_store_pd(tb, t[v]);
      std::memcpy(Lm + j0 + 4 * v, mb, static_cast<size_t>(rc) * sizeof(double));
      std::memcpy(Lt + j0 + 4 * v, tb, static_cast<size_t>(rc) * sizeof(double));
    } else {
      _mm256_storeu_pd(Lm + j0 + 4 * v, m[v]);
      _mm256_storeu_pd(Lt + j0 + 4 * v, t[v]);
    }
  }
}

// R consecutive scan positions (rows at p, p + step, ...) of V vectors of 4 columns (at p + 4v
// in each row; kPart: the last vector has rc < 4 columns, read from and written to buffers,
// its other lanes 0), from the states m[0, V), t[0, V), advanced in place. An
// element's update: a = exp(-|x - m|) (lse_factor_arg), t' = t + a, or (1 + t) a = a t + a if
// x > m. The R V exps run in lockstep (lse_expv), then the t updates in scan order, then the
// R V log1ps of the outputs' t in lockstep (lse_log1pv): the arithmetic of every element is
// that of one element at a time (the same bits for every R and V, and as the walk before
// 2026-11-25, one vector at a time). kWrite: the outputs, the
// state after each element (exclusive: before it), regular stores.
template <class T, bool kExcl, bool kWrite, int R, int V, bool kPart>
static SCANOPS_AI void lse_col_tile(const T* in, T* out, int64_t p, int64_t step, int64_t rc, __m256d* m,
                                    __m256d* t) {
  constexpr int K = R * V;
  const __m256d ninf = _mm256_set1_pd(-__builtin_inf());
  __m256d d[K], gt[K], om[K], ot[K];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const int k = r * V + v;
      const T* q = in + p + r * step + 4 * v;
      __m256d x;
      if (kPart && v == V - 1) {
        T xb[4] = {0, 0, 0, 0};
        std::memcpy(xb, q, static_cast<size_t>(rc) * sizeof(T));
        x = load4(xb);
      } else {
        x = load4(q);
      }
      const __m256d nan = _mm256_cmp_pd(x, x, _CMP_UNORD_Q);
      const __m256d xs = _mm256_blendv_pd(x, ninf, nan);
      const __m256d M = _mm256_max_pd(xs, m[v]);
      d[k] = lse_factor_arg(x, xs, nan, m[v], M, gt[k]);
      om[k] = kExcl ? m[v] : M;
      m[v] = M;
    }
  }
  lse_expv<K>(d);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const int k = r * V + v;
      const __m256d tn = _mm256_blendv_pd(_mm256_add_pd(t[v], d[k]), _mm256_fmadd_pd(d[k], t[v], d[k]), gt[k]);
      ot[k] = kExcl ? t[v] : tn;
      t[v] = tn;
    }
  }
  if constexpr (kWrite) {
    lse_log1pv<K>(ot);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        const int k = r * V + v;
        const __m256d y = _mm256_add_pd(om[k], ot[k]);
        T* q = out + p + r * step + 4 * v;
        if (kPart && v == V - 1) {
          T yb[4];
          store4<false>(yb, y);
          std::memcpy(q, yb, static_cast<size_t>(rc) * sizeof(T));
        } else {
          store4<false>(q, y);
        }
      }
    }
  }
}

// `rows` scan positions of columns that are V <= 7 vectors wide (kPart: the last of rc < 4
// columns), rows at base, base + step, ...: R rows at a time (R V exps in lockstep), the rows
// past the last R one at a time; the states stay in registers from the first row to the last.
template <class T, bool kExcl, bool kWrite, int R, int V, bool kPart>
static void lse_col_narrow(const T* in, T* out, int64_t base, int64_t step, int64_t rc, int64_t rows, double* Lm,
                           double* Lt) {
  __m256d m[V], t[V];
  lse_col_load<V, kPart>(Lm, Lt, 0, rc, m, t);
  int64_t s = 0;
  for (; s + R <= rows; s += R, base += R * step) lse_col_tile<T, kExcl, kWrite, R, V, kPart>(in, out, base, step, rc, m, t);
  for (; s < rows; ++s, base += step) lse_col_tile<T, kExcl, kWrite, 1, V, kPart>(in, out, base, step, rc, m, t);
  lse_col_save<V, kPart>(Lm, Lt, 0, rc, m, t);
}

// V vectors of columns from j0 (kPart: the last of rc < 4 columns) of R rows (at p, p + step):
// their states from Lm, Lt and back, R V exps in lockstep.
template <class T, bool kExcl, bool kWrite, int R, int V, bool kPart>
static SCANOPS_AI void lse_col_chunk(const T* in, T* out, int64_t p, int64_t step, int64_t j0, int64_t rc, double* Lm,
                                     double* Lt) {
  __m256d m[V], t[V];
  lse_col_load<V, kPart>(Lm, Lt, j0, rc, m, t);
  lse_col_tile<T, kExcl, kWrite, R, V, kPart>(in, out, p + j0, step, rc, m, t);
  lse_col_save<V, kPart>(Lm, Lt, j0, rc, m, t);
}

// Columns of 8 vectors or more: kColRows rows at a time (rows, base, step as lse_col_narrow;
// a last odd row alone), each in chunks of 8 / kColRows vectors along the rows (states from Lm,
// Lt and back), then the VR vectors left from column jr (kPart: the last of rc < 4 columns).
constexpr int kColRows = 2;
template <class T, bool kExcl, bool kWrite, int R, int VR, bool kPart>
static SCANOPS_AI void lse_col_wide_rows(const T* in, T* out, int64_t p, int64_t step, int64_t jr, int64_t rc,
                                         double* Lm, double* Lt) {
  constexpr int VC = 8 / kColRows;
  for (int64_t j = 0; j < jr; j += 4 * VC) lse_col_chunk<T, kExcl, kWrite, R, VC, false>(in, out, p, step, j, 4, Lm, Lt);
  if constexpr (VR > 0) lse_col_chunk<T, kExcl, kWrite, R, VR, kPart>(in, out, p, step, jr, rc, Lm, Lt);
}
template <class T, bool kExcl, bool kWrite, int VR, bool kPart>
static void lse_col_wide(const T* in, T* out, int64_t base, int64_t step, int64_t nv, int64_t rc, int64_t rows,
                         double* Lm, double* Lt) {
  const int64_t jr = (nv - VR) * 4;  // the first column of the rest
  int64_t s = 0;
  for (; s + kColRows <= rows; s += kColRows, base += kColRows * step)
    lse_col_wide_rows<T, kExcl, kWrite, kColRows, VR, kPart>(in, out, base, step, jr, rc, Lm, Lt);
  for (; s < rows; ++s, base += step) lse_col_wide_rows<T, kExcl, kWrite, 1, VR, kPart>(in, out, base, step, jr, rc, Lm, Lt);
}

// Columns [i0, i0 + w) of outer index o, scan positions [s0, s1) (rev: positions n-1-s), from
// the states Lm[0, w) (maxima) and Lt[0, w), updated in place. Every element's update and
// value are those of a walk of one vector of columns and one row at a time (the walk before
// 2026-11-25); the exps and log1ps of up to 8 vectors run in lockstep (lse_col_tile): 8 or
// more vectors (w > 28) take 2 rows x 4 vectors at a time along the rows, then the nv % 4
// vectors left (2 x 1-3; a partial last vector with nv % 4 = 0: the last 4); narrower columns
// R rows of all their vectors (1 vector: 8 rows, 2: 4 rows, 3 or 4: 2 rows, 5-7: 1 row). A
// last vector of fewer than 4 columns runs on buffers. Measured (2-core VM, 1 thread, float32
// (4096, 16384) dim 0): one vector at a time 364-387 ms, 1 row x 8 vectors 283-292, 2 x 4
// 254-278, 4 x 2 259-274 (noise between the last two).
template <class T, bool kExcl, bool kWrite>
static void lse_col_walk_impl(const T* in, T* out, int64_t n, int64_t inner, bool rev, int64_t o, int64_t i0, int64_t w,
                              int64_t s0, int64_t s1, double* Lm, double* Lt) {
  if (s1 <= s0 || w <= 0) return;
  const int64_t step = rev ? -inner : inner, rows = s1 - s0;
  const int64_t base = (o * n + (rev ? n - 1 - s0 : s0)) * inner + i0;
  const int64_t nv = (w + 3) / 4, rc = w - 4 * (nv - 1);
  auto go = [&](auto part) {
    constexpr bool P = decltype(part)::value;
    switch (nv) {
      case 1: return lse_col_narrow<T, kExcl, kWrite, 8, 1, P>(in, out, base, step, rc, rows, Lm, Lt);
      case 2: return lse_col_narrow<T, kExcl, kWrite, 4, 2, P>(in, out, base, step, rc, rows, Lm, Lt);
      case 3: return lse_col_narrow<T, kExcl, kWrite, 2, 3, P>(in, out, base, step, rc, rows, Lm, Lt);
      case 4: return lse_col_narrow<T, kExcl, kWrite, 2, 4, P>(in, out, base, step, rc, rows, Lm, Lt);
      case 5: return lse_col_narrow<T, kExcl, kWrite, 1, 5, P>(in, out, base, step, rc, rows, Lm, Lt);
      case 6: return lse_col_narrow<T, kExcl, kWrite, 1, 6, P>(in, out, base, step, rc, rows, Lm, Lt);
      case 7: return lse_col_narrow<T, kExcl, kWrite, 1, 7, P>(in, out, base, step, rc, rows, Lm, Lt);
      default: break;
    }
    switch (nv % 4) {
      case 0:  // a partial last vector: the last 4 vectors are the rest (2 x 4)
        return lse_col_wide<T, kExcl, kWrite, P ? 4 : 0, P>(in, out, base, step, nv, rc, rows, Lm, Lt);
      case 1: return lse_col_wide<T, kExcl, kWrite, 1, P>(in, out, base, step, nv, rc, rows, Lm, Lt);
      case 2: return lse_col_wide<T, kExcl, kWrite, 2, P>(in, out, base, step, nv, rc, rows, Lm, Lt);
      default: return lse_col_wide<T, kExcl, kWrite, 3, P>(in, out, base, step, nv, rc, rows, Lm, Lt);
    }
  };
  if (rc < 4) {
    go(std::true_type{});
  } else {
    go(std::false_type{});
  }
}

// The state of a run of states a then b (a earlier): (max, the other's 1 + t scaled to it);
// equal maxima (infinities included) keep both 1s but one; NaN in t propagates.
static inline LseState lse_combine(const LseState& a, const LseState& b) {
  if (a.m == b.m) return {a.m, a.t + b.t + 1.0};
  if (a.m > b.m) return {a.m, a.t + (1.0 + b.t) * std::exp(b.m - a.m)};
  return {b.m, (1.0 + a.t) * std::exp(a.m - b.m) + b.t};
}

// The state of elements [lo, hi) of `in` taken together (a block's total, independent of any
// carry): m their maximum (NaN read as -inf), t = (k - 1) + the sum of exp(x - m) over the
// elements below m, k of them equal to m; NaN if any element is NaN. Two passes over the
// block (from cache): the maximum (lse_block_max), then the sum in four accumulators, one per
// 4 elements of every 16 (lse_total_add), their lanes in a fixed order (lse_lanes_sum), then
// the elements past the last 16: the bits depend on the block alone. An exp per element, no
// log, no chain. lse_row_impl<kTot> takes the same sums during a walk (lse_total_finish):
// every step here and there is the same arithmetic in the same order, so the same bits.
template <class T>
static LseState lse_block_total(const T* in, int64_t lo, int64_t hi) {
  bool nan = false;
  const double m = lse_block_max(in, lo, hi, nan);
  if (nan) return {m, __builtin_nan("")};
  if (!(m - m == 0.0)) {  // m = +-inf (or nothing finite): the k copies of m count, the rest 0
    double k = 0;
    for (int64_t j = lo; j < hi; ++j) k += static_cast<double>(in[j]) == m ? 1.0 : 0.0;
    return {m, k > 0 ? k - 1.0 : 0.0};
  }
  const __m256d mb = _mm256_set1_pd(m);
  __m256d sv[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  __m256d kv = _mm256_setzero_pd();
  int64_t i = lo;
  for (; i + 32 <= hi; i += 32) lse_total_add<2>(in + i, mb, sv, kv);
  for (; i + 16 <= hi; i += 16) lse_total_add<1>(in + i, mb, sv, kv);
  LseTotalSums s{m, lse_lanes_sum(sv), lse_lanes_sum(&kv, 1)};  // k: a count, exact in any order
  for (int64_t j = i; j < hi; ++j) {
    const double x = static_cast<double>(in[j]);
    if (x == m) {
      s.k += 1.0;
    } else {
      s.t += std::exp(x - m);
    }
  }
  return lse_total_finish(s);
}

#undef SCANOPS_AI
}  // namespace avx2
