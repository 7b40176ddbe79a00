// The read-ahead queue: the bytes of every record as a plain read gives them,
// within its byte budget, cancelled at a new epoch and at destruction without
// a hang or a read into freed memory (this suite also runs under TSan and
// ASan), errors naming the shard and record; and a loader reading through it
// gives exactly the batches it gives without it, in every shuffle mode.
#include <gtest/gtest.h>

#include <thread>

#include "loader/loader.h"
#include "loader/read_queue.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;

constexpr int kSide = 80;  // 80x80x3 = 19200 bytes: records the loader reads ahead one by one
constexpr size_t kBytes = size_t(kSide) * kSide * 3;

// Stored raw records of kBytes, record i filled from i; several shards.
void WriteBigStoredDataset(const std::string& dir, int n) {
  testing::WriteRawDataset(dir, n, kSide, CompressionMode::kStore, 1 << 20, 40 * kBytes);
}

std::string Expected(const Dataset& ds, uint32_t shard, uint32_t local) {
  ReadScratch s;
  std::string_view p;
  EXPECT_TRUE(ds.shard(shard).ReadRecord(local, &s, &p).ok());
  return std::string(p);
}

TEST(ReadQueueTest, EveryRecordComesBackAsAPlainReadGivesItWithinTheBudget) {
  TempDir dir;
  WriteBigStoredDataset(dir.path(), 200);
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok());
  ASSERT_GT((*ds)->num_shards(), 3u);
  const uint64_t budget = 6 * kBytes;
  ReadQueue q(ds->get(), 8, budget);
  std::vector<std::pair<uint32_t, uint32_t>> order;
  for (uint64_t r = 0; r < (*ds)->num_records(); r += 3)
    order.push_back((*ds)->Locate((r * 7) % 200));
  for (const auto& [s, l] : order) q.Submit(s, l);
  std::vector<char> bytes;
  Status st;
  // Two takers, as two workers, each its half in order.
  auto take = [&](size_t from) {
    std::vector<char> b;
    Status s;
    for (size_t i = from; i < order.size(); i += 2) {
      ASSERT_TRUE(q.Take(order[i].first, order[i].second, &b, &s));
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(std::string(b.data(), b.size()), Expected(**ds, order[i].first, order[i].second));
    }
  };
  std::thread other(take, 1);
  take(0);
  other.join();
  const ReadQueueStats stats = q.stats();
  EXPECT_EQ(stats.reads, order.size());
  // Whether reads overlapped is the scheduler's business (on a busy machine
  // the I/O threads may run one at a time): not asserted here. The latency
  // benchmark (bench/latency_compare.sh) shows the reads in flight.
  EXPECT_GE(stats.peak_in_flight, 1u);
  EXPECT_LE(stats.peak_bytes, budget + 2 * kBytes)
      << "the budget, plus the reads two takers wait for";
  // Never submitted, or already taken: read it yourself.
  EXPECT_FALSE(q.Take(order[0].first, order[0].second, &bytes, &st));
}

TEST(ReadQueueTest, CancelAndDestructionDropQueuedReadsWithoutAHang) {
  TempDir dir;
  WriteBigStoredDataset(dir.path(), 120);
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok());
  for (int round = 0; round < 20; ++round) {
    auto q = std::make_unique<ReadQueue>(ds->get(), 4, 4 * kBytes);
    for (uint64_t r = 0; r < 120; ++r) {
      const auto [s, l] = (*ds)->Locate(r);
      q->Submit(s, l);
    }
    std::vector<char> b;
    Status st;
    const auto [s0, l0] = (*ds)->Locate(0);
    ASSERT_TRUE(q->Take(s0, l0, &b, &st));
    q->Cancel();
    const auto [s5, l5] = (*ds)->Locate(5);
    EXPECT_FALSE(q->Take(s5, l5, &b, &st)) << "a cancelled read is not delivered";
    // Submitted again after the cancel: delivered.
    q->Submit(s5, l5);
    ASSERT_TRUE(q->Take(s5, l5, &b, &st));
    EXPECT_EQ(std::string(b.data(), b.size()), Expected(**ds, s5, l5));
    for (uint64_t r = 0; r < 120; ++r) {
      const auto [s, l] = (*ds)->Locate(r);
      q->Submit(s, l);
    }
    q.reset();  // reads queued and in flight: joined, nothing delivered after
  }
}

TEST(ReadQueueTest, AReadErrorNamesTheShardAndRecord) {
  TempDir dir;
  WriteBigStoredDataset(dir.path(), 50);
  {
    auto r = ShardReader::Open(dir / "shard-00000.sks");
    ASSERT_TRUE(r.ok());
    const uint64_t off = (*r)->block((*r)->record(7).block).offset + (*r)->record(7).offset + 100;
    std::string b = testing::ReadFile(dir / "shard-00000.sks");
    b[off] ^= 0x5A;
    testing::WriteFile(dir / "shard-00000.sks", b);
  }
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok());
  ReadQueue q(ds->get(), 2, 8 * kBytes);
  q.Submit(0, 7);
  std::vector<char> b;
  Status st;
  ASSERT_TRUE(q.Take(0, 7, &b, &st));
  EXPECT_TRUE(st.IsCorruption());
  EXPECT_NE(st.message().find("shard-00000.sks: record 7"), std::string::npos) << st.message();
}

std::vector<std::string> Epoch(const std::string& dir, LoaderOptions o, uint64_t epoch,
                               LoaderStats* stats = nullptr) {
  auto l = Loader::Open(dir, o);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  std::vector<std::string> batches;
  if (!l.ok() || !(*l)->StartEpoch(epoch).ok()) return batches;
  for (;;) {
    const Batch* b = nullptr;
    Status s = (*l)->Next(&b);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok() || b == nullptr) break;
    batches.emplace_back(reinterpret_cast<const char*>(b->data), b->size * b->sample_bytes());
  }
  if (stats != nullptr) *stats = (*l)->stats();
  return batches;
}

TEST(ReadQueueTest, TheLoaderGivesTheSameBatchesThroughTheQueueInEveryMode) {
  TempDir dir;
  WriteBigStoredDataset(dir.path(), 150);
  for (ShuffleMode mode : {ShuffleMode::kFull, ShuffleMode::kBlockLocal, ShuffleMode::kNone}) {
    for (auto direct : {LoaderOptions::DirectReads::kNever, LoaderOptions::DirectReads::kAlways}) {
      LoaderOptions o;
      o.batch_size = 16;
      o.workers = 2;
      o.shuffle = mode;
      o.direct_reads = direct;
      o.rank = 1;
      o.world_size = 2;
      o.read_depth = 0;
      const auto plain = Epoch(dir.path(), o, 3);
      o.read_depth = 16;
      o.read_ahead_bytes = 1 << 20;
      LoaderStats st;
      const auto queued = Epoch(dir.path(), o, 3, &st);
      ASSERT_EQ(plain.size(), queued.size());
      for (size_t k = 0; k < plain.size(); ++k) EXPECT_TRUE(plain[k] == queued[k]) << k;
      EXPECT_GT(st.queued_reads, 0u);
      EXPECT_GT(st.peak_reads_in_flight, 0u);
      EXPECT_LE(st.peak_read_ahead_bytes, (1u << 20) + 2 * kBytes);
    }
  }
}

TEST(ReadQueueTest, ANewEpochOrTheLoadersEndMidEpochCancelsTheReads) {
  TempDir dir;
  WriteBigStoredDataset(dir.path(), 150);
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.read_depth = 16;
  for (int round = 0; round < 5; ++round) {
    auto l = Loader::Open(dir.path(), o);
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE((*l)->StartEpoch(0).ok());
    const Batch* b = nullptr;
    ASSERT_TRUE((*l)->Next(&b).ok());
    ASSERT_TRUE((*l)->StartEpoch(1, 3).ok());  // mid-epoch: the queue's reads are cancelled
    ASSERT_TRUE((*l)->Next(&b).ok());
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->index, 3u);
  }  // destroyed mid-epoch with reads queued
  o.read_depth = 0;
  const auto plain = Epoch(dir.path(), o, 1);
  o.read_depth = 16;
  auto l = Loader::Open(dir.path(), o);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE((*l)->StartEpoch(0).ok());
  const Batch* b = nullptr;
  ASSERT_TRUE((*l)->Next(&b).ok());
  ASSERT_TRUE((*l)->StartEpoch(1).ok());
  for (size_t k = 0; k < plain.size(); ++k) {
    ASSERT_TRUE((*l)->Next(&b).ok());
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(plain[k] ==
                std::string(reinterpret_cast<const char*>(b->data), b->size * b->sample_bytes()));
  }
}

}  // namespace
}  // namespace shardkit
