// Bad input: each error is a c10::Error whose message names the op and the argument.
#include <scanops/scanops.h>

#include "test_util.h"

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "<no error>";
}

#define EXPECT_ERROR(stmt, ...)                                                          \
  do {                                                                                   \
    const std::string msg = error_of([&] { (void)(stmt); });                             \
    for (const char* part : {__VA_ARGS__}) {                                              \
      EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " \
                                                    << part;                              \
    }                                                                                    \
  } while (0)

TEST(ScanopsErrors, DimOutOfRange) {
  auto x = torch::randn({3, 4});
  EXPECT_ERROR(scanops::cumsum(x, 2), "scanops.cumsum", "'dim'", "out of range");
  EXPECT_ERROR(scanops::cumprod(x, -3), "scanops.cumprod", "'dim'");
  EXPECT_ERROR(scanops::cumsum(torch::tensor(1.0), 1), "scanops.cumsum", "'dim'");
}

TEST(ScanopsErrors, MaskShapeDtypeDevice) {
  auto x = torch::randn({3, 4});
  EXPECT_ERROR(scanops::masked_cumsum(x, torch::ones({3, 5}, torch::kBool), 1),
               "scanops.masked_cumsum", "'mask'", "broadcastable");
  EXPECT_ERROR(scanops::masked_cumsum(x, torch::ones({3, 4}), 1), "scanops.masked_cumsum",
               "'mask'", "bool");
  if (torch::cuda::is_available()) {
    EXPECT_ERROR(scanops::masked_cumsum(x, torch::ones({3, 4}, torch::dtype(torch::kBool)
                                                                   .device(torch::kCUDA)), 1),
                 "scanops.masked_cumsum", "'mask'", "same device");
  }
}

TEST(ScanopsErrors, UnsupportedDtypes) {
  auto c = torch::randn({3, 4}, torch::kComplexFloat);
  EXPECT_ERROR(scanops::cummax(c, 1), "scanops.cummax", "'self'", "real or bool");
  EXPECT_ERROR(scanops::logcumsumexp(torch::ones({3}, torch::kLong), 0), "scanops.logcumsumexp",
               "'self'", "floating or complex");
  auto x = torch::randn({3, 4});
  EXPECT_ERROR(scanops::cumsum(x, 1, {.dtype = torch::kBool}), "scanops.cumsum", "'dtype'");
  EXPECT_ERROR(scanops::cummin(x, 1, {.dtype = torch::kDouble}), "scanops.cummin", "dtype");
  EXPECT_ERROR(scanops::cumsum(torch::zeros({3}, torch::kUInt16), 0), "scanops.cumsum",
               "'self'", "unsupported");
}

TEST(ScanopsErrors, LinearRecurrenceArguments) {
  auto x = torch::randn({3, 4});
  EXPECT_ERROR(scanops::linear_recurrence(torch::randn({3, 4}, torch::kFloat64), x, 1),
               "scanops.linear_recurrence", "'a'", "dtype");
  EXPECT_ERROR(scanops::linear_recurrence(torch::randn({2, 4}), x, 1),
               "scanops.linear_recurrence", "'a'", "broadcastable");
  EXPECT_ERROR(scanops::linear_recurrence(torch::ones({3, 4}, torch::kInt32),
                                          torch::ones({3, 4}, torch::kInt32), 1),
               "scanops.linear_recurrence", "'x'");
}

}  // namespace
