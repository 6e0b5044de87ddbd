// scanops CUDA back end: one dense line of a sum (a 1-D cumsum, forward, inclusive or
// exclusive: floating types, and integer or bool inputs to int64) through CCCL's
// cub::DeviceScan, instead of the row kernel's look-back mode.
//
// Why CUB here and not elsewhere: CCCL 3.5 (the pinned PyPI nvidia-cuda-cccl, see
// requirements-tools.txt) runs a float `plus` scan with a stable reduction order on sm_90 and
// newer through its warp-specialised "lookahead" kernel (bulk copies into shared-memory
// stages, a lookahead warp that folds the predecessors' tile aggregates in fixed batches of
// 32, so the result is the same run to run). Measured on the H100, one 2^30-element line
// (bench/cub_scan_bench.cu, docs/design.md): float32 83.5% of copy against the look-back
// mode's 78.5%, exclusive 82.5% / 78.3%, bfloat16 with float32 accumulation 91.3% / 68.7%,
// float64 77.7% / 68.8%; a float32 cumprod with float64 states was slower there (63.8% /
// 66.8%), so the other combines, reverse scans, masks and the fused backward epilogues stay
// on the hand-written kernels. Integer sums are exact in any order, so they take CUB's
// default order: H200, 2^28 / 2^30-element lines of int64 77.3% / 77.3% of copy against the
// look-back's 53.1% / 54.0%, int32 into int64 64.1% / 65.2% against 58.6% / 60.1%; 2^27
// elements into int64: int16 57.7% against 45.4%, uint8 53.4% / 39.3%, bool 53.8% / 38.4%
// (int8 as uint8). A reverse float32 line through reverse iterators ran at 36% (look-back
// 64%): reverse lines stay on the row kernel.
// Built when CMake finds CCCL >= 3.5 (SCANOPS_CUB_LINE_SCAN=1); without it every line takes
// the row kernel.
#pragma once

#include <type_traits>

#include "ops/cuda/scan_cuda.h"

#ifndef SCANOPS_CUB_LINE_SCAN
#define SCANOPS_CUB_LINE_SCAN 0
#endif

namespace scanops::cuda {

// The (input, output) element types cub_line_sum is instantiated for: one floating type in
// and out (float32 accumulation for the half types, as the library's own kernels), or an
// integer or bool input and int64 out (torch's promotion of integer sums).
template <class In>
inline constexpr bool kCubLineIntInput =
    std::is_same_v<In, bool> || std::is_same_v<In, uint8_t> || std::is_same_v<In, int8_t> ||
    std::is_same_v<In, int16_t> || std::is_same_v<In, int32_t> || std::is_same_v<In, int64_t>;
template <class In, class Out>
inline constexpr bool kCubLineSumTypes =
    SCANOPS_CUB_LINE_SCAN &&
    ((std::is_same_v<In, Out> &&
      (std::is_same_v<In, float> || std::is_same_v<In, double> || std::is_same_v<In, c10::Half> ||
       std::is_same_v<In, c10::BFloat16>)) ||
     (std::is_same_v<Out, int64_t> && kCubLineIntInput<In>));

// out[i] = in[0] + ... + in[i] (exclusive: in[0] + ... + in[i-1], 0 first), accumulated in
// float32 for float32 / float16 / bfloat16, float64 for float64 and int64 for the integers,
// in an order fixed by the length and the GPU (floating types: bitwise the same run to run;
// integers: exact). Temporary storage (a tile state per ~32 KB of input) from ctx.scratch.
// initial (a device pointer to one Out, or nullptr): the line starts from *initial, i.e.
// out[i] = *initial + in[0] + ... (exclusive: out[0] = *initial). Read by the kernel on the
// device (CUB's FutureValue init: no host synchronisation), in CUB's same lookahead kernel
// and stable order (the initial value folded in by the first tile's threads), so the speed
// is that of the scan without it. Chosen over sending such lines to the row kernel's
// look-back mode, which is 5-25% slower on these lines (the table above).
template <class In, class Out>
void cub_line_sum(const LaunchContext& ctx, const In* in, Out* out, int64_t length,
                  bool exclusive, const Out* initial = nullptr);

// Narrow columns as one line of column tuples: `outer` dense (length, lanes) float32 blocks
// (row-major, `lanes` columns side by side) scanned along their length, each block through
// CUB's stable-order lookahead kernel with a lane-wise plus over tuples of `lanes` floats (one
// DeviceScan per block). Forward, inclusive or exclusive; initial: outer * lanes values (block
// o's at initial + o * lanes) or nullptr. Bitwise the same run to run (the order is fixed by
// the length, lanes and the GPU). Measured on the H100 through the library, tuples aligned to
// 4 bytes, share of a copy (docs/benchmarks/h100-2026-12-07-cub-lanes.md), against the rows of
// lanes (lanes_scan.cuh) and, for 8 columns, the vector column tiles:
//   columns                 2      3      4      5      6      7      8
//   2^28 elements  CUB    75.1%  72.0%  60.9%  64.1%  60.6%  46.2%  41.1%
//                  before 63.5%  58.4%  62.9%  53.9%  50.0%  40.5%  60.4%
//   2^26 elements  CUB    69.9%  66.6%  57.9%  58.9%  56.2%  43.8%  40.9%
//                  before 61.6%  56.9%  59.3%  52.0%  46.5%  39.0%  28.7%
// and at 2^24 and 2^22 elements level or behind. Hence cub_lanes_fits: 2, 3, 5, 6 or 7 columns,
// blocks of at least 2^26 elements. Tuples aligned to their vector width (8 / 16 bytes) ran
// faster at kernel level (bench/cub_lanes_bench.cu, 2^28: 79 / 74 / 66 / 61% for 2 / 4 / 6 / 8
// columns) but have not run through the library: the next step for 4 and 8 columns.
inline constexpr int kCubMaxLanes = 7;
template <class In, class Out>
inline constexpr bool kCubLanesSumTypes =
    SCANOPS_CUB_LINE_SCAN && std::is_same_v<In, float> && std::is_same_v<Out, float>;

// Whether cub_lanes_sum takes a float32 sum of (outer, length, inner): sm_90 or newer (CUB's
// lookahead kernel), forward, 2, 3, 5, 6 or 7 columns, at most 4 blocks of at least 2^26
// elements each.
bool cub_lanes_fits(int cc_major, int64_t outer, int64_t length, int64_t inner, bool reverse);

void cub_lanes_sum(const LaunchContext& ctx, const float* in, float* out, int64_t outer,
                   int64_t length, int lanes, bool exclusive, const float* initial = nullptr);

}  // namespace scanops::cuda
