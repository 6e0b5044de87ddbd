// ThreadSanitizer builds only (cmake/ScanopsSanitize.cmake adds this file to libscanops.so when
// SCANOPS_SANITIZE contains "thread"): the fork and join edges of OpenMP parallel regions.
//
// at::parallel_for is inline OpenMP in torch's wheels: its `#pragma omp parallel`, compiled
// into this library, is a call of libgomp's GOMP_parallel(fn, data, nthreads, flags), which
// runs fn(data) on the calling thread and on the threads of libgomp's pool and returns when all
// have returned. libgomp (torch's copy) is not instrumented, so TSan sees neither edge of that
// contract (the pool's threads are woken and waited for through libgomp's own futexes and
// atomics), and reports as races every write the caller made before a region that a worker
// reads inside it (the scheduler's Ctx, the carry vectors sized before the region) and every
// write a worker made that the caller reads or frees after it.
//
// This GOMP_parallel, hidden in this library (so that it serves the library's own regions and
// no one else's), calls libgomp's and declares the two edges OpenMP guarantees, and nothing
// more: a release by the caller before the region that every worker acquires as it starts
// (fork), and a release by every worker as it ends that the caller acquires after the region
// (join). The synchronisation inside a region (the chained scans' ready flags and block
// counter, the exception capture of at::parallel_for) is instrumented code of this library,
// which TSan checks as it is. What TSan still does not see: accesses made by uninstrumented
// code (libtorch, libgomp, Python), i.e. only this library's own loads and stores are checked.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {
using gomp_parallel_t = void (*)(void (*)(void*), void*, unsigned, unsigned);

struct Region {
  void (*fn)(void*);
  void* data;
  char fork;  // sync addresses: the caller releases &fork, every worker acquires it
  char join;  // every worker releases &join, the caller acquires it
};

void run_member(void* p) {
  Region* r = static_cast<Region*>(p);
  __tsan_acquire(&r->fork);
  r->fn(r->data);
  __tsan_release(&r->join);
}

gomp_parallel_t real_gomp_parallel() {
  static const gomp_parallel_t real = [] {
    // The next GOMP_parallel after this library in its lookup order: libgomp's (this library
    // links libgomp.so.1, -fopenmp); else the libgomp already loaded (torch's).
    void* f = dlvsym(RTLD_NEXT, "GOMP_parallel", "GOMP_4.0");
    if (!f) {
      if (void* h = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD)) f = dlvsym(h, "GOMP_parallel", "GOMP_4.0");
    }
    if (!f) {
      std::fprintf(stderr, "scanops (TSan build): libgomp's GOMP_parallel not found: %s\n", dlerror());
      std::abort();
    }
    return reinterpret_cast<gomp_parallel_t>(f);
  }();
  return real;
}
}  // namespace

extern "C" __attribute__((visibility("hidden"))) void GOMP_parallel(void (*fn)(void*), void* data,
                                                                    unsigned num_threads, unsigned flags) {
  Region r{fn, data, 0, 0};
  __tsan_release(&r.fork);
  real_gomp_parallel()(run_member, &r, num_threads, flags);
  __tsan_acquire(&r.join);
}
