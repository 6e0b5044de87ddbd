// scanops CPU back end: the Min kernels (cummin).
#include "ops/cpu/scan_cpu.h"
#include "ops/cpu/scan_cpu_kernels.h"

namespace scanops::cpu {
void scan_min(const ScanProblem& p) { dispatch_kind<CombineKind::Min, CpuRunner, /*kWide=*/true>(p); }
}  // namespace scanops::cpu
