// Models by name: MakeModel builds the model a ModelSpec names (the names are
// kModelArchNames, train/models/model_spec.h), each from its file in
// train/models/ (resnet.h: ResNet-18/34/50 and ResNet-20; tiny_net.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "base/status.h"
#include "train/models/model_spec.h"

namespace shardkit {

// The model spec.arch names, initialised as its constructor says; an
// InvalidArgument naming spec.arch and every known name if it names none.
Result<torch::nn::AnyModule> MakeModel(const ModelSpec& spec);
torch::nn::Module& AsModule(torch::nn::AnyModule& m);

// The number of trainable parameters.
int64_t ParameterCount(torch::nn::Module& m);

}  // namespace shardkit
