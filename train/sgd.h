// SGD with momentum whose buffers are part of the training state that a
// checkpoint (train/checkpoint.h) saves and restores.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardkit {

// torch.optim.SGD's update, with momentum buffers keyed by parameter name.
class Sgd {
 public:
  struct Options {
    double momentum = 0.9;
    double weight_decay = 1e-4;
    bool nesterov = false;
  };
  Sgd(std::vector<std::pair<std::string, torch::Tensor>> named_params, Options options);
  void ZeroGrad();
  void Step(double lr);
  std::map<std::string, torch::Tensor>& momentum() { return momentum_; }

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  Options options_;
  std::map<std::string, torch::Tensor> momentum_;
};

}  // namespace shardkit
