// Part of the ThreadSanitizer self-test (tsan_omp_selftest.cpp): an OpenMP region as torch's
// kernels run theirs (cpu_vflip_memcpy, exp_kernel: TensorIterator loops under
// at::parallel_for in libtorch_cpu). Built WITHOUT -fsanitize (libtorch_cpu is not
// instrumented), with -fopenmp, and dlopen'ed RTLD_LOCAL by the test program, as Python loads
// torch's libraries: its loads and stores are invisible to TSan, but the memcpy it calls is
// intercepted and checked, and its GOMP_parallel call must reach the LD_PRELOADed
// libscanops_tsan_omp.so for the fork and join to be seen.
#include <omp.h>

#include <cstring>

// Copies src to dst from 2 threads, each its half; overlap: both threads copy the first half
// (two unsynchronised memcpy writes to the same bytes: the planted race).
extern "C" void scanops_selftest_copy(char* dst, const char* src, long n, int overlap) {
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    const long half = n / 2;
    const long begin = overlap ? 0 : t * half;
    const long len = overlap || t == 0 ? half : n - half;
    std::memcpy(dst + begin, src + begin, len);
  }
}
