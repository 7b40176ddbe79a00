// The tiny test net.
#include "train/models/tiny_net.h"

namespace shardkit {
namespace {

namespace nn = torch::nn;

// Two convs and a linear layer, no BatchNorm: its gradients average across
// ranks exactly like one big batch, which the DDP equivalence test needs.
struct TinyNetImpl : nn::Module {
  explicit TinyNetImpl(const ModelSpec& spec) {
    conv1 = register_module(
        "conv1", nn::Conv2d(nn::Conv2dOptions(spec.in_channels, 8, 3).stride(2).padding(1)));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(8, 16, 3).stride(2).padding(1)));
    fc = register_module("fc", nn::Linear(16, spec.num_classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv2(torch::relu(conv1(x))));
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::Linear fc{nullptr};
};

}  // namespace

torch::nn::AnyModule MakeTinyNet(const ModelSpec& spec) {
  return nn::AnyModule(std::make_shared<TinyNetImpl>(spec));
}

}  // namespace shardkit
