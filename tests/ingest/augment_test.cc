// bigMNIST: each transform on its own, determinism across thread counts,
// labels and counts, the HDF5 round trip (HDF5 import: hdf5_test.cc).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "base/random.h"
#include "ingest/bigmnist_distort.h"
#include "ingest/bigmnist_plan.h"
#include "ingest/idx_file.h"
#include "ingest/packer.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::RunCommand;
using testing::TempDir;

const std::string kAugment = SHARDKIT_AUGMENT_TOOL;
const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::vector<uint8_t> Digit(uint64_t seed) {
  std::vector<uint8_t> img(28 * 28);
  KeyedRng rng(seed);
  for (auto& p : img) p = static_cast<uint8_t>(rng.Below(256));
  return img;
}

SampleTransform Identity() {
  SampleTransform t;
  t.elastic_alpha = 0;
  return t;
}

std::vector<uint8_t> Apply(const std::vector<uint8_t>& src, const SampleTransform& t) {
  std::vector<uint8_t> out(src.size());
  AugmentScratch s;
  ApplyTransform(src.data(), 28, 28, t, out.data(), &s);
  return out;
}

TEST(AugmentTransform, IdentityLeavesTheImageUnchanged) {
  auto img = Digit(1);
  EXPECT_EQ(Apply(img, Identity()), img);
}

TEST(AugmentTransform, FlippingTwiceIsTheIdentity) {
  auto img = Digit(2);
  SampleTransform f = Identity();
  f.flip = true;
  auto once = Apply(img, f);
  EXPECT_NE(once, img);
  EXPECT_EQ(Apply(once, f), img);
  for (int y = 0; y < 28; ++y) EXPECT_EQ(once[y * 28], img[y * 28 + 27]);
}

TEST(AugmentTransform, NinetyDegreeRotationIsTransposePlusFlip) {
  auto img = Digit(3);
  SampleTransform r = Identity();
  r.angle_rad = M_PI / 2;
  auto rot = Apply(img, r);
  // Rotating by +90 degrees about the centre: out(x, y) = in(y, 27 - x).
  for (int y = 0; y < 28; ++y) {
    for (int x = 0; x < 28; ++x)
      ASSERT_EQ(rot[y * 28 + x], img[(27 - x) * 28 + y]) << x << "," << y;
  }
}

TEST(AugmentTransform, ElasticWithAlphaZeroIsTheIdentity) {
  auto img = Digit(4);
  SampleTransform e = Identity();
  e.elastic_key = 12345;
  e.elastic_alpha = 0;
  e.elastic_sigma = 4;
  EXPECT_EQ(Apply(img, e), img);
  e.elastic_alpha = 34;
  EXPECT_NE(Apply(img, e), img);
}

TEST(AugmentTransform, TranslationAndScaleMovePixels) {
  std::vector<uint8_t> img(28 * 28, 0);
  img[10 * 28 + 10] = 255;
  SampleTransform t = Identity();
  t.tx = 2;
  t.ty = -1;
  auto out = Apply(img, t);
  EXPECT_EQ(out[9 * 28 + 12], 255);
  t = Identity();
  t.scale = 2;  // about the centre (13.5, 13.5): 10 -> 6.5, between pixels
  out = Apply(img, t);
  EXPECT_EQ(out[10 * 28 + 10], 0);
}

TEST(AugmentTransform, ParametersDependOnlyOnTheirKey) {
  AugmentParams p;
  auto draw = [&](uint64_t seed, uint64_t index, uint64_t version, uint64_t copy) {
    return DrawTransform(p, {seed, index, version, copy}, 28, 28);
  };
  auto a = draw(1, 10, 2, 0), b = draw(1, 10, 2, 0), c = draw(2, 10, 2, 0), d = draw(1, 10, 3, 0),
       e = draw(1, 10, 2, 1);
  EXPECT_EQ(a.angle_rad, b.angle_rad);
  EXPECT_EQ(a.elastic_key, b.elastic_key);
  EXPECT_NE(a.angle_rad, c.angle_rad);
  EXPECT_NE(a.angle_rad, d.angle_rad);
  EXPECT_NE(a.angle_rad, e.angle_rad) << "another copy draws its own transform";
  EXPECT_NE(a.elastic_key, e.elastic_key);
  for (uint64_t i = 0; i < 1000; ++i) {
    auto t = draw(0, i, 0, i % 7);
    ASSERT_LE(std::abs(t.angle_rad), p.rotation_deg * M_PI / 180 + 1e-12);
    ASSERT_GE(t.scale, p.scale_min);
    ASSERT_LE(t.scale, p.scale_max);
    ASSERT_LE(std::abs(t.tx), p.translate_px);
  }
}

// Identical-copies output keeps the bytes it had before copies could differ:
// copy 0 draws from the stream keyed (seed, index, version, 0xB16).
TEST(AugmentTransform, CopyZeroDrawsTheStreamOfIdenticalCopies) {
  AugmentParams p;
  for (uint64_t i = 0; i < 100; ++i) {
    KeyedRng old(7, i, i % 6, 0xB16);
    const double angle = old.Uniform(-p.rotation_deg, p.rotation_deg) * M_PI / 180.0;
    EXPECT_EQ(DrawTransform(p, {7, i, i % 6, 0}, 28, 28).angle_rad, angle);
  }
}

// --- The rcc recipe: the source, then one transform per version ---------------

const char* ViewName(uint64_t v) {
  static const char* names[] = {"original", "rotation", "translation", "scale", "flip", "elastic"};
  return names[v];
}

// Which of t's transforms are active.
std::vector<std::string> Active(const SampleTransform& t) {
  std::vector<std::string> on;
  if (t.angle_rad != 0) on.push_back("rotation");
  if (t.tx != 0 || t.ty != 0) on.push_back("translation");
  if (t.scale != 1) on.push_back("scale");
  if (t.flip) on.push_back("flip");
  if (t.shear != 0) on.push_back("shear");
  if (t.elastic_alpha != 0) on.push_back("elastic");
  return on;
}

TEST(RccRecipe, EachVersionIsOneTransformWithinItsRange) {
  AugmentParams p;
  p.recipe = Recipe::kRcc;
  double max_angle = 0, min_scale = 2, max_scale = 0, max_shift = 0;
  std::set<double> shifts;
  for (uint64_t k = 0; k < 20000; ++k) {
    const uint64_t version = k % kRccVersions;
    const SampleKey key{k % 3, k / 6, version, k % 11};
    const SampleTransform t = DrawTransform(p, key, 28, 28);
    const std::vector<std::string> on = Active(t);
    if (version == 0) {
      ASSERT_TRUE(on.empty()) << "version 0 is the source unchanged, copy " << key.copy;
      continue;
    }
    // A translation of (0, 0) is a draw of the range; every other view is always active.
    if (version == 2 && on.empty()) continue;
    ASSERT_EQ(on, std::vector<std::string>{ViewName(version)}) << "key " << k;
    switch (static_cast<RccView>(version)) {
      case RccView::kRotation:
        ASSERT_LE(std::abs(t.angle_rad), 20 * M_PI / 180 + 1e-12);
        max_angle = std::max(max_angle, std::abs(t.angle_rad) * 180 / M_PI);
        break;
      case RccView::kTranslation:
        // torchvision: int(round(uniform(-0.2 * 28, 0.2 * 28))), whole pixels in -6..6.
        ASSERT_EQ(t.tx, std::round(t.tx));
        ASSERT_EQ(t.ty, std::round(t.ty));
        ASSERT_LE(std::max(std::abs(t.tx), std::abs(t.ty)), 6);
        max_shift = std::max({max_shift, std::abs(t.tx), std::abs(t.ty)});
        shifts.insert(t.tx);
        break;
      case RccView::kScale:
        ASSERT_GE(t.scale, 0.8);
        ASSERT_LE(t.scale, 1.2);
        min_scale = std::min(min_scale, t.scale);
        max_scale = std::max(max_scale, t.scale);
        break;
      case RccView::kFlip:
        break;
      case RccView::kElastic:
        ASSERT_EQ(t.elastic_alpha, 30);
        ASSERT_EQ(t.elastic_sigma, 5);
        ASSERT_EQ(t.elastic_style, ElasticStyle::kTorchvision);
        break;
      case RccView::kOriginal:
        break;
    }
  }
  // The draws reach across their ranges.
  EXPECT_GT(max_angle, 19.5);
  EXPECT_LT(min_scale, 0.81);
  EXPECT_GT(max_scale, 1.19);
  EXPECT_EQ(max_shift, 6);
  EXPECT_EQ(shifts.size(), 13u) << "every whole shift in -6..6";
}

// torchvision's ElasticTransform(alpha, sigma) on an H x W image: noise
// uniform(-1, 1), blurred by a Gaussian of int(8 sigma + 1) taps (made odd)
// over the noise reflected at the border, times alpha / size, added to a
// sampling grid whose [-1, 1] spans size pixels: alpha / 2 pixels per unit.
// Computed here directly in 2D, against ElasticDisplacement's separable pass.
TEST(RccRecipe, ElasticDisplacementIsTorchvisionsInPixels) {
  SampleTransform t;
  t.elastic_key = 99;
  t.elastic_alpha = 30;
  t.elastic_sigma = 5;
  t.elastic_style = ElasticStyle::kTorchvision;
  const int w = 28, h = 28, r = 20;  // int(8 * 5 + 1) = 41 taps
  std::vector<double> nx(w * h), ny(w * h);
  KeyedRng rng(t.elastic_key);
  for (int i = 0; i < w * h; ++i) {
    nx[i] = static_cast<float>(rng.Uniform(-1, 1));
    ny[i] = static_cast<float>(rng.Uniform(-1, 1));
  }
  auto reflect = [](int i, int n) { return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i; };
  double total = 0;
  for (int i = -r; i <= r; ++i) total += std::exp(-0.5 * i * i / 25.0);
  AugmentScratch s;
  std::vector<double> dx, dy;
  ElasticDisplacement(t, w, h, &s, &dx, &dy);
  double largest = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double ex = 0, ey = 0;
      for (int j = -r; j <= r; ++j) {
        for (int i = -r; i <= r; ++i) {
          const double g = std::exp(-0.5 * (i * i + j * j) / 25.0) / (total * total);
          const int at = reflect(y + j, h) * w + reflect(x + i, w);
          ex += g * nx[at];
          ey += g * ny[at];
        }
      }
      ASSERT_NEAR(dx[y * w + x], 30.0 / 2 * ex, 1e-4) << x << "," << y;
      ASSERT_NEAR(dy[y * w + x], 30.0 / 2 * ey, 1e-4) << x << "," << y;
      largest = std::max(largest, std::abs(dx[y * w + x]));
    }
  }
  EXPECT_GT(largest, 0.5) << "a visible deformation, not a rounding";
}

// The views of one source image, as the tool draws them.
std::vector<std::vector<uint8_t>> RccViews(const std::vector<uint8_t>& img, uint64_t copy) {
  AugmentParams p;
  p.recipe = Recipe::kRcc;
  std::vector<std::vector<uint8_t>> views;
  for (uint64_t v = 0; v < kRccVersions; ++v)
    views.push_back(Apply(img, DrawTransform(p, {5, 3, v, copy}, 28, 28)));
  return views;
}

std::vector<uint8_t> Mirrored(const std::vector<uint8_t>& img, int w = 28) {
  std::vector<uint8_t> out(img.size());
  for (size_t y = 0; y < img.size() / w; ++y) {
    for (int x = 0; x < w; ++x) out[y * w + x] = img[y * w + (w - 1 - x)];
  }
  return out;
}

// img moved right by tx and down by ty whole pixels, 0 where nothing comes from.
std::vector<uint8_t> Shifted(const std::vector<uint8_t>& img, int tx, int ty, int w = 28) {
  const int h = static_cast<int>(img.size()) / w;
  std::vector<uint8_t> out(img.size(), 0);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int sx = x - tx, sy = y - ty;
      if (sx >= 0 && sy >= 0 && sx < w && sy < h) out[y * w + x] = img[sy * w + sx];
    }
  }
  return out;
}

TEST(RccRecipe, ViewsChangeTheImageOnlyAsTheirTransformDoes) {
  const auto img = Digit(8);
  AugmentParams p;
  p.recipe = Recipe::kRcc;
  for (uint64_t copy = 0; copy < 20; ++copy) {
    const auto views = RccViews(img, copy);
    EXPECT_EQ(views[0], img) << "version 0 is the source, byte for byte";
    EXPECT_EQ(views[4], Mirrored(img)) << "the flip view is the mirrored source";
    const SampleTransform t = DrawTransform(p, {5, 3, 2, copy}, 28, 28);
    EXPECT_EQ(views[2], Shifted(img, static_cast<int>(t.tx), static_cast<int>(t.ty)));
    for (uint64_t v : {1, 3, 5}) EXPECT_NE(views[v], img) << ViewName(v) << " copy " << copy;
  }
}

// --interpolation nearest (torchvision's RandomAffine default): a rotated or
// scaled view takes only pixels of the source (or the zero outside it), where
// bilinear sampling blends them; shifts, flips and rcc's elastic view (whose
// torchvision default is bilinear) are the same either way.
TEST(RccRecipe, NearestSamplesSourcePixelsInTheAffineViewsOnly) {
  auto img = Digit(9);
  for (auto& px : img) px = px < 128 ? 0 : 200;  // two values: any other is a blend
  const std::set<uint8_t> values(img.begin(), img.end());
  AugmentParams bilinear, nearest;
  bilinear.recipe = nearest.recipe = Recipe::kRcc;
  nearest.interpolation = Interpolation::kNearest;
  int blended = 0;
  for (uint64_t copy = 0; copy < 20; ++copy) {
    for (uint64_t v = 0; v < kRccVersions; ++v) {
      const SampleTransform tb = DrawTransform(bilinear, {5, 3, v, copy}, 28, 28);
      const SampleTransform tn = DrawTransform(nearest, {5, 3, v, copy}, 28, 28);
      const auto b = Apply(img, tb), n = Apply(img, tn);
      if (v == 1 || v == 3) {  // rotation, scale
        EXPECT_TRUE(tn.nearest);
        for (uint8_t px : n) ASSERT_TRUE(px == 0 || values.count(px)) << ViewName(v);
        for (uint8_t px : b) blended += px != 0 && !values.count(px);
        EXPECT_NE(n, b) << ViewName(v) << " copy " << copy;
      } else {
        EXPECT_EQ(n, b) << ViewName(v) << " copy " << copy << ": not resampled, or bilinear";
      }
    }
  }
  EXPECT_GT(blended, 1000) << "bilinear blends pixels into new values";
  AugmentParams compose;
  compose.interpolation = Interpolation::kNearest;
  compose.elastic_alpha = 0;
  const auto n = Apply(img, DrawTransform(compose, {1, 2, 3, 0}, 28, 28));
  for (uint8_t px : n) ASSERT_TRUE(px == 0 || values.count(px)) << "compose";
}

// --- Parts and settings ---------------------------------------------------------

TEST(BigMnistPlan, ParsePartTakesIOfNAndRefusesTheRest) {
  auto p = ParsePart("2/4");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->index, 2u);
  EXPECT_EQ(p->count, 4u);
  EXPECT_TRUE(ParsePart("0/1").ok());
  EXPECT_TRUE(ParsePart("99999/100000").ok());
  const std::pair<const char*, const char*> bad[] = {
      {"4/4", "0..3"},
      {"0/0", "N is 0"},
      {"a/b", "not I/N"},
      {"2", "not I/N"},
      {"-1/4", "not I/N"},
      {"2/4x", "not I/N"},
      {" 2/4", "not I/N"},
      {"1/2/3", "not I/N"},
      {"", "not I/N"},
      {"9999999999/3", "not I/N"},
      {"0/100001", "at most 100000 parts"},
  };
  for (const auto& [text, why] : bad) {
    auto r = ParsePart(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
}

TEST(BigMnistPlan, PartsTileTheWholeRunsShardsInOrder) {
  for (uint64_t total : {1ull, 7ull, 1000ull, 72000000ull}) {
    for (uint64_t per_shard : {1ull, 3ull, 121ull, 324000ull}) {
      const uint64_t shards = (total + per_shard - 1) / per_shard;
      for (uint32_t count : {1u, 2u, 3u, 7u, 64u}) {
        if (count > shards) {
          auto r = SplitIntoParts({0, count}, total, per_shard);
          ASSERT_FALSE(r.ok());
          EXPECT_NE(r.status().message().find("more parts than"), std::string::npos);
          continue;
        }
        uint64_t next_shard = 0, next_record = 0;
        for (uint32_t i = 0; i < count; ++i) {
          auto r = SplitIntoParts({i, count}, total, per_shard);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          ASSERT_EQ(r->first_shard, next_shard);
          ASSERT_EQ(r->first_record, next_record);
          ASSERT_EQ(r->first_record, r->first_shard * per_shard) << "on the whole's boundaries";
          ASSERT_GE(r->shards(), shards / count);
          ASSERT_LE(r->shards(), shards / count + 1);
          next_shard = r->end_shard;
          next_record = r->end_record;
        }
        EXPECT_EQ(next_shard, shards);
        EXPECT_EQ(next_record, total);
      }
    }
  }
}

TEST(BigMnistPlan, SettingsDigestTellsSettingsApart) {
  const std::string a = SettingsDigest(R"({"seed":0})");
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a, SettingsDigest(R"({"seed":0})"));
  EXPECT_NE(a, SettingsDigest(R"({"seed":1})"));
  EXPECT_NE(SettingsDigest("12345678"), SettingsDigest("12345678 "));
}

class BigMnistCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Env::Default()->FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
      GTEST_SKIP() << "dataset-fashion-mnist not installed";
  }
  std::string Cmd(const std::string& out, const std::string& extra) {
    return kAugment + " bigmnist --src " + kFashion + " " + out +
           " --limit 300 --versions 3 --copies 4 " + extra;
  }
  TempDir dir_;
};

std::vector<std::string> ShardBytes(const std::string& dir) {
  std::vector<std::string> v;
  auto m = ReadManifest(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return v;
  for (const auto& s : m->shards) v.push_back(testing::ReadFile(JoinPath(dir, s.file)));
  return v;
}

TEST_F(BigMnistCli, SameSeedIsByteIdenticalWithOneOrTwoThreads) {
  auto r1 = RunCommand(Cmd(dir_ / "t1", "--threads 1 --shard-size 200000"));
  ASSERT_EQ(r1.exit_code, 0) << r1.out;
  auto r2 = RunCommand(Cmd(dir_ / "t2", "--threads 2 --shard-size 200000"));
  ASSERT_EQ(r2.exit_code, 0) << r2.out;
  auto a = ShardBytes(dir_ / "t1"), b = ShardBytes(dir_ / "t2");
  ASSERT_GT(a.size(), 1u);
  EXPECT_EQ(a, b);
  auto r3 = RunCommand(Cmd(dir_ / "s2", "--threads 2 --shard-size 200000 --seed 2"));
  ASSERT_EQ(r3.exit_code, 0) << r3.out;
  EXPECT_NE(a, ShardBytes(dir_ / "s2"));
}

// --block-size sets what a random read decompresses; the records are the same.
TEST_F(BigMnistCli, BlockSizeChangesTheBlocksNotTheRecords) {
  auto big = RunCommand(Cmd(dir_ / "big", "--shard-size 200000"));
  ASSERT_EQ(big.exit_code, 0) << big.out;
  auto small = RunCommand(Cmd(dir_ / "small", "--shard-size 200000 --block-size 8192"));
  ASSERT_EQ(small.exit_code, 0) << small.out;
  auto a = Dataset::Open(dir_ / "big"), b = Dataset::Open(dir_ / "small");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)->num_shards(), (*b)->num_shards());
  ReadScratch sa, sb;
  for (size_t s = 0; s < (*a)->num_shards(); ++s) {
    const ShardReader &ra = (*a)->shard(s), &rb = (*b)->shard(s);
    EXPECT_GT(rb.num_blocks(), ra.num_blocks());
    for (uint32_t b2 = 0; b2 < rb.num_blocks(); ++b2) EXPECT_LE(rb.block(b2).raw_size, 8192u + 784);
    ASSERT_EQ(ra.num_records(), rb.num_records());
    for (uint32_t i = 0; i < ra.num_records(); ++i) {
      std::string_view pa, pb;
      ASSERT_TRUE(ra.ReadRecord(i, &sa, &pa).ok());
      ASSERT_TRUE(rb.ReadRecord(i, &sb, &pb).ok());
      ASSERT_EQ(pa, pb) << i;
      ASSERT_EQ(ra.label(i), rb.label(i));
      ASSERT_EQ(ra.key(i), rb.key(i));
    }
  }
}

TEST_F(BigMnistCli, CountsLabelsAndSpreadOfCopies) {
  auto r = RunCommand(Cmd(dir_ / "out", "--shard-size 300000"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir_ / "out").exit_code, 0);
  auto ds = Dataset::Open(dir_ / "out");
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->num_records(), 300u * 3 * 4);
  // Labels follow their source image; every (index, version, copy) appears once.
  std::string labels = testing::ReadFile(kFashion + "/train-labels-idx1-ubyte.gz");
  auto src = RunCommand("zcat " + kFashion +
                        "/train-labels-idx1-ubyte.gz | head -c 308 | tail -c 300 | od -An -tu1 -v");
  std::vector<int> src_labels;
  std::istringstream in(src.out);
  for (int v; in >> v;) src_labels.push_back(v);
  ASSERT_EQ(src_labels.size(), 300u);
  std::set<std::string> keys;
  std::map<size_t, std::set<uint64_t>> copies_per_shard;
  for (size_t s = 0; s < (*ds)->num_shards(); ++s) {
    const ShardReader& sr = (*ds)->shard(s);
    for (uint32_t i = 0; i < sr.num_records(); ++i) {
      std::string key(sr.key(i));
      keys.insert(key);
      const uint64_t index = std::stoull(key.substr(0, key.find('/')));
      EXPECT_EQ(sr.record(i).label, src_labels[index]) << key;
      copies_per_shard[s].insert(std::stoull(key.substr(key.rfind('/') + 1)));
    }
  }
  EXPECT_EQ(keys.size(), 300u * 3 * 4);
  for (const auto& [s, copies] : copies_per_shard)
    EXPECT_EQ(copies.size(), 4u) << "shard " << s << " mixes copies";
}

TEST_F(BigMnistCli, Hdf5RoundTripShardsToHdf5ToShardsIsEqual) {
  ASSERT_EQ(RunCommand(Cmd(dir_ / "shards", "")).exit_code, 0);
  auto h = RunCommand(Cmd(dir_ / "big.h5", "--format hdf5"));
  ASSERT_EQ(h.exit_code, 0) << h.out;
  auto p = RunCommand(testing::PackTool() + " hdf5 " + dir_ / "big.h5" + " " +
                      dir_ / "back --images /images --labels /labels");
  ASSERT_EQ(p.exit_code, 0) << p.out;
  auto a = Dataset::Open(dir_ / "shards"), b = Dataset::Open(dir_ / "back");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)->num_records(), (*b)->num_records());
  ReadScratch sa, sb;
  for (uint64_t g = 0; g < (*a)->num_records(); ++g) {
    auto [s1, l1] = (*a)->Locate(g);
    auto [s2, l2] = (*b)->Locate(g);
    std::string_view pa, pb;
    ASSERT_TRUE((*a)->shard(s1).ReadRecord(l1, &sa, &pa).ok());
    std::string copy(pa);
    ASSERT_TRUE((*b)->shard(s2).ReadRecord(l2, &sb, &pb).ok());
    ASSERT_EQ(copy, std::string(pb)) << "record " << g;
    ASSERT_EQ((*a)->shard(s1).record(l1).label, (*b)->shard(s2).record(l2).label);
  }
}

TEST_F(BigMnistCli, KilledRunResumesKeepingFinishedShards) {
  // Many small shards written by one thread, so that a kill lands mid-way.
  auto command = [&](const std::string& out) {
    return kAugment + " bigmnist --src " + kFashion + " " + out +
           " --limit 3000 --versions 2 --copies 60 --shard-size 200000 --threads 1";
  };
  const std::string cmd = command(dir_ / "out");
  ASSERT_EQ(RunCommand(command(dir_ / "ref")).exit_code, 0);
  const int pid = testing::Spawn(cmd, dir_ / "log");
  // Shard 6 begun: shards 0 to 5 are finished (under their temporary names
  // until the manifest is written).
  const bool some_done = testing::WaitForFile(dir_ / "out/.shard-00006.sks.tmp", 600);
  kill(pid, SIGKILL);
  testing::WaitExit(pid, 60);
  ASSERT_TRUE(some_done) << testing::ReadFile(dir_ / "log");
  ASSERT_FALSE(Env::Default()->FileExists(dir_ / "out/manifest.json"))
      << "killed before the end: must not look complete";
  EXPECT_FALSE(Dataset::Open(dir_ / "out").ok());
  auto r = RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("kept from an interrupted run"), std::string::npos) << r.out;
  EXPECT_EQ(ShardBytes(dir_ / "out"), ShardBytes(dir_ / "ref"));
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir_ / "out").exit_code, 0);
}

// --- rcc, distinct copies and parts, through the tool -------------------------

std::string Rcc(const std::string& out, const std::string& extra) {
  return kAugment + " bigmnist --src " + kFashion + " " + out + " --recipe rcc --limit 300 " +
         extra;
}

// Fashion-MNIST's first n training images, 784 bytes each.
std::vector<std::vector<uint8_t>> SourceImages(size_t n) {
  auto ds = ReadIdxDataset(kFashion + "/train-images-idx3-ubyte.gz",
                           kFashion + "/train-labels-idx1-ubyte.gz");
  EXPECT_TRUE(ds.ok()) << ds.status().ToString();
  std::vector<std::vector<uint8_t>> v;
  for (size_t i = 0; ds.ok() && i < n; ++i) {
    const uint8_t* p = ds->images.data.data() + i * 784;
    v.emplace_back(p, p + 784);
  }
  return v;
}

struct Key {
  uint64_t index, version, copy;
  bool operator<(const Key& o) const {
    return std::tie(index, version, copy) < std::tie(o.index, o.version, o.copy);
  }
  bool operator==(const Key& o) const {
    return std::tie(index, version, copy) == std::tie(o.index, o.version, o.copy);
  }
};

// Every record of the shard files in `dir` (a dataset or a part), by key.
std::map<Key, std::vector<uint8_t>> Records(const std::string& dir) {
  std::map<Key, std::vector<uint8_t>> out;
  auto names = Env::Default()->ListDir(dir);
  EXPECT_TRUE(names.ok());
  for (const std::string& name : *names) {
    if (name.rfind("shard-", 0) != 0) continue;
    auto r = ShardReader::Open(JoinPath(dir, name));
    EXPECT_TRUE(r.ok()) << name;
    if (!r.ok()) continue;
    ReadScratch scratch;
    std::string_view block;
    int64_t block_index = -1;
    for (uint32_t i = 0; i < (*r)->num_records(); ++i) {
      // Block by block: ReadRecord would decompress a block once per record.
      if ((*r)->record(i).block != block_index) {
        block_index = (*r)->record(i).block;
        EXPECT_TRUE((*r)->ReadBlock(block_index, &scratch, &block).ok());
      }
      std::string_view payload;
      EXPECT_TRUE((*r)->RecordFromBlock(i, block, &payload).ok());
      Key k;
      std::sscanf(std::string((*r)->key(i)).c_str(), "%lu/%lu/%lu", &k.index, &k.version, &k.copy);
      out[k].assign(payload.begin(), payload.end());
    }
  }
  return out;
}

TEST_F(BigMnistCli, RccVersionsAreTheSourceThenOneTransformEach) {
  auto r = RunCommand(Rcc(dir_ / "out", "--copies 2 --distinct-copies"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto src = SourceImages(300);
  const auto records = Records(dir_ / "out");
  ASSERT_EQ(records.size(), 300u * 6 * 2);
  AugmentParams p;
  p.recipe = Recipe::kRcc;
  int unchanged[6] = {0, 0, 0, 0, 0, 0};
  for (const auto& [k, px] : records) {
    const auto& img = src[k.index];
    const SampleTransform t = DrawTransform(p, {0, k.index, k.version, k.copy}, 28, 28);
    if (k.version == 0) {
      ASSERT_EQ(px, img) << "version 0 is the source, byte for byte";
    }
    if (k.version == 4) {
      ASSERT_EQ(px, Mirrored(img)) << "the flip view is the mirrored source";
    }
    if (k.version == 2) {
      ASSERT_EQ(px, Shifted(img, static_cast<int>(t.tx), static_cast<int>(t.ty)))
          << "the translation view is the source moved by whole pixels";
    }
    ASSERT_EQ(px, Apply(img, t)) << k.index << "/" << k.version << "/" << k.copy;
    unchanged[k.version] += px == img;
  }
  // A few blank-edged images survive a small shift or a slight scale unchanged.
  for (int v : {1, 2, 3, 5}) EXPECT_LT(unchanged[v], 600 / 20) << ViewName(v);
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir_ / "out").exit_code, 0);
}

TEST_F(BigMnistCli, DistinctCopiesDifferAndAreByteIdenticalWithOneOrTwoThreads) {
  const std::string opts = "--copies 4 --distinct-copies --shard-size 100000";
  auto r1 = RunCommand(Rcc(dir_ / "t1", opts + " --threads 1"));
  ASSERT_EQ(r1.exit_code, 0) << r1.out;
  auto r2 = RunCommand(Rcc(dir_ / "t2", opts + " --threads 2"));
  ASSERT_EQ(r2.exit_code, 0) << r2.out;
  const auto a = ShardBytes(dir_ / "t1");
  ASSERT_GT(a.size(), 10u);
  EXPECT_EQ(a, ShardBytes(dir_ / "t2"));
  // One shard and two threads: its records are computed two at a time.
  auto one1 = RunCommand(Rcc(dir_ / "one1", "--copies 4 --distinct-copies --threads 1"));
  ASSERT_EQ(one1.exit_code, 0) << one1.out;
  auto one2 = RunCommand(Rcc(dir_ / "one2", "--copies 4 --distinct-copies --threads 2"));
  ASSERT_EQ(one2.exit_code, 0) << one2.out;
  ASSERT_EQ(ShardBytes(dir_ / "one1").size(), 1u);
  EXPECT_EQ(ShardBytes(dir_ / "one1"), ShardBytes(dir_ / "one2"));
  EXPECT_EQ(Records(dir_ / "one2"), Records(dir_ / "t1")) << "the same records, other shards";
  // Per (source, version): how many of its 4 copies are different images.
  std::map<std::pair<uint64_t, uint64_t>, std::set<std::vector<uint8_t>>> copies;
  for (const auto& [k, px] : Records(dir_ / "t1")) copies[{k.index, k.version}].insert(px);
  ASSERT_EQ(copies.size(), 300u * 6);
  int all_differ[6] = {0, 0, 0, 0, 0, 0};
  for (const auto& [iv, images] : copies) {
    if (iv.second == 0 || iv.second == 4) {
      EXPECT_EQ(images.size(), 1u) << "source and flip hold nothing random: copies are equal";
    }
    all_differ[iv.second] += images.size() == 4;
  }
  EXPECT_GE(all_differ[1], 295) << "rotation";
  EXPECT_GE(all_differ[2], 200) << "translation: 13 x 13 whole shifts, some repeat";
  EXPECT_GE(all_differ[3], 295) << "scale";
  EXPECT_GE(all_differ[5], 295) << "elastic";
  // Without the flag every copy is copy 0 of the flag's output.
  auto same = RunCommand(Rcc(dir_ / "same", "--copies 4 --shard-size 100000"));
  ASSERT_EQ(same.exit_code, 0) << same.out;
  const auto distinct = Records(dir_ / "t1");
  for (const auto& [k, px] : Records(dir_ / "same"))
    ASSERT_EQ(px, distinct.at({k.index, k.version, 0}));
}

TEST_F(BigMnistCli, ComposeDistinctCopiesDifferInEveryVersion) {
  auto r = RunCommand(Cmd(dir_ / "out", "--distinct-copies --threads 2"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::map<std::pair<uint64_t, uint64_t>, std::set<std::vector<uint8_t>>> copies;
  for (const auto& [k, px] : Records(dir_ / "out")) copies[{k.index, k.version}].insert(px);
  ASSERT_EQ(copies.size(), 300u * 3);
  for (const auto& [iv, images] : copies) EXPECT_EQ(images.size(), 4u) << iv.first;
}

// What part.json says of a part, and what the whole's manifest lists.
TEST_F(BigMnistCli, PartsReproduceTheOneProcessRunByteForByte) {
  const std::string opts = "--copies 4 --distinct-copies --shard-size 100000";
  auto whole = RunCommand(Rcc(dir_ / "whole", opts + " --threads 2"));
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  auto m = ReadManifest(dir_ / "whole");
  ASSERT_TRUE(m.ok());
  // 7,200 records, as many a shard as the Packer's rule puts there (123).
  const uint64_t per_shard = RecordsPerShard(100000, 784);
  const uint64_t shards = (7200 + per_shard - 1) / per_shard;
  ASSERT_EQ(m->shards.size(), shards);
  std::vector<ShardInfo> joined;
  std::string settings;
  uint64_t next_record = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    const std::string dir = dir_ / ("part" + std::to_string(i));
    auto r = RunCommand(Rcc(dir, opts + " --threads 1 --part " + std::to_string(i) + "/3"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_FALSE(Env::Default()->FileExists(JoinPath(dir, kManifestName)))
        << "a part is not a dataset";
    EXPECT_FALSE(Dataset::Open(dir).ok());
    auto part = ReadPartManifest(dir);
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    EXPECT_EQ(part->part.index, i);
    EXPECT_EQ(part->part.count, 3u);
    EXPECT_EQ(part->part.first_record, next_record);
    EXPECT_EQ(part->part.first_shard, joined.size());
    EXPECT_EQ(part->part.total_records, m->records());
    EXPECT_EQ(part->record.shape, m->record.shape);
    EXPECT_EQ(part->classes, m->classes);
    // Merge takes part 0's created_by for the whole: it describes the whole.
    EXPECT_NE(part->created_by.find("\"samples\":7200"), std::string::npos) << part->created_by;
    if (i == 0) settings = part->part.settings;
    EXPECT_EQ(part->part.settings, settings) << "same settings, whatever the threads";
    EXPECT_EQ(part->shards.size(), (i + 1) * shards / 3 - i * shards / 3);
    for (const ShardInfo& s : part->shards) {
      EXPECT_EQ(
          RunCommand("cmp " + JoinPath(dir, s.file) + " " + dir_ / "whole/" + s.file).exit_code, 0)
          << s.file;
      joined.push_back(s);
    }
    next_record += part->records();
  }
  EXPECT_EQ(settings.size(), 32u);
  ASSERT_EQ(joined.size(), m->shards.size());
  for (size_t i = 0; i < joined.size(); ++i) {
    EXPECT_EQ(joined[i].file, m->shards[i].file);
    EXPECT_EQ(joined[i].records, m->shards[i].records);
    EXPECT_EQ(joined[i].bytes, m->shards[i].bytes);
    EXPECT_EQ(joined[i].raw_bytes, m->shards[i].raw_bytes);
    EXPECT_EQ(joined[i].crc32c, m->shards[i].crc32c);
  }
  // Other settings, another digest: such parts do not merge.
  auto other = RunCommand(Rcc(dir_ / "other", opts + " --seed 1 --part 0/3"));
  ASSERT_EQ(other.exit_code, 0) << other.out;
  auto o = ReadPartManifest(dir_ / "other");
  ASSERT_TRUE(o.ok());
  EXPECT_NE(o->part.settings, settings);
  // A finished part is replaced only with --force.
  auto again = RunCommand(Rcc(dir_ / "part0", opts + " --part 0/3"));
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.out.find("already holds a part"), std::string::npos) << again.out;
  EXPECT_EQ(RunCommand(Rcc(dir_ / "part0", opts + " --part 0/3 --force")).exit_code, 0);
}

TEST_F(BigMnistCli, BadOptionsExitTwoWithOneLineNamingThem) {
  const std::string opts = "--copies 4 --shard-size 100000";  // 59 shards of 123 records
  const std::pair<std::string, std::string> cases[] = {
      {"--part 3/3", "--part"},
      {"--part 0/0", "--part"},
      {"--part two/4", "--part"},
      {"--part 1", "--part"},
      {"--part -1/4", "--part"},
      {"--part 0/60", "more parts than the output has shards (59"},
      {"--part 0/2 --format hdf5", "--part"},
      {"--rotation 10", "--rotation"},
      {"--elastic-alpha 3", "--elastic-alpha"},
      {"--versions 5", "--versions 5"},
      {"--block-size 100", "--block-size"},
      {"--block-size 1e12", "--block-size"},
      {"--block-size -4096", "--block-size"},
  };
  for (const auto& [extra, expect] : cases) {
    auto r = RunCommand(Rcc(dir_ / "bad", opts + " " + extra));
    EXPECT_EQ(r.exit_code, 2) << extra << ": " << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << extra << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << extra << ": " << r.out;
    EXPECT_FALSE(Env::Default()->FileExists(dir_ / "bad/part.json"));
  }
}

}  // namespace
}  // namespace shardkit
