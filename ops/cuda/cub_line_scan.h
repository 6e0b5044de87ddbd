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

// Narrow columns as one line of lane tuples: `outer` dense (length, lanes) float32 blocks
// (row-major, lanes = 2..kCubMaxLanes columns side by side) scanned along their length, each
// block through CUB's stable-order lookahead kernel with a lane-wise plus over tuples of
// `lanes` floats (one DeviceScan per block). Forward, inclusive or exclusive; initial: outer *
// lanes values (block o's at initial + o * lanes) or nullptr. Bitwise the same run to run (the
// order is fixed by the length, lanes and the GPU). Measured on the H100 against the rows of
// lanes (lanes_scan.cuh) and the column tiles, share of a copy (bench/cub_lanes_bench.cu and
// docs/benchmarks/h100-2026-12-07-cub-lanes.md): blocks of 2^28 elements, lanes 2..8: 75 / 72
// / 74 / 64 / 66 / 46 / 61% against 64 / 58 / 63 / 54 / 50 / 41 / 60%; 2^26: 70 / 67 / 58
// (unaligned tuples) / 59 / 56 / 44 / 41% against 62 / 57 / 59 / 52 / 47 / 39 / 29%; 2^24 and
// 2^22 level or behind. cub_lanes_fits holds the ground where it wins.
inline constexpr int kCubMaxLanes = 8;
template <class In, class Out>
inline constexpr bool kCubLanesSumTypes =
    SCANOPS_CUB_LINE_SCAN && std::is_same_v<In, float> && std::is_same_v<Out, float>;

// Whether cub_lanes_sum takes a float32 sum of (outer, length, inner) with these pointers
// (input, output, initial or nullptr): sm_90 or newer, forward, blocks of at least 2^26
// elements, at most 4 of them, and tuples of an even number of lanes aligned to their vector
// width (8 or 16 bytes: the unaligned tuples of 4 ran at 58-61% against the rows of lanes'
// 59-63%).
bool cub_lanes_fits(int cc_major, int64_t outer, int64_t length, int64_t inner, bool reverse,
                    const void* in, const void* out, const void* initial);

void cub_lanes_sum(const LaunchContext& ctx, const float* in, float* out, int64_t outer,
                   int64_t length, int lanes, bool exclusive, const float* initial = nullptr);

}  // namespace scanops::cuda
