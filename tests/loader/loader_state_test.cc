// LoaderState (saved, parsed, checked: CheckResumable) and PlanResume, which
// turns a saved state into where a run of another cut continues.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loader/loader_state.h"
#include "loader/resume_plan.h"
#include "loader/sampler.h"

namespace shardkit {
namespace {

TEST(LoaderStateTest, RoundTripsAndNamesWhatIsWrong) {
  LoaderState s;
  s.epoch = 3;
  s.batch = 17;
  s.seed = 1ull << 63;
  s.world_size = 8;
  s.batch_size = 256;
  s.records = 1281167;
  s.drop_last = true;
  s.shuffle = "block";
  s.block_window = 32;
  s.transform = "train 224x224 scale 0.08-1 ratio 0.75-1.33333 flip 0.5";
  s.positions = {{0, 5}, {1ull << 40, (1ull << 40) + 3}};
  s.dataset = "0123456789abcdef0123456789abcdef";
  auto back = LoaderStateFromJson(LoaderStateToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(LoaderStateToJson(*back), LoaderStateToJson(s));
  for (auto [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"[]", "not a JSON object"},
           {"{\"version\": 2}", "'epoch' is missing"},
           {"{\"version\": 9}", "version 9"},
           {"not json", "not a JSON object"},
           {"{\"version\":1,\"epoch\":-1}", "'epoch' is not a non-negative integer"},
           {"{\"version\":1,\"epoch\":0,\"batch\":0,\"seed\":0,\"world_size\":1,"
            "\"batch_size\":1,\"records\":9,\"positions\":[[1,-2]]}",
            "'positions' is not a list"}}) {
    auto r = LoaderStateFromJson(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
}

TEST(LoaderStateTest, OnePolicyForEveryResume) {
  LoaderState saved;
  saved.epoch = 2;
  saved.batch = 5;
  saved.seed = 1;
  saved.world_size = 4;
  saved.batch_size = 32;
  saved.records = 1000;
  saved.shuffle = "full";
  saved.transform = "train 224x224";
  LoaderState now = saved;
  EXPECT_TRUE(CheckResumable(saved, now).ok());
  // The cut may change mid-epoch (elastic resume); the order and augmentation may not.
  now.world_size = 8;
  now.batch_size = 7;
  now.drop_last = true;
  EXPECT_TRUE(CheckResumable(saved, now).ok());
  now.shuffle = "block";
  Status s = CheckResumable(saved, now);
  ASSERT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("shuffle full -> block"), std::string::npos) << s.message();
  now = saved;
  now.transform = "train 128x128";
  EXPECT_NE(CheckResumable(saved, now).message().find("transform"), std::string::npos);
  saved.batch = 0;  // an epoch boundary: the order may change
  EXPECT_TRUE(CheckResumable(saved, now).ok());
  saved.positions = {{3, 9}};  // the rest of a resumed epoch, even at its batch 0: not
  EXPECT_TRUE(CheckResumable(saved, now).IsInvalidArgument());
  saved.positions.clear();
  now.seed = 2;
  EXPECT_NE(CheckResumable(saved, now).message().find("seed"), std::string::npos);
  now = saved;
  now.records = 999;
  EXPECT_NE(CheckResumable(saved, now).message().find("1000 records"), std::string::npos);
  // As many records, other shards: another dataset, at a boundary too; a
  // state without a fingerprint (before version 4) is not compared on it.
  now = saved;
  saved.dataset = "aaaa";
  now.dataset = "bbbb";
  EXPECT_NE(CheckResumable(saved, now).message().find("another dataset"), std::string::npos);
  saved.dataset.clear();
  EXPECT_TRUE(CheckResumable(saved, now).ok());
  // A state from before the cut was recorded (records 0, no shuffle): those
  // fields are not compared, the rest is.
  LoaderState old;
  old.epoch = 1;
  old.batch = 3;
  old.seed = 1;
  old.world_size = 4;
  old.batch_size = 32;
  EXPECT_TRUE(CheckResumable(old, saved).ok());
}

// A state saved by a run of `world` ranks of `batch` samples over `records`.
LoaderState SavedAt(uint64_t epoch, uint64_t batch, uint64_t world, uint64_t batch_size,
                    uint64_t records, const std::string& shuffle = "full") {
  LoaderState s;
  s.epoch = epoch;
  s.batch = batch;
  s.seed = 7;
  s.world_size = world;
  s.batch_size = batch_size;
  s.records = records;
  s.shuffle = shuffle;
  s.transform = "raw";
  return s;
}

TEST(ResumePlanTest, SameCutContinuesAtTheSavedBatch) {
  const LoaderState saved = SavedAt(3, 4, 2, 10, 100);
  auto at = PlanResume(saved, SavedAt(0, 0, 2, 10, 100), 1);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(at->epoch, 3u);
  EXPECT_EQ(at->batch, 4u);
  EXPECT_EQ(at->rest, nullptr);
}

TEST(ResumePlanTest, AStateReadToItsEndStartsTheNextEpoch) {
  // 100 records, 2 ranks of 10: 5 batches an epoch.
  auto at = PlanResume(SavedAt(3, 5, 2, 10, 100), SavedAt(0, 0, 4, 3, 100), 0);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(at->epoch, 4u);
  EXPECT_EQ(at->batch, 0u);
  EXPECT_EQ(at->rest, nullptr);
}

TEST(ResumePlanTest, AnotherCutMidEpochContinuesWithExactlyWhatWasLeft) {
  // 2 ranks x 10 read 3 batches (60 positions, strided: 0..59); 4 ranks of 3 go on.
  auto at = PlanResume(SavedAt(3, 3, 2, 10, 100), SavedAt(0, 0, 4, 3, 100), 2);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(at->epoch, 3u);
  EXPECT_EQ(at->batch, 0u);
  ASSERT_NE(at->rest, nullptr);
  EXPECT_EQ(at->rest->size(), 40u);
  EXPECT_EQ(at->rest->At(0), 60u);
  // Every rank plans the same rest, and the ranks' cuts of it hold each position once.
  std::multiset<uint64_t> seen;
  for (int rank = 0; rank < 4; ++rank) {
    auto r = PlanResume(SavedAt(3, 3, 2, 10, 100), SavedAt(0, 0, 4, 3, 100), rank);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->rest->ranges(), at->rest->ranges());
    const Partition p = Partition::Cut(100, r->rest, rank, 4, 3, false, true);
    for (uint64_t i = 0; i < p.real; ++i) seen.insert(p.Position(i));
  }
  EXPECT_EQ(seen.size(), 40u);
  EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), 40u);
  EXPECT_EQ(*seen.begin(), 60u);
}

TEST(ResumePlanTest, TooLittleLeftForABatchUnderDropLastIsTheNextEpoch) {
  LoaderState now = SavedAt(0, 0, 4, 16, 100);
  now.drop_last = true;  // 4 x 16 = 64 a batch; 40 are left
  auto at = PlanResume(SavedAt(3, 3, 2, 10, 100), now, 0);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(at->epoch, 4u);
  EXPECT_EQ(at->batch, 0u);
  EXPECT_EQ(at->rest, nullptr);
}

TEST(ResumePlanTest, RefusesWhatCannotContinueExactly) {
  const LoaderState now = SavedAt(0, 0, 2, 10, 100);
  for (auto [saved, why] : std::vector<std::pair<LoaderState, std::string>>{
           {SavedAt(3, 6, 2, 10, 100), "loader state: batch 6 is past the epoch's 5 batches"},
           {SavedAt(3, 1, 2, 10, 99), "dataset of 99 records"},
           {SavedAt(3, 1, 2, 10, 100, "block"), "shuffle block -> full"},
           {SavedAt(3, 1, 1 << 20, 10, 100), "loader state: world size 1048576"}}) {
    auto at = PlanResume(saved, now, 0);
    ASSERT_FALSE(at.ok()) << why;
    EXPECT_TRUE(at.status().IsInvalidArgument());
    EXPECT_NE(at.status().message().find(why), std::string::npos) << at.status().message();
  }
  LoaderState bad_rest = SavedAt(3, 0, 2, 10, 100);
  bad_rest.positions = {{50, 200}};
  auto at = PlanResume(bad_rest, now, 0);
  ASSERT_FALSE(at.ok());
  EXPECT_EQ(at.status().message().rfind("loader state: ", 0), 0u) << at.status().message();
}

}  // namespace
}  // namespace shardkit
