// ReadPlanner alone: the order over the ranks (every record once, however
// batches are grouped into fills), blocks scheduled before the fills that
// read them, and the probe that decides whether reads go through the queue.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loader/read_planner.h"
#include "loader/read_queue.h"
#include "loader/sampler.h"
#include "shard/block_cache.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"
#include "tests/loader/loader_test_util.h"

namespace shardkit {
namespace {

using testing::Expected;
using testing::TempDir;
using testing::WriteRaw;

ReadPlanner::Setup PlannerSetup(const Dataset& ds, const BlockCache* cache, ShuffleMode mode,
                                uint64_t batch, int rank, int world) {
  ReadPlanner::Setup p;
  p.dataset = &ds;
  p.cache = cache;
  p.layout = BlockLayout::Of(ds);
  auto part = Partition::Make(ds.num_records(), rank, world, batch, /*drop_last=*/false,
                              /*strided=*/mode != ShuffleMode::kBlockLocal);
  if (!part.ok()) {
    ADD_FAILURE() << part.status().ToString();
    return p;
  }
  p.partition = *part;
  p.mode = mode;
  p.seed = 5;
  p.window = 2;
  p.max_warm = 4;
  p.workers = 2;
  return p;
}

// The planner's order: over the ranks, every record exactly once per epoch
// (the padding aside), the same however the batches are grouped into fills;
// and in block-local mode each block is scheduled for decompression once,
// before the fill that first reads it.
TEST(ReadPlannerTest, EveryRecordOnceAndEachBlockScheduledOnceBeforeItsFill) {
  TempDir dir;
  WriteRaw(dir.path(), 300, 24, CompressionMode::kZstd, /*block=*/2048);
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok());
  BlockCache cache(ds->get(), 1 << 20);
  for (ShuffleMode mode : {ShuffleMode::kFull, ShuffleMode::kBlockLocal, ShuffleMode::kNone}) {
    SCOPED_TRACE(ShuffleModeName(mode));
    std::vector<int> seen((*ds)->num_records(), 0);
    for (int rank = 0; rank < 3; ++rank) {
      ReadPlanner one(PlannerSetup(**ds, &cache, mode, 16, rank, 3));
      ReadPlanner grouped(PlannerSetup(**ds, &cache, mode, 16, rank, 3));
      const Partition& part = one.partition();
      one.StartEpoch(2, 0);
      grouped.StartEpoch(2, 0);
      std::set<std::pair<uint32_t, uint32_t>> scheduled;
      for (uint64_t k = 0; k < part.batches; k += 3) {
        std::vector<BatchSpan> spans;
        for (uint64_t j = k; j < std::min(k + 3, part.batches); ++j)
          spans.push_back(BatchSpan{j, j * part.batch_size, int(part.BatchLength(j))});
        grouped.Prepare(spans);
        for (const BlockRef& b : grouped.blocks_to_warm())
          EXPECT_TRUE(scheduled.insert({b.shard, b.block}).second) << "block scheduled twice";
        for (const BatchSpan& span : spans) {
          one.Prepare({span});
          for (int i = 0; i < span.size; ++i) {
            const SampleLocation a = one.Locate(span.base + i), b = grouped.Locate(span.base + i);
            EXPECT_EQ(a.record, b.record);
            if (span.base + i < part.real) ++seen[a.record];
            if (mode == ShuffleMode::kBlockLocal) {
              const uint32_t block = (*ds)->shard(a.shard).record(a.local).block;
              EXPECT_TRUE(scheduled.count({a.shard, block})) << "read before it was scheduled";
            }
          }
        }
      }
    }
    for (size_t r = 0; r < seen.size(); ++r) EXPECT_EQ(seen[r], 1) << "record " << r;
  }
}

// The read planner's probe: batches go through the read queue while its
// reads are slower than ReadPlanner::kFastReadSeconds by the queue's clock;
// once they are faster, the workers read batches themselves but for every
// kProbeEvery-th, which still goes through the queue; when reads turn slow
// again, every batch is queued again. The queue's clock ticks the read
// latency each phase sets.
TEST(ReadPlannerTest, QueuesReadsWhileTheyAreSlowAndProbesWhileTheyAreFast) {
  TempDir dir;
  WriteRaw(dir.path(), 2048, 8, CompressionMode::kStore, 1 << 20);
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok());
  BlockCache cache(ds->get(), 1 << 20);
  testing::FakeClock clock;
  ReadQueue queue(ds->get(), /*depth=*/1, 1 << 20, 0, clock);  // one reader: one read per tick
  const uint64_t batch = ReadPlanner::kMinProbeReads;
  ReadPlanner::Setup setup = PlannerSetup(**ds, &cache, ShuffleMode::kFull, batch, 0, 1);
  setup.queue = &queue;
  setup.read_ahead_records = true;
  ReadPlanner planner(std::move(setup));
  planner.StartEpoch(0, 0);
  const uint64_t slow = 4 * ReadPlanner::kFastReadSeconds * 1e9;
  const uint64_t fast = ReadPlanner::kFastReadSeconds * 1e9 / 25;
  const uint64_t phase = 4 * ReadPlanner::kProbeEvery;  // batches per phase
  std::string queued;                                   // per batch: 'q' queued, 'w' workers
  for (uint64_t k = 0; k < 3 * phase; ++k) {
    if (k % phase == 0) clock.SetTick(k / phase == 1 ? fast : slow);
    planner.Prepare({BatchSpan{k, k * batch, int(batch)}});
    int taken = 0;
    for (uint64_t i = 0; i < batch; ++i) {
      const SampleLocation l = planner.Locate(k * batch + i);
      std::vector<char> bytes;
      Status status;
      if (queue.Take(l.shard, l.local, &bytes, &status)) {
        ++taken;
        EXPECT_TRUE(status.ok()) << status.ToString();
        EXPECT_EQ(std::string(bytes.begin(), bytes.end()), Expected(**ds, l.record));
      }
    }
    EXPECT_TRUE(taken == 0 || taken == int(batch)) << "batch " << k << ": " << taken;
    queued += taken > 0 ? 'q' : 'w';
  }
  SCOPED_TRACE(queued);
  const uint64_t every = ReadPlanner::kProbeEvery;
  // The decision for batch k is taken as k - kReadAheadBatches is prepared,
  // from the reads timed since the last one: fully in a phase's latency from
  // its third probe on.
  for (uint64_t k = 0; k < phase; ++k) EXPECT_EQ(queued[k], 'q') << "slow: batch " << k;
  for (uint64_t k = phase + 2 * every + 1; k < 2 * phase; ++k)
    EXPECT_EQ(queued[k], k % every == 0 ? 'q' : 'w') << "fast: batch " << k;
  for (uint64_t k = 2 * phase + 2 * every + 1; k < 3 * phase; ++k)
    EXPECT_EQ(queued[k], 'q') << "slow again: batch " << k;
}

}  // namespace
}  // namespace shardkit
