// Packing an ImageNet-shaped tree with everything real ImageNet contains:
// grayscale, CMYK and progressive JPEGs, a PNG under a .JPEG name, a truncated
// JPEG, a text file and an empty class folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "image/codec.h"
#include "ingest/packer.h"
#include "ingest/tree_source.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"

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
  EXPECT_EQ(sum.conversions.cmyk, 2u);
  EXPECT_EQ(sum.conversions.png, 1u);
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

// One ustar member with any name, as a hostile archive may carry it (GNU tar
// and bsdtar would strip or refuse such names when they make one):
// type '0' a file, '1' a hard link, '2' a symbolic link, '3' a device, '5' a
// folder.
std::string TarMember(const std::string& name, const std::string& bytes, char type = '0',
                      const std::string& link = "") {
  std::string h(512, '\0');
  auto put = [&](size_t at, const std::string& v) { h.replace(at, v.size(), v); };
  auto octal = [](uint64_t v, int digits) {
    char buf[24];
    std::snprintf(buf, sizeof(buf), "%0*llo", digits, static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  put(0, name);
  put(100, octal(type == '5' ? 0755 : 0644, 7));
  put(108, octal(0, 7));
  put(116, octal(0, 7));
  put(124, octal(type == '0' ? bytes.size() : 0, 11));
  put(136, octal(1700000000, 11));
  put(148, std::string(8, ' '));
  h[156] = type;
  put(157, link);
  put(257, std::string("ustar\0"
                       "00",
                       8));
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  put(148, octal(sum, 6) + std::string("\0 ", 2));
  if (type != '0') return h;
  std::string data = bytes;
  data.resize((bytes.size() + 511) / 512 * 512, '\0');
  return h + data;
}

std::string TarEnd() { return std::string(1024, '\0'); }

// Every record's key, label and bytes, in the dataset's order.
std::vector<std::string> Records(const std::string& dir) {
  auto ds = Dataset::Open(dir);
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  std::vector<std::string> out;
  if (!ds.ok()) return out;
  ReadScratch scratch;
  for (size_t s = 0; s < (*ds)->num_shards(); ++s) {
    const ShardReader& r = (*ds)->shard(s);
    for (uint32_t i = 0; i < r.num_records(); ++i) {
      std::string_view p;
      EXPECT_TRUE(r.ReadRecord(i, &scratch, &p).ok());
      out.push_back(std::string(r.key(i)) + " " + std::to_string(r.label(i)) + " " +
                    std::string(p));
    }
  }
  return out;
}

// Issue 62: a tar of class tars (ILSVRC2012_img_train.tar's layout) whose
// outer members include "../n03.tar", an absolute "/elsewhere/n04.tar" and
// more strays. Each is an unusable member whatever it is named: skipped by
// name and counted (the whole tar is not refused), --strict fails on the
// first, nothing is written outside OUT, and no stray becomes a class
// (GNU tar writes "/n05.tar" as n05.tar, "tar -xP" at the root), also when
// strays come first. What is packed is exactly the tar of its two valid
// class tars.
TEST(ImageNetClassTars, StrayOuterMembersAreSkippedByNameWhateverTheyAreNamed) {
  TempDir dir;
  auto jpeg = [](int seed) { return MakeJpeg(SyntheticImage(40, 30, 3, seed), JpegFlavor::kRgb); };
  const std::string n01 = TarMember("a.JPEG", jpeg(1)) + TarMember("b.JPEG", jpeg(2)) + TarEnd();
  const std::string n02 = TarMember("c.JPEG", jpeg(3)) + TarEnd();
  const std::string other = TarMember("d.JPEG", jpeg(4)) + TarEnd();
  WriteFile(dir / "clean.tar", TarMember("n01.tar", n01) + TarMember("n02.tar", n02) + TarEnd());
  WriteFile(dir / "hostile.tar",
            TarMember("n01.tar", n01) + TarMember("../n03.tar", other) +
                TarMember("/elsewhere/n04.tar", other) + TarMember("/n05.tar", other) +
                TarMember("more/", "", '5') + TarMember("more/n06.tar", other) +
                TarMember("n07.tar/", "", '5') + TarMember("cover.JPEG", jpeg(5)) +
                TarMember("n08.tar.gz", other) + TarMember("README.txt", "one tar per class\n") +
                TarMember("evil.tar", "", '2', "/etc/passwd") +
                TarMember("n09.tar", "", '1', "n01.tar") + TarMember("n02.tar", n02) + TarEnd());
  ImageNetPackOptions o;
  o.src = dir / "clean.tar";
  o.out = dir / "clean";
  PackSummary sum;
  ASSERT_TRUE(PackImageNet(
                  o, [](const std::string&) {}, &sum)
                  .ok());

  o.src = dir / "hostile.tar";
  o.out = dir / "hostile";
  std::vector<std::string> lines;
  Status s = PackImageNet(
      o, [&](const std::string& m) { lines.push_back(m); }, &sum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string all = testing::JoinLines(lines);
  EXPECT_EQ(sum.packed, 3u);
  EXPECT_EQ(Count(sum, Unusable::kUnsafePath), 3u) << all;     // .., /elsewhere/.., /n05.tar
  EXPECT_EQ(Count(sum, Unusable::kOutsideLayout), 6u) << all;  // 2 folders, 4 files
  EXPECT_EQ(Count(sum, Unusable::kLink), 2u) << all;
  EXPECT_EQ(sum.skipped(), 11u) << all;
  for (const char* stray :
       {"hostile.tar:../n03.tar: a path outside the archive's tree (skipped)",
        "hostile.tar:/elsewhere/n04.tar: not a class tar, in a tar of class tars (ILSVRC's "
        "layout): an absolute path (tar -x writes it as elsewhere/n04.tar",
        "hostile.tar:/n05.tar: not a class tar", "hostile.tar:more/: not a class tar",
        "hostile.tar:more/n06.tar: not a class tar, in a tar of class tars (ILSVRC's layout): an "
        "archive below a folder",
        "hostile.tar:n07.tar/: not a class tar", "hostile.tar:cover.JPEG: not a class tar",
        "hostile.tar:n08.tar.gz: not a class tar", "hostile.tar:README.txt: not a class tar",
        "hostile.tar:evil.tar: not a regular file (a symbolic link",
        "hostile.tar:n09.tar: a hard link"}) {
    EXPECT_NE(all.find(stray), std::string::npos) << stray << "\n" << all;
  }
  EXPECT_EQ(ReadManifest(o.out)->classes, (std::vector<std::string>{"n01", "n02"}));
  EXPECT_EQ(Records(dir / "hostile"), Records(dir / "clean"));
  // Nothing was extracted anywhere: the folder holds what the test made.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"clean", "clean.tar", "hostile", "hostile.tar"}));

  o.out = dir / "strict";
  o.strict = true;
  s = PackImageNet(
      o, [](const std::string&) {}, &sum);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("--strict: " + dir / "hostile.tar:../n03.tar"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(Env::Default()->FileExists(o.out));

  // Strays first: an absolute name does not tell the layout (a class tar
  // after it does), so they are strays of the tar of class tars too.
  WriteFile(dir / "first.tar",
            TarMember("/elsewhere/n04.tar", other) + TarMember("/cover.JPEG", jpeg(5)) +
                TarMember("n09.tar", "", '1', "/cover.JPEG") + TarMember("n01.tar", n01) +
                TarMember("n02.tar", n02) + TarEnd());
  o.src = dir / "first.tar";
  o.out = dir / "first";
  o.strict = false;
  lines.clear();
  s = PackImageNet(
      o, [&](const std::string& m) { lines.push_back(m); }, &sum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Count(sum, Unusable::kUnsafePath), 2u) << testing::JoinLines(lines);
  EXPECT_EQ(Count(sum, Unusable::kLink), 1u) << testing::JoinLines(lines);
  EXPECT_EQ(sum.skipped(), 3u) << testing::JoinLines(lines);
  EXPECT_NE(testing::JoinLines(lines).find("first.tar:/cover.JPEG: not a class tar"),
            std::string::npos)
      << testing::JoinLines(lines);
  EXPECT_EQ(Records(dir / "first"), Records(dir / "clean"));

  // A tree whose every name is absolute (tar -cP's) is still a tree.
  WriteFile(dir / "abs_tree.tar", TarMember("/t/", "", '5') + TarMember("/t/n01/a.JPEG", jpeg(1)) +
                                      TarMember("/t/n02/c.JPEG", jpeg(3)) + TarEnd());
  o.src = dir / "abs_tree.tar";
  o.out = dir / "abs_tree";
  s = PackImageNet(
      o, [](const std::string&) {}, &sum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sum.packed, 2u);
  EXPECT_EQ(sum.skipped(), 0u);
  EXPECT_EQ(ReadManifest(o.out)->classes, (std::vector<std::string>{"n01", "n02"}));
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
