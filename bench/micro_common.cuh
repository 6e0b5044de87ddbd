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

// The experiments' set-up: device 0, a stream, a 64 MiB arena and the LaunchContext over them.
struct Setup {
  cudaDeviceProp prop{};
  cudaStream_t stream{};
  Arena arena{int64_t{64} << 20};
  scanops::cuda::LaunchContext ctx{};
  Setup() {
    cudaGetDeviceProperties(&prop, 0);
    cudaStreamCreate(&stream);
    ctx = {stream, prop.multiProcessorCount, &arena};
  }
};

// A random walk of -1 / 0 / +1 steps: every partial sum is exact in float32 whatever the
// association, so a scan's result can be checked against a host running sum bit for bit.
__global__ inline void fill_steps(float* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t h = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) >> 40;
    p[i] = static_cast<float>(static_cast<int>(h % 3) - 1);
  }
}

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
