// The ThreadSanitizer set-up's own check (scripts/sanitize.sh thread builds and runs it before
// the tests): an OpenMP region as at::parallel_for compiles it (GOMP_parallel), with the
// caller's data written before the region, read and written inside it (a flag handing one
// thread's value to the other, as the chained scans' carries are) and read after it.
//   selftest ok    correct code: with tsan_omp_fork_join.cpp linked in, no report (without
//                  it, TSan reports the fork and join as races: libgomp is not instrumented);
//   selftest race  the same plus an unsynchronised write by both threads: one report.
// So the fork/join edges declared by tsan_omp_fork_join.cpp hide no race inside a region.
#include <omp.h>

#include <atomic>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  const bool race = argc > 1 && argv[1][0] == 'r';
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
