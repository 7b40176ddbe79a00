// BatchFeeder: moves loader batches to the training device and normalises
// them there. A batch is staged from its lease, without copying it on the
// host: BatchView() is a uint8 tensor over the loader's memory (an NHWC batch
// viewed as a channels-last NCHW tensor), and the feeder keeps the lease until
// the device no longer reads it. On CUDA (device_feeder_cuda.cc) the loader's
// batch memory is pinned (PinnedSlotAllocator), so the host-to-device copy is
// truly asynchronous: it runs on a side stream while the previous step computes.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

#include "loader/loader.h"

namespace shardkit {

// The batch's pixels as a uint8 [N, C, H, W] tensor sharing its memory: NCHW
// batches contiguous, NHWC batches with channels-last strides. Valid while
// the batch's lease lives.
torch::Tensor BatchView(const Batch& batch);

class BatchFeeder {
 public:
  virtual ~BatchFeeder() = default;
  // Starts moving the batch to the device; keeps the lease as long as needed.
  virtual void Stage(std::shared_ptr<const Batch> batch) = 0;
  // The staged batch on the device: normalised float images (channels-last
  // if asked for) and int64 labels.
  virtual std::pair<torch::Tensor, torch::Tensor> Take() = 0;
};

std::unique_ptr<BatchFeeder> MakeBatchFeeder(torch::Device device, const std::vector<float>& mean,
                                             const std::vector<float>& std, bool channels_last);

#ifdef SHARDKIT_WITH_CUDA
std::unique_ptr<BatchFeeder> MakeCudaBatchFeeder(torch::Device device,
                                                 const std::vector<float>& mean,
                                                 const std::vector<float>& std, bool channels_last);
// Makes GPU `index` this thread's (and the process's default) CUDA device:
// a rank's context, streams and NCCL communicator then live on its own GPU.
void SetCudaDevice(int index);
// Page-locked host memory from LibTorch's caching host allocator, for the
// loader's batches (LoaderOptions::allocator).
SlotAllocator PinnedSlotAllocator();
#endif

}  // namespace shardkit
