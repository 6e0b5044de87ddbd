// scanops CPU back end: the kernels, the scheduler and CpuRunner<Combine, in_t, out_t> (the
// entry of one instantiation). Included by the translation units that instantiate them, one per
// combine kind (scan_cpu_<kind>.cpp), so that they compile in parallel; the process-wide memory
// and store policy is in scan_cpu_memory.cpp, the entry scan_cpu() in scan_cpu.cpp.
// Everything here but that policy has internal linkage: each kind's instantiations are its own.
//
//
// The canonical problem is outer x length x inner (element (o, l, i) at (o*length + l)*inner + i).
// All loops are in *scan order*: scan position s maps to l = reverse ? length-1-s : s.
//
// Arithmetic (what fixes the bits; it depends on the shape and dtype only, never on the
// thread count or on which thread scans what):
//   * Rows (inner == 1): a row is cut into fixed blocks of kBlockBytes of input, counted in
//     scan order from the row's start. Inside a block the local prefix L is built from the
//     block's own elements (SIMD: groups of 8 = two 4-lane in-register scans, see
//     scan_cpu_avx2.h; scalar: groups of 8 with independent local prefixes). An output is
//     value(combine(C_b, L)) where C_b is the block's carry-in, folded sequentially:
//     C_1 = T_0, C_{b+1} = combine(C_b, T_b) (T_b: the block's total); the first block writes
//     value(L). A block scanned by one thread from its carry-in thus gives exactly what a
//     one-thread pass over the whole row gives. (Portable logcumsumexp: one block per line,
//     see WholeLines; cummax / cummin and logcumsumexp walk without the groups of 8, see
//     SequentialOnly. AVX2 logcumsumexp and cummax / cummin walk a block from its carry-in
//     instead, which gives the one-pass walk's bits for any blocking: see LseKernel, ExtKernel.)
//   * Columns (inner > 1): every column is scanned sequentially, vectorised across the
//     contiguous columns. When the problem has few columns (outer*inner < kFewColumns) and long
//     lines, the length is cut into fixed blocks of rows with the same carry-in arithmetic, so
//     long columns can be split across threads.
//   * An initial value (LineState::initial, Ctx::init): a row's first block has a carry-in
//     too, the line's start state K::start (Combine::start of its value), in every schedule
//     (C_0 = start, C_{b+1} = fold(C_b, T_b), outputs value(combine(C_b, L)) as for any block
//     with a carry-in), so the bits stay independent of the thread count. A one-block line
//     (rows_short), a column walk that is not cut into blocks and the first block of a
//     blocked column walk from the start state instead (no combine per element more than
//     from the identity; the blocked column's next carry is that walk's end, in every
//     schedule). Either way an exclusive scan's first output is value(start) itself, not
//     value(combine(start, identity)), which for a sum is v + 0: +0.0 for v = -0.0.
//     cummax / cummin's AVX2 walks tell the identity by its value, not its index: their start
//     state is (v, -1) (ExtKernel::start, fold). logcumsumexp's is (v, -0.0), whose value is
//     v + log1p(-0.0) = v + -0.0 = v bitwise (LseKernel::start).
// Scheduling (free to depend on the thread count): many lines -> at::parallel_for over lines;
// few long lines -> a chained scan over the blocks of all lines: workers claim blocks in order
// from an atomic counter, compute the block's total (reading it into cache), wait for the
// carry-in published by the previous block's worker, publish their own carry-out, claim their
// next block, then rescan this one from cache while prefetching the next (whose totals pass
// then reads from cache). Blocks are claimed in order (one at a time, or runs of consecutive
// blocks: Scheduler::run_blocks), so the block a worker waits on is always being processed by
// a running worker: no deadlock even when parallel_for runs the workers inline (nested
// parallelism) or on fewer threads. The data is read from RAM once.
//
// Kernels: AVX2 + FMA (float32 / float64 inputs, float64 lanes: float32 accumulates in
// float64 as torch's CPU kernel does; complex64 / complex128 sums along rows with
// complex<double> states, two elements a vector; cummax / cummin along float32 / float64
// rows and columns) in scan_cpu_avx2.h, logcumsumexp of float32 / float64 rows and columns
// (float64 lanes) in scan_cpu_lse_avx2.h, compiled with a GCC target pragma and used only when
// the CPU has AVX2 and FMA (and ATen's capability is not forced to DEFAULT,
// SCANOPS_CPU_KERNELS != generic); a portable scalar kernel for every other case.
// Outputs are written with regular stores (streaming stores on request: use_streaming_stores).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SCANOPS_AVX2_KERNELS 1
#include <immintrin.h>
#endif

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "ops/dispatch.h"

// The process-wide memory and store policy (scan_cpu_memory.cpp): one state per process for
// every translation unit of the back end.
namespace scanops {
void advise_huge_pages(void* p, int64_t bytes);  // MADV_HUGEPAGE for large outputs (see there)
bool use_prefault(int64_t bytes);                // populate output pages ahead of the stores?
void prefault_bytes(const void* p, int64_t bytes);
bool use_streaming_stores(int64_t bytes);        // SCANOPS_CPU_STREAM
bool use_avx2();                                 // AVX2 + FMA kernels usable (and not turned off)
}  // namespace scanops


namespace scanops {
namespace {

constexpr int64_t kBlockBytes = 128 * 1024;   // input bytes per block (stays in L2 for the rescan)
constexpr int64_t kFewColumns = 4096;         // below: column scans are blocked along the length
constexpr int64_t kGrain = 32 * 1024;         // elements per parallel task, at least
constexpr int64_t kStreamBytes = 16 << 20;    // "large" outputs (huge pages, SCANOPS_CPU_STREAM < 0)
constexpr int64_t kMaxColWidth = 2048;        // columns per work item (carry array in L1/L2)

struct Ctx {
  const void* in;
  const void* coeff;
  const bool* mask;
  void* out;
  int64_t* idx;  // indexed combines (cummax / cummin): the positions, else nullptr
  int64_t outer, n, inner;
  bool exclusive, reverse, stream;
  int64_t out_size;  // bytes of an output element
  bool prefault;     // populate output pages ahead of the stores (prefault_range)
  bool col_prefetch = false;  // column walks prefetch their input rows ahead (one thread only)
  // Row walks with outputs prefetch their inputs this many elements from the element they
  // read (0: kPrefetchBytes ahead in scan order). The chained scans' rescans, whose block is
  // in cache already, point it at the block the worker takes next (see Scheduler::rows).
  int64_t pf_next = 0;
  // LineState::initial (out_t, outer * inner values, line (o, i) at o * inner + i) or nullptr:
  // every line starts from K::start(c, line) instead of K::identity() (see Scheduler).
  const void* init = nullptr;
};

// A carry (a fold of block totals) that is NaN is made the canonical quiet NaN. Which NaN an
// add or multiply of two NaNs returns is the operand order the compiler picked, and a block's
// total comes from another instantiation of the walk (no stores) on several threads than on
// one (the walk that writes): the same bits, but for NaN payloads. With the carries settled,
// outputs no longer depend on the thread count in any bit (test_cpu_threads.py). Selections
// (cummax / cummin) keep the elements they select, payloads included: not settled.
inline double settle_nan(double v) { return v != v ? std::numeric_limits<double>::quiet_NaN() : v; }
inline float settle_nan(float v) { return v != v ? std::numeric_limits<float>::quiet_NaN() : v; }
template <class T>
inline c10::complex<T> settle_nan(const c10::complex<T>& z) {
  return {settle_nan(z.real()), settle_nan(z.imag())};
}
template <class T>
inline AffineState<T> settle_nan(const AffineState<T>& s) {
  return {settle_nan(s.a), settle_nan(s.b)};
}
template <class S>
inline S settle_nan(const S& s) {  // integers and other states: as they are
  return s;
}

template <class F>
inline void with_bool(bool b, F&& f) {
  if (b) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// with_bool for the mask flag of a kernel: only sums take a mask (masked_cumsum; the engine
// never hands another combine one), so the other combines instantiate no masked walk.
template <bool kCanMask, class F>
inline void with_mask(bool masked, F&& f) {
  if constexpr (kCanMask) {
    with_bool(masked, std::forward<F>(f));
  } else {
    f(std::false_type{});
  }
}

// SCANOPS_CPU_STREAM: unset or 0 (regular stores), positive (streaming stores at every size),
// negative (streaming stores for outputs of at least kStreamBytes, the default before
// 2026-11-24); see use_streaming_stores.
inline int stream_mode() {
  static const int mode = [] {
    const char* e = std::getenv("SCANOPS_CPU_STREAM");
    return e ? std::atoi(e) : 0;
  }();
  return mode;
}

// SCANOPS_CPU_RUN_BYTES: output bytes a worker of the chained scans claims at a time from 3
// threads (Scheduler::run_blocks); unset: kRunBytes; 0: one block at a time (the whole output
// populated first). The default is 0: on the 16-core Xeon (2026-11-26, 4 / 8 / 16 threads,
// 1-D and (N/64, 64) dim 0) runs of 1-4 MiB were level with single blocks and 256 KiB runs
// 1.3-3.5x slower (design.md, "CPU: chained scans"). Kept as the unit of a claim: a run is
// where two blocks' totals could be taken side by side.
constexpr int64_t kRunBytes = 0;
inline int64_t chained_run_bytes() {
  static const int64_t v = [] {
    const char* e = std::getenv("SCANOPS_CPU_RUN_BYTES");
    return e ? std::max<int64_t>(0, std::atoll(e)) : kRunBytes;
  }();
  return v;
}

// SCANOPS_CPU_PF_NEXT=0: the chained scans' rescans prefetch 2 KiB ahead as every walk does,
// not the run the worker takes next (Scheduler::rows).
inline bool prefetch_next_run() {
  static const bool v = [] {
    const char* e = std::getenv("SCANOPS_CPU_PF_NEXT");
    return !(e && std::string(e) == "0");
  }();
  return v;
}

inline void spin_pause() {
#if defined(SCANOPS_AVX2_KERNELS)
  _mm_pause();
#endif
}

}  // namespace

#if defined(SCANOPS_AVX2_KERNELS)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "ops/cpu/scan_cpu_avx2.h"
#include "ops/cpu/scan_cpu_lse_avx2.h"

namespace avx2 {

// Flag dispatch of the AVX2 kernels (compiled for AVX2 too: the lambdas are defined here).
template <class Op, class T>
struct Kernel {
  using S = typename Op::S;
  using cst_t = double;
  static constexpr int kComps = Op::K;
  static constexpr bool kCanMask = std::is_same_v<Op, SumOp>;
  static constexpr uintptr_t kAlign = 4 * sizeof(T);  // a streaming store writes 4 elements

  static Ptrs<T> ptrs(const Ctx& c) {
    return {static_cast<const T*>(c.in), static_cast<const T*>(c.coeff), c.mask, static_cast<T*>(c.out)};
  }
  static S identity() { return Op::sid(); }
  // The start state of line `line` (o * inner + i) of a problem with an initial value.
  static S start(const Ctx& c, int64_t line) { return Op::sstart(load1(static_cast<const T*>(c.init) + line)); }
  static S fold(const S& C, const S& T_) { return settle_nan(Op::scomb(C, T_)); }
  static bool row_stream_ok(const Ctx& c, int64_t o) {
    const int64_t end = c.reverse ? (o + 1) * c.n : o * c.n;
    return c.stream && (reinterpret_cast<uintptr_t>(static_cast<T*>(c.out) + end) % kAlign == 0);
  }

  __attribute__((noinline)) static S row_block(const Ctx& c, int64_t o, int64_t s0, int64_t s1, const S& C,
                                               bool carry, bool write) {
    const auto p = ptrs(c);
    const bool masked = kCanMask && c.mask != nullptr;
    S r{};
    if (!write) {
      with_bool(c.reverse, [&](auto R) {
        with_bool(masked, [&](auto M) {
          if constexpr (kCanMask || !M())
            r = row_block_impl<Op, T, R(), M(), false, false, false, false>(p, o * c.n, c.n, s0, s1, C);
        });
      });
      return r;
    }
    with_bool(c.reverse, [&](auto R) {
      with_bool(masked, [&](auto M) {
        with_bool(c.exclusive, [&](auto E) {
          with_bool(carry, [&](auto Cy) {
            with_bool(row_stream_ok(c, o), [&](auto NT) {
              if constexpr (kCanMask || !M())
                r = row_block_impl<Op, T, R(), M(), E(), true, Cy(), NT()>(p, o * c.n, c.n, s0, s1, C, c.pf_next);
            });
          });
        });
      });
    });
    return r;
  }

  // Whole rows [o0, o1), each a single block (length <= block size). With an initial value a
  // row's walk starts from its start state (row_block_impl without carry: the local prefix
  // starts from C; no combine per element more than from the identity).
  __attribute__((noinline)) static void rows_short(const Ctx& c, int64_t o0, int64_t o1) {
    const auto p = ptrs(c);
    const bool masked = kCanMask && c.mask != nullptr;
    const bool nt = c.stream && reinterpret_cast<uintptr_t>(p.out) % kAlign == 0 && c.n % 4 == 0;
    const T* init = static_cast<const T*>(c.init);
    with_bool(c.reverse, [&](auto R) {
      with_bool(masked, [&](auto M) {
        with_bool(c.exclusive, [&](auto E) {
          with_bool(nt, [&](auto NT) {
            if constexpr (kCanMask || !M()) {
              if (c.n == 4) {
                if (init != nullptr) {
                  rows4_impl<Op, T, R(), M(), E(), NT(), true>(p, o0, o1, init);
                } else {
                  rows4_impl<Op, T, R(), M(), E(), NT()>(p, o0, o1);
                }
              } else if (init != nullptr) {
                for (int64_t o = o0; o < o1; ++o)
                  row_block_impl<Op, T, R(), M(), E(), true, false, NT()>(p, o * c.n, c.n, 0, c.n, start(c, o));
              } else {
                for (int64_t o = o0; o < o1; ++o)
                  row_block_impl<Op, T, R(), M(), E(), true, false, NT()>(p, o * c.n, c.n, 0, c.n, Op::sid());
              }
            }
          });
        });
      });
    });
  }

  // The column walk's prefetch, elements from each row it reads (col_walk_impl's pf_off).
  static int64_t col_prefetch_offset(const Ctx& c, int64_t w) {
    if (c.pf_next != 0) return c.pf_next;
    return c.col_prefetch ? col_prefetch_rows(w) * (c.reverse ? -c.inner : c.inner) : 0;
  }
  static void col_identity(double* st, int64_t w) {
    for (int k = 0; k < Op::K; ++k) {
      const double v = k == 0 ? (Op::K == 2 ? 1.0 : Op::svalue(Op::sid())) : 0.0;
      std::fill(st + k * w, st + (k + 1) * w, v);
    }
  }
  // The start states of columns [i0, i0 + w) of outer index o (an initial value).
  static void col_start(const Ctx& c, double* st, int64_t w, int64_t o, int64_t i0) {
    for (int64_t j = 0; j < w; ++j) Op::to_comps(start(c, o * c.inner + i0 + j), st, w, j);
  }
  // C = carry ? combine(C, L) : L
  __attribute__((noinline)) static void col_fold(double* C, const double* L, int64_t w, bool carry) {
    for (int64_t j = 0; j < w; ++j) {
      const S l = Op::from_comps(L, w, j);
      Op::to_comps(carry ? settle_nan(Op::scomb(Op::from_comps(C, w, j), l)) : l, C, w, j);
    }
  }
  __attribute__((noinline)) static void col_walk(const Ctx& c, int64_t o, int64_t i0, int64_t w, int64_t s0,
                                                 int64_t s1, double* L, const double* C, bool write) {
    const auto p = ptrs(c);
    const bool masked = kCanMask && c.mask != nullptr;
    const bool nt = c.stream && c.inner % 4 == 0 && i0 % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(p.out) % kAlign == 0;
    if (!write) {
      with_bool(masked, [&](auto M) {
        if constexpr (kCanMask || !M())
          col_walk_impl<Op, T, M(), false, false, false, false>(p, c.n, c.inner, c.reverse, o, i0, w, s0, s1, L,
                                                                nullptr);
      });
      return;
    }
    with_bool(masked, [&](auto M) {
      with_bool(c.exclusive, [&](auto E) {
        with_bool(C != nullptr, [&](auto Cy) {
          with_bool(nt, [&](auto NT) {
            if constexpr (kCanMask || !M())
              col_walk_impl<Op, T, M(), E(), true, Cy(), NT()>(p, c.n, c.inner, c.reverse, o, i0, w, s0, s1, L, C,
                                                               col_prefetch_offset(c, w));
          });
        });
      });
    });
  }
  static void finish(const Ctx& c) {
    if (c.stream) sfence();
  }
  // No flush-to-zero mode: MXCSR's FTZ also flushes the float32 result of the float64 ->
  // float32 conversion when it is subnormal, so float32 outputs between 1.4e-45 and 1.2e-38
  // came out 0 (a cumprod of 0.97 along 3072 rows: 9225 zeros where the float64 result
  // rounded to float32 has none; the fuzz's seed 1, case 1153). FTZ was there to spare Intel
  // cores a ~100-cycle assist per float64-subnormal operation (running products that decay
  // through 1e-308); the right result comes first.
  struct Guard {};
};

// Complex sums along rows (inner == 1): T = float (complex64) or double (complex128), two T
// an element; states complex<double>.
template <class T>
struct CplxSumKernel {
  using S = CplxS;
  using cst_t = double;
  static constexpr uintptr_t kAlign = 4 * sizeof(T);  // a streaming store writes 2 elements

  static Ptrs<T> ptrs(const Ctx& c) {
    return {static_cast<const T*>(c.in), nullptr, c.mask, static_cast<T*>(c.out)};
  }
  static S identity() { return {0.0, 0.0}; }
  static S start(const Ctx& c, int64_t line) {
    const T* v = static_cast<const T*>(c.init) + 2 * line;
    return {static_cast<double>(v[0]), static_cast<double>(v[1])};
  }
  static S fold(const S& C, const S& T_) {
    return {settle_nan(C.re + T_.re), settle_nan(C.im + T_.im)};
  }
  static bool row_stream_ok(const Ctx& c, int64_t o) {
    const int64_t end = c.reverse ? (o + 1) * c.n : o * c.n;
    return c.stream && (reinterpret_cast<uintptr_t>(static_cast<T*>(c.out) + 2 * end) % kAlign == 0);
  }
  __attribute__((noinline)) static S row_block(const Ctx& c, int64_t o, int64_t s0, int64_t s1, const S& C,
                                               bool carry, bool write) {
    const auto p = ptrs(c);
    S r{};
    if (!write) {
      with_bool(c.reverse, [&](auto R) {
        with_bool(c.mask != nullptr, [&](auto M) {
          r = crow_block_impl<T, R(), M(), false, false, false, false>(p, o * c.n, c.n, s0, s1, C);
        });
      });
      return r;
    }
    with_bool(c.reverse, [&](auto R) {
      with_bool(c.mask != nullptr, [&](auto M) {
        with_bool(c.exclusive, [&](auto E) {
          with_bool(carry, [&](auto Cy) {
            with_bool(row_stream_ok(c, o), [&](auto NT) {
              r = crow_block_impl<T, R(), M(), E(), true, Cy(), NT()>(p, o * c.n, c.n, s0, s1, C);
            });
          });
        });
      });
    });
    return r;
  }
  __attribute__((noinline)) static void rows_short(const Ctx& c, int64_t o0, int64_t o1) {
    const auto p = ptrs(c);
    const bool nt = c.stream && reinterpret_cast<uintptr_t>(p.out) % kAlign == 0 && c.n % 2 == 0;
    const bool init = c.init != nullptr;  // a row's walk starts from its start state
    with_bool(c.reverse, [&](auto R) {
      with_bool(c.mask != nullptr, [&](auto M) {
        with_bool(c.exclusive, [&](auto E) {
          with_bool(nt, [&](auto NT) {
            for (int64_t o = o0; o < o1; ++o)
              crow_block_impl<T, R(), M(), E(), true, false, NT()>(p, o * c.n, c.n, 0, c.n,
                                                                    init ? start(c, o) : identity());
          });
        });
      });
    });
  }
  static void finish(const Ctx& c) {
    if (c.stream) sfence();
  }
  struct Guard {};
};

// Flag dispatch of a row walk from a state (ExtKernel, LseKernel): f(R, E, W, NT) runs the walk
// instantiated for reverse, exclusive, write and streaming stores; a walk without outputs
// (write = false) is instantiated for the direction only.
template <class S, class F>
S walk_row(const Ctx& c, bool write, bool nt, F&& f) {
  S r{};
  if (!write) {
    with_bool(c.reverse, [&](auto R) { r = f(R, std::false_type{}, std::false_type{}, std::false_type{}); });
    return r;
  }
  with_bool(c.reverse, [&](auto R) {
    with_bool(c.exclusive, [&](auto E) {
      with_bool(nt, [&](auto NT) { r = f(R, E, std::true_type{}, NT); });
    });
  });
  return r;
}

// cummax / cummin along rows (inner == 1) and columns of float32 / float64. A row block with a
// carry-in is walked from the carry (a selection: combine(C, L) is the walk from C, whatever the
// association); the block's returned state is then combine(C, L), and fold(C, combine(C, L))
// = combine(C, L) (selections are idempotent), so the Scheduler's folds stay exact.
//
// Columns (inner > 1): the Scheduler's column state is kComps = 2 int64 components per column,
// component-major (L[0, w): the w values of T packed in its first w * sizeof(T) bytes; L[w, 2w):
// the positions). col_walk walks from the carry-in too (it copies C into L first): the outputs
// are combine(C, L) directly, L ends as combine(C, L), and col_fold's combine(C, that) is that.
template <class T, bool kMax>
struct ExtKernel {
  using Combine = ExtremumCombine<T, kMax>;
  using S = IndexedState<T>;
  using cst_t = int64_t;
  static constexpr int kComps = 2;
  static constexpr bool kColFromCarry = true;  // col_walk starts from C (copied into L)
  static constexpr int64_t kVec = 32 / int64_t(sizeof(T));
  static S identity() { return Combine::identity(); }
  // A line's initial value v: the state (v, -1). These walks tell the identity by its value
  // (-inf / +inf, which every element beats; never by the index), so (v, -1) is walked as an
  // ordinary value that comes before every element, and positions still holding it are
  // written with index -1 as they should be (Combine::kInitial is for Combine::combine).
  static S start(const Ctx& c, int64_t line) { return {static_cast<const T*>(c.init)[line], Combine::kIdentity}; }
  // combine(C, T_) with C read as a value whatever its index (C may be a start state (v, -1)),
  // T_ the state of a non-empty block (a walk from the identity or from C: its index is -1 only
  // if it is C's own). Without an initial value C is never the identity (a non-empty walk from
  // the identity always takes its first element): Combine::combine's bits.
  static S fold(const S& C, const S& T_) {
    return (T_.i != Combine::kIdentity && Combine::wins(T_.v, C.v)) ? T_ : C;
  }
  static bool stream_ok(const Ctx& c, int64_t o) {
    // 32-byte stores at every group: the row's first (forward) / last (reverse) element
    const int64_t end = c.reverse ? (o + 1) * c.n : o * c.n;
    return c.stream && reinterpret_cast<uintptr_t>(static_cast<T*>(c.out) + end) % 32 == 0 &&
           reinterpret_cast<uintptr_t>(c.idx + end) % 32 == 0;
  }
  __attribute__((noinline)) static S row_block(const Ctx& c, int64_t o, int64_t s0, int64_t s1, const S& C,
                                               bool carry, bool write) {
    const T* in = static_cast<const T*>(c.in);
    T* out = static_cast<T*>(c.out);
    const S st = carry ? C : identity();
    return walk_row<S>(c, write, stream_ok(c, o) && s0 % kVec == 0, [&](auto R, auto E, auto W, auto NT) {
      return ext_row_impl<T, kMax, R(), E(), W(), NT()>(in, out, c.idx, o * c.n, c.n, s0, s1, st);
    });
  }
  __attribute__((noinline)) static void rows_short(const Ctx& c, int64_t o0, int64_t o1) {
    const T* in = static_cast<const T*>(c.in);
    T* out = static_cast<T*>(c.out);
    const bool init = c.init != nullptr;  // a row's walk starts from its start state
    with_bool(c.reverse, [&](auto R) {
      with_bool(c.exclusive, [&](auto E) {
        for (int64_t o = o0; o < o1; ++o)
          ext_row_impl<T, kMax, R(), E(), true, false>(in, out, c.idx, o * c.n, c.n, 0, c.n,
                                                       init ? start(c, o) : identity());
      });
    });
  }

  static T* col_vals(cst_t* st) { return reinterpret_cast<T*>(st); }
  static S col_get(const cst_t* st, int64_t w, int64_t j) {
    S r;
    std::memcpy(&r.v, reinterpret_cast<const char*>(st) + j * sizeof(T), sizeof(T));
    r.i = st[w + j];
    return r;
  }
  static void col_put(cst_t* st, int64_t w, int64_t j, const S& x) {
    std::memcpy(reinterpret_cast<char*>(st) + j * sizeof(T), &x.v, sizeof(T));
    st[w + j] = x.i;
  }
  static void col_identity(cst_t* st, int64_t w) {
    for (int64_t j = 0; j < w; ++j) col_put(st, w, j, identity());
  }
  static void col_start(const Ctx& c, cst_t* st, int64_t w, int64_t o, int64_t i0) {
    for (int64_t j = 0; j < w; ++j) col_put(st, w, j, start(c, o * c.inner + i0 + j));
  }
  // C = carry ? fold(C, L) : L
  __attribute__((noinline)) static void col_fold(cst_t* C, const cst_t* L, int64_t w, bool carry) {
    for (int64_t j = 0; j < w; ++j) {
      const S l = col_get(L, w, j);
      col_put(C, w, j, carry ? fold(col_get(C, w, j), l) : l);
    }
  }
  __attribute__((noinline)) static void col_walk(const Ctx& c, int64_t o, int64_t i0, int64_t w, int64_t s0,
                                                 int64_t s1, cst_t* L, const cst_t* C, bool write) {
    const T* in = static_cast<const T*>(c.in);
    T* out = static_cast<T*>(c.out);
    if (C != nullptr) std::copy(C, C + 2 * w, L);  // walk from the carry-in
    if (!write) {
      ext_col_walk_impl<T, kMax, false, false, false>(in, out, c.idx, c.n, c.inner, c.reverse, o, i0, w, s0, s1,
                                                      col_vals(L), L + w);
      return;
    }
    // Regular stores unless SCANOPS_CPU_STREAM forces streaming: on the 2-core EPYC VM
    // streaming stores made (4096, 16384) dim 0 slower (1 thread: 513 -> 597 ms, values or
    // indices streamed alone 569 / 578), where the rows gain nothing either way. Streamed:
    // 32-byte stores at every row (rows of whole vectors, aligned outputs).
    const bool nt = c.stream && stream_mode() > 0 && c.inner % kVec == 0 && i0 % kVec == 0 &&
                    reinterpret_cast<uintptr_t>(out) % 32 == 0 && reinterpret_cast<uintptr_t>(c.idx) % 32 == 0;
    with_bool(c.exclusive, [&](auto E) {
      with_bool(nt, [&](auto NT) {
        ext_col_walk_impl<T, kMax, E(), true, NT()>(in, out, c.idx, c.n, c.inner, c.reverse, o, i0, w, s0, s1,
                                                    col_vals(L), L + w);
      });
    });
  }
  static void finish(const Ctx& c) {
    if (c.stream) sfence();
  }
  struct Guard {};
};


// logcumsumexp of float32 / float64 (scan_cpu_lse_avx2.h): states (m, t), float64. Every block
// is walked from its carry-in state (its outputs are those of a walk from there).
// Rows of problems with fewer than kTotalsLines rows (kRowTotals): the carry-in of block
// b + 1 is fold(C_b, T_b), T_b the block's total taken by itself (lse_block_total: an exp per
// element, no chain, so the blocks' totals of one long line are computed in parallel), block
// 0's carry-out its walk's end state; the same for every thread count. (Before 2026-11-25 the
// carry-out was the walk's end state from the carry-in, the one-pass walk's bits, but a chain
// through every element of a line: 1-D at 2 threads slower than at 1, 16 threads 1.4x faster
// than 1 on the Xeon.) One thread walking a line's blocks in turn takes T_b inside the walk
// (row_block_total: the same bits as block_total, one pass over the block less). Rows of
// more rows, and columns (kFromCarry): a block's carry-out is the walk's end from its
// carry-in (the Scheduler's chained scans compute it by a walk without outputs), the
// one-pass walk's bits.
template <class T>
struct LseKernel {
  using S = LseState;
  using cst_t = double;
  static constexpr int kComps = 2;
  static constexpr bool kFromCarry = true;
  static constexpr bool kRowTotals = true;
  static constexpr bool kColFromCarry = true;  // col_walk starts from C (folded into L)
  static constexpr uintptr_t kAlign = 4 * sizeof(T);  // a streaming store writes 4 elements
  static S identity() { return {-__builtin_inf(), 0.0}; }
  // A line's initial value v: the state (v, -0.0) (value v + log1p(-0.0) = v + -0.0 = v
  // bitwise, -0.0 included, where t = +0.0 would give v + 0.0 = +0.0 for v = -0.0: an
  // exclusive scan's first output; the -0.0 is gone after the first element, t' = A t + a
  // with a >= +0.0; v = -inf is the identity); NaN as the state after a NaN element,
  // (-inf, NaN), whose value is that NaN.
  static S start(const Ctx& c, int64_t line) {
    const double v = static_cast<double>(static_cast<const T*>(c.init)[line]);
    return v != v ? S{-__builtin_inf(), v} : S{v, -0.0};
  }
  static S fold(const S& C, const S& T_) { return lse_combine(C, T_); }
  // The total of scan positions [s0, s1) of row o, taken by itself (see kRowTotals).
  static S block_total(const Ctx& c, int64_t o, int64_t s0, int64_t s1) {
    const int64_t r = o * c.n;
    return c.reverse ? lse_block_total(static_cast<const T*>(c.in), r + c.n - s1, r + c.n - s0)
                     : lse_block_total(static_cast<const T*>(c.in), r + s0, r + s1);
  }
  static bool row_stream_ok(const Ctx& c, int64_t o) {
    const int64_t end = c.reverse ? (o + 1) * c.n : o * c.n;
    return c.stream && (reinterpret_cast<uintptr_t>(static_cast<T*>(c.out) + end) % kAlign == 0);
  }
  // row_block with outputs from the carry-in C, returning the block's total (block_total's
  // bits) for the carry-out fold(C, total): one thread walking a line's blocks in turn. The
  // total's maximum is a pass of its own before the walk (lse_block_max); its sum of exps is
  // taken inside the walk, beside the t scans (lse_row_impl<kTot>; cache-resident, 2-core VM:
  // 4.5 ns an element, the walk and a separate block_total 4.8). Blocks that are not whole
  // multiples of 64 elements, or whose maximum is not finite (infinities, NaN), walk and take
  // block_total separately.
  __attribute__((noinline)) static S row_block_total(const Ctx& c, int64_t o, int64_t s0, int64_t s1, const S& C) {
    const T* in = static_cast<const T*>(c.in);
    T* out = static_cast<T*>(c.out);
    const int64_t r = o * c.n, lo = c.reverse ? r + c.n - s1 : r + s0;
    bool nan = false;
    LseTotalSums tot{(s1 - s0) % 64 == 0 ? lse_block_max(in, lo, lo + (s1 - s0), nan) : 0.0, 0.0, 0.0};
    if ((s1 - s0) % 64 != 0 || nan || !(tot.m - tot.m == 0.0)) {
      row_block(c, o, s0, s1, C, true, true);
      return block_total(c, o, s0, s1);
    }
    with_bool(c.reverse, [&](auto R) {
      with_bool(c.exclusive, [&](auto E) {
        with_bool(row_stream_ok(c, o), [&](auto NT) {
          lse_row_impl<T, R(), E(), true, NT(), true>(in, out, r, c.n, s0, s1, C, &tot);
        });
      });
    });
    return lse_total_finish(tot);
  }
  __attribute__((noinline)) static S row_block(const Ctx& c, int64_t o, int64_t s0, int64_t s1, const S& C,
                                               bool carry, bool write) {
    const T* in = static_cast<const T*>(c.in);
    T* out = static_cast<T*>(c.out);
    const S st = carry ? C : identity();
    return walk_row<S>(c, write, row_stream_ok(c, o), [&](auto R, auto E, auto W, auto NT) {
      return lse_row_impl<T, R(), E(), W(), NT()>(in, out, o * c.n, c.n, s0, s1, st);
    });
  }
  __attribute__((noinline)) static void rows_short(const Ctx& c, int64_t o0, int64_t o1) {
    const T* in = static_cast<const T*>(c.in);
    T* out = static_cast<T*>(c.out);
    const bool nt = c.stream && reinterpret_cast<uintptr_t>(out) % kAlign == 0 && c.n % 4 == 0;
    const bool init = c.init != nullptr;  // a row's walk starts from its start state
    with_bool(c.reverse, [&](auto R) {
      with_bool(c.exclusive, [&](auto E) {
        with_bool(nt, [&](auto NT) {
          for (int64_t o = o0; o < o1; ++o)
            lse_row_impl<T, R(), E(), true, NT()>(in, out, o * c.n, c.n, 0, c.n, init ? start(c, o) : identity());
        });
      });
    });
  }
  // Column states: L[0, w) the maxima, L[w, 2w) the sums t.
  static void col_identity(double* st, int64_t w) {
    std::fill(st, st + w, -__builtin_inf());
    std::fill(st + w, st + 2 * w, 0.0);
  }
  static void col_start(const Ctx& c, double* st, int64_t w, int64_t o, int64_t i0) {
    for (int64_t j = 0; j < w; ++j) {
      const S s = start(c, o * c.inner + i0 + j);
      st[j] = s.m;
      st[w + j] = s.t;
    }
  }
  // The walk from C already ended in the carry-out: C = L.
  static void col_fold(double* C, const double* L, int64_t w, bool) {
    std::copy(L, L + w, C);
    std::copy(L + w, L + 2 * w, C + w);
  }
  __attribute__((noinline)) static void col_walk(const Ctx& c, int64_t o, int64_t i0, int64_t w, int64_t s0,
                                                 int64_t s1, double* L, const double* C, bool write) {
    const T* in = static_cast<const T*>(c.in);
    T* out = static_cast<T*>(c.out);
    if (C != nullptr) col_fold(L, C, w, true);  // walk from the carry-in
    if (!write) {
      lse_col_walk_impl<T, false, false>(in, out, c.n, c.inner, c.reverse, o, i0, w, s0, s1, L, L + w);
      return;
    }
    // Regular stores (as the cummax columns: see ExtKernel::col_walk).
    with_bool(c.exclusive, [&](auto E) {
      lse_col_walk_impl<T, E(), true>(in, out, c.n, c.inner, c.reverse, o, i0, w, s0, s1, L, L + w);
    });
  }
  static void finish(const Ctx& c) {
    if (c.stream) sfence();
  }
  struct Guard {};
};
}  // namespace avx2
#pragma GCC pop_options
#endif  // SCANOPS_AVX2_KERNELS

namespace {

// ---- the portable scalar kernel -----------------------------------------------------------
// Combines too costly to evaluate twice per element (an exp and a log1p) or whose branches
// the 8-element local prefixes make unpredictable (cummax / cummin: within 8 random values the
// winner is a coin toss; along the running prefix it rarely changes): rows are walked strictly
// sequentially, one combine per element (plus the carry's where a block has one). Measured on
// the 2-core VM, (4096, 16384) rows, 1 thread: the blocked walk took cummax to 778 ms against
// torch's 570 ms, logcumsumexp to twice the log-add-exps.
template <class Combine>
struct SequentialOnly : std::bool_constant<Combine::costly || Combine::selects> {};

// Combines scanned as whole lines, never cut into blocks: a block with a carry-in evaluates
// combine(C, L) for every element on top of its own walk (twice torch's exp/log1p work for
// logcumsumexp along one long line). Lines are still spread over threads; one line is one
// sequential walk, which is what torch computes and is the same for every thread count.
template <class Combine>
struct WholeLines : std::bool_constant<Combine::costly> {};
// Combines whose result does not depend on the association at all (cummax / cummin select an
// element, they round nothing): on one thread they scan whole lines too (no carry blocks, one
// comparison per element), with more threads blocks let one long line be split; the bits are
// the same either way.
template <class Combine>
struct AssociationFree : std::bool_constant<Combine::selects> {};

template <class Combine>
struct is_sum_combine : std::false_type {};
template <class acc_t>
struct is_sum_combine<SumCombine<acc_t>> : std::true_type {};

template <class Combine, class in_t, class out_t>
struct GenericKernel {
  using S = typename Combine::state_t;
  using cst_t = S;
  static constexpr int kComps = 1;
  static constexpr bool kCanMask = is_sum_combine<Combine>::value;

  static S identity() { return Combine::identity(); }
  static S start(const Ctx& c, int64_t line) {
    return Combine::template start<out_t>(static_cast<const out_t*>(c.init)[line]);
  }
  static S settle(const S& s) {
    if constexpr (Combine::selects) {
      return s;
    } else {
      return settle_nan(s);
    }
  }
  static S fold(const S& C, const S& T_) { return settle(Combine::combine(C, T_)); }

  // The element at memory offset idx, at position pos along the line (original order).
  template <bool kMasked>
  static inline S load(const Ctx& c, int64_t idx, [[maybe_unused]] int64_t pos) {
    if constexpr (kMasked) {
      if (!c.mask[idx]) return Combine::identity();
    }
    const in_t* in = static_cast<const in_t*>(c.in);
    if constexpr (Combine::arity == 2) {
      return Combine::template lift<in_t>(static_cast<const in_t*>(c.coeff)[idx], in[idx]);
    } else if constexpr (Combine::indexed) {
      return Combine::template lift<in_t>(in[idx], pos);
    } else {
      return Combine::template lift<in_t>(in[idx]);
    }
  }
  static inline void write(const Ctx& c, int64_t idx, const S& s) {
    static_cast<out_t*>(c.out)[idx] = static_cast<out_t>(Combine::value(s));
    if constexpr (Combine::indexed) c.idx[idx] = Combine::index(s);
  }

  template <bool kRev, bool kMask, bool kExcl, bool kWrite, bool kCarry>
  static S row_block_impl(const Ctx& c, int64_t o, int64_t s0, int64_t s1, const S& C) {
    const int64_t row = o * c.n, n = c.n;
    auto pos = [&](int64_t s) { return kRev ? n - 1 - s : s; };
    auto at = [&](int64_t s) { return row + pos(s); };
    // !kCarry: the local prefix starts from C (the identity, or a one-block row's start state:
    // rows_short with an initial value); kCarry: from the identity, C combined into every output.
    S L = kCarry ? Combine::identity() : C;
    S prev = C;
    auto emit = [&](int64_t idx, const S& R) {
      const S v = kCarry ? Combine::combine(C, R) : R;
      write(c, idx, kExcl ? prev : v);
      prev = v;
    };
    constexpr int64_t kB = 8;  // local prefixes of 8 elements are independent of L (ILP)
    int64_t s = s0;
    for (; !SequentialOnly<Combine>::value && s + kB <= s1; s += kB) {
      S loc[kB];
      loc[0] = load<kMask>(c, at(s), pos(s));
      for (int64_t k = 1; k < kB; ++k)
        loc[k] = Combine::combine(loc[k - 1], load<kMask>(c, at(s + k), pos(s + k)));
      if constexpr (kWrite) {
        for (int64_t k = 0; k < kB; ++k) emit(at(s + k), Combine::combine(L, loc[k]));
      }
      L = Combine::combine(L, loc[kB - 1]);
    }
    for (; s < s1; ++s) {
      L = Combine::combine(L, load<kMask>(c, at(s), pos(s)));
      if constexpr (kWrite) emit(at(s), L);
    }
    return L;
  }

  static S row_block(const Ctx& c, int64_t o, int64_t s0, int64_t s1, const S& C, bool carry, bool write) {
    S r{};
    const bool masked = c.mask != nullptr;
    if (!write) {
      with_bool(c.reverse, [&](auto R) {
        with_mask<kCanMask>(masked, [&](auto M) { r = row_block_impl<R(), M(), false, false, false>(c, o, s0, s1, C); });
      });
      return r;
    }
    with_bool(c.reverse, [&](auto R) {
      with_mask<kCanMask>(masked, [&](auto M) {
        with_bool(c.exclusive, [&](auto E) {
          with_bool(carry, [&](auto Cy) { r = row_block_impl<R(), M(), E(), true, Cy()>(c, o, s0, s1, C); });
        });
      });
    });
    return r;
  }

  static void rows_short(const Ctx& c, int64_t o0, int64_t o1) {
    const bool masked = c.mask != nullptr;
    const bool init = c.init != nullptr;  // a row's walk starts from its start state
    with_bool(c.reverse, [&](auto R) {
      with_mask<kCanMask>(masked, [&](auto M) {
        with_bool(c.exclusive, [&](auto E) {
          for (int64_t o = o0; o < o1; ++o)
            row_block_impl<R(), M(), E(), true, false>(c, o, 0, c.n, init ? start(c, o) : Combine::identity());
        });
      });
    });
  }

  static void col_identity(S* st, int64_t w) { std::fill(st, st + w, Combine::identity()); }
  static void col_start(const Ctx& c, S* st, int64_t w, int64_t o, int64_t i0) {
    for (int64_t j = 0; j < w; ++j) st[j] = start(c, o * c.inner + i0 + j);
  }
  static void col_fold(S* C, const S* L, int64_t w, bool carry) {
    for (int64_t j = 0; j < w; ++j) C[j] = carry ? settle(Combine::combine(C[j], L[j])) : L[j];
  }

  template <bool kMask, bool kExcl, bool kWrite, bool kCarry>
  static void col_walk_impl(const Ctx& c, int64_t o, int64_t i0, int64_t w, int64_t s0, int64_t s1, S* L,
                            const S* C) {
    const int64_t step = c.reverse ? -c.inner : c.inner;
    int64_t base = (o * c.n + (c.reverse ? c.n - 1 - s0 : s0)) * c.inner + i0;
    auto val = [&](int64_t j, const S& st) {
      if constexpr (kCarry) {
        return Combine::combine(C[j], st);
      } else {
        return st;
      }
    };
    for (int64_t s = s0; s < s1; ++s, base += step) {
      const int64_t pos = c.reverse ? c.n - 1 - s : s;
      for (int64_t j = 0; j < w; ++j) {
        const S x = load<kMask>(c, base + j, pos);
        if constexpr (kWrite && kExcl) write(c, base + j, val(j, L[j]));
        L[j] = Combine::combine(L[j], x);
        if constexpr (kWrite && !kExcl) write(c, base + j, val(j, L[j]));
      }
    }
  }
  static void col_walk(const Ctx& c, int64_t o, int64_t i0, int64_t w, int64_t s0, int64_t s1, S* L, const S* C,
                       bool write) {
    const bool masked = c.mask != nullptr;
    if (!write) {
      with_mask<kCanMask>(masked, [&](auto M) { col_walk_impl<M(), false, false, false>(c, o, i0, w, s0, s1, L, nullptr); });
      return;
    }
    with_mask<kCanMask>(masked, [&](auto M) {
      with_bool(c.exclusive, [&](auto E) {
        with_bool(C != nullptr,
                  [&](auto Cy) { col_walk_impl<M(), E(), true, Cy()>(c, o, i0, w, s0, s1, L, C); });
      });
    });
  }
  static void finish(const Ctx&) {}
  struct Guard {};
};

// ---- scheduling (kernel-independent) ------------------------------------------------------
inline void wait_ready(const std::atomic<int>& flag) {
  int spins = 0;
  while (!flag.load(std::memory_order_acquire)) {
    if (++spins < 4096) {
      spin_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

// Kernels whose blocks are walked from their carry-in state and whose carry-out is that walk's
// end state (K::kFromCarry: logcumsumexp), where the other kernels fold a block total computed
// from the identity into the carry-in. The chained scans then wait for the carry-in first, walk
// the block without outputs for the carry-out, publish it, and walk it again with outputs.
template <class K, class = void>
struct FromCarry : std::false_type {};
template <class K>
struct FromCarry<K, std::void_t<decltype(K::kFromCarry)>> : std::bool_constant<K::kFromCarry> {};

// Kernels whose row blocks are walked from their carry-in but whose carries are folded from
// block totals taken by themselves (K::kRowTotals, K::block_total: logcumsumexp), so that the
// totals of one long line are computed in parallel: the rows' schedules fold
// K::block_total(block) where the others fold the local total a walk returns.
// (Lines below which they do, see Scheduler::rows: measured on the 2-core VM, float32
// logcumsumexp, 1 / 2 threads: 1-D 2^26 433 -> 543 / 335 -> 310 ms, (64, 2^20) rows 436 ->
// 541 / 234 -> 293 ms with totals.)
constexpr int64_t kTotalsLines = 16;
template <class K, class = void>
struct RowTotals : std::false_type {};
template <class K>
struct RowTotals<K, std::void_t<decltype(K::kRowTotals)>> : std::bool_constant<K::kRowTotals> {};

// Kernels whose col_walk starts from the carry-in (copies C into L: cummax / cummin,
// logcumsumexp), where the others combine C into every output: a walk split into consecutive
// row ranges passes C to the first range only, or to every range.
template <class K, class = void>
struct ColFromCarry : std::false_type {};
template <class K>
struct ColFromCarry<K, std::void_t<decltype(K::kColFromCarry)>> : std::bool_constant<K::kColFromCarry> {};

// Output pages are populated (MADV_POPULATE_WRITE) a chunk of this many bytes at a time, just
// before the chunk's stores: the kernel zeroes the pages into this core's L2, the stores then
// hit them (see prefault_range).
constexpr int64_t kPrefaultBytes = 256 * 1024;

// Populates the output pages (values, and indices where there are) of elements [e0, e1).
inline void prefault_range(const Ctx& c, int64_t e0, int64_t e1) {
  prefault_bytes(static_cast<const char*>(c.out) + e0 * c.out_size, (e1 - e0) * c.out_size);
  if (c.idx != nullptr) prefault_bytes(c.idx + e0, (e1 - e0) * int64_t(sizeof(int64_t)));
}

template <class K>
struct Scheduler {
  using S = typename K::S;
  using cst_t = typename K::cst_t;

  // The output elements of row o, scan positions [s0, s1), populated (c.prefault).
  static void prefault_row(const Ctx& c, int64_t o, int64_t s0, int64_t s1) {
    if (!c.prefault) return;
    const int64_t r = o * c.n;
    if (c.reverse) {
      prefault_range(c, r + c.n - s1, r + c.n - s0);
    } else {
      prefault_range(c, r + s0, r + s1);
    }
  }
  // K::col_walk with outputs over scan positions [s0, s1) for the columns [i0, i0 + span) of
  // outer index o: items of W columns side by side (item j: columns from i0 + j W, state at
  // L + j K::kComps W; a carry-in C only for a single item). With c.prefault the rows are
  // walked a range at a time, the range's output pages populated just before (every item
  // walks on from its own L, so the results are those of one walk). Where the span is part of
  // each row, that is a call per row: under kPrefaultBytes / 8 of a row it is walked without
  // (calls of 2 pages measured slower than the faults they replace: (4096, 16384) dim 0, 2048
  // columns an item, 1 thread 194 -> 211 ms).
  static void col_walk_out(const Ctx& c, int64_t o, int64_t i0, int64_t span, int64_t W, int64_t s0, int64_t s1,
                           cst_t* L, const cst_t* C) {
    const int64_t inner = c.inner, span_bytes = span * c.out_size;
    auto walk = [&](int64_t a, int64_t b) {
      for (int64_t j = 0; j * W < span; ++j)
        K::col_walk(c, o, i0 + j * W, std::min(W, span - j * W), a, b, L + j * K::kComps * W,
                    (a == s0 || !ColFromCarry<K>::value) ? C : nullptr, true);
    };
    if (!c.prefault || (span < inner && span_bytes < kPrefaultBytes / 8)) {
      walk(s0, s1);
      return;
    }
    const int64_t R = std::max<int64_t>(1, kPrefaultBytes / span_bytes);
    const int64_t base = o * c.n * inner;
    for (int64_t a = s0; a < s1; a += R) {
      const int64_t b = std::min(s1, a + R);
      const int64_t lo = c.reverse ? c.n - b : a, hi = c.reverse ? c.n - a : b;  // memory rows
      if (span == inner) {
        prefault_range(c, base + lo * inner, base + hi * inner);
      } else {
        for (int64_t l = lo; l < hi; ++l) prefault_range(c, base + l * inner + i0, base + l * inner + i0 + span);
      }
      walk(a, b);
    }
  }

  // The chained scans hand consecutive blocks to the workers in turn, so the workers' output
  // chunks interleave: populating them chunk by chunk measured faster at 2 threads (2-core VM,
  // 2^26 float32 1-D: 104 -> 89 ms) but slower from 4 (16-core Xeon, 1-D: 4 threads 68 -> 71
  // ms, 8: 35 -> 64, 16: 22 -> 45; (N/64, 64) dim 0 alike: many small calls from every thread
  // at once). From 3 threads the whole output is populated first instead, by all the threads
  // over contiguous ranges (prefault_all), as bench_cpu.py's floor populates its copy's.
  static Ctx chained_ctx(const Ctx& c, int64_t threads) {
    Ctx r = c;
    if (c.prefault && threads > 2) {
      prefault_all(c);
      r.prefault = false;
    }
    return r;
  }

  // Blocks a worker of the chained scans claims at a time (a run; the carries are folded block
  // by block whatever the run, so this is scheduling only). Up to 2 threads: 1, each block's
  // output populated just before its stores. From 3 threads: runs of about
  // SCANOPS_CPU_RUN_BYTES of output (default 0: single blocks, the whole output populated
  // first, see chained_ctx), each worker populating its own run block by block: a worker's
  // output is then a contiguous range of that size, not blocks interleaved with every other
  // worker's, whose population from many threads at once was slower than populating all first.
  static int64_t run_blocks(const Ctx& c, int64_t threads, int64_t block_out_elems) {
    if (threads <= 2 || !c.prefault) return 1;
    const int64_t run_bytes = chained_run_bytes();
    return std::clamp<int64_t>(run_bytes / std::max<int64_t>(1, block_out_elems * c.out_size), 1, 64);
  }

  // Populates every output page, the output split into one contiguous range per thread; for
  // the schedules whose workers' stores are not contiguous chunks of kPrefaultBytes (the
  // chained scans from 3 threads, column items whose rows are short slices of the output
  // rows): one large call per thread instead of a fault per page. The pages' zeroed lines
  // have left the caches by the time of the stores (every page goes to memory twice), which
  // per-chunk populating avoids where it applies.
  static void prefault_all(const Ctx& c) {
    const int64_t total = c.outer * c.n * c.inner;
    at::parallel_for(0, total, std::max<int64_t>(1, kPrefaultBytes / c.out_size),
                     [&](int64_t b, int64_t e) { prefault_range(c, b, e); });
  }

  static void run(const Ctx& c, int64_t block_elems) {
    if (c.outer == 0 || c.n == 0 || c.inner == 0) return;
    if (c.inner == 1) {
      rows(c, block_elems);
    } else {
      // The narrow column walks' input prefetch (col_walk_impl, col_prefetch_rows) at one
      // thread only: on the 2-core VM it made (2^20, 64) dim 0 8-14% faster at 1 thread,
      // and at 2 threads slower (an earlier version, every width: the exclusive walk 57-58 ->
      // 61-68 ms; the extra requests where two cores share the memory bus). design.md, "CPU:
      // input prefetch in the row walks", the last paragraph.
      Ctx cp = c;
      cp.col_prefetch = at::get_num_threads() == 1;
      cols(cp, block_elems);
    }
  }

  static void rows(const Ctx& c, int64_t B) {
    const int64_t n = c.n;
    const int64_t nb = (n + B - 1) / B;
    const int64_t threads = at::get_num_threads();
    // RowTotals kernels fold block totals only on few lines (by the shape alone: the bits
    // must not depend on the thread count); on more, the lines themselves keep the threads
    // busy and a walk's end state is the cheaper carry (no second pass over the block).
    const bool totals = RowTotals<K>::value && c.outer < kTotalsLines;
    if (nb == 1) {
      at::parallel_for(0, c.outer, std::max<int64_t>(1, kGrain / n), [&](int64_t b, int64_t e) {
        [[maybe_unused]] const typename K::Guard guard{};
        const int64_t step = c.prefault ? std::max<int64_t>(1, kPrefaultBytes / (n * c.out_size)) : e - b;
        for (int64_t o = b; o < e; o += step) {
          const int64_t oe = std::min(e, o + step);
          if (c.prefault) prefault_range(c, o * n, oe * n);
          K::rows_short(c, o, oe);
        }
        K::finish(c);
      });
      return;
    }
    if (threads == 1 || c.outer >= 4 * threads) {
      at::parallel_for(0, c.outer, 1, [&](int64_t b, int64_t e) {
        [[maybe_unused]] const typename K::Guard guard{};
        for (int64_t o = b; o < e; ++o) {
          // An initial value: the line's first block has a carry-in too, its start state.
          const bool init = c.init != nullptr;
          S C = init ? K::start(c, o) : K::identity();
          for (int64_t blk = 0; blk < nb; ++blk) {
            const int64_t s0 = blk * B, s1 = std::min(n, s0 + B);
            const bool carry = blk > 0 || init;
            prefault_row(c, o, s0, s1);
            if constexpr (RowTotals<K>::value) {  // (else: the walk's end is the carry-out)
              if (carry && totals) {  // the walk takes the block's total too (the last's: unused)
                if (blk + 1 < nb) {
                  C = K::fold(C, K::row_block_total(c, o, s0, s1, C));
                } else {
                  K::row_block(c, o, s0, s1, C, true, true);
                }
                continue;
              }
            }
            const S T_ = K::row_block(c, o, s0, s1, C, carry, true);
            if constexpr (RowTotals<K>::value) {
              C = T_;
            } else {
              C = carry ? K::fold(C, T_) : T_;
            }
          }
        }
        K::finish(c);
      });
      return;
    }
    // Chained scan over the blocks of all rows, claimed a run of M consecutive blocks of one
    // row at a time (run_blocks; M = 1 from carry-in kernels): the run's totals, the carry-in
    // from the previous run, the run's carry-out published, then the run rescanned block by
    // block from cache. The carries are folded block by block in scan order whatever M is, so
    // the bits are those of the one-thread walk.
    const int64_t M = FromCarry<K>::value && !totals ? 1 : run_blocks(c, threads, B);
    const Ctx ch = M > 1 ? c : chained_ctx(c, threads);
    const int64_t nr = (nb + M - 1) / M;
    const int64_t G = c.outer * nr;
    std::vector<S> carry(static_cast<size_t>(G));
    std::vector<std::atomic<int>> ready(static_cast<size_t>(G));
    std::atomic<int64_t> next{0};
    at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
      [[maybe_unused]] const typename K::Guard guard{};
      std::vector<S> T(static_cast<size_t>(M)), Cb(static_cast<size_t>(M));
      int64_t g = next.fetch_add(1, std::memory_order_relaxed);
      while (g < G) {
        const int64_t o = g / nr, b0 = (g % nr) * M, b1 = std::min(nb, b0 + M);
        // An initial value: a line's first block has a carry-in too, its start state, taken
        // as the carry published for it would be (the folds as in the loop above).
        const bool init = c.init != nullptr;
        if (FromCarry<K>::value && !totals) {  // M == 1: the block is b0
          const int64_t s0 = b0 * B, s1 = std::min(n, s0 + B);
          if (b0 > 0) wait_ready(ready[g]);
          const S C = b0 > 0 ? carry[g] : init ? K::start(c, o) : K::identity();
          const bool cy = b0 > 0 || init;
          if (b0 + 1 < nb) {
            carry[g + 1] = K::row_block(c, o, s0, s1, C, cy, false);
            ready[g + 1].store(1, std::memory_order_release);
          }
          prefault_row(ch, o, s0, s1);
          K::row_block(c, o, s0, s1, C, cy, true);
          g = next.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        S C{};
        int64_t first = b0;
        if (b0 == 0 && init) {
          C = K::start(c, o);
        } else if (b0 == 0) {  // no carry-in: written at once, its walk's total is the next carry
          const int64_t s1 = std::min(n, B);
          prefault_row(ch, o, 0, s1);
          C = K::row_block(c, o, 0, s1, K::identity(), false, true);
          first = 1;
        }
        for (int64_t b = first; b < b1; ++b) {
          const int64_t s0 = b * B, s1 = std::min(n, s0 + B);
          if constexpr (RowTotals<K>::value) {  // (totals: RowTotals kernels are FromCarry ones)
            T[b - b0] = K::block_total(c, o, s0, s1);
          } else {
            T[b - b0] = K::row_block(c, o, s0, s1, K::identity(), false, false);
          }
        }
        if (b0 > 0) {
          wait_ready(ready[g]);
          C = carry[g];
        }
        for (int64_t b = first; b < b1; ++b) {
          Cb[b - b0] = C;
          C = K::fold(C, T[b - b0]);
        }
        if (b1 < nb) {
          carry[g + 1] = C;
          ready[g + 1].store(1, std::memory_order_release);
        }
        // The next run is claimed before this one is rescanned from cache, and the rescan
        // prefetches it (the element as far on in it as the walk is in this one): its totals
        // pass, the only pass that reads from memory, then finds it in cache. No deadlock: a
        // rescan waits on nothing, and runs are still claimed in order.
        const int64_t gn = next.fetch_add(1, std::memory_order_relaxed);
        Ctx cx = ch;
        if (gn < G && prefetch_next_run()) {
          const int64_t on = gn / nr, bn = (gn % nr) * M;
          cx.pf_next = (on - o) * n + (c.reverse ? b0 - bn : bn - b0) * B;
        }
        for (int64_t b = first; b < b1; ++b) {
          const int64_t s0 = b * B, s1 = std::min(n, s0 + B);
          prefault_row(ch, o, s0, s1);
          K::row_block(cx, o, s0, s1, Cb[b - b0], true, true);
        }
        g = gn;
      }
      K::finish(c);
    });
  }

  static void cols(const Ctx& c, int64_t block_elems) {
    const int64_t n = c.n, inner = c.inner;
    const int64_t threads = at::get_num_threads();
    constexpr int64_t KC = K::kComps;
    const int64_t Bl = std::max<int64_t>(8, block_elems / inner);  // rows per block (shape only)
    const bool blocked = c.outer * inner < kFewColumns && n >= 2 * Bl;
    auto round16 = [](int64_t v) { return (v + 15) / 16 * 16; };

    if (!blocked) {
      // Work items: (outer index, range of W columns); W only partitions the work.
      const int64_t per_outer = std::max<int64_t>(1, (4 * threads + c.outer - 1) / c.outer);
      int64_t W = std::clamp<int64_t>(round16((inner + per_outer - 1) / per_outer), 16, kMaxColWidth);
      W = std::min(W, inner);
      const int64_t ncb = (inner + W - 1) / W, items = c.outer * ncb;
      const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, n * W));
      // A task's columns: a slice of every row too short to populate row by row (see
      // col_walk_out) when the items are spread over several threads: the whole output is
      // populated first ((4096, 16384) dim 0 at 16 threads: 1024 columns, 4 KB a row).
      Ctx cc = c;
      const int64_t task_cols = std::min(inner, std::max(grain, (items + threads - 1) / threads) * W);
      if (c.prefault && threads > 1 && task_cols < inner &&
          task_cols * c.out_size < kPrefaultBytes / 8) {
        prefault_all(c);
        cc.prefault = false;
      }
      at::parallel_for(0, items, grain,
                       [&](int64_t b, int64_t e) {
                         [[maybe_unused]] const typename K::Guard guard{};
                         // A task's items of one outer index are side by side: walked as one
                         // item of all their columns where that is at most kMaxColWidth wide
                         // (a column's walk is the same whichever item holds it), else
                         // together a range of rows at a time (see col_walk_out). So a row's
                         // slice is walked in one go: (4096, 16384) dim 0 at 16 threads
                         // walked 4 items of 256 columns one after another, 1 KB of each row
                         // at a time, where it now walks 4 KB.
                         std::vector<cst_t> L(static_cast<size_t>(KC * W * std::min(ncb, e - b)));
                         for (int64_t it = b; it < e;) {
                           const int64_t o = it / ncb, i0 = (it % ncb) * W;
                           const int64_t ie = std::min(e, (o + 1) * ncb);
                           const int64_t span = std::min(inner, (ie - o * ncb) * W) - i0;
                           const int64_t Wk = span <= kMaxColWidth ? span : W;
                           for (int64_t j = 0; j * Wk < span; ++j) {
                             // an initial value: the walk starts from the columns' start states
                             if (c.init != nullptr) {
                               K::col_start(c, L.data() + j * KC * Wk, std::min(Wk, span - j * Wk), o, i0 + j * Wk);
                             } else {
                               K::col_identity(L.data() + j * KC * Wk, std::min(Wk, span - j * Wk));
                             }
                           }
                           col_walk_out(cc, o, i0, span, Wk, 0, n, L.data(), nullptr);
                           it = ie;
                         }
                         K::finish(c);
                       });
      return;
    }

    const int64_t W = std::min<int64_t>(inner, 1024);
    const int64_t ncb = (inner + W - 1) / W, items = c.outer * ncb;
    const int64_t nb = (n + Bl - 1) / Bl;
    auto item_cols = [&](int64_t it, int64_t& o, int64_t& i0, int64_t& w) {
      o = it / ncb;
      i0 = (it % ncb) * W;
      w = std::min(W, inner - i0);
    };
    if (threads == 1 || items >= 4 * threads) {
      at::parallel_for(0, items, 1, [&](int64_t b, int64_t e) {
        [[maybe_unused]] const typename K::Guard guard{};
        std::vector<cst_t> L(static_cast<size_t>(KC * W)), C(static_cast<size_t>(KC * W));
        for (int64_t it = b; it < e; ++it) {
          int64_t o, i0, w;
          item_cols(it, o, i0, w);
          for (int64_t blk = 0; blk < nb; ++blk) {
            const int64_t s0 = blk * Bl, s1 = std::min(n, s0 + Bl);
            const bool carry = blk > 0;
            // The first block is walked from the start states (an initial value) or the
            // identity, without a carry-in; its walk's end is the next carry (C = L).
            if (blk == 0 && c.init != nullptr) {
              K::col_start(c, L.data(), w, o, i0);
            } else {
              K::col_identity(L.data(), w);
            }
            col_walk_out(c, o, i0, w, w, s0, s1, L.data(), carry ? C.data() : nullptr);
            K::col_fold(C.data(), L.data(), w, carry);
          }
        }
        K::finish(c);
      });
      return;
    }
    // Chained scan over (item, block of rows), claimed a run of M consecutive blocks of one
    // item at a time (run_blocks, as the rows' chained scan; M = 1 for carry-in kernels).
    const int64_t M = FromCarry<K>::value ? 1 : run_blocks(c, threads, Bl * W);
    const Ctx ch = M > 1 ? c : chained_ctx(c, threads);
    const int64_t nr = (nb + M - 1) / M;
    const int64_t G = items * nr;
    const int64_t slot = KC * W;
    std::vector<cst_t> carry(static_cast<size_t>(G * slot));
    std::vector<std::atomic<int>> ready(static_cast<size_t>(G));
    std::atomic<int64_t> next{0};
    at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
      [[maybe_unused]] const typename K::Guard guard{};
      std::vector<cst_t> L(static_cast<size_t>(slot));
      // T: the run's block totals; Cb: their carry-ins (slot apiece); Cc: the running carry.
      std::vector<cst_t> T(static_cast<size_t>(M * slot)), Cb(static_cast<size_t>(M * slot)),
          Cc(static_cast<size_t>(slot));
      // An initial value: an item's first block is walked from the start states (FromCarry
      // kernels: from the carry-in Cc = the start states, which their walks start from).
      const bool init = c.init != nullptr;
      int64_t g = next.fetch_add(1, std::memory_order_relaxed);
      while (g < G) {
        const int64_t it = g / nr, b0 = (g % nr) * M, b1 = std::min(nb, b0 + M);
        int64_t o, i0, w;
        item_cols(it, o, i0, w);
        if constexpr (FromCarry<K>::value) {  // M == 1: the block is b0
          const int64_t s0 = b0 * Bl, s1 = std::min(n, s0 + Bl);
          if (b0 > 0) wait_ready(ready[g]);
          if (b0 == 0 && init) K::col_start(c, Cc.data(), w, o, i0);
          const cst_t* C = b0 > 0 ? carry.data() + g * slot : init ? Cc.data() : nullptr;
          if (b0 + 1 < nb) {
            K::col_identity(L.data(), w);
            K::col_walk(c, o, i0, w, s0, s1, L.data(), C, false);
            std::copy(L.begin(), L.begin() + KC * w, carry.begin() + (g + 1) * slot);
            ready[g + 1].store(1, std::memory_order_release);
          }
          K::col_identity(L.data(), w);
          col_walk_out(ch, o, i0, w, w, s0, s1, L.data(), C);
          g = next.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        int64_t first = b0;
        if (b0 == 0) {  // no carry-in: walked from the start states (an initial value) or the
                        // identity and written at once; its walk's state is the next carry
          if (init) {
            K::col_start(c, L.data(), w, o, i0);
          } else {
            K::col_identity(L.data(), w);
          }
          col_walk_out(ch, o, i0, w, w, 0, std::min(n, Bl), L.data(), nullptr);
          std::copy(L.begin(), L.begin() + KC * w, Cc.begin());
          first = 1;
        }
        for (int64_t b = first; b < b1; ++b) {
          cst_t* Tb = T.data() + (b - b0) * slot;
          K::col_identity(Tb, w);
          K::col_walk(c, o, i0, w, b * Bl, std::min(n, (b + 1) * Bl), Tb, nullptr, false);
        }
        if (b0 > 0) {
          wait_ready(ready[g]);
          std::copy(carry.begin() + g * slot, carry.begin() + g * slot + KC * w, Cc.begin());
        }
        for (int64_t b = first; b < b1; ++b) {
          std::copy(Cc.begin(), Cc.begin() + KC * w, Cb.begin() + (b - b0) * slot);
          K::col_fold(Cc.data(), T.data() + (b - b0) * slot, w, true);
        }
        if (b1 < nb) {
          std::copy(Cc.begin(), Cc.begin() + KC * w, carry.begin() + (g + 1) * slot);
          ready[g + 1].store(1, std::memory_order_release);
        }
        // The next run claimed before the rescan, which prefetches it (as in rows).
        const int64_t gn = next.fetch_add(1, std::memory_order_relaxed);
        Ctx cx = ch;
        if (gn < G && prefetch_next_run()) {
          int64_t on, i0n, wn;
          item_cols(gn / nr, on, i0n, wn);
          const int64_t bn = (gn % nr) * M;
          cx.pf_next = ((on - o) * n + (c.reverse ? b0 - bn : bn - b0) * Bl) * inner + (i0n - i0);
        }
        for (int64_t b = first; b < b1; ++b) {
          K::col_identity(L.data(), w);
          col_walk_out(cx, o, i0, w, w, b * Bl, std::min(n, (b + 1) * Bl), L.data(), Cb.data() + (b - b0) * slot);
        }
        g = gn;
      }
      K::finish(c);
    });
  }
};

template <class Combine, class in_t, class out_t>
struct CpuRunner {
  static void run(const ScanProblem& p) {
    // The kernels of other combines are not instantiated for a mask (with_mask).
    TORCH_CHECK(!p.in.mask.defined() || is_sum_combine<Combine>::value, p.spec.op_name,
                ": internal error: a mask for a combine that takes none");
    // The engine materialises broadcasts and runs the epilogue around this back end (of its
    // BackendCaps only line_state: an initial value, LineState, is taken as is).
    TORCH_CHECK(!p.in.mask.strides.in_place && !p.in.coeff.strides.in_place &&
                    !p.in.scale_input && !p.epilogue.any() && !p.epilogue.shift_mul,
                p.spec.op_name, ": internal error: a problem part the CPU back end does not take");
    const ProblemData<in_t, out_t> d(p);
    const int64_t numel = p.shape.numel();
    const int64_t out_bytes = numel * static_cast<int64_t>(sizeof(out_t));
    Ctx c{d.input,
          d.coeff,
          d.mask,
          d.values,
          d.indices,
          p.shape.outer,
          p.shape.length,
          p.shape.inner,
          p.spec.flags.exclusive,
          p.spec.flags.reverse,
          use_streaming_stores(out_bytes),
          static_cast<int64_t>(sizeof(out_t)),
          use_prefault(out_bytes)};
    c.init = d.initial;  // LineState::initial (BackendCaps::line_state)
    const bool whole_lines = WholeLines<Combine>::value ||
                             (AssociationFree<Combine>::value && at::get_num_threads() == 1);
    const int64_t block_elems = whole_lines
                                    ? int64_t{1} << 60  // one block per line
                                    : kBlockBytes / static_cast<int64_t>(sizeof(in_t));
    advise_huge_pages(c.out, out_bytes);
    if (c.idx) advise_huge_pages(c.idx, numel * static_cast<int64_t>(sizeof(int64_t)));
#if defined(SCANOPS_AVX2_KERNELS)
    using acc = decltype(Combine::value(Combine::identity()));
    constexpr bool kAvx2Combine = std::is_same_v<Combine, SumCombine<double>> ||
                                  std::is_same_v<Combine, ProdCombine<double>> ||
                                  std::is_same_v<Combine, AffineCombine<double>>;
    if constexpr ((std::is_same_v<in_t, float> || std::is_same_v<in_t, double>) &&
                  std::is_same_v<in_t, out_t> && std::is_same_v<acc, double> && kAvx2Combine) {
      if (use_avx2()) {
        using Op = std::conditional_t<
            Combine::arity == 2, avx2::AffineOp,
            std::conditional_t<std::is_same_v<Combine, SumCombine<double>>, avx2::SumOp, avx2::ProdOp>>;
        Scheduler<avx2::Kernel<Op, in_t>>::run(c, block_elems);
        return;
      }
    }
    // cummax / cummin along rows and columns of float32 / float64.
    if constexpr ((std::is_same_v<in_t, float> || std::is_same_v<in_t, double>) && std::is_same_v<in_t, out_t> &&
                  (std::is_same_v<Combine, MaxCombine<in_t>> || std::is_same_v<Combine, MinCombine<in_t>>)) {
      if (use_avx2()) {
        Scheduler<avx2::ExtKernel<in_t, std::is_same_v<Combine, MaxCombine<in_t>>>>::run(c, block_elems);
        return;
      }
    }
    // logcumsumexp of float32 / float64, rows and columns: fixed blocks (a block is walked from
    // its carry-in, so any blocking gives the one-pass walk's bits; blocks let long lines be
    // split across threads). Complex and half types keep the portable kernel.
    if constexpr ((std::is_same_v<in_t, float> || std::is_same_v<in_t, double>) && std::is_same_v<in_t, out_t> &&
                  std::is_same_v<Combine, LogAddExpCombine<double>>) {
      if (use_avx2()) {
        Scheduler<avx2::LseKernel<in_t>>::run(c, kBlockBytes / static_cast<int64_t>(sizeof(in_t)));
        return;
      }
    }
    // Complex sums along rows: the complex row kernel. (Columns keep the portable kernel:
    // the real kernel's columns of the (re, im) view measured 7-16% slower there.)
    if constexpr (is_complex<in_t>::value && std::is_same_v<in_t, out_t> &&
                  std::is_same_v<Combine, SumCombine<c10::complex<double>>>) {
      if (use_avx2() && c.inner == 1) {
        if (c.outer == 0 || c.n == 0) return;
        Scheduler<avx2::CplxSumKernel<typename in_t::value_type>>::rows(c, block_elems);
        return;
      }
    }
#endif
    Scheduler<GenericKernel<Combine, in_t, out_t>>::run(c, block_elems);
  }
};

}  // namespace
}  // namespace scanops
