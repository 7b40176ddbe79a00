// The corrupt policy (CorruptSamples): fail passes the error on, skip
// replaces within a budget of damages, never hides an I/O error, never loops
// for a replacement; a corrupt block costs one unit and is reported once.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "loader/corrupt_policy.h"
#include "loader/loader.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"
#include "tests/loader/loader_test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;
using testing::WriteRaw;

// Flips one byte in the middle of block `block` of shard 0's stored bytes.
void FlipByteInBlock(const std::string& dir, uint32_t block) {
  uint64_t offset = 0;
  {
    auto r = ShardReader::Open(dir + "/shard-00000.sks");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    offset = (*r)->block(block).offset + (*r)->block(block).stored_size / 2;
  }
  std::string bytes = testing::ReadFile(dir + "/shard-00000.sks");
  bytes[offset] ^= 0x5A;
  testing::WriteFile(dir + "/shard-00000.sks", bytes);
}

TEST(CorruptSamplesTest, FailPassesTheErrorOnSkipReplacesWithinTheBudget) {
  uint64_t r = 0;
  CorruptSamples fail(CorruptPolicy::kFail, 100, 50);
  Status bad = Status::Corruption("shard-00000.sks: record 3: bad");
  EXPECT_EQ(fail.Replace(3, 3, bad, 0, &r).message(), bad.message());
  EXPECT_EQ(fail.samples_replaced(), 0u);
  EXPECT_EQ(fail.corrupt_records(), 0u);

  CorruptSamples skip(CorruptPolicy::kSkip, 2, 50);
  ASSERT_TRUE(skip.Replace(3, 3, bad, 0, &r).ok());
  EXPECT_LT(r, 50u);
  EXPECT_NE(r, 3u);
  uint64_t again = 0;
  CorruptSamples other(CorruptPolicy::kSkip, 2, 50);
  ASSERT_TRUE(other.Replace(3, 3, bad, 0, &again).ok());
  EXPECT_EQ(again, r);  // deterministic
  const uint64_t first = r;
  uint64_t second = 0;
  ASSERT_TRUE(skip.Replace(3, first, bad, 1, &second).ok());  // the first replacement failed
  EXPECT_NE(second, r);                                       // the next attempt, another sample
  // An I/O error is never hidden by a replacement.
  EXPECT_TRUE(skip.Replace(4, 4, Status::IOError("EIO"), 0, &r).IsIOError());
  // The budget counts damages, not samples: the same message is one unit.
  ASSERT_TRUE(skip.Replace(5, 5, bad, 0, &r).ok());
  ASSERT_TRUE(skip.Replace(6, 6, Status::Corruption("shard-00000.sks: record 9: bad"), 0, &r).ok());
  Status over = skip.Replace(7, 7, Status::Corruption("shard-00001.sks: record 1: bad"), 0, &r);
  EXPECT_TRUE(over.IsCorruption());
  EXPECT_NE(over.message().find("more than 2 corrupt records or blocks skipped"), std::string::npos)
      << over.message();
  // The records that failed: 3, its first replacement, 5, 6 and 7; no
  // sample was delivered yet (Replaced()).
  EXPECT_EQ(skip.corrupt_records(), (std::set<uint64_t>{3, first, 5, 6, 7}.size()));
  EXPECT_EQ(skip.samples_replaced(), 0u);
  // A record is counted once, however often it fails: as a sample's
  // replacement, then as its own sample; each sample delivered counts once.
  CorruptSamples twice(CorruptPolicy::kSkip, 10, 50);
  ASSERT_TRUE(twice.Replace(1, 40, bad, 0, &r).ok());
  ASSERT_TRUE(twice.Replace(1, 41, bad, 1, &r).ok());
  twice.Replaced();
  ASSERT_TRUE(twice.Replace(2, 41, bad, 0, &r).ok());
  twice.Replaced();
  EXPECT_EQ(twice.corrupt_records(), 2u);
  EXPECT_EQ(twice.samples_replaced(), 2u);
  EXPECT_EQ(twice.units(), 1u);
  EXPECT_EQ(skip.units(), 3u);
  EXPECT_EQ(skip.messages().size(), 3u);
  CorruptSamples many(CorruptPolicy::kSkip, 1000, 50);
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(
        many.Replace(i, i, Status::Corruption("record " + std::to_string(i) + ": bad"), 0, &r)
            .ok());
  }
  EXPECT_EQ(many.messages().size(), CorruptSamples::kMaxMessages);
  CorruptSamples block(CorruptPolicy::kSkip, 1000, 50);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(block.Replace(i, i, bad, 0, &r).ok());
  EXPECT_EQ(block.messages().size(), 1u) << "one damage, reported once";
  // Replacements failing within a damage already counted do not grow the
  // budget: the attempts for one sample are bounded, never an endless loop.
  uint64_t attempt = 0;
  Status last;
  for (; attempt < 1000; ++attempt) {
    last = block.Replace(7, 7, bad, attempt, &r);
    if (!last.ok()) break;
  }
  EXPECT_EQ(attempt, CorruptSamples::kMaxAttempts);
  EXPECT_NE(last.message().find("no readable replacement for sample 7"), std::string::npos)
      << last.message();
  // Never the sample itself, whatever the rank's count (7919 was the old stride).
  for (uint64_t n : {2ull, 3ull, 7919ull, 2 * 7919ull}) {
    CorruptSamples any(CorruptPolicy::kSkip, 1000, n);
    for (uint64_t i = 0; i < std::min<uint64_t>(n, 50); ++i) {
      for (uint64_t a = 0; a < 4; ++a) {
        ASSERT_TRUE(any.Replace(i, i, bad, a, &r).ok());
        EXPECT_NE(r, i);
        EXPECT_LT(r, n);
      }
    }
  }
}

// Every record of the rank in one corrupt zstd block: under skip, one
// damage, but no replacement can be read: the batch fails, it does not hang.
TEST(CorruptSamplesTest, NoReadableReplacementEndsTheEpochWithAnError) {
  TempDir dir;
  WriteRaw(dir.path(), 60, 16, CompressionMode::kZstd, /*block=*/1 << 20);
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ((*ds)->shard(0).num_blocks(), 1u);
  ds->reset();
  FlipByteInBlock(dir.path(), 0);
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.corrupt_policy = CorruptPolicy::kSkip;
  auto l = Loader::Open(dir.path(), o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_TRUE((*l)->StartEpoch(0).ok());
  const Batch* b = nullptr;
  Status s = (*l)->Next(&b);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("no readable replacement"), std::string::npos) << s.message();
}

TEST(CorruptSamplesTest, NamesComeFromOneTable) {
  CorruptPolicy p = CorruptPolicy::kFail;
  EXPECT_TRUE(CorruptPolicyFromName("skip", &p));
  EXPECT_EQ(p, CorruptPolicy::kSkip);
  EXPECT_STREQ(CorruptPolicyName(p), "skip");
  EXPECT_FALSE(CorruptPolicyFromName("Skip", &p));
  EXPECT_EQ(NameList(kCorruptPolicyNames), "'fail' or 'skip'");
  EXPECT_EQ(NameList(kShuffleModeNames), "'auto', 'full', 'block' or 'none'");
}

// One flipped byte in a zstd block fails every record the block held, with
// the block's one message: under on_corrupt skip that is one unit of the
// budget (a budget of 1 lets the epoch finish), reported once.
TEST(CorruptSamplesTest, ACorruptCompressedBlockCostsOneUnitOfTheBudget) {
  TempDir dir;
  WriteRaw(dir.path(), 400, 16, CompressionMode::kZstd, /*block=*/8192);
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok());
  const ShardReader& r = (*ds)->shard(0);
  ASSERT_GT(r.num_blocks(), 3u);
  ASSERT_NE(r.block(1).codec, static_cast<uint32_t>(format::Codec::kStored));
  uint64_t in_block = 0;
  for (uint32_t i = 0; i < r.num_records(); ++i) in_block += r.record(i).block == 1;
  ds->reset();
  FlipByteInBlock(dir.path(), 1);

  LoaderOptions o;
  o.batch_size = 32;
  o.workers = 2;
  o.corrupt_policy = CorruptPolicy::kSkip;
  o.skip_budget = 1;
  auto l = Loader::Open(dir.path(), o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_TRUE((*l)->StartEpoch(0).ok());
  uint64_t samples = 0;
  for (;;) {
    const Batch* b = nullptr;
    Status s = (*l)->Next(&b);
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (b == nullptr) break;
    samples += b->size;
  }
  EXPECT_EQ(samples, 400u);
  LoaderStats st = (*l)->stats();
  EXPECT_EQ(st.corrupt_units, 1u);
  // Exactly the block's records were bad, and each of their samples was
  // replaced once, however many replacements landed in the block again.
  EXPECT_EQ(st.corrupt_records, in_block);
  EXPECT_EQ(st.samples_replaced, in_block);
  ASSERT_EQ(st.corrupt_messages.size(), 1u);
  EXPECT_NE(st.corrupt_messages[0].find("block 1"), std::string::npos) << st.corrupt_messages[0];
  // A second epoch meets the same records: more samples replaced, no more records.
  ASSERT_TRUE((*l)->StartEpoch(1).ok());
  for (;;) {
    const Batch* b = nullptr;
    ASSERT_TRUE((*l)->Next(&b).ok());
    if (b == nullptr) break;
  }
  st = (*l)->stats();
  EXPECT_EQ(st.corrupt_records, in_block);
  EXPECT_EQ(st.samples_replaced, 2 * in_block);
  EXPECT_EQ(st.corrupt_units, 1u);
}

}  // namespace
}  // namespace shardkit
