// scanops CUDA back end, layer 5: launch_scan<Combine, in_t, out_t>, the one place that
// picks a kernel family by shape.
//
//   inner == 1                 rows of contiguous elements -> scan_rows (row_scan.cuh),
//                              one launch:
//     length <= kTile            whole rows packed into segmented tiles
//     longer, >= 3/10 of a row a resident block (row_geometry)
//                                a block per row walks its tiles carrying the state
//     longer, fewer rows         chunks of a few tiles, one per block, chained by decoupled
//                                look-back (each chunk is reduced, then rescanned)
//     one such line of a dense sum (floating; integer / bool into int64), forward: CCCL's
//                                DeviceScan (cub_line_scan.h), initial values too; so are
//                                float32 blocks of 2, 3, 5-7 columns (cub_lanes_sum)
//   2 <= inner <= 7, few lines, floating sums / products without mask or companion:
//                              rows of `inner` lanes -> scan_rows (lanes_scan.cuh)
//   inner > 1                  columns -> scan_columns (column_scan.cuh):
//     >= 2048 columns per SM     a thread per column walks it, one launch
//     fewer, >= 4 bands of vectors  vector column tiles chained by look-back, one launch
//     fewer, >= 64 / 16 bands      column warp tiles / column tiles, one launch
//     fewer, long length         columns split into chunks: chunk totals, their exclusive
//                                scan (scan_rows), rescan from the carries: three launches
//
// Included by the .cu files that instantiate it (one per combine kind).
#pragma once

#include <type_traits>

#include "ops/cuda/column_scan.cuh"
#include "ops/cuda/cub_line_scan.h"
#include "ops/cuda/lanes_scan.cuh"
#include "ops/cuda/row_scan.cuh"

namespace scanops::cuda {

namespace detail {

// The sums that take MaskPreSink: masked_cumsum's backward of floating types.
template <class Combine, class out_t>
struct is_mask_pre_sum : std::false_type {};
template <class acc_t, class out_t>
struct is_mask_pre_sum<SumCombine<acc_t>, out_t>
    : std::bool_constant<std::is_same_v<out_t, float> || std::is_same_v<out_t, double> ||
                         std::is_same_v<out_t, c10::Half> || std::is_same_v<out_t, c10::BFloat16>> {};

// The linear recurrences that take EpiPreSink: float32 / float64 results.
template <class Combine, class out_t>
struct is_epi_pre_affine : std::false_type {};
template <class acc_t, class out_t>
struct is_epi_pre_affine<AffineCombine<acc_t>, out_t>
    : std::bool_constant<std::is_same_v<out_t, float> || std::is_same_v<out_t, double>> {};

template <class Combine>
struct is_sum : std::false_type {};
template <class acc_t>
struct is_sum<SumCombine<acc_t>> : std::true_type {};

// One dense line of a plain sum (floating, or integer / bool into int64) that the row kernel
// would take in look-back mode, forward, with no mask, companion or fused epilogue: CUB's
// DeviceScan is faster there (cub_line_scan.h has the measurements).
template <class Combine, class in_t, class out_t>
inline constexpr bool kCubLine = is_sum<Combine>::value && kCubLineSumTypes<in_t, out_t>;

template <class Combine, class in_t, class out_t, class Source, class Sink>
bool takes_cub_line(const DeviceProblem& p) {
  if constexpr (kCubLine<Combine, in_t, out_t>) {
    constexpr int64_t kTile = int64_t{kRowThreads} * row_items<Combine, Source, Sink>();
    // sm_90 and newer: where CUB runs its lookahead kernel (measured on the H100 only; older
    // GPUs would get its classic look-back, not measured against the row kernel's).
    return p.ctx.cc_major >= 9 && p.outer == 1 && p.inner == 1 && !p.flags.reverse &&
           p.length > kMaxRowModeTiles * kTile &&
           p.mask == nullptr && p.add == nullptr && p.mul == nullptr && p.mul_mask == nullptr &&
           !p.shift_mul && p.indices == nullptr;
  } else {
    return false;
  }
}

// Narrow columns of a plain float32 sum as one line of column tuples through CUB
// (cub_lanes_sum): forward, no mask, companion or fused epilogue, a few large blocks of some
// column counts (cub_lanes_fits says which, cub_line_scan.h has the measurements).
template <class Combine, class in_t, class out_t>
inline constexpr bool kCubLanes = is_sum<Combine>::value && kCubLanesSumTypes<in_t, out_t>;

template <class Combine, class in_t, class out_t>
bool takes_cub_lanes(const DeviceProblem& p) {
  if constexpr (kCubLanes<Combine, in_t, out_t>) {
    return p.mask == nullptr && p.add == nullptr && p.mul == nullptr && p.mul_mask == nullptr &&
           !p.shift_mul && !p.scale_input && p.indices == nullptr &&
           cub_lanes_fits(p.ctx.cc_major, p.outer, p.length, p.inner, p.flags.reverse);
  } else {
    return false;
  }
}

// Narrow columns scanned as rows of lanes (lanes_scan.cuh): 2..kMaxLanes columns, no mask or
// companion (a fused epilogue, add / mul / mul_mask, rides in LanesSink: the backward takes
// the forward's kernel family), and few lines (where scan_columns would take its tiles or
// three passes; with at least col_whole_columns_per_sm lines per SM a thread per column walks
// it).
template <class Combine>
bool takes_lanes(const DeviceProblem& p) {
  return p.inner >= 2 && p.inner <= kMaxLanes && p.mask == nullptr && !p.scale_input &&
         !p.shift_mul && p.indices == nullptr && p.length > 1 &&
         p.outer * p.inner < p.ctx.sms * col_whole_columns_per_sm<Combine>();
}

template <class Combine, class in_t, class out_t, bool kBroadcast>
void launch_by_shape(const DeviceProblem& p) {
  const int64_t numel = p.outer * p.length * p.inner;
  using Source = InputSource<Combine, in_t, kBroadcast>;
  Source src{static_cast<const in_t*>(p.input), static_cast<const in_t*>(p.coeff), p.mask,
             p.scale_input};
  if constexpr (kBroadcast) {
    src.at.coeff_at = CompanionIndex(p.coeff_layout, p.length, p.inner, numel);
    src.at.mask_at = CompanionIndex(p.mask_layout, p.length, p.inner, numel);
  }
  // Outputs of more than kStreamingBytes take evict-first stores (see store_vec_hinted).
  constexpr int64_t kStreamingBytes = int64_t{256} << 20;
  const int64_t out_bytes =
      numel * static_cast<int64_t>(sizeof(out_t) + (p.indices != nullptr ? sizeof(int64_t) : 0));
  // The lines' initial values ride in the sink (OutputSink::initial, a kernel parameter):
  // every kernel family starts a line from OutputSink::line_start where it would start from
  // identity(), once per line (per row, look-back chunk line, column or column tile).
  const OutputSink<Combine, out_t> dst{static_cast<out_t*>(p.output),
                                       p.indices,
                                       out_bytes > kStreamingBytes,
                                       static_cast<const out_t*>(p.add),
                                       static_cast<const out_t*>(p.mul),
                                       p.mul_mask,
                                       static_cast<const out_t*>(p.initial)};
  TORCH_CHECK(p.initial == nullptr || (p.add == nullptr && p.mul == nullptr &&
                                       p.mul_mask == nullptr && !p.scale_input && !p.shift_mul),
              "scanops: internal error: an initial value with a fused epilogue");
  if (p.shift_mul) {
    // mul read one scan position on (cumprod's backward: linear recurrences, dense
    // companions, rows; the engine shifts mul itself for the other problems).
    TORCH_CHECK(p.inner == 1 && p.mul != nullptr,
                "scanops: internal error: shift_mul outside the row kernels");
    if constexpr (Combine::arity == 2 && !kBroadcast) {
      const auto run = [&](auto second) {
        MulNextSink<Combine, out_t, decltype(second)::value> next_dst{dst};
        next_dst.mul = nullptr;
        next_dst.mul_next = static_cast<const out_t*>(p.mul);
        next_dst.second = static_cast<out_t*>(p.second);
        next_dst.line = p.length;
        next_dst.next = p.flags.reverse ? -1 : 1;
        scan_rows<Combine>(p.ctx, src, next_dst, p.outer, p.length, p.flags);
      };
      if (p.second != nullptr) {
        run(std::true_type{});
      } else {
        run(std::false_type{});
      }
      return;
    } else {
      TORCH_CHECK(false, "scanops: internal error: shift_mul for this problem");
    }
  }
  // masked_cumsum's backward (a sum whose only epilogue is a mask) along rows: the row tiles
  // load the mask's vectors with their input (MaskPreSink). Floating sums only (its
  // instantiation). H100, (32768, 32768) float32 masked_cumsum fwd+bwd: 83% -> 95% of its
  // copies. The same in the vector column tiles (the R mask vectors of a lane loaded with its
  // input, held through the tile's look-back) took it along dim 0 from 65% to 59%: not used.
  if constexpr (is_mask_pre_sum<Combine, out_t>::value && !kBroadcast) {
    if (p.inner == 1 && p.mul_mask != nullptr && p.add == nullptr && p.mul == nullptr) {
      MaskPreSink<Combine, out_t> mask_dst{dst};
      scan_rows<Combine>(p.ctx, src, mask_dst, p.outer, p.length, p.flags);
      return;
    }
  }
  // A fused epilogue otherwise (logcumsumexp's and cummax / cummin's backward: linear
  // recurrences with add and mul or mul_mask) along rows: EpiPreSink, every operand of a
  // thread's stores loaded before them.
  if constexpr (is_epi_pre_affine<Combine, out_t>::value && !kBroadcast) {
    if (p.inner == 1 && (p.add != nullptr || p.mul != nullptr || p.mul_mask != nullptr)) {
      EpiPreSink<Combine, out_t> epi_dst{dst};
      scan_rows<Combine>(p.ctx, src, epi_dst, p.outer, p.length, p.flags);
      return;
    }
  }
  if constexpr (!kBroadcast && kCubLine<Combine, in_t, out_t>) {
    if (takes_cub_line<Combine, in_t, out_t, Source, OutputSink<Combine, out_t>>(p)) {
      cub_line_sum(p.ctx, static_cast<const in_t*>(p.input), static_cast<out_t*>(p.output),
                   p.length, p.flags.exclusive, static_cast<const out_t*>(p.initial));
      return;
    }
  }
  if constexpr (!kBroadcast && kCubLanes<Combine, in_t, out_t>) {
    if (takes_cub_lanes<Combine, in_t, out_t>(p)) {
      cub_lanes_sum(p.ctx, static_cast<const in_t*>(p.input), static_cast<out_t*>(p.output),
                    p.outer, p.length, static_cast<int>(p.inner), p.flags.exclusive,
                    static_cast<const out_t*>(p.initial));
      return;
    }
  }
  if constexpr (!kBroadcast && kLanesCompiled<Combine, in_t, out_t>) {
    if (takes_lanes<Combine>(p) && scan_lanes<Combine, in_t, out_t>(p)) return;
  }
  if (p.inner == 1) {
    scan_rows<Combine>(p.ctx, src, dst, p.outer, p.length, p.flags);
  } else {
    scan_columns<Combine>(p.ctx, src, dst, p.outer, p.length, p.inner, p.flags);
  }
}

// The combines whose ops take companions (masked_cumsum: Sum; linear_recurrence: Affine),
// and so may have one broadcast in place: their kernels are compiled a second time for it.
template <class Combine>
struct takes_companions : std::bool_constant<Combine::arity == 2> {};
template <class acc_t>
struct takes_companions<SumCombine<acc_t>> : std::true_type {};

template <class Combine, class in_t, class out_t>
void launch_by_layout(const DeviceProblem& p) {
  if constexpr (takes_companions<Combine>::value) {
    if (p.mask_layout.strided || p.coeff_layout.strided) {
      return launch_by_shape<Combine, in_t, out_t, true>(p);
    }
  }
  TORCH_CHECK(!p.mask_layout.strided && !p.coeff_layout.strided,
              "scanops: internal error: a broadcast companion for a combine that takes none");
  launch_by_shape<Combine, in_t, out_t, false>(p);
}

}  // namespace detail

template <class Combine, class in_t, class out_t>
void launch_scan(const DeviceProblem& p) {
  if constexpr (Combine::indexed) {
    // Lines shorter than 2^31 keep positions in 32 bits: for 4-byte values the state is 8
    // bytes instead of 16, twice the items per thread in the row tiles (measured: see
    // docs/design.md, "cummax / cummin").
    using Narrow = typename Combine::narrow_t;
    if constexpr (!std::is_same_v<Combine, Narrow>) {
      if (p.length <= int64_t{INT32_MAX}) return detail::launch_by_layout<Narrow, in_t, out_t>(p);
    }
  }
  detail::launch_by_layout<Combine, in_t, out_t>(p);
}

}  // namespace scanops::cuda
