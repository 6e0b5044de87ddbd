// scanops CUDA back end: segmented scans (ScanProblem's Segments), the boundary between the
// host side (scan_cuda.cpp) and their kernels (segmented.cuh, instantiated in
// segmented_<kind>.cu for the type lists of scan_cuda.h). A header of its own, so that the
// unsegmented kernels' translation units do not depend on it.
#pragma once

#include "ops/cuda/scan_cuda.h"
#include "ops/segmented.h"

namespace scanops::cuda {

// A segmented ScanProblem as the kernels see it: input, output and indices dense in the
// canonical layout (element (o, l, i) at (o * length + l) * inner + i), the companions (mask,
// coefficients, reset) read through their strides (ops/segmented.h, SegStrides).
struct SegmentedDeviceProblem {
  const void* input;   // in_t
  const void* coeff;   // in_t, arity-2 combines only, else nullptr
  SegStrides coeff_at;
  const bool* mask;    // nullptr: no mask
  SegStrides mask_at;
  const bool* reset;   // never nullptr
  SegStrides reset_at;
  void* output;        // out_t
  int64_t* indices;    // indexed combines only, else nullptr
  const void* initial;  // out_t, outer * inner values, or nullptr
  int64_t outer, length, inner;
  ScanFlags flags;
  LaunchContext ctx;
};

// Enqueues the segmented scan of `p` on p.ctx.stream. No host synchronisation.
template <class Combine, class in_t, class out_t>
void launch_segmented(const SegmentedDeviceProblem& p);

}  // namespace scanops::cuda
