// The learning-rate schedule: warmup to the base rate, then each kind's decay.
#include <gtest/gtest.h>

#include "train/lr_schedule.h"

namespace shardkit {
namespace {

// Warmup rises linearly to the base rate at its last step and never passes
// it (fractional positions: a resume on another global batch); then each
// kind decays as documented over the steps after warmup.
TEST(LrScheduleTest, WarmupRisesToTheBaseRateThenEachKindDecaysAsDocumented) {
  // 10 epochs of 10 steps, 1 of warmup: decay over steps 10..100.
  const LearningRateSchedule cosine(LrSchedule::kCosine, 0.4, 1, 10, 10);
  EXPECT_DOUBLE_EQ(cosine.At(0), 0.04);
  EXPECT_DOUBLE_EQ(cosine.At(4), 0.2);
  EXPECT_DOUBLE_EQ(cosine.At(9), 0.4);
  double before = 0;
  for (double step = 0; step < 10; step += 0.25) {
    EXPECT_LE(cosine.At(step), 0.4) << step;
    EXPECT_GE(cosine.At(step), before) << step;
    before = cosine.At(step);
  }
  EXPECT_DOUBLE_EQ(cosine.At(10), 0.4);
  EXPECT_DOUBLE_EQ(cosine.At(55), 0.2);  // half way: half the rate
  EXPECT_NEAR(cosine.At(100), 0, 1e-12);
  EXPECT_NEAR(cosine.At(130), 0, 1e-12) << "past the end it stays at 0";

  const LearningRateSchedule step(LrSchedule::kStep, 0.4, 1, 10, 10);
  EXPECT_DOUBLE_EQ(step.At(36.9), 0.4);  // milestones at 30%, 60%, 80% of 90 steps after 10
  EXPECT_DOUBLE_EQ(step.At(37), 0.04);
  EXPECT_DOUBLE_EQ(step.At(63.9), 0.04);
  EXPECT_DOUBLE_EQ(step.At(64), 0.004);
  EXPECT_NEAR(step.At(82), 0.0004, 1e-15);

  const LearningRateSchedule constant(LrSchedule::kConstant, 0.4, 0, 10, 10);
  EXPECT_DOUBLE_EQ(constant.At(0), 0.4) << "no warmup: the base rate from the first step";
  EXPECT_DOUBLE_EQ(constant.At(99), 0.4);

  // Warmup longer than the run: it rises over the run's steps, never past base.
  const LearningRateSchedule long_warmup(LrSchedule::kCosine, 0.4, 20, 2, 10);
  EXPECT_DOUBLE_EQ(long_warmup.At(19), 0.4 * 20 / 200);
  EXPECT_LE(long_warmup.At(199.5), 0.4);
}

}  // namespace
}  // namespace shardkit
