// scanops CPU back end: the Sum kernels (cumsum, masked_cumsum).
#include "ops/cpu/scan_cpu.h"
#include "ops/cpu/scan_cpu_kernels.h"

namespace scanops::cpu {
void scan_sum(const ScanProblem& p) { dispatch_kind<CombineKind::Sum, CpuRunner, /*kWide=*/true>(p); }
}  // namespace scanops::cpu
