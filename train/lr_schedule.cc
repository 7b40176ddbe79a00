// Warmup and decay of the learning rate.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace shardkit {

LearningRateSchedule::LearningRateSchedule(LrSchedule kind, double base, double warmup_epochs,
                                           int epochs, int64_t steps_per_epoch)
    : kind_(kind),
      base_(base),
      warmup_steps_(warmup_epochs * static_cast<double>(steps_per_epoch)),
      total_steps_(static_cast<double>(epochs) * static_cast<double>(steps_per_epoch)) {}

double LearningRateSchedule::At(double step) const {
  const double warm = warmup_steps_, total = total_steps_;
  // Step s ends warmup's (s + 1)-th part; a fractional position (a resume on
  // another global batch) within the last part ends warmup, never passes it.
  if (warm > 0 && step < warm) return std::min(base_, base_ * (step + 1) / warm);
  const double progress = total > warm ? (step - warm) / (total - warm) : 1.0;
  switch (kind_) {
    case LrSchedule::kConstant:
      return base_;
    case LrSchedule::kStep: {
      double lr = base_;
      for (double milestone : {0.3, 0.6, 0.8}) {
        if (progress >= milestone) lr *= 0.1;
      }
      return lr;
    }
    case LrSchedule::kCosine:
      break;
  }
  return base_ * 0.5 * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

}  // namespace shardkit
