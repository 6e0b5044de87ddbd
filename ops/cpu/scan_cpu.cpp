// scanops: the CPU back end of the scan engine. The kernels, their arithmetic and scheduling are
// described in scan_cpu_kernels.h; this is the entry, which calls the translation unit of the
// problem's combine kind.
#include "ops/cpu/scan_cpu.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

namespace scanops {

// The CPU back end runs the scan and starts each line from its initial value itself
// (line_state: every kernel and schedule, see Scheduler in scan_cpu_kernels.h); companions
// materialised, input scaling, epilogue and shifts done by the engine around it.
// SCANOPS_CPU_LINE_STATE=0 turns line_state off (the engine's fallback: the initial value
// prepended to every line), for comparisons.
BackendCaps scan_cpu_caps() {
  BackendCaps caps{};
  const char* e = std::getenv("SCANOPS_CPU_LINE_STATE");
  caps.line_state = !(e && std::string(e) == "0");
  caps.segments = true;  // scan_cpu_segmented.cpp
  return caps;
}

void scan_cpu(const ScanProblem& p) {
  if (p.segments.defined()) return cpu::scan_segmented(p);
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
