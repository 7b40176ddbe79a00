// The device feeder: an NHWC batch is viewed as a channels-last tensor over
// the loader's memory, without a copy, and normalised as the NCHW path is.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "train/device_feeder.h"

namespace shardkit {
namespace {

// The trainer asks the loader for NHWC when training channels-last: the batch
// is viewed as a channels-last NCHW tensor over the loader's memory (same data
// pointer, channels-last strides, no copy), and the feeder's normalised output
// equals that of the NCHW path, in the memory format asked for.
TEST(FeederTest, NhwcBatchesAreViewedAsChannelsLastWithoutACopy) {
  const int n = 2, c = 3, h = 4, w = 5;
  std::vector<uint8_t> nhwc(n * h * w * c), nchw(n * c * h * w);
  std::vector<int32_t> labels = {1, 0};
  for (int i = 0; i < n; ++i)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int ch = 0; ch < c; ++ch) {
          const uint8_t v = static_cast<uint8_t>((i * 97 + y * 31 + x * 7 + ch * 53) & 0xFF);
          nhwc[((i * h + y) * w + x) * c + ch] = v;
          nchw[((i * c + ch) * h + y) * w + x] = v;
        }
  Batch b;
  b.size = b.real_size = n;
  b.channels = c;
  b.height = h;
  b.width = w;
  b.labels = labels.data();
  b.layout = Layout::kNHWC;
  b.data = nhwc.data();
  torch::Tensor v = BatchView(b);
  EXPECT_EQ(v.data_ptr(), static_cast<void*>(nhwc.data()));
  EXPECT_EQ(v.sizes(), (std::vector<int64_t>{n, c, h, w}));
  EXPECT_EQ(v.strides(), (std::vector<int64_t>{h * w * c, 1, w * c, c}));
  EXPECT_TRUE(v.is_contiguous(torch::MemoryFormat::ChannelsLast));
  Batch planar = b;
  planar.layout = Layout::kNCHW;
  planar.data = nchw.data();
  EXPECT_TRUE(torch::equal(v, BatchView(planar)));
  EXPECT_EQ(BatchView(planar).data_ptr(), static_cast<void*>(nchw.data()));

  const std::vector<float> mean = {0.5f, 0.4f, 0.3f}, stdv = {0.2f, 0.25f, 0.3f};
  auto cl = MakeBatchFeeder(torch::kCPU, mean, stdv, /*channels_last=*/true);
  auto plain = MakeBatchFeeder(torch::kCPU, mean, stdv, /*channels_last=*/false);
  // The lease owns nothing here (the vectors do): an aliasing shared_ptr.
  cl->Stage(std::shared_ptr<const Batch>(std::shared_ptr<void>(), &b));
  plain->Stage(std::shared_ptr<const Batch>(std::shared_ptr<void>(), &planar));
  auto [x, y] = cl->Take();
  auto [x2, y2] = plain->Take();
  EXPECT_TRUE(x.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(x2.is_contiguous());
  EXPECT_TRUE(torch::allclose(x, x2));
  EXPECT_TRUE(torch::equal(y, y2));
  EXPECT_EQ(y.dtype(), torch::kInt64);
  EXPECT_NEAR(x[1][2][3][4].item<float>(),
              (nchw[((1 * c + 2) * h + 3) * w + 4] / 255.f - 0.3f) / 0.3f, 1e-5);
}

}  // namespace
}  // namespace shardkit
