// scanops CPU back end: the LogAddExp kernels (logcumsumexp).
#include "ops/cpu/scan_cpu.h"
#include "ops/cpu/scan_cpu_kernels.h"

namespace scanops::cpu {
void scan_logaddexp(const ScanProblem& p) { dispatch_kind<CombineKind::LogAddExp, CpuRunner, /*kWide=*/true>(p); }
}  // namespace scanops::cpu
