// The learning-rate schedule: linear warmup, then cosine, step or constant
// decay over the run's steps (the kinds and their names: LrSchedule in
// train/train_options.h).
#pragma once

#include <cstdint>

#include "train/train_options.h"

namespace shardkit {

class LearningRateSchedule {
 public:
  // `base` is the rate after warmup (the linear-scaling rule already
  // applied); the run is `epochs` epochs of `steps_per_epoch` steps, the
  // first `warmup_epochs` of them warming up.
  LearningRateSchedule(LrSchedule kind, double base, double warmup_epochs, int epochs,
                       int64_t steps_per_epoch);

  // The rate at schedule position `step`, in steps of this run's global
  // batch: fractional after a resume with another global batch (the
  // position is samples seen over the global batch). Warmup rises linearly
  // to `base` at its last step; step decay multiplies by 0.1 at 30%, 60% and
  // 80% of the steps after warmup; cosine reaches 0 at the last step and
  // stays there.
  double At(double step) const;

 private:
  LrSchedule kind_;
  double base_, warmup_steps_, total_steps_;
};

}  // namespace shardkit
