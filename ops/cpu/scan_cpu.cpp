// scanops: the CPU back end of the scan engine. The kernels, their arithmetic and scheduling are
// described in scan_cpu_kernels.h; this is the entry, which calls the translation unit of the
// problem's combine kind.
#include "ops/cpu/scan_cpu.h"

#include <c10/util/Exception.h>

namespace scanops {

// The CPU back end runs the scan alone: companions materialised, input scaling, epilogue and
// shifts done by the engine around it.
BackendCaps scan_cpu_caps() { return BackendCaps{}; }

void scan_cpu(const ScanProblem& p) {
  switch (p.spec.kind) {
    case CombineKind::Sum: return cpu::scan_sum(p);
    case CombineKind::Prod: return cpu::scan_prod(p);
    case CombineKind::Affine: return cpu::scan_affine(p);
    case CombineKind::LogAddExp: return cpu::scan_logaddexp(p);
    case CombineKind::Max: return cpu::scan_max(p);
    case CombineKind::Min: return cpu::scan_min(p);
  }
  TORCH_CHECK(false, p.spec.op_name, ": internal error: unknown combine kind");
}

}  // namespace scanops
