// torch.optim.SGD's update (weight decay, momentum, Nesterov).
#include "train/sgd.h"

namespace shardkit {

Sgd::Sgd(std::vector<std::pair<std::string, torch::Tensor>> named_params, Options options)
    : params_(std::move(named_params)), options_(options) {}

void Sgd::ZeroGrad() {
  for (auto& [name, p] : params_) {
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
  }
}

void Sgd::Step(double lr) {
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    if (!p.grad().defined()) continue;
    torch::Tensor d = p.grad();
    if (options_.weight_decay != 0) d = d.add(p, options_.weight_decay);
    if (options_.momentum != 0) {
      auto it = momentum_.find(name);
      if (it == momentum_.end()) {
        it = momentum_.emplace(name, d.clone()).first;  // first step: buf = d
      } else {
        it->second.mul_(options_.momentum).add_(d);
      }
      d = options_.nesterov ? d.add(it->second, options_.momentum) : it->second;
    }
    p.add_(d, -lr);
  }
}

}  // namespace shardkit
