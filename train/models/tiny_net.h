// A tiny BatchNorm-free CNN for tests where ranks must agree exactly. Built
// by name ("tiny") through MakeModel (train/models/models.h).
#pragma once

#include <torch/torch.h>

#include "train/models/model_spec.h"

namespace shardkit {

// Two convs and a linear layer, no BatchNorm: its gradients average across
// ranks exactly like one big batch, which the DDP equivalence test needs.
torch::nn::AnyModule MakeTinyNet(const ModelSpec& spec);

}  // namespace shardkit
