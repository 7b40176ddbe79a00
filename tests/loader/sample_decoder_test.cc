// SampleDecoder alone (bytes -> pixels): raw records copied or transposed and
// their size checked; a JPEG's crop keyed by (seed, epoch, position) only.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "loader/sample_decoder.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

TEST(SampleDecoderTest, RawRecordsAreCopiedOrTransposedAndSizeChecked) {
  RecordFormat f;
  f.kind = format::RecordKind::kRawU8;
  f.shape = {2, 3, 2};  // H, W, C
  auto nchw = SampleDecoder::Make(f, TransformParams(), Layout::kNCHW, 0, "d");
  auto nhwc = SampleDecoder::Make(f, TransformParams(), Layout::kNHWC, 0, "d");
  ASSERT_TRUE(nchw.ok() && nhwc.ok());
  EXPECT_EQ(nchw->sample_bytes(), 12u);
  std::string hwc;
  for (int i = 0; i < 12; ++i) hwc.push_back(static_cast<char>(i));
  SampleDecoder::State st;
  uint8_t out[12];
  ASSERT_TRUE(nhwc->Decode(st, hwc, 0, 0, out).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), 12), hwc);
  ASSERT_TRUE(nchw->Decode(st, hwc, 0, 0, out).ok());
  const uint8_t planes[12] = {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11};
  EXPECT_EQ(0, std::memcmp(out, planes, 12));
  Status s = nchw->Decode(st, hwc.substr(1), 0, 0, out);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message(), "11 bytes, the record shape needs 12");
  f.kind = format::RecordKind::kBytes;
  EXPECT_TRUE(
      SampleDecoder::Make(f, TransformParams(), Layout::kNCHW, 0, "d").status().IsUnsupported());
}

// A JPEG's crop depends on (seed, epoch, position) only: the same for any
// worker or state, another for another epoch; garbage is a Corruption.
TEST(SampleDecoderTest, JpegCropsAreKeyedAndGarbageIsCorruption) {
  RecordFormat f;
  f.kind = format::RecordKind::kJpeg;
  TransformParams t;
  t.kind = TransformKind::kTrain;
  t.size = 32;
  auto d = SampleDecoder::Make(f, t, Layout::kNCHW, 7, "d");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->sample_bytes(), 3u * 32 * 32);
  const std::string jpeg =
      testing::MakeJpeg(testing::SyntheticImage(120, 90, 3, 1), testing::JpegFlavor::kRgb);
  SampleDecoder::State a, b;
  std::vector<uint8_t> x(d->sample_bytes()), y(d->sample_bytes()), z(d->sample_bytes());
  ASSERT_TRUE(d->Decode(a, jpeg, 3, 11, x.data()).ok());
  ASSERT_TRUE(d->Decode(b, jpeg, 3, 11, y.data()).ok());
  EXPECT_EQ(x, y);
  bool differs = false;
  for (uint64_t e = 4; e < 8 && !differs; ++e) {
    ASSERT_TRUE(d->Decode(b, jpeg, e, 11, z.data()).ok());
    differs = z != x;
  }
  EXPECT_TRUE(differs);
  EXPECT_TRUE(d->Decode(a, "not a jpeg", 0, 0, x.data()).IsCorruption());
}

}  // namespace
}  // namespace shardkit
