// The CUDA BatchFeeder: an asynchronous host-to-device copy, on a side stream,
// straight from the loader's pinned batch memory, and normalisation on the
// device. Built only when
// LibTorch has CUDA (SHARDKIT_WITH_CUDA).
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>
// PyTorch 2.8 deprecated at::cuda::getCachingHostAllocator() for the
// device-generic at::getHostAllocator(at::kCUDA).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#include <ATen/core/CachingHostAllocator.h>
#define SHARDKIT_GENERIC_HOST_ALLOCATOR 1
#else
#include <ATen/cuda/CachingHostAllocator.h>
#endif

#include <cstring>

#include "train/device_feeder.h"

namespace shardkit {
namespace {

class CudaFeeder : public BatchFeeder {
 public:
  CudaFeeder(torch::Device device, const std::vector<float>& mean, const std::vector<float>& std,
             bool channels_last)
      : device_(device),
        channels_last_(channels_last),
        stream_(c10::cuda::getStreamFromPool(false, device.index())) {
    const int64_t c = static_cast<int64_t>(mean.size());
    mean_ = torch::tensor(mean).view({1, c, 1, 1}).to(device);
    inv_std_ = (1.0 / torch::tensor(std)).view({1, c, 1, 1}).to(device);
  }
  void Stage(std::shared_ptr<const Batch> b) override {
    Slot& s = slots_[next_ ^= 1];
    // The copy that last read this slot's batch must be done before its
    // lease goes back to the loader.
    s.done.synchronize();
    s.lease = std::move(b);
    const Batch& batch = *s.lease;
    c10::cuda::CUDAStreamGuard guard(stream_);
    // Straight from the loader's (pinned) memory: no host copy.
    s.images = BatchView(batch).to(device_, /*non_blocking=*/true);
    s.labels = torch::from_blob(batch.labels, {batch.size}, torch::kInt32)
                   .to(device_, torch::kInt64, /*non_blocking=*/true);
    s.done.record(stream_);
    staged_ = &s;
  }
  std::pair<torch::Tensor, torch::Tensor> Take() override {
    Slot& s = *staged_;
    s.done.block(c10::cuda::getCurrentCUDAStream(device_.index()));
    s.images.record_stream(c10::cuda::getCurrentCUDAStream(device_.index()));
    s.labels.record_stream(c10::cuda::getCurrentCUDAStream(device_.index()));
    torch::Tensor x = s.images.to(torch::kFloat32).mul_(1.0 / 255).sub_(mean_).mul_(inv_std_);
    const auto format =
        channels_last_ ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    if (!x.is_contiguous(format)) x = x.contiguous(format);
    return {x, s.labels};
  }

 private:
  struct Slot {
    std::shared_ptr<const Batch> lease;  // the loader's memory the copy reads
    torch::Tensor images, labels;
    at::cuda::CUDAEvent done;
  };
  torch::Device device_;
  bool channels_last_;
  c10::cuda::CUDAStream stream_;
  torch::Tensor mean_, inv_std_;
  Slot slots_[2];
  int next_ = 0;
  Slot* staged_ = nullptr;
};

}  // namespace

void SetCudaDevice(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

SlotAllocator PinnedSlotAllocator() {
  return [](size_t bytes) {
#ifdef SHARDKIT_GENERIC_HOST_ALLOCATOR
    at::Allocator* pinned = at::getHostAllocator(at::kCUDA);
#else
    at::Allocator* pinned = at::cuda::getCachingHostAllocator();
#endif
    auto owner = std::make_shared<c10::DataPtr>(pinned->allocate(bytes));
    uint8_t* p = static_cast<uint8_t*>(owner->get());
    return std::shared_ptr<uint8_t>(p, [owner](uint8_t*) mutable { owner.reset(); });
  };
}

std::unique_ptr<BatchFeeder> MakeCudaBatchFeeder(torch::Device device,
                                                 const std::vector<float>& mean,
                                                 const std::vector<float>& std,
                                                 bool channels_last) {
  return std::make_unique<CudaFeeder>(device, mean, std, channels_last);
}

}  // namespace shardkit
