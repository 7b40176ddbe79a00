// BatchFeeder: moves loader batches (uint8, NCHW) to the training device and
// normalises them there. On CUDA (device_feeder_cuda.cc) the bytes go through
// pinned host buffers and are copied on a side stream while the previous step
// computes; on CPU the conversion is done in place of the copy.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

#include "loader/loader.h"

namespace shardkit {

class BatchFeeder {
 public:
  virtual ~BatchFeeder() = default;
  // Starts moving `batch`; the loader's buffer may be reused once this returns.
  virtual void Stage(const Batch& batch) = 0;
  // The staged batch on the device: normalised float images and int64 labels.
  virtual std::pair<torch::Tensor, torch::Tensor> Take() = 0;
};

std::unique_ptr<BatchFeeder> MakeBatchFeeder(torch::Device device, const std::vector<float>& mean,
                                             const std::vector<float>& std, bool channels_last);

#ifdef SHARDKIT_WITH_CUDA
std::unique_ptr<BatchFeeder> MakeCudaBatchFeeder(torch::Device device,
                                                 const std::vector<float>& mean,
                                                 const std::vector<float>& std, bool channels_last);
#endif

}  // namespace shardkit
