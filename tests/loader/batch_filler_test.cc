// BatchFiller alone: a batch with a corrupt record settled as the policy
// says, each batch handed over as soon as it is filled (in order and whole,
// with the team too), and the choice between filling alone and with the
// team, measured on a clock the test moves.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "loader/batch_filler.h"
#include "loader/corrupt_policy.h"
#include "loader/prefetch_ring.h"
#include "loader/record_source.h"
#include "loader/sample_decoder.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"
#include "tests/loader/loader_test_util.h"

namespace shardkit {
namespace {

using testing::Expected;
using testing::TempDir;
using testing::WriteRaw;

// A batch holding a corrupt record: failed by name under kFail; under kSkip
// filled with a replacement, counted, and the batch is whole.
TEST(BatchFillerTest, SettlesACorruptSampleAsThePolicySays) {
  TempDir dir;
  WriteRaw(dir.path(), 40, 16, CompressionMode::kZstd, 1 << 20, /*corrupt=*/5);
  for (CorruptPolicy policy : {CorruptPolicy::kFail, CorruptPolicy::kSkip}) {
    LoaderOptions o;
    o.batch_size = 40;
    o.shuffle = ShuffleMode::kNone;
    o.workers = 2;
    auto src = RecordSource::Open(dir.path(), o, o, o.workers);
    ASSERT_TRUE(src.ok());
    auto dec = SampleDecoder::Make((*src)->dataset().manifest().record, TransformParams(),
                                   Layout::kNHWC, 0, dir.path());
    ASSERT_TRUE(dec.ok());
    CorruptSamples corrupt(policy, 10, (*src)->partition().per_rank);
    std::atomic<bool> stop{false};
    BatchFiller filler(src->get(), &*dec, &corrupt, 2, &stop);
    Batch shape;
    shape.channels = 1;
    shape.height = shape.width = 16;
    shape.layout = Layout::kNHWC;
    PrefetchRing ring(2, 40, shape, nullptr);
    std::vector<PrefetchRing::Slot*> claimed;
    ASSERT_TRUE(ring.Claim(0, 1, 1, &claimed));
    (*src)->StartEpoch(0, 0);
    std::vector<BatchFiller::Job> jobs = {BatchFiller::Job{claimed[0], 0, 0, 40}};
    filler.Fill(0, &jobs);
    const PrefetchRing::Slot& slot = *claimed[0];
    if (policy == CorruptPolicy::kFail) {
      EXPECT_TRUE(slot.status.IsCorruption());
      EXPECT_NE(slot.status.message().find("record 5"), std::string::npos)
          << slot.status.ToString();
      EXPECT_EQ(filler.stats().batches, 0u);
    } else {
      ASSERT_TRUE(slot.status.ok()) << slot.status.ToString();
      EXPECT_EQ(corrupt.samples_replaced(), 1u);
      EXPECT_EQ(corrupt.corrupt_records(), 1u);
      EXPECT_NE(slot.batch.sample_ids[5], 5u);
      EXPECT_EQ(slot.batch.sample_ids[6], 6u);
      EXPECT_EQ(filler.stats().samples, 40u);
      auto ds = Dataset::Open(dir.path());
      ASSERT_TRUE(ds.ok());
      for (int i = 0; i < 40; ++i) {
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(slot.batch.data) + i * 256, 256),
                  Expected(**ds, slot.batch.sample_ids[i]));
      }
    }
  }
}

// A BatchFiller over the raw 16x16 dataset in `dir` (WriteRaw's) and a ring
// of `slots` batches, all claimed: Jobs(n) are batches 0..n-1 of an epoch,
// batch k in claimed[k]. Open() says what failed, or nothing.
struct FillerRig {
  std::unique_ptr<RecordSource> src;
  std::unique_ptr<SampleDecoder> dec;
  std::unique_ptr<CorruptSamples> corrupt;
  std::atomic<bool> stop{false};
  std::unique_ptr<BatchFiller> filler;
  std::unique_ptr<PrefetchRing> ring;
  std::vector<PrefetchRing::Slot*> claimed;
  int batch = 0;

  std::string Open(const std::string& dir, int batch_size, ShuffleMode shuffle, int workers,
                   CorruptPolicy policy, uint64_t skip_budget, int slots) {
    batch = batch_size;
    LoaderOptions o;
    o.batch_size = batch_size;
    o.shuffle = shuffle;
    o.workers = workers;
    auto s = RecordSource::Open(dir, o, o, o.workers);
    if (!s.ok()) return "RecordSource: " + s.status().ToString();
    src = std::move(*s);
    auto d = SampleDecoder::Make(src->dataset().manifest().record, TransformParams(), Layout::kNHWC,
                                 0, dir);
    if (!d.ok()) return "SampleDecoder: " + d.status().ToString();
    dec = std::make_unique<SampleDecoder>(std::move(*d));
    corrupt = std::make_unique<CorruptSamples>(policy, skip_budget, src->partition().per_rank);
    filler = std::make_unique<BatchFiller>(src.get(), dec.get(), corrupt.get(), workers, &stop);
    Batch shape;
    shape.channels = 1;
    shape.height = shape.width = 16;
    shape.layout = Layout::kNHWC;
    ring = std::make_unique<PrefetchRing>(slots, batch_size, shape, nullptr);
    if (!ring->Claim(0, 1, slots, &claimed) || claimed.size() != static_cast<size_t>(slots))
      return "a free ring is claimed whole";
    return "";
  }
  std::vector<BatchFiller::Job> Jobs(uint64_t n) const {
    std::vector<BatchFiller::Job> jobs;
    for (uint64_t k = 0; k < n; ++k)
      jobs.push_back(BatchFiller::Job{claimed[k], k, static_cast<uint64_t>(batch) * k, batch});
    return jobs;
  }
};

// A fill of several batches hands each over as soon as its samples are in:
// on one worker (samples in order), batch j reaches the consumer before any
// sample of batch j + 1 is written. A failed batch is handed over, with its
// error, and none after it.
TEST(BatchFillerTest, HandsEachBatchOverAsSoonAsItIsFilled) {
  TempDir dir;
  WriteRaw(dir.path(), 40, 16, CompressionMode::kStore, 1 << 20, /*corrupt=*/25);
  FillerRig rig;
  ASSERT_EQ(rig.Open(dir.path(), 10, ShuffleMode::kNone, 1, CorruptPolicy::kFail, 0, 4), "");
  const std::vector<PrefetchRing::Slot*>& claimed = rig.claimed;
  constexpr uint64_t kUnset = ~uint64_t{0};
  for (PrefetchRing::Slot* slot : claimed) std::fill_n(slot->batch.sample_ids, 10, kUnset);
  rig.src->StartEpoch(0, 0);
  std::vector<BatchFiller::Job> jobs = rig.Jobs(4);
  std::vector<uint64_t> handed;
  rig.filler->Fill(0, &jobs, [&](const BatchFiller::Job& job) {
    handed.push_back(job.k);
    if (job.k == 0) {
      EXPECT_TRUE(job.slot->status.ok()) << job.slot->status.ToString();
      EXPECT_EQ(job.slot->batch.sample_ids[9], 9u);
      EXPECT_EQ(claimed[1]->batch.sample_ids[0], kUnset) << "batch 1 begun before batch 0 went";
    }
    return true;
  });
  ASSERT_EQ(handed, (std::vector<uint64_t>{0, 1, 2})) << "record 25 fails batch 2: none after it";
  EXPECT_TRUE(claimed[2]->status.IsCorruption()) << claimed[2]->status.ToString();

  // A consumer that stops taking batches (publish says no) is handed no more.
  handed.clear();
  rig.src->StartEpoch(1, 0);
  rig.filler->Fill(1, &jobs, [&](const BatchFiller::Job& job) {
    handed.push_back(job.k);
    return false;
  });
  EXPECT_EQ(handed, (std::vector<uint64_t>{0}));
}

// The same with the team (4 workers, a compressed full shuffle, a corrupt
// record replaced): every batch is handed over once, in order, whole, with
// the bytes of the records it names; under ThreadSanitizer this is the
// check that a batch is read only after every worker's writes to it.
TEST(BatchFillerTest, TheTeamHandsBatchesOverInOrderAndWhole) {
  TempDir dir;
  WriteRaw(dir.path(), 160, 16, CompressionMode::kZstd, 2048, /*corrupt=*/37);
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok());
  FillerRig rig;
  ASSERT_EQ(rig.Open(dir.path(), 20, ShuffleMode::kFull, 4, CorruptPolicy::kSkip, 10, 8), "");
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    rig.src->StartEpoch(epoch, 0);
    std::vector<BatchFiller::Job> jobs = rig.Jobs(8);
    std::vector<uint64_t> handed;
    rig.filler->Fill(epoch, &jobs, [&](const BatchFiller::Job& job) {
      handed.push_back(job.k);
      EXPECT_TRUE(job.slot->status.ok()) << job.slot->status.ToString();
      for (int i = 0; i < 20; ++i) {
        const uint64_t id = job.slot->batch.sample_ids[i];
        EXPECT_NE(id, 37u) << "the corrupt record is replaced";
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(job.slot->batch.data) + i * 256, 256),
                  Expected(**ds, id))
            << "batch " << job.k << " sample " << i;
      }
      return true;
    });
    EXPECT_EQ(handed, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7})) << "epoch " << epoch;
  }
  EXPECT_EQ(rig.corrupt->samples_replaced(), 3u) << "once an epoch";
}

// Fills the test times: phases of `fills` fills in which a fill by the
// calling thread alone takes alone_ns on the filler's clock and one by the
// team shared_ns, with wait_ns between fills (the producer's wait for free
// slots). Batches of 8 raw records of side x side bytes, one after another,
// epoch after epoch, each epoch a new run of fills as the loader makes it,
// and every run_fills fills (if set) a run resumed where the last one
// stopped, after run_pause_ns (a checkpoint or an evaluation, say): 8 x 8
// records make batches small enough to start alone, 128 x 128 ones large
// enough to start shared. The ways the fills took, 'a' alone and 's' shared.
struct FillPhase {
  int fills;
  uint64_t alone_ns, shared_ns, wait_ns = 0;
};
struct FillRig {
  int side = 8;
  int records = 0;  // 0: 4096 records of 8 x 8, 512 of larger ones
  int run_fills = 0;
  uint64_t run_pause_ns = 0;
  // If given: the fills past the warm-up that went alone, and how many of
  // them NextClaim (for a ring of 8) had made one batch at most.
  int* alone_fills = nullptr;
  int* alone_fills_claiming_one = nullptr;
};
std::string FillWays(const std::vector<FillPhase>& phases, const FillRig& rig = FillRig()) {
  TempDir dir;
  const int records = rig.records > 0 ? rig.records : rig.side <= 8 ? 4096 : 512;
  WriteRaw(dir.path(), records, rig.side, CompressionMode::kStore, 1 << 20);
  LoaderOptions o;
  o.batch_size = 8;
  o.shuffle = ShuffleMode::kNone;
  o.workers = 2;
  auto src = RecordSource::Open(dir.path(), o, o, o.workers);
  if (!src.ok()) return "RecordSource: " + src.status().ToString();
  auto dec = SampleDecoder::Make((*src)->dataset().manifest().record, TransformParams(),
                                 Layout::kNHWC, 0, dir.path());
  if (!dec.ok()) return "SampleDecoder: " + dec.status().ToString();
  CorruptSamples corrupt(CorruptPolicy::kFail, 0, (*src)->partition().per_rank);
  std::atomic<bool> stop{false};
  testing::FakeClock clock;
  BatchFiller filler(src->get(), &*dec, &corrupt, 2, &stop, clock);
  Batch shape;
  shape.channels = 1;
  shape.height = shape.width = rig.side;
  shape.layout = Layout::kNHWC;
  PrefetchRing ring(2, 8, shape, nullptr);
  std::vector<PrefetchRing::Slot*> claimed;
  if (!ring.Claim(0, 1, 1, &claimed)) return "no slot";
  const uint64_t batches = (*src)->partition().batches;
  std::string ways;
  uint64_t fill = 0;
  int alone_fills = 0, claiming_one = 0;
  for (const FillPhase& phase : phases) {
    for (int i = 0; i < phase.fills; ++i, ++fill) {
      const uint64_t epoch = fill / batches, k = fill % batches;
      if (k == 0) {
        (*src)->StartEpoch(epoch, 0);
        filler.NewRun();
      } else if (rig.run_fills > 0 && fill % rig.run_fills == 0) {
        filler.NewRun();
        clock.Advance(rig.run_pause_ns);
      }
      const BatchFiller::Claim claim = filler.NextClaim(8, batches - k, false);
      clock.Advance(phase.wait_ns);
      std::vector<BatchFiller::Job> jobs = {BatchFiller::Job{claimed[0], k, k * 8, 8}};
      const uint64_t alone_before = filler.stats().fills_alone;
      // The fill takes its time while it runs (the filler measures each
      // fill up to its end).
      filler.Fill(epoch, &jobs, [&](const BatchFiller::Job&) {
        const bool alone = filler.stats().fills_alone > alone_before;
        clock.Advance(alone ? phase.alone_ns : phase.shared_ns);
        return true;
      });
      if (!claimed[0]->status.ok()) return "fill: " + claimed[0]->status.ToString();
      const bool alone = filler.stats().fills_alone > alone_before;
      ways += alone ? 'a' : 's';
      if (alone && fill >= BatchFiller::kWarmupFills) {
        ++alone_fills;
        if (claim.most == 1 && claim.want == 1) ++claiming_one;
      }
    }
  }
  EXPECT_EQ(filler.stats().fills_alone + filler.stats().fills_shared, fill);
  if (rig.alone_fills != nullptr) *rig.alone_fills = alone_fills;
  if (rig.alone_fills_claiming_one != nullptr) *rig.alone_fills_claiming_one = claiming_one;
  return ways;
}

// The fraction of ways[from, to) filled `way`.
double ShareOf(const std::string& ways, char way, size_t from, size_t to) {
  to = std::min(to, ways.size());
  if (from >= to) return 0;
  return double(std::count(ways.begin() + from, ways.begin() + to, way)) / double(to - from);
}

// Small raw batches are filled alone while cold, larger ones shared; then
// each way is measured (the cold fills' way first) and the one faster by the
// clock fills from then on, the other tried now and then: whichever way is
// the faster one. A way measured 1.5x slower than the other ends its burst
// after one fill.
TEST(BatchFillerTest, MeasuresBothWaysThenFillsTheFasterOneAndRetriesTheOther) {
  const size_t warm = BatchFiller::kWarmupFills, burst = BatchFiller::kBurst;
  for (const int side : {8, 128}) {
    for (const bool alone_faster : {true, false}) {
      const char first = side == 8 ? 'a' : 's', second = side == 8 ? 's' : 'a';
      SCOPED_TRACE(std::string(side == 8 ? "small" : "large") + " batches, " +
                   (alone_faster ? "alone 3x faster" : "the team 3x faster"));
      FillRig rig;
      rig.side = side;
      const std::string ways =
          alone_faster ? FillWays({{3000, 1000, 3000}}, rig) : FillWays({{3000, 3000, 1000}}, rig);
      ASSERT_EQ(ways.size(), 3000u) << ways;
      EXPECT_EQ(ways.substr(0, warm), std::string(warm, first)) << "cold";
      const char best = alone_faster ? 'a' : 's', other = alone_faster ? 's' : 'a';
      // The second way's burst: whole if it is the faster, one fill if not.
      const size_t second_burst = second == best ? burst : 1;
      EXPECT_EQ(ways.substr(warm, burst + second_burst + 1),
                std::string(burst, first) + std::string(second_burst, second) + best)
          << ways;
      const size_t measured = warm + burst + second_burst;
      EXPECT_GE(ShareOf(ways, best, measured, ways.size()), 0.95) << ways;
      const size_t retry = ways.find(other, measured);
      ASSERT_NE(retry, std::string::npos) << "the slower way is retried: " << ways;
      EXPECT_EQ(ways.substr(retry, 2), std::string(1, other) + best) << "for one fill: " << ways;
    }
  }
}

// Large batches (JPEGs, say) on a team many times faster than the calling
// thread alone: the trial alone is one fill, of one batch (NextClaim: one
// batch even where a fill of raw records takes half the ring), then the team
// fills on, and a retry alone comes rarely and is one fill too; a trial that
// would fall on an epoch's first fill (not measured) waits for the next.
TEST(BatchFillerTest, ATrialAloneOfAFarFasterTeamCostsOneBatch) {
  const size_t warm = BatchFiller::kWarmupFills, burst = BatchFiller::kBurst;
  // 64-batch epochs, and 12-batch ones whose second epoch starts where the
  // first trial alone would.
  for (const int records : {512, 96}) {
    SCOPED_TRACE(std::to_string(records / 8) + "-batch epochs");
    int alone = 0, claiming_one = 0;
    FillRig rig;
    rig.side = 128;
    rig.records = records;
    rig.alone_fills = &alone;
    rig.alone_fills_claiming_one = &claiming_one;
    const std::string ways = FillWays({{3000, 15000, 1000}}, rig);
    ASSERT_EQ(ways.size(), 3000u) << ways;
    EXPECT_EQ(ways.substr(0, warm + burst), std::string(warm + burst, 's')) << ways;
    EXPECT_EQ(ways.find('a'), records == 96 ? warm + burst + 1 : warm + burst) << ways;
    EXPECT_GE(alone, 1) << ways;
    EXPECT_LE(alone, 3) << ways;
    EXPECT_EQ(ways.find("aa"), std::string::npos) << ways;
    EXPECT_EQ(claiming_one, alone) << "each trial alone claimed one batch";
  }
}

// A fill is measured with the producer's wait for free slots before it: when
// a slow consumer's pace dominates both ways, filling alone (3x slower by
// its own time) is not far behind, and its burst runs whole.
TEST(BatchFillerTest, TheWaitForFreeSlotsCountsInAFillsTime) {
  const size_t warm = BatchFiller::kWarmupFills, burst = BatchFiller::kBurst;
  FillRig rig;
  rig.side = 128;
  const std::string ways = FillWays({{200, 3000, 1000, 10000}}, rig);
  ASSERT_EQ(ways.size(), 200u) << ways;
  EXPECT_EQ(ways.substr(0, warm + 2 * burst),
            std::string(warm + burst, 's') + std::string(burst, 'a'))
      << ways;
}

// A loader stopped mid-epoch and resumed at the same batch after a long
// pause (a checkpoint, an evaluation): the resumed run's first fill is not
// measured, so the pause does not count against the way that took it. With a
// pause every 5 fills and the calling thread alone 1.4x faster, alone fills
// on and the team is tried once an interval (counted, the pauses would make
// the two take turns).
TEST(BatchFillerTest, APauseBeforeAResumedRunIsNotCountedAgainstAWay) {
  FillRig rig;
  rig.run_fills = 5;
  rig.run_pause_ns = 1000000000;
  const std::string ways = FillWays({{2000, 1000, 1400}}, rig);
  ASSERT_EQ(ways.size(), 2000u) << ways;
  // Bursts of the team (1.4x slower: tried whole) come once an interval.
  size_t bursts = 0;
  for (size_t i = 30; i < ways.size(); ++i) bursts += ways[i] == 's' && ways[i - 1] == 'a';
  const size_t interval = size_t(BatchFiller::kBurst * BatchFiller::kExplore * 1.4 * 1.4);
  EXPECT_LE(bursts, ways.size() / interval + 1) << ways;
  EXPECT_GE(ShareOf(ways, 'a', 30, ways.size()), 0.9) << ways;
}

// When the way in use turns slower than the other, the filler sees it in its
// own next fills and switches within a few hundred; when it turns back, it
// switches back. A way not in use that turns faster is seen when it is next
// tried (measured anew, its old figures dropped): at the first retry after
// the change, every kBurst x kExplore x ratio^2 fills (the ratio 3 before).
TEST(BatchFillerTest, SwitchesWhenTheFasterWayChangesAndSwitchesBack) {
  const std::string ways = FillWays({{1500, 1000, 3000}, {1500, 3000, 1000}, {1500, 1000, 3000}});
  ASSERT_EQ(ways.size(), 4500u) << ways;
  EXPECT_GE(ShareOf(ways, 'a', 100, 1500), 0.95) << ways;
  EXPECT_GE(ShareOf(ways, 's', 1800, 3000), 0.95) << "alone turned slow: " << ways;
  EXPECT_GE(ShareOf(ways, 'a', 3300, 4500), 0.95) << "and fast again: " << ways;

  const std::string unused = FillWays({{1500, 1000, 3000}, {3000, 1000, 300}});
  ASSERT_EQ(unused.size(), 4500u) << unused;
  const size_t interval = size_t(BatchFiller::kBurst * BatchFiller::kExplore * 3 * 3);
  // The fill chosen once fills_ (fills so far) is a multiple of the interval.
  const size_t retry = (1500 / interval + 1) * interval;
  EXPECT_GE(ShareOf(unused, 'a', 100, 1500), 0.95) << unused;
  EXPECT_EQ(unused.substr(retry - 1, 3), "ass") << "the first retry after the change: " << unused;
  EXPECT_GE(ShareOf(unused, 's', retry, 4500), 0.95)
      << "the team turned fast while unused: " << unused;
}

}  // namespace
}  // namespace shardkit
