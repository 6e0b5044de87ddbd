// The public header, called through the dispatcher, against torch's own ops, on every device.
#include <scanops/scanops.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "test_util.h"

using scanops_test::devices;
using scanops_test::ref_scan;

namespace {

struct Case {
  std::vector<int64_t> shape;
  int64_t dim;
};

const std::vector<Case> kCases = {
    {{1000}, 0},        {{37, 41}, 1},      {{37, 41}, 0},          {{5000, 3}, -1},
    {{3, 70001}, 1},    {{4, 5, 6}, 1},     {{2, 3, 4, 5}, -3},     {{1, 1}, 0},
    {{2048, 64}, 1},    {{64, 2048}, 0},    {{3, 200000}, 1},       {{257, 3, 129}, 0},
};

TEST(ScanopsApi, CumsumAndCumprodMatchTorchAllFlags) {
  for (const auto& dev : devices()) {
    for (const auto& c : kCases) {
      auto x = torch::randn(c.shape, torch::dtype(torch::kFloat32).device(dev));
      auto xp = torch::rand(c.shape, torch::dtype(torch::kFloat64).device(dev)) * 0.2 + 0.9;
      for (bool e : {false, true}) {
        for (bool r : {false, true}) {
          auto y = scanops::cumsum(x, c.dim, {.exclusive = e, .reverse = r});
          auto ref = ref_scan(x.to(torch::kFloat64), c.dim, false, e, r);
          ASSERT_EQ(y.scalar_type(), torch::kFloat32);
          ASSERT_TRUE(y.is_contiguous());
          const double scale = std::sqrt(static_cast<double>(x.size(c.dim))) + 1;
          EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), ref, 1e-5, 1e-5 * scale))
              << "cumsum shape " << x.sizes() << " dim " << c.dim << " e " << e << " r " << r
              << " on " << dev;
          auto p = scanops::cumprod(xp, c.dim, {.exclusive = e, .reverse = r});
          EXPECT_TRUE(torch::allclose(p, ref_scan(xp, c.dim, true, e, r), 1e-9, 1e-12))
              << "cumprod shape " << x.sizes() << " dim " << c.dim << " on " << dev;
        }
      }
    }
  }
}

TEST(ScanopsApi, IntegralPromotionAndExactness) {
  for (const auto& dev : devices()) {
    for (auto dt : {torch::kInt8, torch::kInt16, torch::kInt32, torch::kInt64, torch::kUInt8,
                    torch::kBool}) {
      auto x = torch::randint(0, 3, {33, 17}, torch::dtype(torch::kInt64).device(dev)).to(dt);
      auto y = scanops::cumsum(x, 1);
      ASSERT_EQ(y.scalar_type(), torch::kInt64) << dt;
      EXPECT_TRUE(torch::equal(y, torch::cumsum(x, 1))) << dt << " on " << dev;
      auto p = scanops::cumprod(x, 0);
      EXPECT_TRUE(torch::equal(p, torch::cumprod(x, 0))) << dt << " on " << dev;
      auto y32 = scanops::cumsum(x, 1, {.dtype = torch::kInt32});
      ASSERT_EQ(y32.scalar_type(), torch::kInt32);
      EXPECT_TRUE(torch::equal(y32, torch::cumsum(x, 1, torch::kInt32)));
    }
  }
}

TEST(ScanopsApi, LowPrecisionAccumulatesInFloat32) {
  for (const auto& dev : devices()) {
    for (auto dt : {torch::kFloat16, torch::kBFloat16}) {
      auto x = torch::rand({4, 32768}, torch::dtype(torch::kFloat32).device(dev)).to(dt);
      auto y = scanops::cumsum(x, 1);
      ASSERT_EQ(y.scalar_type(), dt);
      auto ref = torch::cumsum(x.to(torch::kFloat64), 1);
      auto rel = ((y.to(torch::kFloat64) - ref).abs() / ref.abs().clamp_min(1)).max().item<double>();
      // One rounding of the float32 sum to the output type: < 2^-8 for bf16, 2^-11 for fp16.
      EXPECT_LT(rel, dt == torch::kBFloat16 ? 8e-3 : 1e-3) << dt << " on " << dev;
    }
  }
}

TEST(ScanopsApi, MaskedCumsumEqualsCumsumOfProduct) {
  for (const auto& dev : devices()) {
    auto x = torch::randn({300, 129}, torch::dtype(torch::kFloat64).device(dev));
    auto m = torch::rand({300, 129}, torch::dtype(torch::kFloat32).device(dev)) > 0.5;
    for (int64_t dim : {0, 1, -1}) {
      for (bool e : {false, true}) {
        for (bool r : {false, true}) {
          auto y = scanops::masked_cumsum(x, m, dim, {.exclusive = e, .reverse = r});
          auto ref = ref_scan(x * m, dim, false, e, r);
          EXPECT_TRUE(torch::allclose(y, ref, 1e-12, 1e-10)) << dim << e << r << dev;
        }
      }
    }
    // Broadcast mask (a row mask applied to every row).
    auto row = torch::rand({129}, torch::dtype(torch::kFloat32).device(dev)) > 0.5;
    EXPECT_TRUE(torch::allclose(scanops::masked_cumsum(x, row, 1), torch::cumsum(x * row, 1)));
  }
}

TEST(ScanopsApi, LinearRecurrenceMatchesLoop) {
  for (const auto& dev : devices()) {
    auto a = torch::rand({7, 50}, torch::dtype(torch::kFloat64).device(dev));
    auto x = torch::randn({7, 50}, torch::dtype(torch::kFloat64).device(dev));
    auto h = scanops::linear_recurrence(a, x, 1);
    auto ref = torch::empty_like(x);
    auto prev = torch::zeros({7}, x.options());
    for (int64_t t = 0; t < 50; ++t) {
      prev = a.select(1, t) * prev + x.select(1, t);
      ref.select(1, t).copy_(prev);
    }
    EXPECT_TRUE(torch::allclose(h, ref, 1e-12, 1e-12)) << dev;
  }
}

TEST(ScanopsApi, InitialThroughScanOptions) {
  for (const auto& dev : devices()) {
    auto opt = torch::dtype(torch::kFloat64).device(dev);
    auto a = torch::rand({7, 50}, opt);
    auto x = torch::randn({7, 50}, opt);
    auto h0 = torch::randn({7}, opt);
    // h[-1] = h0
    auto h = scanops::linear_recurrence(a, x, 1, {.initial = h0});
    auto prev = h0.clone();
    auto ref = torch::empty_like(x);
    for (int64_t t = 0; t < 50; ++t) {
      prev = a.select(1, t) * prev + x.select(1, t);
      ref.select(1, t).copy_(prev);
    }
    EXPECT_TRUE(torch::allclose(h, ref, 1e-12, 1e-12)) << dev;
    // cumsum from h0: h0 + cumsum(x); exclusive and reverse: h0 first in scan order
    EXPECT_TRUE(torch::allclose(scanops::cumsum(x, 1, {.initial = h0}),
                                h0.unsqueeze(1) + torch::cumsum(x, 1), 1e-12, 1e-12));
    auto ex = scanops::cumsum(x, 1, {.exclusive = true, .reverse = true, .initial = h0});
    EXPECT_TRUE(torch::equal(ex.select(1, 49), h0)) << dev;
    // a chunked scan continues exactly for integer sums
    auto xi = torch::randint(-100, 100, {3, 40}, torch::dtype(torch::kInt64).device(dev));
    auto whole = scanops::cumsum(xi, 1);
    auto first = scanops::cumsum(xi.narrow(1, 0, 17), 1);
    auto second = scanops::cumsum(xi.narrow(1, 17, 23), 1, {.initial = first.select(1, 16)});
    EXPECT_TRUE(torch::equal(torch::cat({first, second}, 1), whole)) << dev;
    // cummax: positions still holding the initial value get index -1
    auto [v, i] = scanops::cummax(torch::zeros({2, 3}, opt), 1,
                                  {.initial = torch::ones({2}, opt)});
    EXPECT_TRUE(torch::equal(i, torch::full({2, 3}, -1, i.options()))) << dev;
    // a wrong initial names the op and the argument
    try {
      scanops::cumsum(x, 1, {.initial = torch::zeros({50}, opt)});
      ADD_FAILURE() << "no error";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("scanops.cumsum: argument 'initial'"), std::string::npos);
    }
  }
}

TEST(ScanopsApi, NonContiguousZeroDimAndEmpty) {
  for (const auto& dev : devices()) {
    auto base = torch::randn({40, 60}, torch::dtype(torch::kFloat64).device(dev));
    auto t = base.t();                               // transposed
    auto s = base.slice(1, 1, 60, 3);                // strided + offset
    auto e = torch::randn({60}, base.options()).expand({40, 60});  // stride 0
    for (const auto& v : {t, s, e}) {
      for (int64_t dim : {0, 1}) {
        EXPECT_TRUE(torch::allclose(scanops::cumsum(v, dim), torch::cumsum(v, dim)));
      }
    }
    auto z = torch::tensor(2.5, base.options());
    EXPECT_EQ(scanops::cumsum(z, 0).dim(), 0);
    EXPECT_EQ(scanops::cumsum(z, -1).item<double>(), 2.5);
    EXPECT_EQ(scanops::cumsum(z, 0, {.exclusive = true}).item<double>(), 0.0);
    EXPECT_EQ(scanops::cumprod(z, 0, {.exclusive = true}).item<double>(), 1.0);
    auto empty = torch::empty({0, 5}, base.options());
    EXPECT_EQ(scanops::cumsum(empty, 1).sizes(), empty.sizes());
    EXPECT_EQ(scanops::cumsum(empty.to(torch::kInt32), 0).scalar_type(), torch::kInt64);
  }
}

TEST(ScanopsApi, MetaTensorsGiveShapeAndDtype) {
  auto x = torch::empty({8, 1 << 20}, torch::dtype(torch::kInt16).device(torch::kMeta));
  auto y = scanops::cumsum(x, 1, {.exclusive = true});
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_EQ(y.scalar_type(), torch::kInt64);
  EXPECT_EQ(scanops::cumprod(x, 0, {.dtype = torch::kFloat16}).scalar_type(), torch::kFloat16);
  auto m = torch::empty({1 << 20}, torch::dtype(torch::kBool).device(torch::kMeta));
  EXPECT_EQ(scanops::masked_cumsum(x, m, 1).sizes(), x.sizes());
  EXPECT_THROW(scanops::cumsum(x, 2), c10::Error);  // checks run on Meta too
}

TEST(ScanopsApi, CudaMatchesCpuOnEveryKernelFamily) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Case> big = {{{1 << 20, 4}, 1},  {{1 << 14, 64}, 1}, {{64, 1 << 20}, 1},
                                 {{(1 << 24) + 3}, 0}, {{2048, 2048}, 0}, {{8, 2048, 512}, 1},
                                 {{2, 3000001}, 1}, {{5, 7}, 1}};
  for (const auto& c : big) {
    auto x = torch::randn(c.shape, torch::dtype(torch::kFloat64).device(torch::kCUDA));
    for (bool e : {false, true}) {
      for (bool r : {false, true}) {
        auto y = scanops::cumsum(x, c.dim, {.exclusive = e, .reverse = r});
        auto ref = ref_scan(x, c.dim, false, e, r);
        EXPECT_TRUE(torch::allclose(y, ref, 1e-9, 1e-8)) << x.sizes() << " " << c.dim;
      }
    }
  }
}

// logcumsumexp by torch's op, composed with flip (reverse) and a shift (exclusive, -inf first).
torch::Tensor ref_lcse(const torch::Tensor& x, int64_t dim, bool exclusive, bool reverse) {
  torch::Tensor xs = reverse ? x.flip(dim) : x;
  torch::Tensor y = torch::logcumsumexp(xs, dim);
  if (exclusive) {
    const int64_t n = x.size(dim);
    torch::Tensor first =
        torch::full_like(y.narrow(dim, 0, 1), -std::numeric_limits<double>::infinity());
    y = torch::cat({first, y.narrow(dim, 0, n - 1)}, dim);
  }
  return reverse ? y.flip(dim) : y;
}

// cummax / cummin by torch's ops: reverse = flip, scan, flip with indices n-1-i; exclusive =
// shifted by one in scan order, `identity` with index -1 first.
std::tuple<torch::Tensor, torch::Tensor> ref_minmax(const torch::Tensor& x, int64_t dim,
                                                    bool is_max, bool exclusive, bool reverse,
                                                    const c10::Scalar& identity) {
  const int64_t n = x.size(dim);
  torch::Tensor xs = reverse ? x.flip(dim) : x;
  std::tuple<torch::Tensor, torch::Tensor> vi = is_max ? torch::cummax(xs, dim) : torch::cummin(xs, dim);
  torch::Tensor v = std::get<0>(vi);
  torch::Tensor i = std::get<1>(vi);
  if (exclusive) {
    v = torch::cat({torch::full_like(v.narrow(dim, 0, 1), identity), v.narrow(dim, 0, n - 1)}, dim);
    i = torch::cat({torch::full_like(i.narrow(dim, 0, 1), -1), i.narrow(dim, 0, n - 1)}, dim);
  }
  if (reverse) {
    i = torch::where(i >= 0, i.neg() + (n - 1), i).flip(dim);
    v = v.flip(dim);
  }
  return {v, i};
}

TEST(ScanopsApi, LogcumsumexpMatchesTorchAllFlags) {
  for (const auto& dev : devices()) {
    for (const auto& c : kCases) {
      auto x64 = torch::randn(c.shape, torch::dtype(torch::kFloat64).device(dev)) * 3;
      auto x32 = x64.to(torch::kFloat32);
      for (bool e : {false, true}) {
        for (bool r : {false, true}) {
          auto ref = ref_lcse(x64, c.dim, e, r);
          auto y64 = scanops::logcumsumexp(x64, c.dim, {.exclusive = e, .reverse = r});
          ASSERT_EQ(y64.scalar_type(), torch::kFloat64);
          EXPECT_TRUE(torch::allclose(y64, ref, 1e-10, 1e-10))
              << "float64 shape " << x64.sizes() << " dim " << c.dim << " e " << e << " r " << r
              << " on " << dev;
          auto y32 = scanops::logcumsumexp(x32, c.dim, {.exclusive = e, .reverse = r});
          ASSERT_EQ(y32.scalar_type(), torch::kFloat32);
          // float32 accumulation on CUDA: errors grow at most like sqrt(n) (random data).
          const double scale = std::sqrt(static_cast<double>(x32.size(c.dim))) + 1;
          EXPECT_TRUE(torch::allclose(y32.to(torch::kFloat64), ref, 1e-5, 1e-5 * scale))
              << "float32 shape " << x32.sizes() << " dim " << c.dim << " e " << e << " r " << r
              << " on " << dev;
        }
      }
    }
    // -inf is the identity: an all -inf row stays -inf (no NaN), exclusive starts with -inf.
    const double inf = std::numeric_limits<double>::infinity();
    auto ninf = torch::full({3, 50}, -inf, torch::dtype(torch::kFloat32).device(dev));
    auto y = scanops::logcumsumexp(ninf, 1);
    EXPECT_TRUE(torch::equal(y, ninf)) << dev;
    auto z = torch::zeros({4}, torch::dtype(torch::kFloat64).device(dev));
    auto ze = scanops::logcumsumexp(z, 0, {.exclusive = true}).cpu();
    EXPECT_EQ(ze[0].item<double>(), -inf);
    EXPECT_NEAR(ze[3].item<double>(), std::log(3.0), 1e-12);
  }
}

TEST(ScanopsApi, CummaxCumminMatchTorchWithTies) {
  for (const auto& dev : devices()) {
    for (const auto& c : kCases) {
      // Small integers: ties everywhere (the latest in scan order wins, as torch).
      auto base = torch::randint(-3, 4, c.shape, torch::dtype(torch::kInt64).device(dev));
      for (auto dt : {torch::kFloat32, torch::kInt32, torch::kUInt8, torch::kBool}) {
        auto x = base.to(dt);
        for (bool is_max : {true, false}) {
          c10::Scalar identity;
          if (dt == torch::kFloat32) {
            identity = (is_max ? -1 : 1) * std::numeric_limits<double>::infinity();
          } else if (dt == torch::kInt32) {
            identity = is_max ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max();
          } else if (dt == torch::kUInt8) {
            identity = is_max ? 0 : 255;
          } else {
            identity = !is_max;
          }
          for (bool e : {false, true}) {
            for (bool r : {false, true}) {
              const scanops::ScanOptions o{.exclusive = e, .reverse = r};
              auto got = is_max ? scanops::cummax(x, c.dim, o) : scanops::cummin(x, c.dim, o);
              // torch's CPU ops are the oracle on every device.
              auto want = ref_minmax(x.cpu(), c.dim, is_max, e, r, identity);
              got = std::make_tuple(std::get<0>(got).cpu(), std::get<1>(got).cpu());
              ASSERT_EQ(std::get<0>(got).scalar_type(), dt);
              ASSERT_EQ(std::get<1>(got).scalar_type(), torch::kInt64);
              EXPECT_TRUE(torch::equal(std::get<0>(got), std::get<0>(want)))
                  << (is_max ? "cummax" : "cummin") << " values " << dt << " shape " << x.sizes()
                  << " dim " << c.dim << " e " << e << " r " << r << " on " << dev;
              EXPECT_TRUE(torch::equal(std::get<1>(got), std::get<1>(want)))
                  << (is_max ? "cummax" : "cummin") << " indices " << dt << " shape " << x.sizes()
                  << " dim " << c.dim << " e " << e << " r " << r << " on " << dev;
            }
          }
        }
      }
    }
    // NaN propagates with the index of the latest NaN.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto xn = torch::tensor({1.0, nan, 5.0, nan, 7.0}, torch::dtype(torch::kFloat64).device(dev));
    auto [v, i] = scanops::cummax(xn, 0);
    auto [tv, ti] = torch::cummax(xn.cpu(), 0);
    v = v.cpu();
    i = i.cpu();
    EXPECT_TRUE(torch::equal(i, ti)) << i << ti;
    EXPECT_TRUE(torch::equal(v.isnan(), tv.isnan()));
  }
}

TEST(ScanopsApi, ComplexInputsMatchTorch) {
  for (const auto& dev : devices()) {
    auto opts = torch::dtype(torch::kFloat64).device(dev);
    auto z = torch::complex(torch::randn({7, 300}, opts), torch::randn({7, 300}, opts));
    for (int64_t dim : {0, 1, -1}) {
      auto s128 = scanops::cumsum(z, dim);
      ASSERT_EQ(s128.scalar_type(), torch::kComplexDouble);
      EXPECT_TRUE(torch::allclose(s128, torch::cumsum(z, dim), 1e-12, 1e-12)) << dim << dev;
      auto z64 = z.to(torch::kComplexFloat);
      auto s64 = scanops::cumsum(z64, dim, {.reverse = true});
      ASSERT_EQ(s64.scalar_type(), torch::kComplexFloat);
      EXPECT_TRUE(torch::allclose(s64.to(torch::kComplexDouble), ref_scan(z64.to(torch::kComplexDouble), dim, false, false, true),
                                  1e-5, 1e-4))
          << dim << dev;
      // Products of numbers near the unit circle stay in range.
      auto u = torch::polar(torch::exp(torch::randn({7, 300}, opts) * 0.05),
                            torch::rand({7, 300}, opts) * 6.28);
      EXPECT_TRUE(torch::allclose(scanops::cumprod(u, dim, {.exclusive = true}),
                                  ref_scan(u, dim, true, true, false), 1e-10, 1e-10))
          << dim << dev;
      // logcumsumexp: log is defined up to 2 pi i, compare the exponentials.
      auto l = scanops::logcumsumexp(z, dim);
      ASSERT_EQ(l.scalar_type(), torch::kComplexDouble);
      EXPECT_TRUE(torch::allclose(torch::exp(l), torch::exp(torch::logcumsumexp(z, dim)), 1e-10, 1e-10))
          << dim << dev;
    }
  }
}

TEST(ScanopsApi, NewOpsRejectBadInputs) {
  auto xc = torch::ones({3, 4}, torch::kComplexFloat);
  EXPECT_THROW(scanops::cummax(xc, 1), c10::Error);
  EXPECT_THROW(scanops::cummin(xc, 1), c10::Error);
  auto xi = torch::ones({3, 4}, torch::kInt64);
  EXPECT_THROW(scanops::logcumsumexp(xi, 1), c10::Error);
  auto x = torch::ones({3, 4});
  EXPECT_THROW(scanops::logcumsumexp(x, 2), c10::Error);
  EXPECT_THROW(scanops::cummax(x, -3), c10::Error);
  EXPECT_THROW(scanops::logcumsumexp(x, 1, {.dtype = torch::kFloat64}), c10::Error);
  EXPECT_THROW(scanops::cummin(x, 1, {.dtype = torch::kFloat64}), c10::Error);
  try {
    scanops::cummax(xc, 1);
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("scanops.cummax"), std::string::npos) << e.what();
  }
}

TEST(ScanopsApi, VersionIsSet) { EXPECT_FALSE(scanops::version().empty()); }

}  // namespace
