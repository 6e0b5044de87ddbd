// The ThreadSanitizer set-up's own check (scripts/sanitize.sh thread builds and runs it before
// the tests, with libscanops_tsan_omp.so, built from tsan_omp_fork_join.cpp, LD_PRELOADed
// after the TSan runtime exactly as into Python; and without it, as the control).
//
//   selftest ok              an OpenMP region as scanops compiles at::parallel_for (this
//                            program is instrumented): the caller's data written before the
//                            region, read and written inside it (a flag handing one thread's
//                            value to the other, as the chained scans' carries are) and read
//                            after it. With the interposer: no report. Without: reports (the
//                            fork and join that uninstrumented libgomp hides).
//   selftest race            the same plus an unsynchronised write by both threads: a report.
//   selftest lib LIB         a region in an uninstrumented library dlopen'ed RTLD_LOCAL
//                            (tsan_omp_selftest_lib.cpp, as libtorch_cpu's regions under
//                            Python): the caller writes a buffer, the workers memcpy it, the
//                            caller reads the copy and frees both. With the interposer: no
//                            report (its GOMP_parallel is reached from that library too).
//                            Without: reports (torch's cpu_vflip_memcpy reports, in small).
//   selftest lib-race LIB    the same with both workers memcpy-ing into the same bytes: a
//                            report (the modelling adds no edge between a region's members).
// So the fork/join edges of tsan_omp_fork_join.cpp reach every caller of libgomp and hide no
// race inside a region.
#include <dlfcn.h>
#include <omp.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {
int run_ok_race(bool race) {
  long shared = 0;
  double total = 0;
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<double> v(1000, rep);
    std::atomic<int> ready{0};
    double carry = 0;
#pragma omp parallel num_threads(2)
    {
      const int t = omp_get_thread_num();
      for (int i = t; i < 1000; i += 2) v[i] += 1;
      if (t == 0) {
        carry = v[0];
        ready.store(1, std::memory_order_release);
      } else {
        while (!ready.load(std::memory_order_acquire)) {
        }
        v[1] += carry;
      }
      if (race) shared += t;  // the planted race
    }
    for (double d : v) total += d;
  }
  std::printf("total %g shared %ld\n", total, shared);
  return 0;
}

int run_lib(const char* path, bool race) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "tsan_omp_selftest: %s\n", dlerror());
    return 2;
  }
  using copy_t = void (*)(char*, const char*, long, int);
  auto copy = reinterpret_cast<copy_t>(dlsym(h, "scanops_selftest_copy"));
  if (!copy) {
    std::fprintf(stderr, "tsan_omp_selftest: %s\n", dlerror());
    return 2;
  }
  long total = 0;
  for (int rep = 0; rep < 20; ++rep) {
    const long n = 4096 + rep;
    std::vector<char> src(n), dst(n);
    for (long i = 0; i < n; ++i) src[i] = static_cast<char>(i + rep);  // written before the region
    copy(dst.data(), src.data(), n, race ? 1 : 0);
    for (long i = 0; i < (race ? n / 2 : n); ++i) total += dst[i];  // read after it
  }  // both freed after it
  std::printf("total %ld\n", total);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "ok";
  if (!std::strcmp(mode, "ok")) return run_ok_race(false);
  if (!std::strcmp(mode, "race")) return run_ok_race(true);
  if (argc > 2 && !std::strcmp(mode, "lib")) return run_lib(argv[2], false);
  if (argc > 2 && !std::strcmp(mode, "lib-race")) return run_lib(argv[2], true);
  std::fprintf(stderr, "usage: %s ok | race | lib LIB | lib-race LIB\n", argv[0]);
  return 2;
}
