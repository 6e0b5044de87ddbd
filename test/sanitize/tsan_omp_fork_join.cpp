// ThreadSanitizer builds only: the fork and join edges of EVERY OpenMP parallel region of the
// process, libtorch_cpu's as well as scanops'. cmake/ScanopsSanitize.cmake builds this file,
// uninstrumented, as libscanops_tsan_omp.so (SCANOPS_SANITIZE contains "thread"), links it into
// the project's executables (the GoogleTest suite) and scripts/sanitize.sh LD_PRELOADs it into
// Python after the TSan runtime.
//
// A `#pragma omp parallel` (at::parallel_for in torch's OpenMP builds, inline in scanops and in
// libtorch_cpu alike; torch's own kernels such as cpu_vflip_memcpy and exp_kernel; MKL's
// threading layer) compiles to a call of libgomp's GOMP_parallel(fn, data, nthreads, flags),
// which runs fn(data) on the calling thread and on the threads of libgomp's pool and returns
// when all have returned. libgomp (torch's copy) is not instrumented, so TSan sees neither edge
// of that contract (the pool's threads are woken and waited for through libgomp's own futexes
// and atomics), and reports as races every write the caller made before a region that a worker
// reads inside it and every write a worker made that the caller reads or frees after it. That
// holds for uninstrumented callers too: TSan checks the intercepted functions (memcpy, memset,
// malloc / free, ...) whoever calls them.
//
// This GOMP_parallel (default visibility; the library exports its GOMP_ entries and nothing
// else) is what every caller's GOMP_parallel@GOMP_4.0 binds to once the library comes before
// libgomp in the global lookup scope (LD_PRELOAD; or a direct dependency of an executable, where
// libgomp is only an indirect one; an unversioned definition satisfies a versioned reference).
// It calls libgomp's (dlvsym RTLD_NEXT; else the libgomp already loaded) and
// declares the two edges OpenMP guarantees, and nothing more: a release by the caller before
// the region that every member acquires as it starts (fork), and a release by every member as
// it ends that the caller acquires after the region (join). Nothing between the members of a
// team: a race between two workers of a region (scanops' or torch's) is still reported, and the
// synchronisation inside scanops' regions (the chained scans' ready flags, the exception
// capture of at::parallel_for) is instrumented code that TSan checks as it is.
//
// The other synchronising libgomp entries that libtorch_cpu imports (`nm -D`: GOMP_barrier,
// GOMP_loop_end, GOMP_critical_start / _end, GOMP_critical_name_start / _end,
// GOMP_atomic_start / _end, GOMP_ordered_start / _end: MKL's GNU threading layer, linked into
// libtorch_cpu, among others; its named critical sections .gomp_critical_user_mkl_blas_*) are
// not modelled: none of them is called in `scripts/sanitize.sh thread ci`
// (counted on 2026-11-27: GOMP_parallel alone, from libtorch_cpu and libscanops). They pass
// through this library so that a run that does reach one says so (stderr, and the file
// $SCANOPS_TSAN_OMP_NOTES when set; sanitize.sh prints it): a report whose accesses lie on
// either side of such a barrier or critical section may then be false, and the entry would
// need its edge here (barrier: a release before and an acquire after on a per-team address;
// critical / atomic / ordered: a lock's acquire after start and release before end). The
// entries without a happens-before guarantee (GOMP_single_start, GOMP_loop_dynamic_*,
// GOMP_loop_ordered_dynamic_*, GOMP_sections_*, GOMP_loop_end_nowait) are left to libgomp:
// modelling them would hide races. GOMP_parallel_start / _end (the pre-4.0 ABI) and the
// combined GOMP_parallel_loop_* entries are imported by no library of the process.
//
// Self-test: test/sanitize/tsan_omp_selftest.cpp (scripts/sanitize.sh runs it first).
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

extern "C" {
// The TSan runtime's annotations. Weak: in a process without the runtime the wrappers only
// forward to libgomp.
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
}

namespace {
// libgomp's definition of `name`: the next one after this library in the lookup order, else
// the one of the libgomp.so.1 already loaded (whoever calls a GOMP_ entry has loaded it; under
// Python it may be only in the local scope of the library that needed it).
void* real_gomp(const char* name, const char* version) {
  void* f = dlvsym(RTLD_NEXT, name, version);
  if (!f) {
    if (void* h = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
      f = dlvsym(h, name, version);
      dlclose(h);
    }
  }
  if (!f) {
    std::fprintf(stderr, "libscanops_tsan_omp: libgomp's %s@%s not found\n", name, version);
    std::abort();
  }
  return f;
}

// Resolved on first use; two threads resolving at once store the same pointer.
template <class F>
F resolve(F* slot, const char* name, const char* version) {
  F f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!f) {
    f = reinterpret_cast<F>(real_gomp(name, version));
    __atomic_store_n(slot, f, __ATOMIC_RELEASE);
  }
  return f;
}

using gomp_parallel_t = void (*)(void (*)(void*), void*, unsigned, unsigned);
using gomp_void_t = void (*)();
using gomp_name_t = void (*)(void**);

struct Region {
  void (*fn)(void*);
  void* data;
  char fork;  // sync addresses: the caller releases &fork, every member acquires it
  char join;  // every member releases &join, the caller acquires it
};

void run_member(void* p) {
  Region* r = static_cast<Region*>(p);
  __tsan_acquire(&r->fork);
  r->fn(r->data);
  __tsan_release(&r->join);
}

// Once per entry and process: the entry was reached, and it is not modelled.
enum Unmodelled { kBarrier, kLoopEnd, kCritical, kCriticalName, kAtomic, kOrdered, kUnmodelled };
int noted[kUnmodelled];

void note(Unmodelled which, const char* name, void* caller) {
  if (__atomic_exchange_n(&noted[which], 1, __ATOMIC_RELAXED)) return;
  Dl_info info;
  const char* object = dladdr(caller, &info) && info.dli_fname ? info.dli_fname : "?";
  char msg[1024];
  int n = std::snprintf(msg, sizeof msg,
                        "libscanops_tsan_omp (pid %d): %s, called from %s, is not modelled "
                        "(test/sanitize/tsan_omp_fork_join.cpp): a TSan report across it may "
                        "be false\n",
                        static_cast<int>(getpid()), name, object);
  if (n <= 0) return;
  if (n >= static_cast<int>(sizeof msg)) n = sizeof msg - 1;
  ssize_t ignored = write(2, msg, n);
  if (const char* path = std::getenv("SCANOPS_TSAN_OMP_NOTES")) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
      ignored = write(fd, msg, n);
      close(fd);
    }
  }
  (void)ignored;
}

gomp_parallel_t real_parallel;
gomp_void_t real_barrier, real_loop_end, real_critical_start, real_atomic_start, real_ordered_start;
gomp_name_t real_critical_name_start;
}  // namespace

#define SCANOPS_TSAN_OMP_EXPORT __attribute__((visibility("default")))

extern "C" {
SCANOPS_TSAN_OMP_EXPORT void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  gomp_parallel_t real = resolve(&real_parallel, "GOMP_parallel", "GOMP_4.0");
  if (!__tsan_release || !__tsan_acquire) {
    real(fn, data, num_threads, flags);
    return;
  }
  Region r{fn, data, 0, 0};
  __tsan_release(&r.fork);
  real(run_member, &r, num_threads, flags);
  __tsan_acquire(&r.join);
}

#define SCANOPS_TSAN_OMP_PASS_THROUGH(entry, which, slot)                  \
  SCANOPS_TSAN_OMP_EXPORT void entry() {                                   \
    note(which, #entry, __builtin_return_address(0));                      \
    resolve(&slot, #entry, "GOMP_1.0")();                                  \
  }
SCANOPS_TSAN_OMP_PASS_THROUGH(GOMP_barrier, kBarrier, real_barrier)
SCANOPS_TSAN_OMP_PASS_THROUGH(GOMP_loop_end, kLoopEnd, real_loop_end)
SCANOPS_TSAN_OMP_PASS_THROUGH(GOMP_critical_start, kCritical, real_critical_start)
SCANOPS_TSAN_OMP_PASS_THROUGH(GOMP_atomic_start, kAtomic, real_atomic_start)
SCANOPS_TSAN_OMP_PASS_THROUGH(GOMP_ordered_start, kOrdered, real_ordered_start)
#undef SCANOPS_TSAN_OMP_PASS_THROUGH

SCANOPS_TSAN_OMP_EXPORT void GOMP_critical_name_start(void** pptr) {
  note(kCriticalName, "GOMP_critical_name_start", __builtin_return_address(0));
  resolve(&real_critical_name_start, "GOMP_critical_name_start", "GOMP_1.0")(pptr);
}
}  // extern "C"
