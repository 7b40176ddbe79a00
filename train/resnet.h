// ResNets with torchvision's architecture and state-dict names (resnet18/34/50),
// the CIFAR-style ResNet-20 for 28x28 and 32x32 inputs, and a tiny
// BatchNorm-free CNN for tests where ranks must agree exactly.
#pragma once

#include <torch/torch.h>

#include <string>

namespace shardkit {

struct ModelSpec {
  std::string arch = "resnet18";  // resnet18 | resnet34 | resnet50 | resnet20 | tiny
  int num_classes = 1000;
  int in_channels = 3;
  // The MNIST stem: a 3x3 stride-1 first conv and no max-pool (for 28x28
  // inputs); chosen automatically by MakeModel for inputs smaller than 64.
  bool small_input_stem = false;
};

// Returns a module whose named_parameters()/named_buffers() match torchvision's
// state_dict keys for resnet18/34/50 (conv1.weight, layer1.0.bn1.running_mean,
// layer2.0.downsample.0.weight, fc.bias, ...). Weights are initialised as
// torchvision does (Kaiming normal, fan_out, for convs; BN weight 1, bias 0).
// Throws std::invalid_argument for an unknown arch.
torch::nn::AnyModule MakeModel(const ModelSpec& spec);
torch::nn::Module& AsModule(torch::nn::AnyModule& m);

// The number of trainable parameters.
int64_t ParameterCount(torch::nn::Module& m);

}  // namespace shardkit
