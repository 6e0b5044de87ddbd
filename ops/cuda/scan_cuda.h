// scanops CUDA back end: the boundary between the host side and the kernels.
//
// scan_cuda.cpp (host compiler, ATen) turns a ScanProblem into a DeviceProblem (raw pointers,
// extents, flags, stream, SM count, a scratch allocator) and calls launch_scan, defined in
// launch_scan.cuh and instantiated in one .cu file per combine kind (scan_sum.cu,
// scan_prod.cu, scan_affine.cu, scan_logaddexp.cu, scan_max.cu, scan_min.cu). The .cu files include no ATen header: that keeps their
// compile time down and lets them build in parallel.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/combine.h"

namespace scanops::cuda {

// Device scratch memory for the multi-pass scans (chunk totals). The host side implements it
// with the caching allocator: memory stays valid until launch_scan returns and is
// stream-ordered, so kernels enqueued on the stream by then may use it.
class Scratch {
 public:
  virtual void* allocate(int64_t bytes) = 0;

 protected:
  ~Scratch() = default;
};

// Where and how kernels are launched: the current stream of the input's device (the caller
// holds a device guard), the device's SM count, scratch memory.
struct LaunchContext {
  cudaStream_t stream;
  int64_t sms;
  Scratch* scratch;
  int cc_major = 0;  // the GPU's compute capability (major); 0: unknown
};

// Where a companion tensor (mask, coefficients) holds the problem's element at canonical
// offset e = (o * length + l) * inner + i: e itself (dense, the common case), or, for a
// companion read in place through a broadcast (a stride-0 dim), o * so + l * sl + i * si.
struct CompanionLayout {
  bool strided = false;
  int64_t so = 0, sl = 0, si = 0;
};

// A ScanProblem as the kernels see it: contiguous tensors, element (o, l, i) at offset
// (o * length + l) * inner + i; the mask and the coefficients possibly broadcast in place.
struct DeviceProblem {
  const void* input;  // in_t
  const void* coeff;  // in_t, arity-2 combines only
  const bool* mask;   // nullptr: no mask
  void* output;       // out_t
  int64_t* indices;   // indexed combines (cummax / cummin) only, else nullptr
  int64_t outer, length, inner;
  ScanFlags flags;
  LaunchContext ctx;
  // The backward fusions (ScanProblem): written value (value + add[t]) * mul[t].
  const void* add = nullptr;         // out_t, or nullptr
  const void* mul = nullptr;         // out_t, or nullptr
  const bool* mul_mask = nullptr;    // bool (the mul of a bool tensor), or nullptr
  bool scale_input = false;          // Affine: lift (a, a * x)
  CompanionLayout mask_layout{};
  CompanionLayout coeff_layout{};
  // mul read at the next scan position, 1 at a line's last (ScanProblem::shift_mul; inner == 1),
  // or, with second (out_t), 0 there and the products written to second
  bool shift_mul = false;
  void* second = nullptr;
  // The value each line starts from (ScanProblem::state, LineState::initial): out_t, outer *
  // inner values, line (o, i) at o * inner + i, or nullptr (every line starts from identity()).
  // Never given together with the fused epilogue, scale_input or shift_mul (the engine).
  const void* initial = nullptr;
};

// Enqueues the scan of `p` (chooses the kernel family by shape). No host synchronisation.
template <class Combine, class in_t, class out_t>
void launch_scan(const DeviceProblem& p);

// The instantiations, X(in_t, out_t, acc) for each: the (in_t, out_t) pairs ops/dispatch.h
// produces and their accumulation type acc_t<in_t>, restated so that the .cu files need no
// ATen header (scan_cuda.cpp checks them against dispatch.h). A pair missing here is an
// undefined launch_scan symbol.
#define SCANOPS_CUDA_INTEGRAL_TYPES(X)          \
  X(int8_t, int8_t, int64_t)                      \
  X(int16_t, int16_t, int64_t)                    \
  X(int32_t, int32_t, int64_t)                    \
  X(int64_t, int64_t, int64_t)                    \
  X(uint8_t, uint8_t, int64_t)                    \
  X(int8_t, int64_t, int64_t)                     \
  X(int16_t, int64_t, int64_t)                    \
  X(int32_t, int64_t, int64_t)                    \
  X(uint8_t, int64_t, int64_t)                    \
  X(bool, int64_t, int64_t)

#define SCANOPS_CUDA_SCAN_TYPES(X)                \
  X(float, float, float)                          \
  X(double, double, double)                       \
  X(c10::Half, c10::Half, float)                  \
  X(c10::BFloat16, c10::BFloat16, float)          \
  X(c10::complex<float>, c10::complex<float>, c10::complex<float>)    \
  X(c10::complex<double>, c10::complex<double>, c10::complex<double>) \
  SCANOPS_CUDA_INTEGRAL_TYPES(X)

// The Prod kernels: floating types accumulate in double (WideFloatAcc in ops/dispatch.h).
#define SCANOPS_CUDA_PROD_TYPES(X)                \
  X(float, float, double)                         \
  X(double, double, double)                       \
  X(c10::Half, c10::Half, double)                 \
  X(c10::BFloat16, c10::BFloat16, double)         \
  X(c10::complex<float>, c10::complex<float>, c10::complex<double>)   \
  X(c10::complex<double>, c10::complex<double>, c10::complex<double>) \
  SCANOPS_CUDA_INTEGRAL_TYPES(X)

// Floating and complex types (in_t == out_t) of Affine and LogAddExp.
// Affine with ScanProblem::wide_acc: float32 and half inputs accumulating in float64.
#define SCANOPS_CUDA_AFFINE_WIDE_TYPES(X)         \
  X(float, float, double)                         \
  X(c10::Half, c10::Half, double)                 \
  X(c10::BFloat16, c10::BFloat16, double)

#define SCANOPS_CUDA_FLOAT_COMPLEX_TYPES(X)                           \
  X(float, float, float)                                              \
  X(double, double, double)                                           \
  X(c10::Half, c10::Half, float)                                      \
  X(c10::BFloat16, c10::BFloat16, float)                              \
  X(c10::complex<float>, c10::complex<float>, c10::complex<float>)    \
  X(c10::complex<double>, c10::complex<double>, c10::complex<double>)

// cummax / cummin (in_t == out_t; the third entry is the type values are kept in).
#define SCANOPS_CUDA_EXTREMUM_TYPES(X)     \
  X(float, float, float)                   \
  X(double, double, double)                \
  X(c10::Half, c10::Half, c10::Half)       \
  X(c10::BFloat16, c10::BFloat16, c10::BFloat16) \
  X(int8_t, int8_t, int8_t)                \
  X(int16_t, int16_t, int16_t)             \
  X(int32_t, int32_t, int32_t)             \
  X(int64_t, int64_t, int64_t)             \
  X(uint8_t, uint8_t, uint8_t)             \
  X(bool, bool, bool)

}  // namespace scanops::cuda
