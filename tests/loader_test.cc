// Loader scenarios: partitions, determinism across worker counts, resume,
// corrupt records under both policies, errors and destruction mid-epoch, and
// the JPEG transforms against a naive reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "loader/loader.h"
#include "loader/transforms.h"
#include "shard/shard.h"
#include "tests/test_util.h"

namespace shardkit {
namespace {

using testing::JpegFlavor;
using testing::MakeJpeg;
using testing::SyntheticImage;
using testing::TempDir;

// A raw dataset whose record i is 4x3x1 bytes all equal to (i % 251), label i % 10.
void WriteRawDataset(const std::string& dir, int n, uint64_t shard_size = 1 << 20,
                     uint32_t block = 256) {
  DatasetWriterOptions o;
  o.shard_size = shard_size;
  o.shard.block_size = block;
  o.shard.kind = format::RecordKind::kRawU8;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < n; ++i) {
    std::string payload(12, static_cast<char>(i % 251));
    payload[0] = static_cast<char>(i & 0xFF);
    payload[1] = static_cast<char>((i >> 8) & 0xFF);
    ASSERT_TRUE((*w)->Add(payload, i % 10, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {4, 3, 1};
  for (int c = 0; c < 10; ++c) m.classes.push_back(std::to_string(c));
  ASSERT_TRUE((*w)->Finish(m).ok());
}

struct Seen {
  std::vector<std::vector<uint64_t>> ids;  // per batch
  std::vector<std::string> bytes;          // per batch
};

// Opens a loader on dir and starts epoch (at batch `start`); nullptr, with
// the failure recorded, if either step fails.
std::unique_ptr<Loader> Started(const std::string& dir, const LoaderOptions& o, uint64_t epoch = 0,
                                uint64_t start = 0) {
  auto l = Loader::Open(dir, o);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return nullptr;
  Status s = (*l)->StartEpoch(epoch, start);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return s.ok() ? std::move(*l) : nullptr;
}

Seen ReadEpoch(const std::string& dir, LoaderOptions o, uint64_t epoch, uint64_t start = 0) {
  auto l = Started(dir, o, epoch, start);
  Seen seen;
  if (l == nullptr) return seen;
  for (;;) {
    const Batch* b = nullptr;
    Status s = l->Next(&b);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok() || b == nullptr) break;
    seen.ids.emplace_back(b->sample_ids, b->sample_ids + b->size);
    seen.bytes.emplace_back(reinterpret_cast<const char*>(b->data), b->sample_bytes() * b->size);
    for (int i = 0; i < b->size; ++i)
      EXPECT_EQ(b->labels[i], static_cast<int32_t>(b->sample_ids[i] % 10));
  }
  return seen;
}

TEST(PermutationTest, IsABijectionForManySizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 10ull, 255ull, 256ull, 1000ull, 4097ull}) {
    KeyedPermutation p(n, 42, 7);
    std::vector<bool> hit(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t v = p(i);
      ASSERT_LT(v, n);
      EXPECT_FALSE(hit[v]) << "n=" << n;
      hit[v] = true;
    }
  }
}

TEST(SamplerTest, BlockLocalIsAPermutationThatKeepsWindowsTogether) {
  std::vector<uint32_t> blocks = {10, 7, 10, 3, 10, 10, 1, 9};
  EpochSampler s(blocks, ShuffleMode::kBlockLocal, 5, 1, 2);
  std::set<uint64_t> all;
  for (uint64_t p = 0; p < s.size(); ++p) all.insert(s.RecordAt(p));
  EXPECT_EQ(all.size(), s.size());
  EXPECT_EQ(*all.rbegin(), s.size() - 1);
  EpochSampler e2(blocks, ShuffleMode::kBlockLocal, 5, 2, 2);
  bool differs = false;
  for (uint64_t p = 0; p < s.size(); ++p) differs |= s.RecordAt(p) != e2.RecordAt(p);
  EXPECT_TRUE(differs) << "epochs must shuffle differently";
}

TEST(PartitionTest, EqualBatchesDisjointAndCovering) {
  for (uint64_t n : {1ull, 7ull, 10ull, 64ull, 101ull, 1000ull}) {
    for (int world : {1, 2, 3, 4, 8}) {
      for (uint64_t batch : {1ull, 3ull, 8ull, 32ull}) {
        for (bool drop_last : {false, true}) {
          std::vector<Partition> parts;
          bool any_error = false;
          for (int r = 0; r < world; ++r) {
            auto p =
                Partition::Make(n, r, world, batch, drop_last, /*strided=*/(n + world) % 2 == 0);
            if (!p.ok()) {
              any_error = true;
              break;
            }
            parts.push_back(*p);
          }
          if (any_error) {
            // Only when some rank would get no batch at all.
            EXPECT_TRUE((drop_last ? n / world : (n + world - 1) / world) <
                        (drop_last ? batch : 1));
            continue;
          }
          std::multiset<uint64_t> positions;
          for (const Partition& p : parts) {
            EXPECT_EQ(p.batches, parts[0].batches) << "every rank the same number of batches";
            uint64_t total = 0;
            for (uint64_t b = 0; b < p.batches; ++b) {
              EXPECT_EQ(p.BatchLength(b), parts[0].BatchLength(b));
              if (drop_last) {
                EXPECT_EQ(p.BatchLength(b), batch);
              }
              for (uint64_t i = 0; i < p.BatchLength(b); ++i)
                positions.insert(p.Position(b * batch + i));
              total += p.BatchLength(b);
            }
          }
          std::set<uint64_t> distinct(positions.begin(), positions.end());
          if (drop_last) {
            EXPECT_EQ(distinct.size(), positions.size()) << "disjoint when dropping";
          } else {
            EXPECT_EQ(distinct.size(), n) << "covering when padding: n=" << n << " world=" << world;
            EXPECT_LT(positions.size() - n, static_cast<uint64_t>(world))
                << "padding is less than one per rank";
            uint64_t real = 0;
            for (const Partition& p : parts) {
              for (uint64_t b = 0; b < p.batches; ++b) real += p.BatchRealLength(b);
            }
            EXPECT_EQ(real, n) << "non-padding samples count each record once";
          }
        }
      }
    }
  }
}

TEST(LoaderTest, RanksAreDisjointAndCoverTheDataset) {
  TempDir dir;
  WriteRawDataset(dir.path(), 1000, 4096);
  std::multiset<uint64_t> ids;
  const int world = 3;
  uint64_t batches = 0;
  for (int r = 0; r < world; ++r) {
    LoaderOptions o;
    o.rank = r;
    o.world_size = world;
    o.batch_size = 16;
    o.workers = 2;
    Seen s = ReadEpoch(dir.path(), o, 0);
    if (r == 0) batches = s.ids.size();
    EXPECT_EQ(s.ids.size(), batches);
    for (auto& b : s.ids) ids.insert(b.begin(), b.end());
  }
  std::set<uint64_t> distinct(ids.begin(), ids.end());
  EXPECT_EQ(distinct.size(), 1000u);
  EXPECT_EQ(ids.size(), 1002u);  // ceil(1000 / 3) * 3: two padded samples
}

TEST(LoaderTest, StridedRanksTogetherEqualOneRankWithTheWholeBatch) {
  TempDir dir;
  WriteRawDataset(dir.path(), 100, 4096);
  LoaderOptions o;
  o.batch_size = 20;
  o.seed = 4;
  Seen one = ReadEpoch(dir.path(), o, 1);
  o.batch_size = 10;
  o.world_size = 2;
  o.rank = 0;
  Seen r0 = ReadEpoch(dir.path(), o, 1);
  o.rank = 1;
  Seen r1 = ReadEpoch(dir.path(), o, 1);
  ASSERT_EQ(one.ids.size(), r0.ids.size());
  for (size_t b = 0; b < one.ids.size(); ++b) {
    std::multiset<uint64_t> a(one.ids[b].begin(), one.ids[b].end()),
        u(r0.ids[b].begin(), r0.ids[b].end());
    u.insert(r1.ids[b].begin(), r1.ids[b].end());
    EXPECT_EQ(a, u) << "batch " << b;
  }
}

TEST(LoaderTest, BatchesDoNotDependOnWorkerCount) {
  TempDir dir;
  WriteRawDataset(dir.path(), 777, 4096, 128);
  for (ShuffleChoice mode :
       {ShuffleChoice::kFull, ShuffleChoice::kBlockLocal, ShuffleChoice::kNone}) {
    LoaderOptions o;
    o.batch_size = 10;
    o.shuffle = mode;
    o.seed = 3;
    o.workers = 1;
    Seen one = ReadEpoch(dir.path(), o, 2);
    o.workers = 2;
    o.prefetch = 1;
    Seen two = ReadEpoch(dir.path(), o, 2);
    o.workers = 3;
    o.prefetch = 7;
    Seen three = ReadEpoch(dir.path(), o, 2);
    o.mmap = false;  // pread instead of mappings: the same bytes
    Seen unmapped = ReadEpoch(dir.path(), o, 2);
    EXPECT_EQ(one.ids, two.ids);
    EXPECT_EQ(one.bytes, two.bytes);
    EXPECT_EQ(one.ids, three.ids);
    EXPECT_EQ(one.bytes, unmapped.bytes);
    EXPECT_EQ(one.ids.size(), 78u);
  }
}

TEST(LoaderTest, EpochsAndSeedsShuffleDifferently) {
  TempDir dir;
  WriteRawDataset(dir.path(), 300);
  LoaderOptions o;
  o.batch_size = 300;
  Seen e0 = ReadEpoch(dir.path(), o, 0), e1 = ReadEpoch(dir.path(), o, 1);
  o.seed = 9;
  Seen s9 = ReadEpoch(dir.path(), o, 0);
  EXPECT_NE(e0.ids, e1.ids);
  EXPECT_NE(e0.ids, s9.ids);
  auto sorted = e0.ids[0];
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < 300; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(LoaderTest, ResumeEqualsUninterrupted) {
  TempDir dir;
  WriteRawDataset(dir.path(), 500, 4096);
  LoaderOptions o;
  o.batch_size = 16;
  o.workers = 2;
  o.rank = 1;
  o.world_size = 2;
  Seen full = ReadEpoch(dir.path(), o, 4);
  Seen tail = ReadEpoch(dir.path(), o, 4, 7);
  ASSERT_EQ(tail.ids.size(), full.ids.size() - 7);
  for (size_t b = 0; b < tail.ids.size(); ++b) {
    EXPECT_EQ(tail.ids[b], full.ids[b + 7]);
    EXPECT_EQ(tail.bytes[b], full.bytes[b + 7]);
  }
}

TEST(LoaderTest, NchwAndNhwcLayouts) {
  TempDir dir;
  // 2x2x3 records: pixel p channel c = 10 * p + c.
  DatasetWriterOptions wo;
  auto w = DatasetWriter::Create(dir.path(), wo);
  ASSERT_TRUE(w.ok());
  std::string rec;
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c < 3; ++c) rec.push_back(static_cast<char>(10 * p + c));
  }
  ASSERT_TRUE((*w)->Add(rec, 0, "a").ok());
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {2, 2, 3};
  ASSERT_TRUE((*w)->Finish(m).ok());
  LoaderOptions o;
  o.batch_size = 1;
  o.layout = Layout::kNHWC;
  EXPECT_EQ(ReadEpoch(dir.path(), o, 0).bytes[0], rec);
  o.layout = Layout::kNCHW;
  std::string chw = ReadEpoch(dir.path(), o, 0).bytes[0];
  EXPECT_EQ(static_cast<uint8_t>(chw[0]), 0);
  EXPECT_EQ(static_cast<uint8_t>(chw[1]), 10);
  EXPECT_EQ(static_cast<uint8_t>(chw[4]), 1);
  EXPECT_EQ(static_cast<uint8_t>(chw[11]), 32);
}

// Flips one payload byte of record `victim` in a stored single-shard dataset.
void CorruptRecord(const std::string& dir, uint32_t victim) {
  auto r = ShardReader::Open(dir + "/shard-00000.sks");
  ASSERT_TRUE(r.ok());
  const auto& e = (*r)->record(victim);
  const uint64_t off = (*r)->block(e.block).offset + e.offset + 2;
  std::string b = testing::ReadFile(dir + "/shard-00000.sks");
  b[off] ^= 0x5A;
  testing::WriteFile(dir + "/shard-00000.sks", b);
}

void WriteStoredRawDataset(const std::string& dir, int n) {
  DatasetWriterOptions o;
  o.shard.compression = CompressionMode::kStore;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE((*w)->Add(std::string(12, char(i)), i % 10, std::to_string(i)).ok());
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {4, 3, 1};
  ASSERT_TRUE((*w)->Finish(m).ok());
}

TEST(LoaderTest, CorruptRecordFailsWithShardAndRecordByDefault) {
  TempDir dir;
  WriteStoredRawDataset(dir.path(), 100);
  CorruptRecord(dir.path(), 42);
  LoaderOptions o;
  o.batch_size = 10;
  o.workers = 2;
  auto l = Started(dir.path(), o);
  ASSERT_NE(l, nullptr);
  Status err;
  for (int i = 0; i < 20 && err.ok(); ++i) {
    const Batch* b;
    err = l->Next(&b);
    if (err.ok() && b == nullptr) break;
  }
  ASSERT_FALSE(err.ok()) << "the worker's error must reach the consumer";
  EXPECT_TRUE(err.IsCorruption());
  EXPECT_NE(err.message().find("shard-00000.sks: record 42"), std::string::npos) << err.message();
  const Batch* b;
  EXPECT_FALSE(l->Next(&b).ok()) << "the error is sticky until StartEpoch";
}

TEST(LoaderTest, CorruptRecordsAreSkippedCountedAndReplaced) {
  TempDir dir;
  WriteStoredRawDataset(dir.path(), 100);
  CorruptRecord(dir.path(), 42);
  CorruptRecord(dir.path(), 7);
  LoaderOptions o;
  o.batch_size = 10;
  o.workers = 2;
  o.corrupt_policy = CorruptPolicy::kSkip;
  o.skip_budget = 5;
  auto l = Started(dir.path(), o);
  ASSERT_NE(l, nullptr);
  uint64_t samples = 0;
  std::set<uint64_t> ids;
  for (;;) {
    const Batch* b;
    Status s = l->Next(&b);
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (b == nullptr) break;
    samples += b->size;
    ids.insert(b->sample_ids, b->sample_ids + b->size);
  }
  EXPECT_EQ(samples, 100u) << "skipped samples are replaced, batches stay full";
  EXPECT_EQ(ids.count(42), 0u);
  EXPECT_EQ(ids.count(7), 0u);
  LoaderStats st = l->stats();
  EXPECT_EQ(st.corrupt_skipped, 2u);
  ASSERT_EQ(st.corrupt_messages.size(), 2u);
}

TEST(LoaderTest, SkipBudgetExceededIsAnError) {
  TempDir dir;
  WriteStoredRawDataset(dir.path(), 100);
  for (uint32_t v : {3u, 13u, 23u, 33u}) CorruptRecord(dir.path(), v);
  LoaderOptions o;
  o.batch_size = 100;
  o.shuffle = ShuffleChoice::kNone;
  o.corrupt_policy = CorruptPolicy::kSkip;
  o.skip_budget = 2;
  auto l = Started(dir.path(), o);
  ASSERT_NE(l, nullptr);
  const Batch* b;
  Status s = l->Next(&b);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("skip budget"), std::string::npos) << s.message();
}

TEST(LoaderTest, DestructionMidEpochReturns) {
  TempDir dir;
  WriteRawDataset(dir.path(), 5000);
  for (int workers : {1, 2, 4}) {
    LoaderOptions o;
    o.batch_size = 8;
    o.workers = workers;
    o.prefetch = 2;
    auto l = Started(dir.path(), o);
    ASSERT_NE(l, nullptr);
    const Batch* b;
    ASSERT_TRUE(l->Next(&b).ok());
    // The producer is now blocked on a full ring; destroying must not hang.
    l.reset();
  }
}

TEST(LoaderTest, RestartingAnEpochMidwayWorks) {
  TempDir dir;
  WriteRawDataset(dir.path(), 200);
  LoaderOptions o;
  o.batch_size = 10;
  o.workers = 2;
  auto l = Started(dir.path(), o);
  ASSERT_NE(l, nullptr);
  const Batch* b;
  ASSERT_TRUE(l->Next(&b).ok());
  const uint64_t first = b->sample_ids[0];
  ASSERT_TRUE(l->StartEpoch(0).ok());
  ASSERT_TRUE(l->Next(&b).ok());
  EXPECT_EQ(b->sample_ids[0], first);
  EXPECT_EQ(b->index, 0u);
}

TEST(LoaderTest, MoreRanksThanRecordsIsAClearError) {
  TempDir dir;
  WriteRawDataset(dir.path(), 3);
  LoaderOptions o;
  o.world_size = 4;
  o.rank = 3;
  o.drop_last = true;
  o.batch_size = 1;
  auto l = Loader::Open(dir.path(), o);
  EXPECT_TRUE(l.status().IsInvalidArgument());
  EXPECT_NE(l.status().message().find("no batch"), std::string::npos);
}

// --- JPEG transforms ------------------------------------------------------

// Decode at full size, crop the region and resize naively (bilinear sampling
// at pixel centres, no DCT scaling): the reference a transform must match.
Image NaiveCropResize(const Image& full, const RectF& r, int size, bool flip) {
  Image out;
  out.Resize(size, size, 3);
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      double sx = r.x + (x + 0.5) * r.w / size - 0.5, sy = r.y + (y + 0.5) * r.h / size - 0.5;
      sx = std::clamp(sx, 0.0, full.width - 1.0);
      sy = std::clamp(sy, 0.0, full.height - 1.0);
      int x0 = int(sx), y0 = int(sy);
      int x1 = std::min(x0 + 1, full.width - 1), y1 = std::min(y0 + 1, full.height - 1);
      double fx = sx - x0, fy = sy - y0;
      for (int c = 0; c < 3; ++c) {
        auto px = [&](int xx, int yy) {
          return full.pixels[(size_t(yy) * full.width + xx) * 3 + c];
        };
        double v = (1 - fy) * ((1 - fx) * px(x0, y0) + fx * px(x1, y0)) +
                   fy * ((1 - fx) * px(x0, y1) + fx * px(x1, y1));
        int ox = flip ? size - 1 - x : x;
        out.pixels[(size_t(y) * size + ox) * 3 + c] = static_cast<uint8_t>(std::lround(v));
      }
    }
  }
  return out;
}

double MeanAbsDiff(const uint8_t* a, const uint8_t* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / n;
}

// The planar (CHW) resampler path shares no kernel with the interleaved
// (HWC) one past the first pass's arithmetic: they must agree to the bit, for
// widths that are and are not multiples of the SIMD tiles, with and without
// flip, for 3 channels and 1; and the interleaved one must match the naive
// reference on a smooth image.
TEST(ResampleTest, PlanarAndInterleavedAgreeToTheBit) {
  int cases = 0;
  for (int c : {3, 1}) {
    for (int trial = 0; trial < 24; ++trial) {
      const int w = 9 + (trial * 37) % 300, h = 7 + (trial * 53) % 260;
      const int ow = 1 + (trial * 13) % 90, oh = 1 + (trial * 29) % 80;
      Image img = SyntheticImage(w, h, 3, 500 + trial);
      if (c == 1) {
        Image g;
        g.Resize(w, h, 1);
        for (size_t p = 0; p < g.pixels.size(); ++p) g.pixels[p] = img.pixels[3 * p + 1];
        img = g;
      }
      const RectF r{w * 0.07, h * 0.11, w * 0.83, h * 0.8};
      const bool flip = trial & 1;
      ResampleScratch s;
      std::vector<uint8_t> hwc(size_t(ow) * oh * c), chw(hwc.size()), want(hwc.size());
      Resample(img, r, ow, oh, flip, hwc.data(), &s, PixelLayout::kHWC);
      Resample(img, r, ow, oh, flip, chw.data(), &s, PixelLayout::kCHW);
      HwcToChw(hwc.data(), ow, oh, c, want.data());
      ASSERT_EQ(chw, want) << c << " channels, " << w << "x" << h << " -> " << ow << "x" << oh
                           << " flip " << flip;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 48);
  Image img = SyntheticImage(320, 240, 3, 9);
  const RectF r{20, 10, 250, 200};
  for (bool flip : {false, true}) {
    ResampleScratch s;
    std::vector<uint8_t> out(64 * 64 * 3);
    Resample(img, r, 64, 64, flip, out.data(), &s, PixelLayout::kHWC);
    Image ref = NaiveCropResize(img, r, 64, flip);
    EXPECT_LT(MeanAbsDiff(out.data(), ref.pixels.data(), out.size()), 6.0) << "flip " << flip;
  }
}

class JpegLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatasetWriterOptions o;
    o.shard.compression = CompressionMode::kStore;
    o.shard.kind = format::RecordKind::kJpeg;
    auto w = DatasetWriter::Create(dir_.path(), o);
    ASSERT_TRUE(w.ok());
    const int dims[][2] = {{500, 375}, {375, 500}, {640, 480}, {300, 300}, {1000, 200}, {120, 90}};
    for (int i = 0; i < 6; ++i) {
      Image img = SyntheticImage(dims[i][0], dims[i][1], 3, 100 + i);
      std::string jpeg = MakeJpeg(img, i == 3 ? JpegFlavor::kGray : JpegFlavor::kRgb, 95);
      JpegDecoder dec;
      DecodedRegion full;
      ASSERT_TRUE(dec.Decode(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(),
                             DecodeRequest{}, &full)
                      .ok());
      full_.push_back(full.image);
      ASSERT_TRUE((*w)->Add(jpeg, i, "img" + std::to_string(i)).ok());
    }
    Manifest m;
    m.record.kind = format::RecordKind::kJpeg;
    m.classes = {"a", "b", "c", "d", "e", "f"};
    ASSERT_TRUE((*w)->Finish(m).ok());
  }
  TempDir dir_;
  std::vector<Image> full_;
};

TEST_F(JpegLoaderTest, TrainTransformMatchesFullDecodeCropResize) {
  LoaderOptions o;
  o.batch_size = 6;
  o.workers = 2;
  o.seed = 11;
  o.layout = Layout::kNHWC;
  o.transform.kind = TransformKind::kTrain;
  o.transform.size = 64;
  o.shuffle = ShuffleChoice::kNone;
  for (uint64_t epoch = 0; epoch < 4; ++epoch) {
    auto l = Started(dir_.path(), o, epoch);
    ASSERT_NE(l, nullptr);
    const Batch* b;
    ASSERT_TRUE(l->Next(&b).ok());
    ASSERT_EQ(b->size, 6);
    for (int i = 0; i < 6; ++i) {
      const Image& full = full_[b->sample_ids[i]];
      KeyedRng rng(o.seed, epoch, i, 0xA06);  // the loader's key: (seed, epoch, position)
      CropDecision crop = RandomResizedCrop(full.width, full.height, o.transform, &rng);
      Image ref = NaiveCropResize(full, crop.rect, 64, crop.flip);
      const double diff =
          MeanAbsDiff(b->data + i * b->sample_bytes(), ref.pixels.data(), ref.pixels.size());
      EXPECT_LT(diff, 6.0) << "epoch " << epoch << " image " << i << " crop " << crop.rect.x << ","
                           << crop.rect.y << " " << crop.rect.w << "x" << crop.rect.h;
    }
  }
}

TEST_F(JpegLoaderTest, ValTransformIsACenterCropOfTheResizedImage) {
  LoaderOptions o;
  o.batch_size = 6;
  o.layout = Layout::kNHWC;
  o.transform.kind = TransformKind::kVal;
  o.transform.size = 56;
  o.shuffle = ShuffleChoice::kNone;
  auto l = Started(dir_.path(), o);
  ASSERT_NE(l, nullptr);
  const Batch* b;
  ASSERT_TRUE(l->Next(&b).ok());
  for (int i = 0; i < 6; ++i) {
    const Image& full = full_[i];
    CropDecision crop = CenterCrop(full.width, full.height, o.transform);
    Image ref = NaiveCropResize(full, crop.rect, 56, false);
    EXPECT_LT(MeanAbsDiff(b->data + i * b->sample_bytes(), ref.pixels.data(), ref.pixels.size()),
              6.0)
        << i;
  }
}

TEST(TransformGeometry, CenterCropMatchesTorchvision) {
  TransformParams p;
  p.kind = TransformKind::kVal;
  p.size = 224;
  // 500x375: Resize(256) -> 341x256, CenterCrop(224) -> left round(58.5)=58 (banker's: 58), top 16.
  CropDecision d = CenterCrop(500, 375, p);
  const double s = 375.0 / 256;
  EXPECT_NEAR(d.rect.w, 224 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(d.rect.h, 224 * s, 1e-9);
  EXPECT_NEAR(d.rect.y, 16 * s, 1e-9);
  EXPECT_NEAR(d.rect.x, 58 * 500.0 / 341, 1e-9);
  // Square image: the crop is centered and 224/256 of the side.
  d = CenterCrop(512, 512, p);
  EXPECT_NEAR(d.rect.w, 448, 1e-9);
  EXPECT_NEAR(d.rect.x, 32, 1e-9);
}

TEST(TransformGeometry, CenterCropRoundsOddMarginsHalfToEvenAsPythonDoes) {
  // torchvision: crop_top = int(round((H - 224) / 2.0)) with Python's round,
  // so a margin of x.5 goes to the even neighbour: 58.5 -> 58, 79.5 -> 80.
  struct Case {
    int w, h;       // source
    int nw, nh;     // after Resize(256): short side 256, long side truncated
    int left, top;  // torchvision's CenterCrop(224) offsets in the resized image
  } cases[] = {
      {500, 375, 341, 256, 58, 16},                                // 58.5 -> 58
      {375, 500, 256, 341, 16, 58}, {640, 427, 383, 256, 80, 16},  // 79.5 -> 80
      {427, 640, 256, 383, 16, 80}, {333, 500, 256, 384, 16, 80},  // even margins
      {257, 256, 257, 256, 16, 16},                                // 16.5 -> 16
      {259, 256, 259, 256, 18, 16},                                // 17.5 -> 18
  };
  TransformParams p;
  p.kind = TransformKind::kVal;
  p.size = 224;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h));
    CropDecision d = CenterCrop(c.w, c.h, p);
    const double sx = double(c.w) / c.nw, sy = double(c.h) / c.nh;
    EXPECT_NEAR(d.rect.x, c.left * sx, 1e-9);
    EXPECT_NEAR(d.rect.y, c.top * sy, 1e-9);
    EXPECT_NEAR(d.rect.w, 224 * sx, 1e-9);
    EXPECT_NEAR(d.rect.h, 224 * sy, 1e-9);
  }
}

TEST(TransformGeometry, RandomResizedCropStaysInsideAndWithinRanges) {
  TransformParams p;
  for (uint64_t k = 0; k < 2000; ++k) {
    KeyedRng rng(1, k);
    const int w = 50 + static_cast<int>(k % 500), h = 40 + static_cast<int>((k * 7) % 400);
    CropDecision d = RandomResizedCrop(w, h, p, &rng);
    ASSERT_GE(d.rect.x, 0);
    ASSERT_GE(d.rect.y, 0);
    ASSERT_LE(d.rect.x + d.rect.w, w);
    ASSERT_LE(d.rect.y + d.rect.h, h);
    ASSERT_GT(d.rect.w, 0);
    ASSERT_GT(d.rect.h, 0);
  }
}

TEST(JpegDecoderTest, ScaledCroppedDecodeChoosesTheSmallestSufficientScale) {
  Image img = SyntheticImage(800, 600, 3, 5);
  std::string jpeg = MakeJpeg(img, JpegFlavor::kRgb, 90);
  JpegDecoder dec;
  DecodeRequest req;
  req.crop = RectF{100, 100, 400, 400};
  req.min_width = req.min_height = 100;
  DecodedRegion out;
  ASSERT_TRUE(
      dec.Decode(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), req, &out).ok());
  EXPECT_EQ(out.scale_num, 2);  // 400 * 2/8 = 100 >= 100
  EXPECT_LT(out.image.width, 800 / 4 + 16) << "columns outside the crop are not decoded";
  EXPECT_LT(out.image.height, 400 / 4 + 8) << "rows outside the crop are not decoded";
  EXPECT_NEAR(out.crop.w, 100, 1e-6);
}

TEST(JpegDecoderTest, EnormousDeclaredDimensionsAreRefusedBeforeAllocation) {
  Image img = SyntheticImage(16, 16, 3, 1);
  std::string jpeg = MakeJpeg(img, JpegFlavor::kRgb);
  // Patch the SOF0 frame header's height and width to 60000 x 60000.
  size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = static_cast<char>(0xEA);
  jpeg[sof + 6] = static_cast<char>(0x60);
  jpeg[sof + 7] = static_cast<char>(0xEA);
  jpeg[sof + 8] = static_cast<char>(0x60);
  JpegDecoder dec;
  DecodedRegion out;
  Status s =
      dec.Decode(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), DecodeRequest{}, &out);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("limit"), std::string::npos) << s.message();
  EXPECT_EQ(out.image.pixels.capacity(), 0u);
}

}  // namespace
}  // namespace shardkit
