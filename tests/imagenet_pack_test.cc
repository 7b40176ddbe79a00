// Packing an ImageNet-shaped tree with everything real ImageNet contains:
// grayscale, CMYK and progressive JPEGs, a PNG under a .JPEG name, a truncated
// JPEG, a text file and an empty class folder.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "image/codec.h"
#include "ingest/packer.h"
#include "ingest/tree_source.h"
#include "shard/shard.h"
#include "tests/test_util.h"

namespace shardkit {
namespace {

using testing::JpegFlavor;
using testing::MakeJpeg;
using testing::SyntheticImage;
using testing::TempDir;
using testing::WriteFile;

// The tree and pack options of one shardkit-pack imagenet run.
struct ImageNetPackOptions : TreeOptions {
  std::string out;
  int threads = 0, resize_short = 0, quality = 90;
  uint64_t seed = 0;
  bool strict = false;
};

uint64_t Count(const PackSummary& s, Unusable why) { return s.unusable[static_cast<int>(why)]; }

Status PackImageNet(const ImageNetPackOptions& t,
                    const std::function<void(const std::string&)>& report, PackSummary* sum) {
  SK_ASSIGN_OR_RETURN(auto source, OpenTree(t));
  PackOptions o;
  o.out = t.out;
  o.threads = t.threads;
  o.resize_short = t.resize_short;
  o.quality = t.quality;
  o.seed = t.seed;
  o.strict = t.strict;
  PackEvents events;
  events.report = report;
  return Pack(source.get(), o, events, sum);
}

double MeanAbsDiff(const Image& a, const Image& b) {
  EXPECT_EQ(a.pixels.size(), b.pixels.size());
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size() && i < b.pixels.size(); ++i)
    sum += std::abs(a.pixels[i] - b.pixels[i]);
  return sum / std::max<size_t>(1, a.pixels.size());
}

class ImageNetTree : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_ / "train";
    for (const char* c : {"n01", "n02", "n03", "n04"}) testing::MakeDirs(src_ + "/" + c);
    images_["n01/rgb.JPEG"] = SyntheticImage(96, 80, 3, 1);
    images_["n01/gray.JPEG"] = SyntheticImage(64, 64, 3, 2);
    images_["n02/cmyk.JPEG"] = SyntheticImage(72, 60, 3, 3);
    images_["n02/cmyk_adobe.JPEG"] = SyntheticImage(72, 60, 3, 4);
    images_["n02/progressive.JPEG"] = SyntheticImage(100, 90, 3, 5);
    images_["n03/png_in_disguise.JPEG"] = SyntheticImage(50, 40, 3, 6);
    WriteFile(src_ + "/n01/rgb.JPEG", MakeJpeg(images_["n01/rgb.JPEG"], JpegFlavor::kRgb));
    WriteFile(src_ + "/n01/gray.JPEG", MakeJpeg(images_["n01/gray.JPEG"], JpegFlavor::kGray));
    WriteFile(src_ + "/n02/cmyk.JPEG", MakeJpeg(images_["n02/cmyk.JPEG"], JpegFlavor::kCmyk, 95));
    WriteFile(src_ + "/n02/cmyk_adobe.JPEG",
              MakeJpeg(images_["n02/cmyk_adobe.JPEG"], JpegFlavor::kCmykAdobe, 95));
    WriteFile(src_ + "/n02/progressive.JPEG",
              MakeJpeg(images_["n02/progressive.JPEG"], JpegFlavor::kProgressive));
    WriteFile(src_ + "/n03/png_in_disguise.JPEG",
              testing::MakePng(images_["n03/png_in_disguise.JPEG"]));
    std::string truncated = MakeJpeg(SyntheticImage(120, 120, 3, 7), JpegFlavor::kRgb);
    WriteFile(src_ + "/n03/truncated.JPEG", truncated.substr(0, truncated.size() / 2));
    WriteFile(src_ + "/n03/readme.JPEG", "this is not an image\n");
    // n04 stays empty.
  }

  TempDir dir_;
  std::string src_;
  std::map<std::string, Image> images_;
};

TEST_F(ImageNetTree, PacksEveryDecodableKindAndReportsTheRest) {
  ImageNetPackOptions o;
  o.src = src_;
  o.out = dir_ / "out";
  o.threads = 2;
  std::vector<std::string> problems;
  PackSummary sum;
  Status s = PackImageNet(
      o, [&](const std::string& m) { problems.push_back(m); }, &sum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sum.packed, 6u);
  EXPECT_EQ(Count(sum, Unusable::kBadImage), 2u);
  EXPECT_EQ(Count(sum, Unusable::kEmptyClass), 1u);
  EXPECT_EQ(sum.converted_cmyk, 2u);
  EXPECT_EQ(sum.converted_png, 1u);
  const std::string all = testing::JoinLines(problems);
  EXPECT_NE(all.find("n03/truncated.JPEG"), std::string::npos) << all;
  EXPECT_NE(all.find("n03/readme.JPEG: not a JPEG or PNG"), std::string::npos) << all;
  EXPECT_NE(all.find("n04: an empty class folder"), std::string::npos) << all;

  auto ds = Dataset::Open(o.out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->manifest().classes, (std::vector<std::string>{"n01", "n02", "n03", "n04"}));
  EXPECT_EQ((*ds)->manifest().record.kind, format::RecordKind::kJpeg);
  // Every record decodes to RGB and looks like its source.
  JpegDecoder dec;
  ReadScratch scratch;
  const ShardReader& r = (*ds)->shard(0);
  ASSERT_EQ(r.num_records(), 6u);
  for (uint32_t i = 0; i < r.num_records(); ++i) {
    std::string key(r.key(i));
    std::string_view p;
    ASSERT_TRUE(r.ReadRecord(i, &scratch, &p).ok());
    DecodedRegion out;
    Status ds_ =
        dec.Decode(reinterpret_cast<const uint8_t*>(p.data()), p.size(), DecodeRequest{}, &out);
    ASSERT_TRUE(ds_.ok()) << key << ": " << ds_.ToString();
    const Image& want = images_[key];
    ASSERT_EQ(out.image.width, want.width) << key;
    ASSERT_EQ(out.image.height, want.height) << key;
    EXPECT_EQ(out.image.channels, 3);
    if (key != "n01/gray.JPEG") {
      EXPECT_LT(MeanAbsDiff(out.image, want), 6.0) << key;
    }
    const std::string cls = key.substr(0, 3);
    EXPECT_EQ((*ds)->manifest().classes[r.record(i).label], cls) << key;
  }
}

TEST_F(ImageNetTree, StrictFailsOnTheFirstProblem) {
  ImageNetPackOptions o;
  o.src = src_;
  o.out = dir_ / "out";
  o.strict = true;
  PackSummary sum;
  Status s = PackImageNet(
      o, [](const std::string&) {}, &sum);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--strict"), std::string::npos);
  EXPECT_FALSE(Env::Default()->FileExists(dir_ / "out/manifest.json"));
}

TEST_F(ImageNetTree, ResizeShortReencodes) {
  ImageNetPackOptions o;
  o.src = src_;
  o.out = dir_ / "out";
  o.resize_short = 32;
  o.quality = 85;
  PackSummary sum;
  ASSERT_TRUE(PackImageNet(
                  o, [](const std::string&) {}, &sum)
                  .ok());
  auto ds = Dataset::Open(o.out);
  ASSERT_TRUE(ds.ok());
  JpegDecoder dec;
  ReadScratch scratch;
  for (uint32_t i = 0; i < (*ds)->shard(0).num_records(); ++i) {
    std::string_view p;
    ASSERT_TRUE((*ds)->shard(0).ReadRecord(i, &scratch, &p).ok());
    JpegInfo info;
    ASSERT_TRUE(dec.ReadHeader(reinterpret_cast<const uint8_t*>(p.data()), p.size(), &info).ok());
    EXPECT_EQ(std::min(info.width, info.height), 32) << (*ds)->shard(0).key(i);
  }
}

TEST_F(ImageNetTree, SeededOrderSpreadsClassesAndIsReproducible) {
  auto keys = [&](uint64_t seed, const std::string& out) {
    ImageNetPackOptions o;
    o.src = src_;
    o.out = out;
    o.seed = seed;
    PackSummary sum;
    EXPECT_TRUE(PackImageNet(
                    o, [](const std::string&) {}, &sum)
                    .ok());
    auto ds = Dataset::Open(out);
    std::vector<std::string> k;
    for (uint32_t i = 0; i < (*ds)->shard(0).num_records(); ++i)
      k.emplace_back((*ds)->shard(0).key(i));
    return k;
  };
  auto a = keys(1, dir_ / "a"), b = keys(1, dir_ / "b"), c = keys(2, dir_ / "c");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// The root rule and what lies beside the classes: a class folder holding
// images and a sub-folder is a class (not a wrapper to descend through); an
// image beside the class folders is an unusable member, a README a note.
TEST(ImageNetRoot, OneClassWithASubFolderKeepsBothImagesAndAnImageBesideIsUnusable) {
  TempDir dir;
  testing::MakeDirs(dir / "train/n01/2019");
  WriteFile(dir / "train/n01/a.JPEG", MakeJpeg(SyntheticImage(40, 30, 3, 1), JpegFlavor::kRgb));
  WriteFile(dir / "train/n01/2019/b.JPEG",
            MakeJpeg(SyntheticImage(40, 30, 3, 2), JpegFlavor::kRgb));
  ImageNetPackOptions o;
  o.src = dir / "train";
  o.out = dir / "one";
  o.strict = true;
  PackSummary sum;
  std::vector<std::string> lines;
  auto report = [&](const std::string& m) { lines.push_back(m); };
  Status s = PackImageNet(o, report, &sum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sum.packed, 2u);
  EXPECT_EQ(ReadManifest(o.out)->classes, std::vector<std::string>{"n01"});
  EXPECT_NE(testing::JoinLines(lines).find("one class, n01, with 1 folder(s)"), std::string::npos)
      << testing::JoinLines(lines);

  testing::MakeDirs(dir / "train/n02");
  WriteFile(dir / "train/n02/c.JPEG", MakeJpeg(SyntheticImage(40, 30, 3, 3), JpegFlavor::kRgb));
  WriteFile(dir / "train/cover.jpg", MakeJpeg(SyntheticImage(40, 30, 3, 4), JpegFlavor::kRgb));
  WriteFile(dir / "train/README.txt", "two classes\n");
  o.out = dir / "strict";
  s = PackImageNet(o, report, &sum);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cover.jpg: an image beside the class folders"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(Env::Default()->FileExists(o.out));
  o.strict = false;
  o.out = dir / "two";
  lines.clear();
  s = PackImageNet(o, report, &sum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sum.packed, 3u);
  EXPECT_EQ(Count(sum, Unusable::kOutsideLayout), 1u);
  const std::string all = testing::JoinLines(lines);
  EXPECT_NE(all.find("1 file(s) beside the class folders that are not images"), std::string::npos)
      << all;
}

TEST(ImageNetVal, FlatFolderWithCsvLabels) {
  TempDir dir;
  testing::MakeDirs(dir / "val");
  WriteFile(dir / "val/ILSVRC2012_val_00000001.JPEG",
            MakeJpeg(SyntheticImage(40, 30, 3, 1), JpegFlavor::kRgb));
  WriteFile(dir / "val/ILSVRC2012_val_00000002.JPEG",
            MakeJpeg(SyntheticImage(40, 30, 3, 2), JpegFlavor::kRgb));
  WriteFile(dir / "val/ILSVRC2012_val_00000003.JPEG",
            MakeJpeg(SyntheticImage(40, 30, 3, 3), JpegFlavor::kRgb));
  WriteFile(dir / "labels.csv",
            "ImageId,PredictionString\r\n"
            "ILSVRC2012_val_00000001,n02 1 2 3 4 n02 5 6 7 8\r\n"
            "ILSVRC2012_val_00000002,n01 1 2 3 4\r\n");
  ImageNetPackOptions o;
  o.src = dir / "val";
  o.out = dir / "out";
  o.val_labels = dir / "labels.csv";
  std::vector<std::string> problems;
  PackSummary sum;
  ASSERT_TRUE(PackImageNet(
                  o, [&](const std::string& m) { problems.push_back(m); }, &sum)
                  .ok());
  EXPECT_EQ(sum.packed, 2u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("ILSVRC2012_val_00000003.JPEG: no label"), std::string::npos);
  auto ds = Dataset::Open(o.out);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->manifest().classes, (std::vector<std::string>{"n01", "n02"}));
  const ShardReader& r = (*ds)->shard(0);
  for (uint32_t i = 0; i < r.num_records(); ++i) {
    EXPECT_EQ(r.record(i).label, r.key(i) == "ILSVRC2012_val_00000001.JPEG" ? 1 : 0);
  }
}

TEST(ImageNetVal, MalformedCsvNamesTheLine) {
  TempDir dir;
  WriteFile(dir / "labels.csv", "ImageId,PredictionString\nfoo\n");
  auto rows = ReadValLabels(dir / "labels.csv");
  EXPECT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("labels.csv:2"), std::string::npos)
      << rows.status().message();
}

}  // namespace
}  // namespace shardkit
