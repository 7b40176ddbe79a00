// Dynamic loss scaling for fp16 training: unscaling the gradients and
// detecting overflow (UnscaleGradients), and the scale's schedule
// (LossScaler: halve on overflow, double after 2000 good steps in a row), as
// torch.cuda.amp.GradScaler does. The scale is part of a checkpoint's position.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace shardkit {

// Divides every gradient by `scale` in place and returns a one-element float
// tensor on their device: nonzero if any gradient holds an inf or a NaN. On
// CUDA one fused multi-tensor kernel does both (the one
// torch.cuda.amp.GradScaler uses); on the CPU a loop of the same two steps.
// Nothing here waits for the device: reading the flag is the caller's one sync.
// All gradients must be on one device.
torch::Tensor UnscaleGradients(std::vector<torch::Tensor> grads, double scale);

// The loss scale from step to step. Not thread-safe; one per model.
class LossScaler {
 public:
  static constexpr double kInitialScale = 65536;  // GradScaler's init_scale
  static constexpr int64_t kGrowthInterval = 2000;

  // Starts at `scale` (kInitialScale, or a checkpoint's).
  explicit LossScaler(double scale = kInitialScale) : scale_(scale) {}
  double scale() const { return scale_; }

  // After a step whose gradients were unscaled: `overflowed` halves the
  // scale and returns false (skip the optimizer step); otherwise true, and
  // the scale doubles after kGrowthInterval good steps in a row.
  bool Update(bool overflowed);
  // Unscales `grads` by scale() (reading the overflow flag: one device
  // sync), then Update. Gradients averaged over ranks give every rank the
  // same decision.
  bool UnscaleOrSkip(std::vector<torch::Tensor> grads);

 private:
  double scale_;
  int64_t good_steps_ = 0;  // since the last overflow or growth
};

}  // namespace shardkit
