// scanops CPU back end: the process-wide memory and store policy (transparent huge pages for
// large outputs, populating output pages ahead of the stores, streaming stores, the AVX2
// kernels' availability). One definition for every translation unit of the back end: the
// huge-page budget (g_free_huge) is the process's, not a kind's.
#include "ops/cpu/scan_cpu_kernels.h"

namespace scanops {

// Transparent huge pages for large outputs (Linux, THP mode `madvise` or `always`): an output
// of at least kStreamBytes is about to be written in full, so its 2 MiB-aligned interior is
// advised MADV_HUGEPAGE, and its first-touch faults (one a 4 KiB page otherwise: 65536 for 256
// MiB) become one a 2 MiB page. Measured (2^26 float32, design.md "CPU: huge pages by
// default"): on the 16-core Xeon at 16 threads 1-D cumsum 16.1-17.1 -> 12.7-14.1 ms, (4096,
// 16384) dim 0 15.2-16.6 -> 12.1-13.4, rows 11.6-12.2 -> 9.2-9.5 (clone(), 4 KiB pages:
// 13-15 ms); at 4 threads 1-D 45.7 -> 29.8-34.5 ms; on the 2-core VM at 1 thread 1-D 103-109
// -> 65-71 ms. The risk is the kernel's: under THP defrag `madvise` a huge-page fault that
// finds no free 2 MiB block compacts memory synchronously (on 2026-11-23 an older version that
// advised every large output did not scale past 1 thread on that host, which was put down to
// this; it was opt-in from then on). So by default (SCANOPS_CPU_HUGEPAGES unset) the advice is given
// only while the free blocks of 2 MiB or more (/proc/buddyinfo, re-read at most every 100 ms)
// hold twice the output: its faults then take free huge pages and never compact. 1: always
// advise; 0: never. Page sizes only: the bits are the same either way.
namespace {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
int huge_pages_mode() {  // 1 always, 0 never, -1 when free 2 MiB blocks cover the output
  static const int mode = [] {
    const char* e = std::getenv("SCANOPS_CPU_HUGEPAGES");
    if (e && std::string(e) == "1") return 1;
    if (e && std::string(e) == "0") return 0;
    return -1;
  }();
  return mode;
}

// Whether THP is on for advised memory (`always` or `madvise` selected); read once.
bool thp_available() {
  static const bool ok = [] {
    FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char buf[128] = {};
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = 0;
    return std::strstr(buf, "[always]") != nullptr || std::strstr(buf, "[madvise]") != nullptr;
  }();
  return ok;
}

// Free memory in blocks of 2 MiB or more, summed over /proc/buddyinfo's zones (a line per zone:
// "Node 0, zone Normal c0 c1 ... c10", c_k the free blocks of 2^k base pages); -1 if unreadable.
int64_t free_huge_block_bytes() {
  FILE* f = std::fopen("/proc/buddyinfo", "r");
  if (!f) return -1;
  const int64_t page = std::max<int64_t>(1, sysconf(_SC_PAGESIZE));
  int kOrder = 0;  // the first order of 2 MiB or more (9 with 4 KiB pages)
  while ((page << kOrder) < (int64_t(2) << 20)) ++kOrder;
  int64_t total = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), f)) {
    const char* p = std::strstr(line, "zone");
    if (!p) continue;
    p += 4;
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;  // the zone's name
    char* q = nullptr;
    for (int k = 0;; ++k) {
      const long long c = std::strtoll(p, &q, 10);
      if (q == p) break;
      if (k >= kOrder && k < 24) total += static_cast<int64_t>(c) * (page << k);  // (kernels have <= 13 orders)
      p = q;
    }
  }
  std::fclose(f);
  return total;
}

// free_huge_block_bytes, cached for 100 ms; each advised output is taken off the cached figure
// until the next read.
std::atomic<int64_t> g_free_huge{0};
std::atomic<int64_t> g_free_huge_at{-1};  // ms on the steady clock; -1: never read

bool huge_blocks_cover(int64_t bytes) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const int64_t at = g_free_huge_at.load(std::memory_order_relaxed);
  if (at < 0 || now - at >= 100) {
    g_free_huge.store(free_huge_block_bytes(), std::memory_order_relaxed);
    g_free_huge_at.store(now, std::memory_order_relaxed);
  }
  if (g_free_huge.load(std::memory_order_relaxed) < 2 * bytes) return false;
  g_free_huge.fetch_sub(bytes, std::memory_order_relaxed);
  return true;
}
#endif
}  // namespace

void advise_huge_pages(void* p, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const int mode = huge_pages_mode();
  if (mode == 0 || bytes < kStreamBytes || !thp_available()) return;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) & ~(kHuge - 1);
  if (e <= a || (mode < 0 && !huge_blocks_cover(bytes))) return;
  (void)madvise(reinterpret_cast<void*>(a), e - a, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

// First-touch faults of a fresh output cost more than the scan (the 2-core VM: a 256 MiB copy
// into a fresh mapping 161 ms, into a populated one 32 ms), so large outputs are populated
// ahead of their stores: MADV_POPULATE_WRITE (Linux 5.14) over the chunk of kPrefaultBytes
// that a worker is about to write, one call for what would be 64 faults (a C test, 256 MiB
// written in 1 MiB chunks: 161 -> 116 ms on 1 thread, 83 -> 60 ms on 2). Populating the whole
// output first saves the faults too, but its zeroed lines have left the caches by the time of
// the stores (125 ms): every page goes to memory twice, which a bandwidth-bound host pays for.
// SCANOPS_CPU_POPULATE: unset or negative, outputs of at least kStreamBytes; 0, never; positive,
// always (the tests). Where the kernel lacks it (EINVAL), the stores fault as before.
bool use_prefault(int64_t bytes) {
#if defined(__linux__)
  static const int mode = [] {  // unset or negative: outputs >= kStreamBytes; 0: never; else always
    const char* e = std::getenv("SCANOPS_CPU_POPULATE");
    return e ? std::atoi(e) : -1;
  }();
  return mode < 0 ? bytes >= kStreamBytes : mode > 0;
#else
  (void)bytes;
  return false;
#endif
}

void prefault_bytes(const void* p, int64_t bytes) {
#if defined(__linux__)
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  static std::atomic<bool> unsupported{false};  // EINVAL: a kernel before 5.14
  if (bytes <= 0 || unsupported.load(std::memory_order_relaxed)) return;
  constexpr uintptr_t kPage = 4096;
  // The pages holding any byte of the range: mapped and writable (the output's own), and
  // populating leaves their contents as they are.
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes) + kPage - 1) & ~(kPage - 1);
  if (madvise(reinterpret_cast<void*>(a), e - a, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
    unsupported.store(true, std::memory_order_relaxed);
#else
  (void)p;
  (void)bytes;
#endif
}


// Regular stores by default; streaming (non-temporal) stores only when SCANOPS_CPU_STREAM asks
// (positive: every size; negative: outputs of at least kStreamBytes, the default before). A
// large output is a fresh mmap: the kernel zeroes each page through the cache at its first
// touch (a fault, or the populate call just before the stores), so a regular store hits a
// line already in L1/L2, where a streaming store has to evict that dirty line first (the page
// crosses the memory bus twice). On the 2-core EPYC VM streaming stores made every large scan
// slower or noisier, before the populate calls (2^26 float32, medians of 3 interleaved rounds;
// 2 threads, clone() 86 ms: 1-D 113 -> 105 ms, exclusive 1-D 119 -> 109, (N/64, 64) dim 0
// 108 -> 99, (4096, 16384) dim 0 99-111 -> 100-101; 1 thread: 1-D 198 -> 190, (16, 4096, 1024)
// dim 1 183-224 -> 187). On a 16-core Xeon (16 threads) it was mixed and within the noise:
// rows 15.3 -> 14.7 ms, (4096, 16384) dim 0 19.8 -> 23.6. Into memory already faulted and
// out of cache streaming stores would win (a 256 MiB copy: 20 against 32 ms).
bool use_streaming_stores(int64_t bytes) {
  const int mode = stream_mode();
  return mode < 0 ? bytes >= kStreamBytes : mode > 0;
}

bool use_avx2() {
#if defined(SCANOPS_AVX2_KERNELS)
  static const bool ok = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
    if (const char* e = std::getenv("SCANOPS_CPU_KERNELS")) {
      if (std::string(e) == "generic") return false;
    }
    return at::get_cpu_capability() != "DEFAULT";  // ATEN_CPU_CAPABILITY=default is honoured
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace scanops
