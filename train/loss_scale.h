// Dynamic loss scaling for fp16 training, the half that touches gradients:
// unscaling them and detecting overflow. The scale's schedule (halve on
// overflow, double after 2000 good steps) is the trainer's and is checkpointed.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace shardkit {

// Divides every gradient by `scale` in place and returns a one-element float
// tensor on their device: nonzero if any gradient holds an inf or a NaN. On
// CUDA one fused multi-tensor kernel does both (the one
// torch.cuda.amp.GradScaler uses); on the CPU a loop of the same two steps.
// Nothing here waits for the device: reading the flag is the caller's one sync.
// All gradients must be on one device.
torch::Tensor UnscaleGradients(std::vector<torch::Tensor> grads, double scale);

}  // namespace shardkit
