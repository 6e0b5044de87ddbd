/* The CPU benchmark's native floor (bench_cpu.py compiles it with the system C compiler and
 * calls it through ctypes, which releases the GIL): the minimal traffic of a scan moved into
 * fresh outputs by `nt` native threads, each over one contiguous span of the elements, walked a
 * chunk at a time, the chunk's output pages populated (MADV_POPULATE_WRITE) just before the
 * chunk's stores: the schedule scanops' CPU back end uses for large outputs, without the scan.
 * Python threads driving ctypes calls measured slower and noisier than the op at 16 threads
 * (a floor the op "beat" by up to 36%), hence native threads.
 *
 * kinds (n elements; out / in / out2 / in2 as named):
 *   0 copy:       out[i] = in[i], esize bytes an element (memcpy)
 *   1 copy+fill:  out[i] = in[i] (esize bytes), out2[i] = 0 (int64): cummax's values and indices
 *   2 copy+read:  out[i] = in[i] (esize bytes), in2[i] read (1 byte, summed): masked_cumsum
 *   3 add:        out[i] = in[i] + in2[i] (float32): linear_recurrence's two reads, one write
 * kind + 8: the copies and the fill as plain loops instead of memcpy / memset (copy_loop).
 * kind + 16: the outputs' 2 MiB-aligned interiors advised MADV_HUGEPAGE first, as scanops
 * advises its large outputs (SCANOPS_CPU_HUGEPAGES, ops/cpu/scan_cpu_memory.cpp advise_huge_pages): a
 * floor with 4 KiB pages alone would be no floor for an op whose output has 2 MiB pages.
 * kind + 32 (with + 8): the plain loops prefetch their inputs 2 KiB ahead, as the scan kernels'
 * walks do (kPrefetchBytes in ops/cpu/scan_cpu_avx2.h): the hardware prefetchers stop at 4 KiB
 * page boundaries, and on the 16-core Xeon the op (prefetching) measured up to 114% of the
 * copies without it.
 * chunk_bytes counts the output bytes of a chunk (out2's included).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct job {
  int kind;
  size_t a, b, ce, esize;
  char* out;
  const char* in;
  char* out2;
  const char* in2;
  uint64_t sink;
};

static void advise_huge(void* p, size_t n) {
#ifdef MADV_HUGEPAGE
  const uintptr_t h = (uintptr_t)2 << 20;
  const uintptr_t a = ((uintptr_t)p + h - 1) & ~(h - 1), e = ((uintptr_t)p + n) & ~(h - 1);
  if (e > a) madvise((void*)a, e - a, MADV_HUGEPAGE);
#else
  (void)p;
  (void)n;
#endif
}

static void populate(void* p, size_t n) {
  const uintptr_t s = (uintptr_t)p & ~(uintptr_t)4095;
  madvise((void*)s, (uintptr_t)p + n - s, MADV_POPULATE_WRITE);
}

/* A plain vector loop (compiled with -fno-tree-loop-distribute-patterns, so it stays a loop:
 * regular stores, as the scan kernels make): libc's memcpy / memset may take `rep movsb` or
 * non-temporal stores, which were slower than the op's own stores on the 16-core Xeon. */
static void copy_loop(char* o, const char* x, size_t bytes) {
  size_t w = bytes / 8;
  uint64_t* o8 = (uint64_t*)o;
  const uint64_t* x8 = (const uint64_t*)x;
  for (size_t i = 0; i < w; ++i) o8[i] = x8[i];
  for (size_t i = w * 8; i < bytes; ++i) o[i] = x[i];
}
#define PF_AHEAD 2048
/* copy_loop with the input prefetched PF_AHEAD bytes ahead, one prefetch a 64-byte line. */
static void copy_loop_pf(char* o, const char* x, size_t bytes) {
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    __builtin_prefetch(x + i + PF_AHEAD, 0, 3);
    uint64_t* o8 = (uint64_t*)(o + i);
    const uint64_t* x8 = (const uint64_t*)(x + i);
    for (int k = 0; k < 8; ++k) o8[k] = x8[k];
  }
  for (; i < bytes; ++i) o[i] = x[i];
}
static void zero_loop(char* o, size_t bytes) {
  size_t w = bytes / 8;
  uint64_t* o8 = (uint64_t*)o;
  for (size_t i = 0; i < w; ++i) o8[i] = 0;
  for (size_t i = w * 8; i < bytes; ++i) o[i] = 0;
}

static void* run(void* arg) {
  struct job* j = (struct job*)arg;
  const int kind = j->kind & 7, loop = j->kind & 8, pf = j->kind & 32;
  for (size_t e0 = j->a; e0 < j->b; e0 += j->ce) {
    const size_t e1 = e0 + j->ce < j->b ? e0 + j->ce : j->b, m = e1 - e0;
    populate(j->out + e0 * j->esize, m * j->esize);
    if (kind == 1) populate(j->out2 + e0 * 8, m * 8);
    switch (kind) {
      case 0:
      case 1:
      case 2:
        if (loop) {
          (pf ? copy_loop_pf : copy_loop)(j->out + e0 * j->esize, j->in + e0 * j->esize, m * j->esize);
          if (kind == 1) zero_loop(j->out2 + e0 * 8, m * 8);
        } else {
          memcpy(j->out + e0 * j->esize, j->in + e0 * j->esize, m * j->esize);
          if (kind == 1) memset(j->out2 + e0 * 8, 0, m * 8);
        }
        if (kind == 2) {
          const unsigned char* q = (const unsigned char*)j->in2 + e0;
          uint64_t s = 0;
          size_t i = 0;
          if (pf) {
            for (; i + 64 <= m; i += 64) {
              __builtin_prefetch(q + i + PF_AHEAD, 0, 3);
              for (int k = 0; k < 64; ++k) s += q[i + k];
            }
          }
          for (; i < m; ++i) s += q[i];
          j->sink += s;
        }
        break;
      case 3: {
        float* o = (float*)j->out + e0;
        const float* x = (const float*)j->in + e0;
        const float* y = (const float*)j->in2 + e0;
        if (pf) {
          size_t i = 0;
          for (; i + 16 <= m; i += 16) {
            __builtin_prefetch(x + i + PF_AHEAD / 4, 0, 3);
            __builtin_prefetch(y + i + PF_AHEAD / 4, 0, 3);
            for (int k = 0; k < 16; ++k) o[i + k] = x[i + k] + y[i + k];
          }
          for (; i < m; ++i) o[i] = x[i] + y[i];
        } else {
          for (size_t i = 0; i < m; ++i) o[i] = x[i] + y[i];
        }
        break;
      }
    }
  }
  return NULL;
}

/* A pool of worker threads kept between calls (created on first use, as torch's OpenMP
 * threads are): thread creation per call would start the last of 16 threads late by a
 * sizeable part of a 12 ms floor. Workers sleep on a condition variable between calls. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static struct job jobs[256];
static int pool_size = 1, active = 0, pending = 0;
static unsigned long generation = 0;

static void* worker(void* arg) {
  const int t = (int)(intptr_t)arg;
  unsigned long seen = 0;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (generation == seen) pthread_cond_wait(&go, &mu);
    seen = generation;
    const int mine = t < active;
    pthread_mutex_unlock(&mu);
    if (mine) run(&jobs[t]);
    pthread_mutex_lock(&mu);
    if (mine && --pending == 0) pthread_cond_signal(&done);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

/* Returns the sum of the mask bytes read (kind 2), so the reads cannot be dropped. Not
 * reentrant (the benchmark calls it from one thread). */
uint64_t scanops_floor(int kind, int nt, size_t chunk_bytes, size_t n, size_t esize, void* out,
                       const void* in, void* out2, const void* in2) {
  if (nt < 1) nt = 1;
  if (nt > 256) nt = 256;
  while (pool_size < nt) {  /* threads 1 .. nt - 1; thread 0's span runs on the caller */
    pthread_t th;
    if (pthread_create(&th, NULL, worker, (void*)(intptr_t)pool_size) != 0) break;
    pthread_detach(th);
    ++pool_size;
  }
  if (nt > pool_size) nt = pool_size;
  if (kind & 16) {
    advise_huge(out, n * esize);
    if ((kind & 7) == 1) advise_huge(out2, n * 8);
  }
  const size_t per_elem = esize + ((kind & 7) == 1 ? 8 : 0);
  size_t ce = chunk_bytes / per_elem;
  if (ce == 0) ce = 1;
  const size_t per = ((n + (size_t)nt - 1) / (size_t)nt + ce - 1) / ce * ce;
  for (int t = 0; t < nt; ++t) {
    const size_t a = (size_t)t * per;
    jobs[t] = (struct job){kind, a < n ? a : n, a + per < n ? a + per : n, ce, esize,
                           (char*)out, (const char*)in, (char*)out2, (const char*)in2, 0};
  }
  pthread_mutex_lock(&mu);
  active = nt;
  pending = nt - 1;
  ++generation;
  pthread_cond_broadcast(&go);
  pthread_mutex_unlock(&mu);
  run(&jobs[0]);
  pthread_mutex_lock(&mu);
  while (pending > 0) pthread_cond_wait(&done, &mu);
  pthread_mutex_unlock(&mu);
  uint64_t sink = 0;
  for (int t = 0; t < nt; ++t) sink += jobs[t].sink;
  return sink;
}
