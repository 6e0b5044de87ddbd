// What the kernel-level experiments (bench/*_bench.cu) share: a scratch arena handed out again
// for every launch (no allocation in a timed region) and a CUDA-event timer. Not part of the
// library.
// Include it before the library's headers: the experiments check no launch (their results
// are checked or not trusted), so c10's checks become no-ops here.
#pragma once

#include <c10/cuda/CUDAException.h>
#undef C10_CUDA_KERNEL_LAUNCH_CHECK
#define C10_CUDA_KERNEL_LAUNCH_CHECK() ((void)0)
#undef C10_CUDA_CHECK
#define C10_CUDA_CHECK(x) ((void)(x))
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "ops/cuda/scan_cuda.h"

namespace scanops::bench {

// One device buffer handed out again for every launch (reset `used` before each).
struct Arena : scanops::cuda::Scratch {
  unsigned char* base = nullptr;
  int64_t size = 0, used = 0;
  explicit Arena(int64_t bytes) : size(bytes) { cudaMalloc(&base, bytes); }
  void* allocate(int64_t bytes) override {
    void* p = base + used;
    used += (bytes + 255) / 256 * 256;
    if (used > size) {
      fprintf(stderr, "arena too small\n");
      exit(2);
    }
    return p;
  }
  ~Arena() { cudaFree(base); }
};

// Milliseconds that f's work on stream s takes.
inline float time_ms(const std::function<void()>& f, cudaStream_t s) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  f();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

}  // namespace scanops::bench
