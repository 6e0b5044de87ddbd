// scanops: device kernels. The engine picks the CPU or CUDA back end from the input's
// device, so both dispatch keys map onto the same catalogue functions.
#include <torch/library.h>

#include "ops/catalog.h"

TORCH_LIBRARY_IMPL(scanops, CPU, m) {
  m.impl("cumsum", &scanops::catalog::cumsum);
  m.impl("masked_cumsum", &scanops::catalog::masked_cumsum);
  m.impl("cumprod", &scanops::catalog::cumprod);
  m.impl("linear_recurrence", &scanops::catalog::linear_recurrence);
  m.impl("logcumsumexp", &scanops::catalog::logcumsumexp);
  m.impl("cummax", &scanops::catalog::cummax);
  m.impl("cummin", &scanops::catalog::cummin);
  m.impl("_cumsum_fused", &scanops::catalog::cumsum_fused);
  m.impl("_linear_recurrence_fused", &scanops::catalog::linear_recurrence_fused);
  m.impl("_linear_recurrence_backward", &scanops::catalog::linear_recurrence_backward);
}

TORCH_LIBRARY_IMPL(scanops, CUDA, m) {
  m.impl("cumsum", &scanops::catalog::cumsum);
  m.impl("masked_cumsum", &scanops::catalog::masked_cumsum);
  m.impl("cumprod", &scanops::catalog::cumprod);
  m.impl("linear_recurrence", &scanops::catalog::linear_recurrence);
  m.impl("logcumsumexp", &scanops::catalog::logcumsumexp);
  m.impl("cummax", &scanops::catalog::cummax);
  m.impl("cummin", &scanops::catalog::cummin);
  m.impl("_cumsum_fused", &scanops::catalog::cumsum_fused);
  m.impl("_linear_recurrence_fused", &scanops::catalog::linear_recurrence_fused);
  m.impl("_linear_recurrence_backward", &scanops::catalog::linear_recurrence_backward);
}
