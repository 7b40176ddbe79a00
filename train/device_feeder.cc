// BatchView, the CPU BatchFeeder, and the choice between it and the CUDA one.
#include "train/device_feeder.h"

namespace shardkit {

torch::Tensor BatchView(const Batch& b) {
  const int64_t n = b.size, c = b.channels, h = b.height, w = b.width;
  std::vector<int64_t> strides = b.layout == Layout::kNHWC
                                     ? std::vector<int64_t>{h * w * c, 1, w * c, c}
                                     : std::vector<int64_t>{c * h * w, h * w, w, 1};
  return torch::from_blob(b.data, {n, c, h, w}, strides, torch::kUInt8);
}

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
  void Stage(std::shared_ptr<const Batch> b) override {
    // The float conversion is the one copy; it keeps the view's memory
    // format, so an NHWC batch becomes a channels-last tensor directly.
    torch::Tensor x = BatchView(*b).to(device_, torch::kFloat32);
    x.mul_(1.0 / 255).sub_(mean_).mul_(inv_std_);
    const auto format =
        channels_last_ ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    if (!x.is_contiguous(format)) x = x.contiguous(format);
    images_ = x;
    labels_ = torch::from_blob(b->labels, {b->size}, torch::kInt32).to(device_, torch::kInt64);
  }  // the lease is dropped here: nothing reads the loader's memory any more
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
