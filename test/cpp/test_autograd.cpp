// Autograd through the public header: gradients equal torch's, and double backward works.
#include <scanops/scanops.h>

#include "test_util.h"

using scanops_test::devices;

namespace {

TEST(ScanopsAutograd, CumsumGradMatchesTorch) {
  for (const auto& dev : devices()) {
    auto x = torch::randn({6, 9}, torch::dtype(torch::kFloat64).device(dev)).requires_grad_();
    auto g = torch::randn({6, 9}, x.options());
    auto [gx] = std::tuple{torch::autograd::grad({scanops::cumsum(x, 1)}, {x}, {g})[0]};
    auto [rx] = std::tuple{torch::autograd::grad({torch::cumsum(x, 1)}, {x}, {g})[0]};
    EXPECT_TRUE(torch::allclose(gx, rx));
  }
}

TEST(ScanopsAutograd, CumprodGradWithZerosMatchesTorch) {
  for (const auto& dev : devices()) {
    auto x = torch::randn({5, 12}, torch::dtype(torch::kFloat64).device(dev));
    x.index_put_({1, 3}, 0.0);
    x.index_put_({2, 0}, 0.0);
    x.index_put_({2, 7}, 0.0);
    x.index_put_({4, 11}, 0.0);
    x.requires_grad_();
    auto g = torch::randn({5, 12}, x.options());
    auto gx = torch::autograd::grad({scanops::cumprod(x, 1)}, {x}, {g})[0];
    auto rx = torch::autograd::grad({torch::cumprod(x, 1)}, {x}, {g})[0];
    EXPECT_TRUE(torch::allclose(gx, rx, 1e-10, 1e-12)) << dev;
  }
}

TEST(ScanopsAutograd, DoubleBackwardRuns) {
  auto x = torch::randn({4, 7}, torch::kFloat64);
  x.index_put_({0, 2}, 0.0);
  x.requires_grad_();
  auto y = scanops::cumprod(x, 1, {.reverse = true});
  auto gx = torch::autograd::grad({y.sum()}, {x}, {}, /*retain_graph=*/true,
                                  /*create_graph=*/true)[0];
  ASSERT_TRUE(gx.requires_grad());
  auto ggx = torch::autograd::grad({gx.sum()}, {x})[0];
  auto xr = x.detach().clone().requires_grad_();
  auto gr = torch::autograd::grad({torch::cumprod(xr.flip(1), 1).flip(1).sum()}, {xr}, {}, true,
                                  true)[0];
  auto ggr = torch::autograd::grad({gr.sum()}, {xr})[0];
  EXPECT_TRUE(torch::allclose(ggx, ggr, 1e-10, 1e-12));
}

}  // namespace
