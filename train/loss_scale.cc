// Gradient unscaling with overflow detection, and the loss scale's schedule.
#include "train/loss_scale.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>

namespace shardkit {

torch::Tensor UnscaleGradients(std::vector<torch::Tensor> grads, double scale) {
  torch::NoGradGuard no_grad;
  const torch::Device device = grads.empty() ? torch::Device(torch::kCPU) : grads[0].device();
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  torch::Tensor found_inf = torch::zeros({1}, opts);
  if (grads.empty()) return found_inf;
  if (device.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
                                                   torch::full({1}, 1.0 / scale, opts));
    return found_inf;
  }
  for (torch::Tensor& g : grads) {
    g.div_(scale);
    found_inf.logical_or_(torch::isfinite(g).all().logical_not());
  }
  return found_inf;
}

bool LossScaler::Update(bool overflowed) {
  if (overflowed) {
    scale_ /= 2;
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ == kGrowthInterval) {
    scale_ *= 2;
    good_steps_ = 0;
  }
  return true;
}

bool LossScaler::UnscaleOrSkip(std::vector<torch::Tensor> grads) {
  return Update(UnscaleGradients(std::move(grads), scale_).item<float>() != 0);
}

}  // namespace shardkit
