// What shardkit-pack and the Python Writer share when they write: how a
// sample becomes its record (PrepareRecord), the conversions they count, and
// the refusal of a dataset of no record (DatasetWriter::Finish).
#include "image/prepare.h"

#include <gtest/gtest.h>

#include <utility>

#include "image/codec.h"
#include "shard/dataset.h"
#include "shard/dataset_writer.h"
#include "storage/env.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::JpegFlavor;
using testing::MakeJpeg;
using testing::MakePng;
using testing::SyntheticImage;
using testing::TempDir;

JpegInfo HeaderOf(const std::string& jpeg) {
  JpegDecoder dec;
  JpegInfo info;
  Status s = dec.ReadHeader(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), &info);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return info;
}

TEST(PrepareRecordTest, AnRgbGrayOrProgressiveJpegIsStoredByteForByte) {
  const Image photo = SyntheticImage(64, 48, 3, 1);
  for (JpegFlavor flavor : {JpegFlavor::kRgb, JpegFlavor::kGray, JpegFlavor::kProgressive}) {
    const std::string jpeg = MakeJpeg(photo, flavor);
    PreparedImage out;
    ASSERT_TRUE(PrepareRecord(jpeg, RecordRule(), &out).ok());
    EXPECT_EQ(out.jpeg, jpeg);
    EXPECT_EQ(out.change, PreparedImage::Change::kNone);
  }
}

TEST(PrepareRecordTest, APngAndACmykJpegBecomeRgbJpegsOfTheSameSize) {
  const Image photo = SyntheticImage(64, 48, 3, 2);
  const std::pair<std::string, PreparedImage::Change> inputs[] = {
      {MakePng(photo), PreparedImage::Change::kPng},
      {MakeJpeg(photo, JpegFlavor::kCmyk), PreparedImage::Change::kCmyk},
      {MakeJpeg(photo, JpegFlavor::kCmykAdobe), PreparedImage::Change::kCmyk}};
  for (const auto& [bytes, change] : inputs) {
    PreparedImage out;
    ASSERT_TRUE(PrepareRecord(bytes, RecordRule(), &out).ok());
    EXPECT_EQ(out.change, change);
    const JpegInfo info = HeaderOf(out.jpeg);
    EXPECT_EQ(info.width, 64);
    EXPECT_EQ(info.height, 48);
    EXPECT_EQ(info.components, 3);
    EXPECT_FALSE(info.cmyk);
  }
}

TEST(PrepareRecordTest, ResizeShortReencodesOnlyImagesLargerThanIt) {
  RecordRule rule;
  rule.resize_short = 24;
  const std::string large = MakeJpeg(SyntheticImage(64, 48, 3, 3), JpegFlavor::kRgb);
  PreparedImage out;
  ASSERT_TRUE(PrepareRecord(large, rule, &out).ok());
  EXPECT_EQ(out.change, PreparedImage::Change::kResized);
  EXPECT_EQ(HeaderOf(out.jpeg).width, 32);
  EXPECT_EQ(HeaderOf(out.jpeg).height, 24);
  const std::string small = MakeJpeg(SyntheticImage(30, 20, 3, 4), JpegFlavor::kRgb);
  ASSERT_TRUE(PrepareRecord(small, rule, &out).ok());
  EXPECT_EQ(out.change, PreparedImage::Change::kNone);
  EXPECT_EQ(out.jpeg, small);
}

TEST(PrepareRecordTest, WhatIsNoImageOrIsDamagedIsRefusedWithoutNamingTheSample) {
  const std::string jpeg = MakeJpeg(SyntheticImage(64, 48, 3, 5), JpegFlavor::kRgb);
  PreparedImage out;
  Status s = PrepareRecord("this is not an image\n", RecordRule(), &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_EQ(s.message(), "not a JPEG or PNG image (unrecognised content)");
  s = PrepareRecord(jpeg.substr(0, jpeg.size() / 2), RecordRule(), &out);
  EXPECT_FALSE(s.ok()) << "a truncated JPEG fails the strict decode";
  s = PrepareRecord(MakePng(SyntheticImage(16, 16, 3, 6)).substr(0, 60), RecordRule(), &out);
  EXPECT_FALSE(s.ok()) << "a truncated PNG";
}

TEST(PrepareRecordTest, ARawRecordIsStoredAsGivenOnlyAtItsShapesSize) {
  RecordRule raw;
  raw.jpeg = false;
  raw.raw_size = 12;
  PreparedImage out;
  ASSERT_TRUE(PrepareRecord("abcdefghijkl", raw, &out).ok());
  EXPECT_EQ(out.jpeg, "abcdefghijkl");
  EXPECT_EQ(out.change, PreparedImage::Change::kNone);
  const Status s = PrepareRecord("abcdefghijk", raw, &out);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_EQ(s.message(), "11 bytes, the shape needs 12");
  // Raw bytes are never taken for an image, whatever they hold.
  raw.raw_size = 0;  // "bytes" records: any size
  const std::string png = MakePng(SyntheticImage(8, 8, 3, 7));
  ASSERT_TRUE(PrepareRecord(png, raw, &out).ok());
  EXPECT_EQ(out.jpeg, png);
  EXPECT_EQ(out.change, PreparedImage::Change::kNone);
}

TEST(PrepareRecordTest, ConversionCountsTellConvertedFromResized) {
  using Change = PreparedImage::Change;
  ConversionCounts counts;
  for (Change c : {Change::kCmyk, Change::kPng, Change::kPng, Change::kResized, Change::kNone}) {
    counts.Count(c);
  }
  EXPECT_EQ(counts.cmyk, 1u);
  EXPECT_EQ(counts.png, 2u);
  EXPECT_EQ(counts.resized, 1u);
  EXPECT_EQ(counts.converted(), 3u);
}

// A writer finished with no record added publishes nothing: a dataset it
// was to replace stays whole, and a directory it made is gone.
TEST(EmptyDatasetTest, AWriterOfNoRecordPublishesNothingAndReplacesNothing) {
  TempDir dir;
  testing::WriteRawDataset(dir / "kept", 5, 4, CompressionMode::kZstd, 1024, 1 << 20);
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {4, 4, 3};
  DatasetWriterOptions o;
  o.overwrite = true;
  for (const std::string& out : {dir / "kept", dir / "new"}) {
    auto w = DatasetWriter::Create(out, o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    const Status s = (*w)->Finish(m);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_EQ(s.message(),
              out + ": no record was added; nothing written (a dataset there is left as it was)");
  }
  auto kept = Dataset::Open(dir / "kept");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ((*kept)->num_records(), 5u);
  EXPECT_FALSE(Env::Default()->FileExists(dir / "new"));
}

}  // namespace
}  // namespace shardkit
