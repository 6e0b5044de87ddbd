// scanops: the CPU back end of the scan engine.
//
// The canonical problem is outer x length x inner. Independent work items are
// (outer index, block of up to kInnerBlock inner columns); each walks the scan dimension
// carrying one state per column, so for inner > 1 the innermost loop runs over contiguous
// columns and vectorises. When there are fewer work items than threads and the lines are
// long, the scan dimension is split into chunks and done in three phases: per-chunk
// totals, an exclusive scan of the totals per line, then a rescan of each chunk from its
// carry-in. All loops are in *scan order* (position s maps to l = reverse ? n-1-s : s).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <vector>

#include "ops/dispatch.h"

namespace scanops {
namespace {

constexpr int64_t kInnerBlock = 64;            // columns per work item (inner > 1)
constexpr int64_t kMinChunk = 32 * 1024;       // elements per chunk before chunking pays

template <class Combine, class in_t, class out_t>
struct CpuRunner {
  using state_t = typename Combine::state_t;

  struct View {
    const in_t* in;
    const in_t* coeff;  // Affine: a[t]
    const bool* mask;
    out_t* out;
    int64_t length, inner;
    bool exclusive, reverse;
  };

  template <bool kMasked>
  static inline state_t load(const View& v, int64_t idx) {
    if constexpr (kMasked) {
      if (!v.mask[idx]) return Combine::identity();
    }
    if constexpr (Combine::arity == 2) {
      return Combine::template lift<in_t>(v.coeff[idx], v.in[idx]);
    } else {
      return Combine::template lift<in_t>(v.in[idx]);
    }
  }

  // Walks scan positions [s0, s1) of columns [i0, i0 + w) of line `o`, starting from
  // `carry` (w states, updated in place). kWrite: write outputs, else only fold (phase 1 of
  // the chunked scan). The flags are template parameters here so the hot loops carry no
  // branches; a single column (inner == 1, the row case) keeps its state in a register.
  template <bool kMasked, bool kExclusive, bool kWrite>
  static void walk_impl(const View& v, int64_t o, int64_t i0, int64_t w, int64_t s0, int64_t s1,
                        state_t* carry) {
    const int64_t n = v.length;
    const int64_t step = v.reverse ? -v.inner : v.inner;
    int64_t base = (o * n + (v.reverse ? n - 1 - s0 : s0)) * v.inner + i0;
    auto visit = [&](state_t& c, int64_t idx) {
      const state_t x = load<kMasked>(v, idx);
      if constexpr (kWrite && kExclusive) v.out[idx] = static_cast<out_t>(Combine::value(c));
      c = Combine::combine(c, x);
      if constexpr (kWrite && !kExclusive) v.out[idx] = static_cast<out_t>(Combine::value(c));
    };
    if (w == 1) {
      state_t c = carry[0];
      for (int64_t s = s0; s < s1; ++s, base += step) visit(c, base);
      carry[0] = c;
      return;
    }
    for (int64_t s = s0; s < s1; ++s, base += step) {
      for (int64_t j = 0; j < w; ++j) visit(carry[j], base + j);
    }
  }

  // Whole rows [o0, o1) of an inner == 1 problem, each from identity(): one call per range of
  // rows rather than per row, so short rows (e.g. length 4) pay no per-row set-up.
  template <bool kMasked, bool kExclusive>
  static void rows_impl(const View& v, int64_t o0, int64_t o1) {
    constexpr int64_t kB = 8;  // elements per block: their local prefixes are independent of
                               // the running carry, so the CPU overlaps blocks (ILP)
    const int64_t n = v.length;
    const int64_t step = v.reverse ? -1 : 1;
    for (int64_t o = o0; o < o1; ++o) {
      int64_t idx = o * n + (v.reverse ? n - 1 : 0);
      state_t c = Combine::identity();
      int64_t s = 0;
      for (; s + kB <= n; s += kB, idx += kB * step) {
        state_t local[kB];
        local[0] = load<kMasked>(v, idx);
        for (int64_t k = 1; k < kB; ++k) {
          local[k] = Combine::combine(local[k - 1], load<kMasked>(v, idx + k * step));
        }
        for (int64_t k = 0; k < kB; ++k) {
          const state_t y = kExclusive ? (k == 0 ? c : Combine::combine(c, local[k - 1]))
                                       : Combine::combine(c, local[k]);
          v.out[idx + k * step] = static_cast<out_t>(Combine::value(y));
        }
        c = Combine::combine(c, local[kB - 1]);
      }
      for (; s < n; ++s, idx += step) {
        const state_t x = load<kMasked>(v, idx);
        if constexpr (kExclusive) v.out[idx] = static_cast<out_t>(Combine::value(c));
        c = Combine::combine(c, x);
        if constexpr (!kExclusive) v.out[idx] = static_cast<out_t>(Combine::value(c));
      }
    }
  }

  static void rows(const View& v, int64_t o0, int64_t o1) {
    const bool masked = v.mask != nullptr;
    if (v.exclusive) {
      return masked ? rows_impl<true, true>(v, o0, o1) : rows_impl<false, true>(v, o0, o1);
    }
    return masked ? rows_impl<true, false>(v, o0, o1) : rows_impl<false, false>(v, o0, o1);
  }

  static void walk(const View& v, int64_t o, int64_t i0, int64_t w, int64_t s0, int64_t s1,
                   state_t* carry, bool write) {
    const bool masked = v.mask != nullptr;
    if (!write) {
      return masked ? walk_impl<true, false, false>(v, o, i0, w, s0, s1, carry)
                    : walk_impl<false, false, false>(v, o, i0, w, s0, s1, carry);
    }
    if (v.exclusive) {
      return masked ? walk_impl<true, true, true>(v, o, i0, w, s0, s1, carry)
                    : walk_impl<false, true, true>(v, o, i0, w, s0, s1, carry);
    }
    return masked ? walk_impl<true, false, true>(v, o, i0, w, s0, s1, carry)
                  : walk_impl<false, false, true>(v, o, i0, w, s0, s1, carry);
  }

  static void run(const ScanProblem& p) {
    View v{p.input.const_data_ptr<in_t>(),
           p.coeff.defined() ? p.coeff.const_data_ptr<in_t>() : nullptr,
           p.mask.defined() ? p.mask.const_data_ptr<bool>() : nullptr,
           p.output.mutable_data_ptr<out_t>(),
           p.length,
           p.inner,
           p.spec.flags.exclusive,
           p.spec.flags.reverse};
    const int64_t col_blocks = (p.inner + kInnerBlock - 1) / kInnerBlock;
    const int64_t items = p.outer * col_blocks;
    const int64_t width = std::min(p.inner, kInnerBlock);
    auto item_cols = [&](int64_t item, int64_t& o, int64_t& i0, int64_t& w) {
      o = item / col_blocks;
      i0 = (item % col_blocks) * kInnerBlock;
      w = std::min(kInnerBlock, p.inner - i0);
    };

    const int64_t threads = at::get_num_threads();
    const int64_t elems_per_item = p.length * width;
    int64_t chunks = 1;
    if (items < 2 * threads && elems_per_item >= 2 * kMinChunk) {
      chunks = std::min<int64_t>(p.length, std::max<int64_t>(
                                               1, std::min<int64_t>(
                                                      (2 * threads + items - 1) / items,
                                                      elems_per_item / kMinChunk)));
    }

    if (chunks == 1) {
      // Enough independent lines: each item scans its whole line.
      const int64_t grain = std::max<int64_t>(1, kMinChunk / std::max<int64_t>(1, elems_per_item));
      if (p.inner == 1) {  // items are rows
        at::parallel_for(0, items, grain,
                         [&](int64_t begin, int64_t end) { rows(v, begin, end); });
        return;
      }
      at::parallel_for(0, items, grain, [&](int64_t begin, int64_t end) {
        state_t carry[kInnerBlock];
        for (int64_t item = begin; item < end; ++item) {
          int64_t o, i0, w;
          item_cols(item, o, i0, w);
          std::fill(carry, carry + w, Combine::identity());
          walk(v, o, i0, w, 0, p.length, carry, /*write=*/true);
        }
      });
      return;
    }

    // Three phases over (item, chunk) tasks.
    const int64_t chunk_len = (p.length + chunks - 1) / chunks;
    const int64_t tasks = items * chunks;
    std::vector<state_t> totals(static_cast<size_t>(tasks * width), Combine::identity());
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t o, i0, w;
        item_cols(t / chunks, o, i0, w);
        const int64_t c = t % chunks;
        const int64_t s0 = c * chunk_len, s1 = std::min(p.length, s0 + chunk_len);
        if (c == chunks - 1 || s0 >= s1) continue;  // the last chunk's total is never needed
        walk(v, o, i0, w, s0, s1, &totals[t * width], /*write=*/false);
      }
    });
    // Exclusive scan of chunk totals per item (chunks is small): totals become carry-ins.
    for (int64_t item = 0; item < items; ++item) {
      std::vector<state_t> run(static_cast<size_t>(width), Combine::identity());
      for (int64_t c = 0; c < chunks; ++c) {
        state_t* tot = &totals[(item * chunks + c) * width];
        for (int64_t j = 0; j < width; ++j) {
          const state_t t = tot[j];
          tot[j] = run[j];
          run[j] = Combine::combine(run[j], t);
        }
      }
    }
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t o, i0, w;
        item_cols(t / chunks, o, i0, w);
        const int64_t c = t % chunks;
        const int64_t s0 = c * chunk_len, s1 = std::min(p.length, s0 + chunk_len);
        if (s0 >= s1) continue;
        walk(v, o, i0, w, s0, s1, &totals[t * width], /*write=*/true);
      }
    });
  }
};

}  // namespace

void scan_cpu(const ScanProblem& p) {
  if (p.spec.kind == CombineKind::Affine) {
    dispatch_affine<CpuRunner, /*kWide=*/true>(p);
  } else {
    dispatch_scan<CpuRunner, /*kWide=*/true>(p);
  }
}

}  // namespace scanops
