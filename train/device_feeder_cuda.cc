// The CUDA BatchFeeder: pinned host staging, an asynchronous host-to-device
// copy on a side stream, and normalisation on the device. Built only when
// LibTorch has CUDA (SHARDKIT_WITH_CUDA).
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

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
  void Stage(const Batch& b) override {
    Slot& s = slots_[next_ ^= 1];
    const int64_t bytes = static_cast<int64_t>(b.sample_bytes()) * b.size;
    if (!s.host.defined() || s.host.numel() < bytes) {
      s.host =
          torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
    }
    if (!s.host_labels.defined() || s.host_labels.numel() < b.size) {
      s.host_labels =
          torch::empty({b.size}, torch::TensorOptions().dtype(torch::kInt32).pinned_memory(true));
    }
    // The previous copy out of this slot must be done before overwriting it.
    s.done.synchronize();
    std::memcpy(s.host.data_ptr(), b.data, static_cast<size_t>(bytes));
    std::memcpy(s.host_labels.data_ptr(), b.labels, sizeof(int32_t) * b.size);
    c10::cuda::CUDAStreamGuard guard(stream_);
    s.images = s.host.narrow(0, 0, bytes)
                   .view({b.size, b.channels, b.height, b.width})
                   .to(device_, /*non_blocking=*/true);
    s.labels = s.host_labels.narrow(0, 0, b.size).to(device_, torch::kInt64, /*non_blocking=*/true);
    s.done.record(stream_);
    staged_ = &s;
  }
  std::pair<torch::Tensor, torch::Tensor> Take() override {
    Slot& s = *staged_;
    s.done.block(c10::cuda::getCurrentCUDAStream(device_.index()));
    s.images.record_stream(c10::cuda::getCurrentCUDAStream(device_.index()));
    s.labels.record_stream(c10::cuda::getCurrentCUDAStream(device_.index()));
    torch::Tensor x = s.images.to(torch::kFloat32).mul_(1.0 / 255).sub_(mean_).mul_(inv_std_);
    if (channels_last_) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
    return {x, s.labels};
  }

 private:
  struct Slot {
    torch::Tensor host, host_labels, images, labels;
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

std::unique_ptr<BatchFeeder> MakeCudaBatchFeeder(torch::Device device,
                                                 const std::vector<float>& mean,
                                                 const std::vector<float>& std,
                                                 bool channels_last) {
  return std::make_unique<CudaFeeder>(device, mean, std, channels_last);
}

}  // namespace shardkit
