// scanops: AVX2 + FMA kernels of the CPU segmented scans (scan_cpu_segmented.cpp): Sum, Prod
// and Affine over float32 / float64 inputs, float64 lanes (float32 accumulates in float64, as
// the generic walk and the unsegmented kernels do); cummax / cummin and logcumsumexp rows and
// columns (their sections below). Float16 / bfloat16 take the same kernels through the
// conversions below (F16C: the region's target includes it), but for rows of sums, products
// and linear recurrences: float16 ones walk in the generic walk's order (seg_row_seq),
// bfloat16 ones keep the generic walk (scan_cpu_segmented.cpp, kVecRows); int64 sums take the
// column kernel in int64 lanes.
//
// Included by scan_cpu_segmented.cpp only, after scan_cpu_kernels.h (this uses
// scan_cpu_avx2.h's vector states, lane shifts, loads and stores) and inside a
// `#pragma GCC target("avx2,fma")` region; called only after the run-time check `use_avx2()`
// (the unsegmented kernels' dispatch), the generic walk being the portable fallback.
//
// Rows (inner == 1): a segmented in-register prefix. A group of 4 positions (one vector, in
// scan order: memory order, or mirrored lanes for reverse scans, as scan_cpu_avx2.h) carries
// its lanes' head flags f (all ones at a head, from 4 reset bytes). Two log steps, each:
// a lane whose window holds a head keeps its value, the others take combine(shifted, own);
// then f |= shifted f. A lane then holds the combine of the elements since the last head in
// the group (or the group's start) and f whether there was one. Groups of 8 = two vectors, the
// second offset by the first's last lane the same way, then each lane takes
// combine(carry, lane) where no head precedes it in the group, itself where one does; the
// carry is the group's last lane. The chain from group to group is one combine and a blend.
// The shifts bring in -0.0 for sums (-0.0 + x == x bit for bit, -0.0 and NaN payloads
// included), the identity for products (1 * x == x) and affine maps (the unsegmented
// kernels' fill). An exclusive output is the inclusive one shifted by a position, the
// identity's value at a head. The walk's association depends only on where the walk starts
// (the unit's first position, fixed by the shape): the bits do not depend on the threads.
//
// A chunk's total (the first pass of lines cut into chunks) reads the flags 8 bytes a step
// back from the chunk's end to its last head and walks from there; a chunk without a head
// is the unsegmented kernels' block total (row_block_impl without outputs).
//
// Columns (inner > 1): a lane per column, no in-register prefix: state = head ? x :
// combine(state, x) as a blend, the column block's states in a buffer between positions.
#pragma once

namespace avx2 {

#define SCANOPS_AI inline __attribute__((always_inline))
#define SCANOPS_AIL __attribute__((always_inline))

// ---- float16 / bfloat16 loads and stores -------------------------------------------------------
// The conversions of c10::Half / c10::BFloat16, bit for bit, as the generic walk makes them: a
// load lifts the element to float (exact; F16C for half, quieting a signaling NaN as c10's
// conversion does; a 16-bit shift for bfloat16) and then to float64; a store rounds the float64
// value to float and then to the 16-bit type (static_cast<out_t>(double) is Half(float(v)) /
// BFloat16(float(v)): two roundings, the same here). Half rounds to nearest even (F16C, its
// immediate: not MXCSR) and every NaN is stored as sign | 0x7E00 (c10's software conversion,
// which this library's translation units use: no -mf16c; F16C keeps the payload's top bits);
// bfloat16 rounds as c10::detail::round_to_nearest_even (the bias 0x7FFF plus the kept lowest
// bit) and every NaN is stored as 0x7FC0 (its sign dropped, as there). The float16 forms need
// F16C (the region's target; the caller checks the CPU flag: use_f16c, scan_cpu_segmented.cpp).
static SCANOPS_AI __m128 f32x4(const c10::Half* p) {
  return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
static SCANOPS_AI __m128 f32x4(const c10::BFloat16* p) {
  const __m128i u = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm_castsi128_ps(_mm_slli_epi32(u, 16));
}
static SCANOPS_AI float f32_of(c10::Half v) { return _cvtsh_ss(v.x); }
static SCANOPS_AI float f32_of(c10::BFloat16 v) {
  const uint32_t u = uint32_t(v.x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// 4 floats to 4 16-bit values (the low 64 bits)
static SCANOPS_AI __m128i bits16x4(__m128 f, const c10::Half*) {
  const __m128i h = _mm_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT);
  const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x7C00));
  const __m128i canon = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(int16_t(0x8000))), _mm_set1_epi16(0x7E00));
  return _mm_blendv_epi8(h, canon, nan);
}
static SCANOPS_AI __m128i bits16x4(__m128 f, const c10::BFloat16*) {
  const __m128i u = _mm_castps_si128(f);
  const __m128i bias = _mm_add_epi32(_mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1)), _mm_set1_epi32(0x7FFF));
  __m128i r = _mm_srli_epi32(_mm_add_epi32(u, bias), 16);
  r = _mm_blendv_epi8(r, _mm_set1_epi32(0x7FC0), _mm_castps_si128(_mm_cmp_ps(f, f, _CMP_UNORD_Q)));
  return _mm_packus_epi32(r, r);  // (values 0 .. 0xFFFF: no saturation)
}
static SCANOPS_AI uint16_t bits16(float f, const c10::Half*) {
  uint16_t h = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
  if ((h & 0x7FFF) > 0x7C00) h = static_cast<uint16_t>((h & 0x8000) | 0x7E00);
  return h;
}
static SCANOPS_AI uint16_t bits16(float f, const c10::BFloat16*) {
  if (f != f) return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + ((u >> 16) & 1) + 0x7FFFu) >> 16);
}
template <class T>
inline constexpr bool is_16bit_float_v = std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>;

template <class T, std::enable_if_t<is_16bit_float_v<T>, int> = 0>
static SCANOPS_AI __m256d load4(const T* p) { return _mm256_cvtps_pd(f32x4(p)); }
template <class T, std::enable_if_t<is_16bit_float_v<T>, int> = 0>
static SCANOPS_AI double load1(const T* p) { return static_cast<double>(f32_of(*p)); }
template <bool kNT, class T, std::enable_if_t<is_16bit_float_v<T>, int> = 0>
static SCANOPS_AI void store4(T* p, __m256d v) {  // (no streaming form: 8 bytes a store)
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), bits16x4(_mm256_cvtpd_ps(v), p));
}
template <class T, std::enable_if_t<is_16bit_float_v<T>, int> = 0>
static SCANOPS_AI void store1(T* p, double v) {
  p->x = bits16(static_cast<float>(v), p);
}

// AffineOp with the generic walk's arithmetic (AffineCombine::combine: g.a * f.b + g.b, a
// product and a sum each rounded; the generic walk is compiled without FMA, so nothing fuses
// there), not AffineOp's fused multiply-add: the float16 / bfloat16 kernels keep the generic
// walk's bits. The empty asm keeps the product a value of its own: in this FMA region GCC's
// C++ default (-ffp-contract=fast) would fuse the two.
struct AffineMulAddOp : AffineOp {
  static SCANOPS_AI __m256d mul_add(__m256d a, __m256d b, __m256d c) {
    __m256d p = _mm256_mul_pd(a, b);
    __asm__("" : "+x"(p));
    return _mm256_add_pd(p, c);
  }
  static SCANOPS_AI VS<2> comb(const VS<2>& f, const VS<2>& g) {
    return {{_mm256_mul_pd(g.c[0], f.c[0]), mul_add(g.c[0], f.c[1], g.c[1])}};
  }
  static SCANOPS_AI S scomb(S f, S g) {
    double p = g.a * f.b;
    __asm__("" : "+x"(p));
    return {g.a * f.a, p + g.b};
  }
};

// Lane masks (all ones where the byte is not 0) of 4 reset bytes (memory order).
static SCANOPS_AI __m256d seg_mask4(uint32_t bytes) {
  const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(static_cast<int>(bytes)));
  return _mm256_castsi256_pd(_mm256_cmpgt_epi64(b, _mm256_setzero_si256()));
}
static SCANOPS_AI uint32_t seg_load32(const bool* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// The lane a shift brings in: exact where it is combined with an element.
template <class Op>
static SCANOPS_AI __m256d seg_fill(int k) {
  if constexpr (std::is_same_v<Op, SumOp>) {
    return _mm256_set1_pd(-0.0);
  } else {
    return Op::idc(k);
  }
}
// m ? b : a, lane-wise, every component
template <class Op>
static SCANOPS_AI VS<Op::K> seg_sel(const VS<Op::K>& a, const VS<Op::K>& b, __m256d m) {
  VS<Op::K> r;
  for (int k = 0; k < Op::K; ++k) r.c[k] = _mm256_blendv_pd(a.c[k], b.c[k], m);
  return r;
}
// Segmented inclusive scan of 4 lanes (scan order) with head flags f, updated to "a head at
// or before the lane in the group".
template <class Op, bool kRev>
static SCANOPS_AI VS<Op::K> seg_scan4(VS<Op::K> v, __m256d& f) {
  const __m256d z = _mm256_setzero_pd();
  VS<Op::K> t;
  for (int k = 0; k < Op::K; ++k) t.c[k] = dshift1<kRev>(v.c[k], seg_fill<Op>(k));
  v = seg_sel<Op>(Op::comb(t, v), v, f);
  f = _mm256_or_pd(f, dshift1<kRev>(f, z));
  for (int k = 0; k < Op::K; ++k) t.c[k] = dshift2<kRev>(v.c[k], seg_fill<Op>(k));
  v = seg_sel<Op>(Op::comb(t, v), v, f);
  f = _mm256_or_pd(f, dshift2<kRev>(f, z));
  return v;
}

// One row: element l at in[l] (coeff[l], mask[l]), its reset flag rs[l], output out[l].
template <class T>
struct SegRow {
  const T* in;
  const T* coeff;
  const bool* mask;
  const bool* rs;
  T* out;
  int64_t n;
};

// Scan positions [k0, k1) of a row from the running state (s, head) (SegState: head = the
// fold holds a segment's first element); first_head: position 0 is a head (no initial value).
template <class Op, class T, bool kRev, bool kMask, bool kExcl, bool kWrite>
static void seg_row_impl(const SegRow<T>& p, int64_t k0, int64_t k1, bool first_head, typename Op::S& s,
                         bool& head) {
  using V = VS<Op::K>;
  using S = typename Op::S;
  const int64_t n = p.n;
  const bool* rs = p.rs;
  auto scalar = [&](int64_t k, bool h) SCANOPS_AIL {
    const int64_t l = kRev ? n - 1 - k : k;
    const S x = lift1<Op, T, kMask>(p.in, p.coeff, p.mask, l);
    if constexpr (kWrite && kExcl) store1(p.out + l, h ? Op::svalue(Op::sid()) : Op::svalue(s));
    s = h ? x : Op::scomb(s, x);
    head = head || h;
    if constexpr (kWrite && !kExcl) store1(p.out + l, Op::svalue(s));
  };
  int64_t k = k0;
  if (k == 0 && k < k1) scalar(k++, first_head);
  V Lv = Op::bcast(s);
  __m256d prev = _mm256_set1_pd(Op::svalue(s));
  const __m256d idval = _mm256_set1_pd(Op::svalue(Op::sid()));
  __m256d anyh = _mm256_setzero_pd();
  auto at4 = [&](int64_t kk) SCANOPS_AIL { return kRev ? n - 4 - kk : kk; };
  auto load = [&](int64_t kk) SCANOPS_AIL { return lift4<Op, T, kMask>(p.in, p.coeff, p.mask, at4(kk)); };
  auto emit = [&](int64_t kk, const V& O, __m256d fraw) SCANOPS_AIL {
    __m256d o = Op::value(O);
    if constexpr (kExcl) {
      const __m256d e = dshift_in<kRev>(o, prev);
      prev = o;
      o = _mm256_blendv_pd(e, idval, fraw);
    }
    store4<false>(p.out + at4(kk), o);
  };
  constexpr int64_t D = kPrefetchBytes / int64_t(sizeof(T));
  for (; k + 8 <= k1; k += 8) {
    const int64_t a = at4(k) + (kRev ? -D : D);
    prefetch_at(p.in, a);
    if constexpr (Op::K == 2) prefetch_at(p.coeff, a);
    // the flags of scan positions k .. k + 7: forward rs[k .. k + 7]; reverse, memory
    // positions n - 8 - k .. n - 1 - k, whose flags are rs[n - 7 - k .. n - k] (the head of
    // memory position l is rs[l + 1]); k >= 1, so rs[n] is never read
    uint64_t w;
    std::memcpy(&w, rs + (kRev ? n - 7 - k : k), 8);
    if (w == 0) {  // no head: the unsegmented group (the same fills)
      V P0 = load(k), P1 = load(k + 4), t;
      for (int j = 0; j < Op::K; ++j) t.c[j] = dshift1<kRev>(P0.c[j], seg_fill<Op>(j));
      P0 = Op::comb(t, P0);
      for (int j = 0; j < Op::K; ++j) t.c[j] = dshift1<kRev>(P1.c[j], seg_fill<Op>(j));
      P1 = Op::comb(t, P1);
      for (int j = 0; j < Op::K; ++j) t.c[j] = dshift2<kRev>(P0.c[j], seg_fill<Op>(j));
      P0 = Op::comb(t, P0);
      for (int j = 0; j < Op::K; ++j) t.c[j] = dshift2<kRev>(P1.c[j], seg_fill<Op>(j));
      P1 = Op::comb(t, P1);
      P1 = Op::comb(vdbcast_last<Op, kRev>(P0), P1);
      if constexpr (kWrite) {
        const __m256d z = _mm256_setzero_pd();
        emit(k, Op::comb(Lv, P0), z);
        emit(k + 4, Op::comb(Lv, P1), z);
      }
      Lv = Op::comb(Lv, vdbcast_last<Op, kRev>(P1));
      continue;
    }
    if (w == 0x0101010101010101ull) {  // every position a head (bool true is 1): each its own
      const V P0 = load(k), P1 = load(k + 4);
      if constexpr (kWrite) {
        if constexpr (kExcl) {
          store4<false>(p.out + at4(k), idval);
          store4<false>(p.out + at4(k + 4), idval);
          prev = Op::value(P1);
        } else {
          store4<false>(p.out + at4(k), Op::value(P0));
          store4<false>(p.out + at4(k + 4), Op::value(P1));
        }
      }
      Lv = vdbcast_last<Op, kRev>(P1);
      anyh = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
      continue;
    }
    const __m256d f0 = seg_mask4(static_cast<uint32_t>(kRev ? w >> 32 : w));
    const __m256d f1 = seg_mask4(static_cast<uint32_t>(kRev ? w : w >> 32));
    __m256d F0 = f0, F1 = f1;
    const V P0 = seg_scan4<Op, kRev>(load(k), F0);
    V P1 = seg_scan4<Op, kRev>(load(k + 4), F1);
    P1 = seg_sel<Op>(Op::comb(vdbcast_last<Op, kRev>(P0), P1), P1, F1);
    F1 = _mm256_or_pd(F1, dbcast_last<kRev>(F0));
    if constexpr (kWrite) {
      emit(k, seg_sel<Op>(Op::comb(Lv, P0), P0, F0), f0);
      emit(k + 4, seg_sel<Op>(Op::comb(Lv, P1), P1, F1), f1);
    }
    const V B = vdbcast_last<Op, kRev>(P1);
    const __m256d G = dbcast_last<kRev>(F1);
    Lv = seg_sel<Op>(Op::comb(Lv, B), B, G);
    anyh = _mm256_or_pd(anyh, G);
  }
  if (k + 4 <= k1) {
    const __m256d f0 = seg_mask4(seg_load32(rs + (kRev ? n - 3 - k : k)));
    __m256d F0 = f0;
    const V P0 = seg_scan4<Op, kRev>(load(k), F0);
    if constexpr (kWrite) emit(k, seg_sel<Op>(Op::comb(Lv, P0), P0, F0), f0);
    const V B = vdbcast_last<Op, kRev>(P0);
    const __m256d G = dbcast_last<kRev>(F0);
    Lv = seg_sel<Op>(Op::comb(Lv, B), B, G);
    anyh = _mm256_or_pd(anyh, G);
    k += 4;
  }
  s = Op::lane0(Lv);
  head = head || _mm256_movemask_pd(anyh) != 0;
  for (; k < k1; ++k) {
    const int64_t l = kRev ? n - 1 - k : k;
    scalar(k, rs[kRev ? l + 1 : l]);
  }
}

// The highest (kLast) or lowest index in [lo, hi) whose byte is not 0, or -1: 8 bytes a step.
template <bool kLast>
static inline int64_t seg_find_flag(const bool* rs, int64_t lo, int64_t hi) {
  if constexpr (kLast) {
    int64_t i = hi;
    for (; i - 8 >= lo; i -= 8) {
      uint64_t w;
      std::memcpy(&w, rs + i - 8, 8);
      if (w != 0) return i - 8 + (63 - __builtin_clzll(w)) / 8;
    }
    for (; i > lo; --i) {
      if (rs[i - 1]) return i - 1;
    }
  } else {
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
      uint64_t w;
      std::memcpy(&w, rs + i, 8);
      if (w != 0) return i + __builtin_ctzll(w) / 8;
    }
    for (; i < hi; ++i) {
      if (rs[i]) return i;
    }
  }
  return -1;
}

// The total of scan positions [k0, k1) (SegmentedCombine's fold from the identity; the
// incoming state is not read): only the elements from the last head on count. With a head,
// the segmented walk from it; without, the unsegmented kernels' block total (a reduction
// without outputs: a tree over 8 elements a step, from the identity).
template <class Op, class T, bool kRev, bool kMask>
static void seg_row_total(const SegRow<T>& p, int64_t k0, int64_t k1, bool first_head, typename Op::S& s,
                          bool& head) {
  const int64_t n = p.n;
  const int64_t a = std::max<int64_t>(k0, 1);
  // the flag of scan position k >= 1 is rs[k] (forward) or rs[n - k] (reverse): the flags of
  // [a, k1) are the bytes [a, k1) or [n - k1 + 1, n - a + 1); the last head in scan order is
  // the highest (forward) or the lowest (reverse) byte set
  int64_t kh = -1;
  if (a < k1) {
    if constexpr (kRev) {
      const int64_t m = seg_find_flag<false>(p.rs, n - k1 + 1, n - a + 1);
      if (m >= 0) kh = n - m;
    } else {
      kh = seg_find_flag<true>(p.rs, a, k1);
    }
  }
  if (kh < 0 && k0 == 0 && first_head) kh = 0;
  if (kh >= 0) {
    seg_row_impl<Op, T, kRev, kMask, false, false>(p, kh, k1, first_head, s, head);
    head = true;
    return;
  }
  const Ptrs<T> q{p.in, p.coeff, p.mask, p.out};
  s = row_block_impl<Op, T, kRev, kMask, false, false, true, false>(q, 0, n, k0, k1, Op::sid());
}

// Run-time flags to instantiations: go(R, E, W), each a std::bool_constant: R = rev,
// W = write, E = excl where W (a walk that writes nothing has no exclusive form).
template <class Go>
static inline void with_rew(bool rev, bool excl, bool write, Go&& go) {
  using F = std::false_type;
  using Tr = std::true_type;
  auto with_e = [&](auto R, auto W) {
    if constexpr (decltype(W)::value) {
      if (excl) return go(R, Tr{}, W);
    }
    go(R, F{}, W);
  };
  auto with_w = [&](auto R) { write ? with_e(R, Tr{}) : with_e(R, F{}); };
  rev ? with_w(Tr{}) : with_w(F{});
}

// The row walk's entry (run-time flags to instantiations).
template <class Op, class T>
static void seg_row(const SegRow<T>& p, bool rev, bool excl, bool write, int64_t k0, int64_t k1, bool first_head,
                    typename Op::S& s, bool& head) {
  auto go = [&](auto R, auto M, auto E, auto W) {
    if constexpr (!decltype(W)::value) {
      seg_row_total<Op, T, decltype(R)::value, decltype(M)::value>(p, k0, k1, first_head, s, head);
    } else {
      seg_row_impl<Op, T, decltype(R)::value, decltype(M)::value, decltype(E)::value, decltype(W)::value>(
          p, k0, k1, first_head, s, head);
    }
  };
  with_rew(rev, excl, write, [&](auto R, auto E, auto W) {
    if constexpr (std::is_same_v<Op, SumOp>) {
      if (p.mask != nullptr) return go(R, std::true_type{}, E, W);
    }
    go(R, std::false_type{}, E, W);
  });
}

// ---- int64 sums along columns ------------------------------------------------------------------
// Int64 elements in int64 lanes: the column walk's lanes are bit containers (loads, stores,
// blends), the sum a wrapping _mm256_add_epi64 (SumCombine<int64_t>'s wrap_add: the generic
// walk's bits, whatever the order). The states travel through the walk's double buffers as
// bits (to_comps / from_comps); the identity 0 has the bits of 0.0 (seg_col_impl's idval).
// Rows keep the generic walk (no in-register prefix of int64 lanes here).
static SCANOPS_AI __m256d load4(const int64_t* p) {
  return _mm256_castsi256_pd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
static SCANOPS_AI int64_t load1(const int64_t* p) { return *p; }
template <bool kNT>
static SCANOPS_AI void store4(int64_t* p, __m256d v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_castpd_si256(v));
}
static SCANOPS_AI void store1(int64_t* p, int64_t v) { *p = v; }
struct I64SumOp {
  static constexpr int K = 1;
  using S = int64_t;
  static SCANOPS_AI __m256d idc(int) { return _mm256_setzero_pd(); }
  static SCANOPS_AI VS<1> comb(const VS<1>& a, const VS<1>& b) {
    return {{_mm256_castsi256_pd(_mm256_add_epi64(_mm256_castpd_si256(a.c[0]), _mm256_castpd_si256(b.c[0])))}};
  }
  static SCANOPS_AI __m256d value(const VS<1>& s) { return s.c[0]; }
  static SCANOPS_AI S scomb(S a, S b) { return static_cast<S>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
  static SCANOPS_AI S svalue(S s) { return s; }
  static SCANOPS_AI S sid() { return 0; }
  static SCANOPS_AI void to_comps(S s, double* d, int64_t w, int64_t j) {
    (void)w;
    std::memcpy(d + j, &s, 8);
  }
  static SCANOPS_AI S from_comps(const double* d, int64_t w, int64_t j) {
    (void)w;
    S s;
    std::memcpy(&s, d + j, 8);
    return s;
  }
};

// ---- sums, products and linear recurrences of float16 rows --------------------------------------
// One position at a time in scan order, the generic walk's arithmetic (walk_row of
// scan_cpu_segmented.cpp: a float64 state, combine(state, element), a head restarts at the
// element; the reset flags read 8 at a time, a word of zeros without a head test), with the
// conversions above instead of c10's software ones. Not seg_row_impl's in-register prefix: it
// reassociates, and float16 / bfloat16 outputs would show it (bfloat16 elements span more
// than float64's 53 bits, products and linear recurrences round at every step), where these
// dtypes keep the generic walk's bits. The walk without outputs (a chunk's total) is the same
// walk from the identity. (Bfloat16 rows keep the generic walk, whose conversions are cheap:
// kVecRows in scan_cpu_segmented.cpp.)
template <class Op, class T, bool kRev, bool kMask, bool kExcl, bool kWrite>
static void seg_row_seq_impl(const SegRow<T>& p, int64_t k0, int64_t k1, bool first_head, typename Op::S& s,
                             bool& head) {
  using S = typename Op::S;
  const int64_t n = p.n;
  const bool* rs = p.rs;
  const int64_t dl = kRev ? -1 : 1;
  auto lift = [&](int64_t l) SCANOPS_AIL -> S {
    if constexpr (Op::K == 2) {
      return {load1(p.coeff + l), load1(p.in + l)};
    } else {
      if constexpr (kMask) {
        if (!p.mask[l]) return Op::sid();
      }
      return load1(p.in + l);
    }
  };
  auto plain = [&](int64_t l) SCANOPS_AIL {
    const S x = lift(l);
    if constexpr (kWrite && kExcl) store1(p.out + l, Op::svalue(s));
    s = Op::scomb(s, x);
    if constexpr (kWrite && !kExcl) store1(p.out + l, Op::svalue(s));
  };
  auto any = [&](int64_t l, bool h) SCANOPS_AIL {
    if (!h) return plain(l);
    const S x = lift(l);
    if constexpr (kWrite && kExcl) store1(p.out + l, Op::svalue(Op::sid()));
    s = x;
    head = true;
    if constexpr (kWrite && !kExcl) store1(p.out + l, Op::svalue(s));
  };
  int64_t k = k0;
  int64_t l = kRev ? n - 1 - k0 : k0;
  if (k == 0 && k < k1) {
    any(l, first_head);
    ++k;
    l += dl;
  }
  // flags of positions l .. l + 7 in scan order: forward rs[l .. l + 7], reverse
  // rs[l - 6 .. l + 1] (the head of memory position l is rs[l + 1]; k >= 1, so rs[n] is never read)
  for (; k + 8 <= k1; k += 8, l += 8 * dl) {
    uint64_t w;
    std::memcpy(&w, rs + l + (kRev ? -6 : 0), 8);
    if (w == 0) {
      for (int j = 0; j < 8; ++j) plain(l + j * dl);
    } else {
      for (int j = 0; j < 8; ++j) {
        const int64_t lj = l + j * dl;
        any(lj, rs[kRev ? lj + 1 : lj]);
      }
    }
  }
  for (; k < k1; ++k, l += dl) any(l, rs[kRev ? l + 1 : l]);
}

template <class Op, class T>
static void seg_row_seq(const SegRow<T>& p, bool rev, bool excl, bool write, int64_t k0, int64_t k1,
                        bool first_head, typename Op::S& s, bool& head) {
  auto go = [&](auto R, auto M, auto E, auto W) {
    seg_row_seq_impl<Op, T, decltype(R)::value, decltype(M)::value, decltype(E)::value, decltype(W)::value>(
        p, k0, k1, first_head, s, head);
  };
  with_rew(rev, excl, write, [&](auto R, auto E, auto W) {
    if constexpr (std::is_same_v<Op, SumOp>) {
      if (p.mask != nullptr) return go(R, std::true_type{}, E, W);
    }
    go(R, std::false_type{}, E, W);
  });
}

// One column block: elements (o, l, i0 + j), j < w, at in[j] etc. of the row pointers below.
template <class T>
struct SegCols {
  const T* in;        // row l of the block: in + l * inner
  const T* coeff;     // coeff + l * csl (columns contiguous)
  const bool* mask;   // mask + l * msl
  const bool* rs;     // rs + l * rsl (+ j * rsi, rsi 0 or 1)
  T* out;             // out + l * inner
  int64_t n, inner, csl, msl, rsl, rsi;
};

// Scan positions [k0, k1) of w columns from their states L (K * w doubles, component-major),
// head flags H (w lane masks as doubles: 0 or all ones, or'ed with the positions' heads).
template <class Op, class T, bool kMask, bool kExcl, bool kWrite>
static void seg_col_impl(const SegCols<T>& p, bool rev, int64_t w, int64_t k0, int64_t k1, bool first_head,
                         double* L, double* H) {
  using V = VS<Op::K>;
  using S = typename Op::S;
  const __m256d idval = _mm256_set1_pd(Op::svalue(Op::sid()));
  const __m256d ones = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t l = rev ? p.n - 1 - k : k;
    const T* in = p.in + l * p.inner;
    const T* cf = Op::K == 2 ? p.coeff + l * p.csl : nullptr;
    const bool* mk = kMask ? p.mask + l * p.msl : nullptr;
    T* out = p.out + l * p.inner;
    // the head flags: position 0 (first_head), else reset at l (forward) or l + 1 (reverse)
    const bool* rs = p.rs + (rev ? l + 1 : l) * p.rsl;
    const bool first = k == 0;
    const bool bcast = first || p.rsi == 0;
    const __m256d hb = (first ? first_head : rs[0]) ? ones : _mm256_setzero_pd();
    int64_t j = 0;
    for (; j + 4 <= w; j += 4) {
      V x;
      if constexpr (Op::K == 2) x.c[0] = load4(cf + j);
      x.c[Op::K - 1] = load4(in + j);
      if constexpr (kMask) {
        const __m256d keep = mask4(mk + j);
        for (int c = 0; c < Op::K; ++c) x.c[c] = _mm256_blendv_pd(Op::idc(c), x.c[c], keep);
      }
      const __m256d h = bcast ? hb : seg_mask4(seg_load32(rs + j));
      V s;
      for (int c = 0; c < Op::K; ++c) s.c[c] = _mm256_loadu_pd(L + c * w + j);
      if constexpr (kWrite && kExcl) store4<false>(out + j, _mm256_blendv_pd(Op::value(s), idval, h));
      s = seg_sel<Op>(Op::comb(s, x), x, h);
      if constexpr (kWrite && !kExcl) store4<false>(out + j, Op::value(s));
      for (int c = 0; c < Op::K; ++c) _mm256_storeu_pd(L + c * w + j, s.c[c]);
      if constexpr (!kWrite) _mm256_storeu_pd(H + j, _mm256_or_pd(_mm256_loadu_pd(H + j), h));
    }
    for (; j < w; ++j) {
      const bool h = bcast ? (first ? first_head : rs[0]) : rs[j];
      S x;
      if constexpr (Op::K == 2) {
        x = {load1(cf + j), load1(in + j)};
      } else {
        x = load1(in + j);
      }
      if constexpr (kMask) {
        if (!mk[j]) x = Op::sid();
      }
      S s = Op::from_comps(L, w, j);
      if constexpr (kWrite && kExcl) store1(out + j, h ? Op::svalue(Op::sid()) : Op::svalue(s));
      s = h ? x : Op::scomb(s, x);
      if constexpr (kWrite && !kExcl) store1(out + j, Op::svalue(s));
      Op::to_comps(s, L, w, j);
      if constexpr (!kWrite) {
        if (h) H[j] = _mm256_cvtsd_f64(ones);
      }
    }
  }
}

template <class Op, class T>
static void seg_col(const SegCols<T>& p, bool rev, bool excl, bool write, int64_t w, int64_t k0, int64_t k1,
                    bool first_head, double* L, double* H) {
  auto go = [&](auto M, auto E, auto W) {
    seg_col_impl<Op, T, decltype(M)::value, decltype(E)::value, decltype(W)::value>(p, rev, w, k0, k1, first_head,
                                                                                   L, H);
  };
  // (rev is a run-time argument of the column walk: the flags' helper with rev = false)
  with_rew(false, excl, write, [&](auto, auto E, auto W) {
    if constexpr (std::is_same_v<Op, SumOp> || std::is_same_v<Op, I64SumOp>) {
      if (p.mask != nullptr) return go(std::true_type{}, E, W);
    }
    go(std::false_type{}, E, W);
  });
}

// The step of the cummax / cummin walks (rows, and the columns' tails): element x at position
// l with head flag h, from the state (m, mi); its outputs at *ov / *oi (exclusive: the state
// before the step, inclusive: after). A head restarts at the element, else the later element
// wins on >= / <= and a NaN wins and stays; mi < 0 (the identity, an initial value) writes -1.
// Float16 / bfloat16 compare as float (exact, ExtremumCombine::wins) and keep the element's own
// bits (a signaling NaN stays signaling, as in the generic walk).
template <class T>
static SCANOPS_AI auto ext_cmp(T v) {
  if constexpr (is_16bit_float_v<T>) {
    return f32_of(v);
  } else {
    return v;
  }
}
template <class T, bool kMax, bool kExcl, bool kWrite>
static SCANOPS_AI void ext_step(T x, bool h, int64_t l, T idv, T& m, int64_t& mi, T* ov, int64_t* oi) {
  if constexpr (kWrite && kExcl) {
    *ov = h ? idv : m;
    *oi = h || mi < 0 ? -1 : mi;
  }
  const auto xc = ext_cmp(x), mc = ext_cmp(m);
  if (h || xc != xc || (mc == mc && (kMax ? xc >= mc : xc <= mc))) {
    m = x;
    mi = l;
  }
  if constexpr (kWrite && !kExcl) {
    *ov = m;
    *oi = mi < 0 ? -1 : mi;
  }
}

// ---- cummax / cummin rows (float32 / float64 / float16 / bfloat16) ---------------------------
// (float16 / bfloat16: a group of 8, compared as floats, the broadcast stores of the state's
// own 16 bits)
template <class T, std::enable_if_t<is_16bit_float_v<T>, int> = 0>
static SCANOPS_AI __m256 vloadu(const T* p) {
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (std::is_same_v<T, c10::Half>) {
    return _mm256_cvtph_ps(u);
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(u), 16));
  }
}
template <class T, std::enable_if_t<is_16bit_float_v<T>, int> = 0>
static SCANOPS_AI __m256 vset1(T v) {
  return _mm256_set1_ps(f32_of(v));
}
// W = 32 / sizeof(T) copies of v at p (16-bit types: 8)
template <class T>
static SCANOPS_AI void ext_fill(T* p, T v) {
  if constexpr (is_16bit_float_v<T>) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_set1_epi16(static_cast<int16_t>(v.x)));
  } else {
    vstore<false>(p, vset1(v));
  }
}
// ext_row_impl's walk (scan_cpu_avx2.h) with heads: a group of one vector (8 floats / 4
// doubles) with no head (its flag bytes read as one word) and no element winning against
// the running (m, mi) writes (m, mi) to every position with broadcast stores (random data:
// nearly every group); any other group walks its elements one at a time: a head restarts
// the state at the element, else torch's rule (later wins on >= / <=, NaN wins and stays).
// The rule is read on values: the identity's value (-inf / +inf) loses to every element, as
// its index -1 does in ExtremumCombine::combine. A selection rounds nothing: the bits are
// the generic walk's. mi is the state's own index (-1 identity, -2 an initial value, else
// the position); outputs write index(): -1 for both.
template <class T, bool kMax, bool kRev, bool kExcl, bool kWrite>
static void seg_ext_row_impl(const T* in, T* out, int64_t* idx, const bool* rs, int64_t n, int64_t k0, int64_t k1,
                             bool first_head, T& m, int64_t& mi, bool& head) {
  constexpr int64_t W = sizeof(T) == 2 ? 8 : 32 / sizeof(T);
  const T idv = kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  auto step = [&](int64_t k, bool h) SCANOPS_AIL {
    const int64_t l = kRev ? n - 1 - k : k;
    ext_step<T, kMax, kExcl, kWrite>(in[l], h, l, idv, m, mi, out + l, idx + l);
    head = head || h;
  };
  int64_t k = k0;
  if (k == 0 && k < k1) step(k++, first_head);
  for (; k + W <= k1; k += W) {
    // flags of positions k .. k + W - 1: forward rs[k .. k + W - 1], reverse rs[n - k - W + 1 .. n - k]
    uint64_t w = 0;
    std::memcpy(&w, rs + (kRev ? n - k - W + 1 : k), W);
    const int64_t at = kRev ? n - W - k : k;
    const auto x = vloadu(in + at);
    if (w == 0 && wins_mask<kMax>(x, vset1(m)) == 0) {
      if constexpr (kWrite) {
        ext_fill(out + at, m);
        const __m256i iv = _mm256_set1_epi64x(mi < 0 ? -1 : mi);
        for (int64_t j = 0; j < W; j += 4) istore<false>(idx + at + j, iv);
      }
      continue;
    }
    for (int64_t j = 0; j < W; ++j) {
      const int64_t l = kRev ? n - 1 - (k + j) : k + j;
      step(k + j, rs[kRev ? l + 1 : l]);
    }
  }
  for (; k < k1; ++k) {
    const int64_t l = kRev ? n - 1 - k : k;
    step(k, rs[kRev ? l + 1 : l]);
  }
}

template <class T, bool kMax>
static void seg_ext_row(const T* in, T* out, int64_t* idx, const bool* rs, int64_t n, bool rev, bool excl, bool write,
                        int64_t k0, int64_t k1, bool first_head, T& m, int64_t& mi, bool& head) {
  auto go = [&](auto R, auto E, auto Wr) {
    seg_ext_row_impl<T, kMax, decltype(R)::value, decltype(E)::value, decltype(Wr)::value>(in, out, idx, rs, n, k0,
                                                                                          k1, first_head, m, mi, head);
  };
  with_rew(rev, excl, write, go);
}

// ---- cummax / cummin columns (float32 / float64 / float16 / bfloat16) ----------------------
// The row step's rule lane-wise over w columns side by side (a column a lane, 4 at a time):
// each column's state (m, mi) in M / I between positions; a head (the lane's reset flag, or one
// broadcast to the row) restarts at the element, else the later element wins on >= / <= and a
// NaN wins and stays. Selections only: the bits are the generic walk's. Hd (w flags) or's the
// heads of the walk without outputs (a chunk's total).
template <class T, bool kMax>
static SCANOPS_AI __m256i ext_col_wins(const T* x, const T* m, __m256i h) {
  if constexpr (std::is_same_v<T, float> || is_16bit_float_v<T>) {
    __m128 xv, mv;
    if constexpr (std::is_same_v<T, float>) {
      xv = _mm_loadu_ps(x);
      mv = _mm_loadu_ps(m);
    } else {
      xv = f32x4(x);
      mv = f32x4(m);
    }
    const __m128 w = _mm_or_ps(_mm_cmp_ps(xv, xv, _CMP_UNORD_Q),
                               _mm_cmp_ps(xv, mv, kMax ? _CMP_GE_OQ : _CMP_LE_OQ));
    return _mm256_or_si256(h, _mm256_cvtepi32_epi64(_mm_castps_si128(w)));
  } else {
    const __m256d xv = _mm256_loadu_pd(x), mv = _mm256_loadu_pd(m);
    const __m256d w = _mm256_or_pd(_mm256_cmp_pd(xv, xv, _CMP_UNORD_Q),
                                   _mm256_cmp_pd(xv, mv, kMax ? _CMP_GE_OQ : _CMP_LE_OQ));
    return _mm256_or_si256(h, _mm256_castpd_si256(w));
  }
}
// 4 values at p: where sel, a's, else b's (sel: 64-bit lane masks)
template <class T>
static SCANOPS_AI void ext_col_pick(T* p, const T* a, const T* b, __m256i sel) {
  if constexpr (std::is_same_v<T, float>) {
    const __m128i s32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(sel, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    _mm_storeu_ps(p, _mm_blendv_ps(_mm_loadu_ps(b), _mm_loadu_ps(a), _mm_castsi128_ps(s32)));
  } else if constexpr (is_16bit_float_v<T>) {  // the values' own bits
    const __m128i s32 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(sel, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    const __m128i s16 = _mm_packs_epi32(s32, s32);
    const __m128i va = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a));
    const __m128i vb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_blendv_epi8(vb, va, s16));
  } else {
    _mm256_storeu_pd(p, _mm256_blendv_pd(_mm256_loadu_pd(b), _mm256_loadu_pd(a), _mm256_castsi256_pd(sel)));
  }
}
template <class T, bool kMax, bool kExcl, bool kWrite>
static void seg_ext_col_impl(const T* in, T* out, int64_t* idx, const bool* rs, int64_t n, int64_t inner, int64_t rsl,
                             int64_t rsi, bool rev, int64_t w, int64_t k0, int64_t k1, bool first_head, T* M,
                             int64_t* I, bool* Hd) {
  const T idv = kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  T idb[4] = {idv, idv, idv, idv};
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t l = rev ? n - 1 - k : k;
    const T* x = in + l * inner;
    T* o = out + l * inner;
    int64_t* oi = idx + l * inner;
    const bool* r = rs + (rev ? l + 1 : l) * rsl;  // position 0: first_head instead
    const bool first = k == 0;
    const bool bcast = first || rsi == 0;
    const bool hb = first ? first_head : r[0];
    const __m256i hv = _mm256_set1_epi64x(hb ? -1 : 0);
    const __m256i lv = _mm256_set1_epi64x(l);
    int64_t j = 0;
    for (; j + 4 <= w; j += 4) {
      const __m256i h = bcast ? hv : _mm256_castpd_si256(seg_mask4(seg_load32(r + j)));
      __m256i mi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(I + j));
      if constexpr (kWrite && kExcl) {
        ext_col_pick(o + j, idb, M + j, h);
        const __m256i none = _mm256_or_si256(h, _mm256_cmpgt_epi64(zero, mi));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(oi + j), _mm256_or_si256(mi, none));
      }
      const __m256i win = ext_col_wins<T, kMax>(x + j, M + j, h);
      ext_col_pick(M + j, x + j, M + j, win);
      mi = _mm256_blendv_epi8(mi, lv, win);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(I + j), mi);
      if constexpr (kWrite && !kExcl) {
        std::memcpy(o + j, M + j, 4 * sizeof(T));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(oi + j), _mm256_or_si256(mi, _mm256_cmpgt_epi64(zero, mi)));
      }
      if constexpr (!kWrite) {
        if (!bcast || hb) {
          alignas(32) int64_t hs[4];
          _mm256_store_si256(reinterpret_cast<__m256i*>(hs), h);
          for (int q = 0; q < 4; ++q) Hd[j + q] = Hd[j + q] || hs[q] != 0;
        }
      }
    }
    for (; j < w; ++j) {
      const bool h = bcast ? hb : r[j];
      ext_step<T, kMax, kExcl, kWrite>(x[j], h, l, idv, M[j], I[j], o + j, oi + j);
      Hd[j] = Hd[j] || h;
    }
  }
}

template <class T, bool kMax>
static void seg_ext_col(const T* in, T* out, int64_t* idx, const bool* rs, int64_t n, int64_t inner, int64_t rsl,
                        int64_t rsi, bool rev, bool excl, bool write, int64_t w, int64_t k0, int64_t k1,
                        bool first_head, T* M, int64_t* I, bool* Hd) {
  // (rev is a run-time argument of the column walk: the flags' helper with rev = false)
  with_rew(false, excl, write, [&](auto, auto E, auto Wr) {
    seg_ext_col_impl<T, kMax, decltype(E)::value, decltype(Wr)::value>(in, out, idx, rs, n, inner, rsl, rsi, rev, w,
                                                                       k0, k1, first_head, M, I, Hd);
  });
}

// ---- logcumsumexp rows -----------------------------------------------------------------------
// The online form of scan_cpu_lse_avx2.h (state (m, t): the running maximum and the sum of
// exp(x - m) less the maximum's 1; value m + log1p(t)), per segment. A head restarts both:
// the maximum is a segmented in-register prefix max (a lane whose window holds a head keeps
// its own), and the element's map t -> A t + a is the constant map to -0.0 (A = 0; a NaN
// element: NaN), so value(head) = x + log1p(-0.0) = x bit for bit, NaN for NaN; the t scan
// is seg_scan4 over the maps (a lane after a head takes the composed constant map, others
// apply the carried t). The three loops and the lockstep exps / log1ps of lse_row_impl.
// An exclusive output at a head is the identity's value, -inf. A state from outside (a
// carry, a line's start) enters as (v, -0.0) ((-inf, NaN) for a NaN v: the maximum skips
// NaN) and leaves as m + log1p(t).

// The maxima after (M) or before (Mp, kExcl) each element of NV groups and their maps.
template <bool kRev, bool kExcl, int NV>
static SCANOPS_AI void seg_lse_factors(const __m256d* x, const __m256d* f, __m256d& mp, double* vm, double* vA,
                                       double* va) {
  const __m256d ninf = _mm256_set1_pd(-__builtin_inf());
  const __m256d z = _mm256_setzero_pd();
  __m256d d[NV], gt[NV], nan[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    nan[v] = _mm256_cmp_pd(x[v], x[v], _CMP_UNORD_Q);
    const __m256d xs = _mm256_blendv_pd(x[v], ninf, nan[v]);
    __m256d F = f[v];
    __m256d M = _mm256_blendv_pd(_mm256_max_pd(xs, dshift1<kRev>(xs, ninf)), xs, F);
    F = _mm256_or_pd(F, dshift1<kRev>(F, z));
    M = _mm256_blendv_pd(_mm256_max_pd(M, dshift2<kRev>(M, ninf)), M, F);
    F = _mm256_or_pd(F, dshift2<kRev>(F, z));
    M = _mm256_blendv_pd(_mm256_max_pd(M, mp), M, F);  // running max after each element
    const __m256d Mp = dshift_in<kRev>(M, mp);         // ... and before it
    d[v] = lse_factor_arg(x[v], xs, nan[v], Mp, M, gt[v]);
    _mm256_store_pd(vm + 4 * v, kExcl ? Mp : M);
    mp = dbcast_last<kRev>(M);
  }
  lse_expv<NV>(d);
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __m256d A = _mm256_blendv_pd(_mm256_set1_pd(1.0), d[v], gt[v]);
    const __m256d hb = _mm256_blendv_pd(_mm256_set1_pd(-0.0), x[v], nan[v]);
    _mm256_store_pd(vA + 4 * v, _mm256_blendv_pd(A, z, f[v]));
    _mm256_store_pd(va + 4 * v, _mm256_blendv_pd(d[v], hb, f[v]));
  }
}

// Scan positions [s0, s1) of a row (element l at in[l], its reset flag rs[l]) from the state
// (s, head) (s a log-sum-exp value; first_head: position 0 is a head).
template <class T, bool kRev, bool kExcl, bool kWrite>
static void seg_lse_row_impl(const T* in, T* out, const bool* rs, int64_t n, int64_t s0, int64_t s1, bool first_head,
                             double& s, bool& head) {
  constexpr int64_t kG = 16;
  constexpr int kL = 8;
  alignas(32) double bm[4 * kG], bA[4 * kG], bt[4 * kG], bf[4 * kG];
  const double ninf = -__builtin_inf();
  __m256d mp = _mm256_set1_pd(s != s ? ninf : s), tp = _mm256_set1_pd(s != s ? s : -0.0);
  __m256d anyh = _mm256_setzero_pd();
  auto at = [&](int64_t k) { return kRev ? n - 4 - k : k; };  // a group's first element
  // the head flags of the group at scan position k with c real lanes (memory lane order)
  auto flags4 = [&](int64_t k, int64_t c) -> __m256d {
    if (k > 0 && c == 4) return seg_mask4(seg_load32(rs + (kRev ? n - 3 - k : k)));
    uint8_t b[4] = {0, 0, 0, 0};
    for (int64_t j = 0; j < c; ++j) {
      const int64_t l = kRev ? n - 1 - (k + j) : k + j;
      b[kRev ? 3 - j : j] = (k + j == 0) ? first_head : rs[kRev ? l + 1 : l];
    }
    uint32_t w;
    std::memcpy(&w, b, 4);
    return seg_mask4(w);
  };
  for (int64_t k = s0; k < s1; k += 4 * kG) {
    const int64_t len = std::min(s1 - k, 4 * kG), full = len / 4, r = len % 4;
    const int64_t lo = kRev ? n - k - len : k + 4 * full;  // the partial group's elements
    const int64_t off = kRev ? 4 - r : 0;                  // ... in its buffer
    int64_t g = 0;
    for (; g + kL <= full; g += kL) {
      __m256d x[kL], f[kL];
      for (int v = 0; v < kL; ++v) {
        x[v] = load4(in + at(k + 4 * (g + v)));
        f[v] = flags4(k + 4 * (g + v), 4);
        _mm256_store_pd(bf + 4 * (g + v), f[v]);
      }
      seg_lse_factors<kRev, kExcl, kL>(x, f, mp, bm + 4 * g, bA + 4 * g, bt + 4 * g);
    }
    for (; g < full; ++g) {
      const __m256d x = load4(in + at(k + 4 * g));
      const __m256d f = flags4(k + 4 * g, 4);
      _mm256_store_pd(bf + 4 * g, f);
      seg_lse_factors<kRev, kExcl, 1>(&x, &f, mp, bm + 4 * g, bA + 4 * g, bt + 4 * g);
    }
    if (r > 0) {  // padded with -inf and no heads: later in scan order, they change no output
      const T pinf = -std::numeric_limits<T>::infinity();
      T xb[4] = {pinf, pinf, pinf, pinf};
      std::memcpy(xb + off, in + lo, static_cast<size_t>(r) * sizeof(T));
      const __m256d x = load4(xb);
      const __m256d f = flags4(k + 4 * full, r);
      _mm256_store_pd(bf + 4 * full, f);
      seg_lse_factors<kRev, kExcl, 1>(&x, &f, mp, bm + 4 * full, bA + 4 * full, bt + 4 * full);
    }
    const int64_t ng = full + (r > 0);
    for (int64_t gg = 0; gg < ng; ++gg) {
      VS<2> v{{_mm256_load_pd(bA + 4 * gg), _mm256_load_pd(bt + 4 * gg)}};
      __m256d F = _mm256_load_pd(bf + 4 * gg);
      anyh = _mm256_or_pd(anyh, F);
      v = seg_scan4<AffineOp, kRev>(v, F);
      const __m256d tn = _mm256_blendv_pd(_mm256_fmadd_pd(v.c[0], tp, v.c[1]), v.c[1], F);
      if constexpr (kWrite) _mm256_store_pd(bt + 4 * gg, kExcl ? dshift_in<kRev>(tn, tp) : tn);
      tp = dbcast_last<kRev>(tn);
    }
    if constexpr (kWrite) {
      const __m256d nv = _mm256_set1_pd(ninf);
      auto fix = [&](int64_t gg, __m256d y) {  // exclusive: -inf at a head
        return kExcl ? _mm256_blendv_pd(y, nv, _mm256_load_pd(bf + 4 * gg)) : y;
      };
      int64_t gg = 0;
      for (; gg + kL <= full; gg += kL) {
        __m256d y[kL];
        for (int v = 0; v < kL; ++v) y[v] = _mm256_load_pd(bt + 4 * (gg + v));
        lse_log1pv<kL>(y);
        for (int v = 0; v < kL; ++v)
          store4<false>(out + at(k + 4 * (gg + v)),
                        fix(gg + v, _mm256_add_pd(_mm256_load_pd(bm + 4 * (gg + v)), y[v])));
      }
      for (; gg < full; ++gg)
        store4<false>(out + at(k + 4 * gg),
                      fix(gg, lse_value(_mm256_load_pd(bm + 4 * gg), _mm256_load_pd(bt + 4 * gg))));
      if (r > 0) {
        T yb[4];
        store4<false>(yb, fix(full, lse_value(_mm256_load_pd(bm + 4 * full), _mm256_load_pd(bt + 4 * full))));
        std::memcpy(out + lo, yb + off, static_cast<size_t>(r) * sizeof(T));
      }
    }
  }
  head = head || _mm256_movemask_pd(anyh) != 0;
  s = _mm256_cvtsd_f64(lse_value(mp, tp));
}

template <class T>
static void seg_lse_row(const T* in, T* out, const bool* rs, int64_t n, bool rev, bool excl, bool write, int64_t s0,
                        int64_t s1, bool first_head, double& s, bool& head) {
  auto go = [&](auto R, auto E, auto W) {
    seg_lse_row_impl<T, decltype(R)::value, decltype(E)::value, decltype(W)::value>(in, out, rs, n, s0, s1,
                                                                                    first_head, s, head);
  };
  with_rew(rev, excl, write, go);
}

// ---- logcumsumexp columns (float32 / float64) ------------------------------------------------
// The unsegmented column walk's update (scan_cpu_lse_avx2.h's lse_col_tile: the state (m, t) of
// a column a lane, a = exp(-|x - m|), t' = t + a, or a t + a where x > m) with the rows' head
// rule lane-wise: at a head the lane restarts at the element, m = x (-inf for a NaN x) and
// t = -0.0 (NaN for a NaN x), so its value m + log1p(t) is x bit for bit. The exps and
// log1ps of up to 8 vectors of a row run in lockstep. The states enter from the walk's values
// as (v, -0.0) ((-inf, NaN) for a NaN v) and leave as m + log1p(t), as the rows' kernel's; the
// calls' position ranges are the shape's (unit chunks), so the bits do not depend on the
// threads. Lm / Lt: the states of w columns, padded to a multiple of 4. Hd (w flags) or's the
// heads of a walk without outputs (a chunk's total).
template <class T, bool kExcl, bool kWrite, int V>
static SCANOPS_AI void seg_lse_col_batch(const T* x, T* o, const bool* r, bool bcast, bool hb, int64_t c0, int64_t w,
                                         double* Lm, double* Lt, bool* Hd) {
  const __m256d ninf = _mm256_set1_pd(-__builtin_inf());
  const __m256d nz = _mm256_set1_pd(-0.0);
  const __m256d hv = _mm256_castsi256_pd(_mm256_set1_epi64x(hb ? -1 : 0));
  __m256d xv[V], h[V], m[V], t[V], d[V], gt[V], nan[V], M[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const int64_t c = c0 + 4 * v, rc = std::min<int64_t>(4, w - c);
    if (rc == 4) {
      xv[v] = load4(x + c);
      h[v] = bcast ? hv : seg_mask4(seg_load32(r + c));
    } else {  // the last, partial vector: its other lanes read 0 and no head, not written
      T xb[4] = {0, 0, 0, 0};
      std::memcpy(xb, x + c, static_cast<size_t>(rc) * sizeof(T));
      xv[v] = load4(xb);
      if (bcast) {
        h[v] = hv;
      } else {
        uint8_t b[4] = {0, 0, 0, 0};
        for (int64_t q = 0; q < rc; ++q) b[q] = r[c + q];
        uint32_t wd;
        std::memcpy(&wd, b, 4);
        h[v] = seg_mask4(wd);
      }
    }
    m[v] = _mm256_loadu_pd(Lm + c);
    t[v] = _mm256_loadu_pd(Lt + c);
    nan[v] = _mm256_cmp_pd(xv[v], xv[v], _CMP_UNORD_Q);
    const __m256d xs = _mm256_blendv_pd(xv[v], ninf, nan[v]);
    const __m256d mx = _mm256_max_pd(xs, m[v]);
    d[v] = lse_factor_arg(xv[v], xs, nan[v], m[v], mx, gt[v]);
    M[v] = _mm256_blendv_pd(mx, xs, h[v]);
  }
  lse_expv<V>(d);
  __m256d ot[V];  // the outputs' t: after the element, or before it (exclusive)
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const int64_t c = c0 + 4 * v;
    __m256d tn = _mm256_blendv_pd(_mm256_add_pd(t[v], d[v]), _mm256_fmadd_pd(d[v], t[v], d[v]), gt[v]);
    tn = _mm256_blendv_pd(tn, _mm256_blendv_pd(nz, xv[v], nan[v]), h[v]);
    ot[v] = kExcl ? t[v] : tn;
    _mm256_storeu_pd(Lm + c, M[v]);
    _mm256_storeu_pd(Lt + c, tn);
    if constexpr (!kWrite) {
      const int hm = _mm256_movemask_pd(h[v]);
      if (hm != 0) {
        const int64_t rc = std::min<int64_t>(4, w - c);
        for (int64_t q = 0; q < rc; ++q) Hd[c + q] = Hd[c + q] || ((hm >> q) & 1);
      }
    }
  }
  if constexpr (kWrite) {
    lse_log1pv<V>(ot);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const int64_t c = c0 + 4 * v, rc = std::min<int64_t>(4, w - c);
      __m256d y = _mm256_add_pd(kExcl ? m[v] : M[v], ot[v]);
      if constexpr (kExcl) y = _mm256_blendv_pd(y, ninf, h[v]);  // exclusive: -inf at a head
      if (rc == 4) {
        store4<false>(o + c, y);
      } else {
        T yb[4];
        store4<false>(yb, y);
        std::memcpy(o + c, yb, static_cast<size_t>(rc) * sizeof(T));
      }
    }
  }
}

template <class T, bool kExcl, bool kWrite>
static void seg_lse_col_impl(const T* in, T* out, const bool* rs, int64_t n, int64_t inner, int64_t rsl, int64_t rsi,
                             bool rev, int64_t w, int64_t k0, int64_t k1, bool first_head, double* Lm, double* Lt,
                             bool* Hd) {
  const int64_t nv = (w + 3) / 4;
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t l = rev ? n - 1 - k : k;
    const T* x = in + l * inner;
    T* o = out + l * inner;
    const bool* r = rs + (rev ? l + 1 : l) * rsl;  // position 0: first_head instead
    const bool first = k == 0;
    const bool bcast = first || rsi == 0;
    const bool hb = first ? first_head : (bcast ? r[0] : false);
    int64_t v = 0;
    for (; v + 8 <= nv; v += 8) seg_lse_col_batch<T, kExcl, kWrite, 8>(x, o, r, bcast, hb, 4 * v, w, Lm, Lt, Hd);
    switch (nv - v) {  // the vectors left, in one batch
      case 1: seg_lse_col_batch<T, kExcl, kWrite, 1>(x, o, r, bcast, hb, 4 * v, w, Lm, Lt, Hd); break;
      case 2: seg_lse_col_batch<T, kExcl, kWrite, 2>(x, o, r, bcast, hb, 4 * v, w, Lm, Lt, Hd); break;
      case 3: seg_lse_col_batch<T, kExcl, kWrite, 3>(x, o, r, bcast, hb, 4 * v, w, Lm, Lt, Hd); break;
      case 4: seg_lse_col_batch<T, kExcl, kWrite, 4>(x, o, r, bcast, hb, 4 * v, w, Lm, Lt, Hd); break;
      case 5: seg_lse_col_batch<T, kExcl, kWrite, 5>(x, o, r, bcast, hb, 4 * v, w, Lm, Lt, Hd); break;
      case 6: seg_lse_col_batch<T, kExcl, kWrite, 6>(x, o, r, bcast, hb, 4 * v, w, Lm, Lt, Hd); break;
      case 7: seg_lse_col_batch<T, kExcl, kWrite, 7>(x, o, r, bcast, hb, 4 * v, w, Lm, Lt, Hd); break;
      default: break;
    }
  }
}

// S: the w columns' values (kMaxCols at most), in and out.
template <class T, int kMaxCols>
static void seg_lse_col(const T* in, T* out, const bool* rs, int64_t n, int64_t inner, int64_t rsl, int64_t rsi,
                        bool rev, bool excl, bool write, int64_t w, int64_t k0, int64_t k1, bool first_head, double* S,
                        bool* Hd) {
  alignas(32) double Lm[kMaxCols + 4], Lt[kMaxCols + 4];
  for (int64_t j = 0; j < w; ++j) {  // (v, -0.0), or (-inf, NaN) for a NaN v
    Lm[j] = S[j] != S[j] ? -__builtin_inf() : S[j];
    Lt[j] = S[j] != S[j] ? S[j] : -0.0;
  }
  for (int64_t j = w; j < kMaxCols + 4; ++j) Lm[j] = Lt[j] = 0.0;
  with_rew(false, excl, write, [&](auto, auto E, auto Wr) {
    seg_lse_col_impl<T, decltype(E)::value, decltype(Wr)::value>(in, out, rs, n, inner, rsl, rsi, rev, w, k0, k1,
                                                                 first_head, Lm, Lt, Hd);
  });
  for (int64_t j = 0; j < w; ++j) S[j] = _mm256_cvtsd_f64(lse_value(_mm256_set1_pd(Lm[j]), _mm256_set1_pd(Lt[j])));
}

#undef SCANOPS_AI
#undef SCANOPS_AIL
}  // namespace avx2
