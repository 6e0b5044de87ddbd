// scanops CPU back end: the Max kernels (cummax).
#include "ops/cpu/scan_cpu.h"
#include "ops/cpu/scan_cpu_kernels.h"

namespace scanops::cpu {
void scan_max(const ScanProblem& p) { dispatch_kind<CombineKind::Max, CpuRunner, /*kWide=*/true>(p); }
}  // namespace scanops::cpu
