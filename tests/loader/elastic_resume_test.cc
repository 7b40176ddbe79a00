// Elastic resume through the Loader: an epoch read part-way on W ranks with
// batch B, saved, and continued on W' ranks with batch B' (and another
// worker count) reads exactly the records the first run had not, each once,
// with the same pixels as an uninterrupted run (augmentation is keyed by the
// record's position in the epoch, never by rank, batch or worker), in every
// shuffle mode; and a resumed epoch can be resumed again on yet another cut.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "image/codec.h"
#include "loader/loader.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;

constexpr int kRecords = 97;

// JPEGs of assorted sizes in zstd blocks of 5 records over several shards,
// so that block-local windows and shard boundaries matter.
void WriteJpegDataset(const std::string& dir, uint64_t seed = 1000) {
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kJpeg;
  o.shard.compression = CompressionMode::kZstd;
  o.shard.block_size = 5;
  o.shard_size = 16 << 10;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < kRecords; ++i) {
    Image img = testing::SyntheticImage(20 + i % 7, 16 + i % 5, 3, seed + i);
    const std::string jpeg = testing::MakeJpeg(img, testing::JpegFlavor::kRgb, 90);
    ASSERT_TRUE((*w)->Add(jpeg, i % 4, "r" + std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kJpeg;
  m.classes = {"a", "b", "c", "d"};
  ASSERT_TRUE((*w)->Finish(m).ok());
}

LoaderOptions Options(ShuffleMode mode, int world, int batch, int workers, bool drop_last) {
  LoaderOptions o;
  o.world_size = world;
  o.batch_size = batch;
  o.workers = workers;
  o.drop_last = drop_last;
  o.shuffle = mode;
  o.block_window = 2;
  o.seed = 31;
  o.layout = Layout::kNHWC;
  o.transform.kind = TransformKind::kTrain;
  o.transform.size = 8;
  return o;
}

// What a run read: the pixels of each real (not padding) sample, by record.
struct Reads {
  std::multimap<uint64_t, std::string> pixels;
  LoaderState state;  // rank 0's, where the ranks stopped
  uint64_t batches = 0;
};

// Every rank of `o.world_size` reads `max_batches` batches of epoch 3 (all
// of them if more), starting from `from` when given; checks they all have
// the same number of batches.
void RunRanks(const std::string& dir, LoaderOptions o, const LoaderState* from,
              uint64_t max_batches, Reads* out) {
  for (int r = 0; r < o.world_size; ++r) {
    o.rank = r;
    auto l = Loader::Open(dir, o);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    Loader& loader = **l;
    if (from != nullptr) {
      Status s = loader.Restore(*from);
      ASSERT_TRUE(s.ok()) << s.ToString();
    } else {
      ASSERT_TRUE(loader.StartEpoch(3).ok());
    }
    if (r == 0) out->batches = loader.batches_per_epoch();
    ASSERT_EQ(loader.batches_per_epoch(), out->batches) << "rank " << r;
    for (uint64_t k = 0; k < max_batches; ++k) {
      const Batch* b = nullptr;
      ASSERT_TRUE(loader.Next(&b).ok());
      if (b == nullptr) break;
      for (int i = 0; i < b->real_size; ++i) {
        out->pixels.emplace(b->sample_ids[i], std::string(reinterpret_cast<const char*>(b->data) +
                                                              i * b->sample_bytes(),
                                                          b->sample_bytes()));
      }
    }
    if (r == 0) out->state = loader.state();
  }
}

class ElasticResumeTest : public ::testing::TestWithParam<ShuffleMode> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    WriteJpegDataset(dir_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
};
TempDir* ElasticResumeTest::dir_ = nullptr;

// Whether `reads` holds each record at most once, with the uninterrupted
// run's pixels; returns how many records it holds.
size_t CheckAgainst(const Reads& reads, const std::map<uint64_t, std::string>& want) {
  size_t n = 0;
  for (auto it = reads.pixels.begin(); it != reads.pixels.end(); ++it, ++n) {
    EXPECT_EQ(reads.pixels.count(it->first), 1u) << "record " << it->first << " read twice";
    auto w = want.find(it->first);
    EXPECT_TRUE(w != want.end() && w->second == it->second)
        << "record " << it->first << " has other pixels than in the uninterrupted run";
  }
  return n;
}

TEST_P(ElasticResumeTest, RestOfTheEpochOnOtherWorldAndBatchSizes) {
  const ShuffleMode mode = GetParam();
  const std::string dir = dir_->path();
  struct Case {
    int w0, b0, w1, b1;
  };
  for (const Case& c : {Case{4, 5, 3, 7}, Case{2, 8, 5, 3}, Case{3, 4, 1, 16}}) {
    SCOPED_TRACE("W " + std::to_string(c.w0) + " -> " + std::to_string(c.w1) + ", B " +
                 std::to_string(c.b0) + " -> " + std::to_string(c.b1));
    // The uninterrupted run: every record once, and its pixels.
    Reads whole;
    RunRanks(dir, Options(mode, c.w0, c.b0, 2, false), nullptr, ~0ull, &whole);
    std::map<uint64_t, std::string> want;
    for (const auto& [record, px] : whole.pixels) want.emplace(record, px);
    ASSERT_EQ(want.size(), static_cast<size_t>(kRecords));

    // Interrupted after 2 batches, resumed on the other cut with 1 worker.
    Reads before, after;
    RunRanks(dir, Options(mode, c.w0, c.b0, 2, false), nullptr, 2, &before);
    ASSERT_EQ(before.state.batch, 2u);
    ASSERT_EQ(before.state.world_size, static_cast<uint64_t>(c.w0));
    RunRanks(dir, Options(mode, c.w1, c.b1, 1, false), &before.state, ~0ull, &after);
    EXPECT_EQ(CheckAgainst(before, want), static_cast<size_t>(2 * c.b0 * c.w0));
    EXPECT_EQ(CheckAgainst(after, want), static_cast<size_t>(kRecords - 2 * c.b0 * c.w0));
    Reads all = before;
    all.pixels.insert(after.pixels.begin(), after.pixels.end());
    EXPECT_EQ(CheckAgainst(all, want), static_cast<size_t>(kRecords)) << "the epoch exactly once";
    EXPECT_EQ(after.state.epoch, 4u) << "read to its end: the next epoch";
    EXPECT_EQ(after.state.batch, 0u);
    EXPECT_TRUE(after.state.positions.empty());
  }
}

TEST_P(ElasticResumeTest, AResumedEpochResumesAgainAndDropLastDropsOnlyTheTail) {
  const ShuffleMode mode = GetParam();
  const std::string dir = dir_->path();
  Reads whole;
  RunRanks(dir, Options(mode, 1, 1, 2, false), nullptr, ~0ull, &whole);
  std::map<uint64_t, std::string> want;
  for (const auto& [record, px] : whole.pixels) want.emplace(record, px);
  for (bool drop_last : {false, true}) {
    SCOPED_TRACE(drop_last ? "drop_last" : "padded");
    Reads a, b, c;
    RunRanks(dir, Options(mode, 2, 6, 2, drop_last), nullptr, 3, &a);
    RunRanks(dir, Options(mode, 5, 2, 1, drop_last), &a.state, 2, &b);
    ASSERT_FALSE(b.state.positions.empty()) << "mid-way through the rest of the epoch";
    ASSERT_EQ(b.state.batch, 2u);
    // The state round-trips through JSON (what checkpoints and Python hold).
    auto saved = LoaderStateFromJson(LoaderStateToJson(b.state));
    ASSERT_TRUE(saved.ok());
    RunRanks(dir, Options(mode, 3, 4, 2, drop_last), &*saved, ~0ull, &c);
    Reads all = a;
    all.pixels.insert(b.pixels.begin(), b.pixels.end());
    all.pixels.insert(c.pixels.begin(), c.pixels.end());
    const size_t n = CheckAgainst(all, want);
    if (drop_last) {
      // The last cut (3 x 4) reads every full batch of what was left; only
      // its tail (under a batch per rank, plus under one per rank) is dropped.
      const uint64_t left = kRecords - a.pixels.size() - b.pixels.size();
      EXPECT_EQ(c.batches, left / 3 / 4);
      EXPECT_EQ(n, a.pixels.size() + b.pixels.size() + 3 * 4 * c.batches);
      EXPECT_LT(kRecords - n, 3u * 4 + 3);
    } else {
      EXPECT_EQ(n, static_cast<size_t>(kRecords));
    }
  }
}

TEST_P(ElasticResumeTest, SameCutContinuesAndOtherOrderIsRefused) {
  const ShuffleMode mode = GetParam();
  const std::string dir = dir_->path();
  Reads whole, a, same;
  RunRanks(dir, Options(mode, 2, 6, 2, false), nullptr, ~0ull, &whole);
  std::map<uint64_t, std::string> want;
  for (const auto& [record, px] : whole.pixels) want.emplace(record, px);
  RunRanks(dir, Options(mode, 2, 6, 2, false), nullptr, 3, &a);
  RunRanks(dir, Options(mode, 2, 6, 1, false), &a.state, ~0ull, &same);
  EXPECT_EQ(same.batches, a.batches) << "the same cut keeps its batch numbers";
  Reads all = a;
  all.pixels.insert(same.pixels.begin(), same.pixels.end());
  EXPECT_EQ(CheckAgainst(all, want), static_cast<size_t>(kRecords));
  // Another seed, or (mid-epoch) another shuffle or transform, is refused by name.
  LoaderOptions o = Options(mode, 3, 6, 1, false);
  o.seed = 32;
  auto l = Loader::Open(dir, o);
  ASSERT_TRUE(l.ok());
  Status s = (*l)->Restore(a.state);
  EXPECT_NE(s.message().find("seed"), std::string::npos) << s.ToString();
  o = Options(mode == ShuffleMode::kFull ? ShuffleMode::kNone : ShuffleMode::kFull, 3, 6, 1, false);
  l = Loader::Open(dir, o);
  ASSERT_TRUE(l.ok());
  s = (*l)->Restore(a.state);
  EXPECT_NE(s.message().find("shuffle"), std::string::npos) << s.ToString();
  // Another dataset of as many records (other images): its positions would
  // name other records, so it is refused too, naming why.
  TempDir other;
  WriteJpegDataset(other.path(), 5000);
  l = Loader::Open(other.path(), Options(mode, 3, 6, 1, false));
  ASSERT_TRUE(l.ok());
  s = (*l)->Restore(a.state);
  EXPECT_NE(s.message().find("another dataset of 97 records"), std::string::npos) << s.ToString();
  LoaderState bad = a.state;
  bad.positions = {{5, 3}};
  o = Options(mode, 3, 6, 1, false);
  l = Loader::Open(dir, o);
  ASSERT_TRUE(l.ok());
  s = (*l)->Restore(bad);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("positions"), std::string::npos) << s.ToString();
}

// What is left too small for a batch of the new cut (drop_last), or a state
// saved on the epoch's last batch: the next epoch starts, whole.
TEST_P(ElasticResumeTest, NothingLeftForABatchStartsTheNextEpoch) {
  const ShuffleMode mode = GetParam();
  const std::string dir = dir_->path();
  Reads a, b;
  RunRanks(dir, Options(mode, 2, 6, 2, true), nullptr, 7, &a);  // 8 batches per rank
  ASSERT_EQ(a.batches, 8u);
  ASSERT_EQ(a.state.batch, 7u);
  LoaderOptions o = Options(mode, 5, 8, 1, true);  // 13 left: no batch of 5 x 8
  auto l = Loader::Open(dir, o);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE((*l)->Restore(a.state).ok());
  EXPECT_EQ((*l)->state().epoch, 4u);
  EXPECT_EQ((*l)->state().batch, 0u);
  EXPECT_TRUE((*l)->state().positions.empty());
  EXPECT_EQ((*l)->batches_per_epoch(), static_cast<uint64_t>(kRecords / 5 / 8));
  LoaderState last = a.state;
  last.batch = a.batches;  // a stop on the epoch's last step
  for (int world : {2, 3}) {
    o = Options(mode, world, 6, 1, true);
    l = Loader::Open(dir, o);
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE((*l)->Restore(last).ok());
    EXPECT_EQ((*l)->state().epoch, 4u) << "world " << world;
    EXPECT_EQ((*l)->state().batch, 0u);
    EXPECT_TRUE((*l)->state().positions.empty());
  }
  last.batch = a.batches + 1;
  EXPECT_NE((*l)->Restore(last).message().find("past the epoch"), std::string::npos);
  last.world_size = 1u << 20;
  EXPECT_TRUE((*l)->Restore(last).IsInvalidArgument());
}

INSTANTIATE_TEST_SUITE_P(EveryShuffle, ElasticResumeTest,
                         ::testing::Values(ShuffleMode::kFull, ShuffleMode::kBlockLocal,
                                           ShuffleMode::kNone),
                         [](const ::testing::TestParamInfo<ShuffleMode>& p) {
                           return std::string(ShuffleModeName(p.param));
                         });

}  // namespace
}  // namespace shardkit
