// ResNets with torchvision's architecture and state-dict names (ResNet-18, 34
// and 50) and the CIFAR-style ResNet-20 for 28x28 and 32x32 inputs. Built by
// name through MakeModel (train/models/models.h).
#pragma once

#include <torch/torch.h>

#include "train/models/model_spec.h"

namespace shardkit {

// Modules whose named_parameters()/named_buffers() match torchvision's
// state_dict keys (conv1.weight, layer1.0.bn1.running_mean,
// layer2.0.downsample.0.weight, fc.bias, ...), initialised as torchvision
// does (Kaiming normal, fan_out, for convs; BN weight 1, bias 0).
torch::nn::AnyModule MakeResNet18(const ModelSpec& spec);
torch::nn::AnyModule MakeResNet34(const ModelSpec& spec);
torch::nn::AnyModule MakeResNet50(const ModelSpec& spec);
// ResNet-20 (He et al. 2016, CIFAR): 3 stages of 3 basic blocks, 16/32/64 channels.
torch::nn::AnyModule MakeResNet20(const ModelSpec& spec);

}  // namespace shardkit
