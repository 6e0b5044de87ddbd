// scanops: Meta (shape) kernels, in C++ and SymInt aware, for torch.compile / torch.export
// and FakeTensor. They run the same argument checks as the real kernels.
#include <torch/library.h>

#include "ops/catalog.h"

TORCH_LIBRARY_IMPL(scanops, Meta, m) {
  m.impl("cumsum", &scanops::catalog::cumsum_meta);
  m.impl("masked_cumsum", &scanops::catalog::masked_cumsum_meta);
  m.impl("cumprod", &scanops::catalog::cumprod_meta);
  m.impl("linear_recurrence", &scanops::catalog::linear_recurrence_meta);
  m.impl("logcumsumexp", &scanops::catalog::logcumsumexp_meta);
  m.impl("cummax", &scanops::catalog::cummax_meta);
  m.impl("cummin", &scanops::catalog::cummin_meta);
  m.impl("_cumsum_fused", &scanops::catalog::cumsum_fused_meta);
  m.impl("_linear_recurrence_fused", &scanops::catalog::linear_recurrence_fused_meta);
  m.impl("_linear_recurrence_backward", &scanops::catalog::linear_recurrence_backward_meta);
}
