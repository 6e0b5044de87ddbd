// scanops CPU back end: the Affine kernels (linear_recurrence, cumprod's backward).
#include "ops/cpu/scan_cpu.h"
#include "ops/cpu/scan_cpu_kernels.h"

namespace scanops::cpu {
void scan_affine(const ScanProblem& p) { dispatch_kind<CombineKind::Affine, CpuRunner, /*kWide=*/true>(p); }
}  // namespace scanops::cpu
