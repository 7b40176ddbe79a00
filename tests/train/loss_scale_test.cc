// fp16 loss scaling: gradients unscaled in place with one overflow flag, and
// the scale's schedule (halved on overflow, doubled after a run of good steps).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/loss_scale.h"

namespace shardkit {
namespace {

// fp16 loss scaling: every gradient is divided by the scale in place, and one
// flag says whether any of them overflowed (inf) or is NaN; finite gradients
// leave it zero. Checked on every device this build can reach.
TEST(LossScaleTest, UnscaleDividesEveryGradientAndFlagsAnyNonFiniteOne) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.push_back(torch::Device(torch::kCUDA, 0));
  for (const torch::Device& d : devices) {
    SCOPED_TRACE(d.str());
    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(d);
    std::vector<torch::Tensor> g = {torch::full({3, 2}, 8.0, opts), torch::arange(5, opts) * 4};
    torch::Tensor flag = UnscaleGradients(g, 4.0);
    EXPECT_EQ(flag.item<float>(), 0);
    EXPECT_TRUE(torch::equal(g[0].cpu(), torch::full({3, 2}, 2.0)));
    EXPECT_TRUE(torch::equal(g[1].cpu(), torch::arange(5, torch::kFloat32)));
    for (double bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<torch::Tensor> h = {torch::ones({4}, opts), torch::ones({2, 2}, opts)};
      h[1][1][0] = bad;
      EXPECT_NE(UnscaleGradients(h, 2.0).item<float>(), 0) << bad;
      EXPECT_EQ(h[0][3].item<float>(), 0.5f);
    }
    EXPECT_EQ(UnscaleGradients({}, 2.0).item<float>(), 0);
  }
}

// The scale's schedule: halved (and the step skipped) on every overflow,
// doubled after kGrowthInterval good steps in a row, an overflow restarting
// the count; UnscaleOrSkip decides from the gradients themselves.
TEST(LossScaleTest, ScaleHalvesOnOverflowAndDoublesAfterAnUnbrokenRunOfGoodSteps) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  const int64_t n = LossScaler::kGrowthInterval;
  for (int64_t i = 1; i < n; ++i) ASSERT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 65536.0) << "one step short of the interval";
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 65536.0);
  for (int64_t i = 1; i < n; ++i) ASSERT_TRUE(s.Update(false));
  EXPECT_FALSE(s.Update(true)) << "an overflow just before growth";
  EXPECT_EQ(s.scale(), 32768.0);
  for (int64_t i = 1; i < n; ++i) ASSERT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 32768.0) << "the count restarted at the overflow";
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 65536.0);

  LossScaler t(8.0);  // a checkpoint's scale
  std::vector<torch::Tensor> g = {torch::full({4}, 16.0)};
  EXPECT_TRUE(t.UnscaleOrSkip(g));
  EXPECT_TRUE(torch::equal(g[0], torch::full({4}, 2.0)));
  EXPECT_EQ(t.scale(), 8.0);
  g[0][2] = INFINITY;
  EXPECT_FALSE(t.UnscaleOrSkip(g));
  EXPECT_EQ(t.scale(), 4.0);
}

}  // namespace
}  // namespace shardkit
