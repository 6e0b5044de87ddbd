// The public header, called through the dispatcher, against torch's own ops, on every device.
#include <scanops/scanops.h>

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

TEST(ScanopsApi, VersionIsSet) { EXPECT_FALSE(scanops::version().empty()); }

}  // namespace
