// scanops CPU back end: the Prod kernels (cumprod).
#include "ops/cpu/scan_cpu.h"
#include "ops/cpu/scan_cpu_kernels.h"

namespace scanops::cpu {
void scan_prod(const ScanProblem& p) { dispatch_kind<CombineKind::Prod, CpuRunner, /*kWide=*/true>(p); }
}  // namespace scanops::cpu
