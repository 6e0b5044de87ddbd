// scanops CUDA back end: the jagged form's offsets in one pass (jagged_offsets.cu), the
// boundary between the host side (scan_cuda.cpp's JaggedOffsetsFn) and the kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace scanops::cuda {

struct JaggedOffsetsArgs {
  const void* offsets;  // int32 or int64, n >= 1 entries, contiguous
  bool int32;
  int64_t n, total;
  bool* heads;       // nullptr, or (total) bools already zeroed: set at each offsets[b] < total
  int64_t* as_long;  // nullptr, or (n) int64: the offsets
  unsigned* bad;     // one word, zeroed: set to 1 where the offsets do not start at 0, end at
                     // total and never decrease
  cudaStream_t stream;
  int64_t sms;
};

// Enqueues the pass on a.stream. No host synchronisation.
void launch_jagged_offsets(const JaggedOffsetsArgs& a);

}  // namespace scanops::cuda
