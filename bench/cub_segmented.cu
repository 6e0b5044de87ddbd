// cub::DeviceSegmentedScan (CCCL >= 3.3; the pinned CCCL 3.5 wheel) as a tiny shared library
// with a plain C ABI, for bench/bench_segmented.py --cub (ctypes; no torch dependency).
// Float32 segmented sums over the jagged (offsets) form: segment b is
// in[offsets[b] : offsets[b + 1]], offsets int64 on the device, num_segments + 1 entries.
//
// Build (bench/build_cub_segmented.sh does this; CCCL's headers first on the include path, so
// that CCCL 3.5 is used and not the toolkit's CCCL 3.0):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Xcompiler -fPIC -shared \
//     -I .venv/lib/python3.11/site-packages/nvidia/cu13/include/cccl \
//     bench/cub_segmented.cu -o build-cubseg/libcub_segmented.so
// (the CUDA runtime is linked statically: the .so needs only the driver.)
#include <cub/device/device_segmented_scan.cuh>
#include <cub/version.cuh>

#include <cuda_runtime.h>
#include <cstddef>
#include <cstdint>
#include <mutex>

#if CUB_VERSION < 300300
#error "cub::DeviceSegmentedScan needs CCCL >= 3.3: put the nvidia-cuda-cccl wheel's include/cccl first"
#endif

namespace {

// One cached temporary buffer, grown on demand (the query runs on every call: host-only work).
// The buffer is freed and reallocated only when a larger size is asked for; the caller's
// stream is synchronised before a free, so a kernel still reading the old buffer finishes first.
std::mutex g_mutex;
void* g_temp = nullptr;
size_t g_temp_bytes = 0;

cudaError_t ensure_temp(size_t bytes, cudaStream_t stream) {
  if (bytes <= g_temp_bytes && g_temp != nullptr) return cudaSuccess;
  if (g_temp != nullptr) {
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return e;
    e = cudaFree(g_temp);
    if (e != cudaSuccess) return e;
    g_temp = nullptr;
    g_temp_bytes = 0;
  }
  size_t want = bytes > 0 ? bytes : 1;
  cudaError_t e = cudaMalloc(&g_temp, want);
  if (e != cudaSuccess) {
    g_temp = nullptr;
    return e;
  }
  g_temp_bytes = want;
  return cudaSuccess;
}

template <bool Exclusive>
cudaError_t run(const float* in, float* out, const int64_t* offsets, int64_t num_segments,
                cudaStream_t stream) {
  size_t bytes = 0;
  cudaError_t e;
  // begin offsets: offsets[0 .. B), end offsets: offsets[1 .. B]
  if (Exclusive) {
    e = cub::DeviceSegmentedScan::ExclusiveSegmentedSum(nullptr, bytes, in, out, offsets,
                                                        offsets + 1, num_segments, stream);
  } else {
    e = cub::DeviceSegmentedScan::InclusiveSegmentedSum(nullptr, bytes, in, out, offsets,
                                                        offsets + 1, num_segments, stream);
  }
  if (e != cudaSuccess) return e;
  e = ensure_temp(bytes, stream);
  if (e != cudaSuccess) return e;
  if (Exclusive) {
    e = cub::DeviceSegmentedScan::ExclusiveSegmentedSum(g_temp, bytes, in, out, offsets,
                                                        offsets + 1, num_segments, stream);
  } else {
    e = cub::DeviceSegmentedScan::InclusiveSegmentedSum(g_temp, bytes, in, out, offsets,
                                                        offsets + 1, num_segments, stream);
  }
  if (e != cudaSuccess) return e;
  return cudaPeekAtLastError();
}

}  // namespace

extern "C" {

// CUB_VERSION of the headers this library was built with (e.g. 300500 for CCCL 3.5.0).
int cub_segscan_version(void) { return CUB_VERSION; }

// Segmented sum of float32 `in` into `out` (device pointers, offsets[num_segments] elements),
// inclusive (exclusive = 0) or exclusive, launched on `stream` (a cudaStream_t; 0: the legacy
// default stream). Returns a cudaError_t (0: launched). Asynchronous: no synchronisation unless
// the temporary buffer grows.
int cub_segscan_f32(const float* in, float* out, const int64_t* offsets, int64_t num_segments,
                    int exclusive, void* stream) {
  if (num_segments <= 0) return 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e = exclusive ? run<true>(in, out, offsets, num_segments, s)
                            : run<false>(in, out, offsets, num_segments, s);
  return static_cast<int>(e);
}

// Temporary bytes the last sized call asked for (0 before any call).
size_t cub_segscan_temp_bytes(void) { return g_temp_bytes; }

const char* cub_segscan_error_string(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // extern "C"
