// The CPU BatchFeeder, and the choice between it and the CUDA one.
#include "train/device_feeder.h"

namespace shardkit {
namespace {

class CpuFeeder : public BatchFeeder {
 public:
  CpuFeeder(torch::Device device, const std::vector<float>& mean, const std::vector<float>& std,
            bool channels_last)
      : device_(device), channels_last_(channels_last) {
    const int64_t c = static_cast<int64_t>(mean.size());
    mean_ = torch::tensor(mean).view({1, c, 1, 1}).to(device);
    inv_std_ = (1.0 / torch::tensor(std)).view({1, c, 1, 1}).to(device);
  }
  void Stage(const Batch& b) override {
    torch::Tensor u8 = torch::from_blob(const_cast<uint8_t*>(b.data),
                                        {b.size, b.channels, b.height, b.width}, torch::kUInt8);
    torch::Tensor x =
        u8.to(device_, torch::kFloat32);  // a copy: the loader's buffer is free after this
    x.mul_(1.0 / 255).sub_(mean_).mul_(inv_std_);
    if (channels_last_) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
    images_ = x;
    labels_ = torch::from_blob(const_cast<int32_t*>(b.labels), {b.size}, torch::kInt32)
                  .to(device_, torch::kInt64);
  }
  std::pair<torch::Tensor, torch::Tensor> Take() override { return {images_, labels_}; }

 private:
  torch::Device device_;
  bool channels_last_;
  torch::Tensor mean_, inv_std_, images_, labels_;
};

}  // namespace

std::unique_ptr<BatchFeeder> MakeBatchFeeder(torch::Device device, const std::vector<float>& mean,
                                             const std::vector<float>& std, bool channels_last) {
#ifdef SHARDKIT_WITH_CUDA
  if (device.is_cuda()) return MakeCudaBatchFeeder(device, mean, std, channels_last);
#endif
  return std::make_unique<CpuFeeder>(device, mean, std, channels_last);
}

}  // namespace shardkit
