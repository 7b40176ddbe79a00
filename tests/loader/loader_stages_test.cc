// The loader's stages alone, without the Loader that wires them: RecordSource
// (payloads and how long they live), SampleDecoder (bytes -> pixels),
// CorruptSamples (the corrupt policy), BatchFiller (a batch with a corrupt
// record in it), LoaderState (saved, parsed, checked, resumed from:
// PlanResume), the options' checks (ValidateLoaderOptions), and the
// DatasetWriter's own record checks that shardkit-pack and the binding share.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

#include "loader/batch_filler.h"
#include "loader/corrupt_policy.h"
#include "loader/loader.h"
#include "loader/loader_state.h"
#include "loader/read_planner.h"
#include "loader/read_queue.h"
#include "loader/record_fetcher.h"
#include "loader/record_source.h"
#include "loader/resume_plan.h"
#include "loader/sample_decoder.h"
#include "shard/dataset_writer.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;

// Records of `bytes` bytes, record i filled from i: zstd blocks of about
// `block` bytes (compressed) or stored ones; `corrupt` records hold a
// shorter payload (a raw record of the wrong size: Corruption when decoded).
void WriteRaw(const std::string& dir, int n, int side, CompressionMode mode, uint32_t block,
              int corrupt = -1) {
  DatasetWriterOptions o;
  o.shard.compression = mode;
  o.shard.kind = format::RecordKind::kRawU8;
  o.shard.block_size = block;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const size_t bytes = size_t(side) * side;
  for (int i = 0; i < n; ++i) {
    std::string p(i == corrupt ? bytes / 2 : bytes, '\0');
    for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<char>((i * 131 + j * 7) & 0xFF);
    ASSERT_TRUE((*w)->Add(p, i % 4, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {side, side, 1};
  m.classes = {"a", "b", "c", "d"};
  ASSERT_TRUE((*w)->Finish(m).ok());
}

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

std::string Expected(const Dataset& ds, uint64_t record) {
  const auto [shard, local] = ds.Locate(record);
  ReadScratch s;
  std::string_view p;
  EXPECT_TRUE(ds.shard(shard).ReadRecord(local, &s, &p).ok());
  return std::string(p);
}

// Every payload stays what it was during the next kLivePayloads - 1 fetches
// of its cursor, whether it points into a stored-record buffer or into a
// decompressed block that later fetches push out of the cursor's memo and
// the (tiny) block cache.
TEST(RecordSourceTest, PayloadsLiveAsLongAsTheSourceSays) {
  for (CompressionMode mode : {CompressionMode::kStore, CompressionMode::kZstd}) {
    TempDir dir;
    WriteRaw(dir.path(), 600, 24, mode, /*block=*/2048);
    LoaderOptions o;
    o.batch_size = 600;
    o.shuffle = ShuffleMode::kFull;
    o.block_cache_bytes = 4096;  // two blocks: memo misses evict
    o.read_depth = 0;
    auto src = RecordSource::Open(dir.path(), o, o, o.workers);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    RecordSource& s = **src;
    auto ds = Dataset::Open(dir.path());
    ASSERT_TRUE(ds.ok());
    s.StartEpoch(0, 0);
    s.Prepare({BatchSpan{0, 0, 600}});
    constexpr int kLive = RecordSource::kLivePayloads;
    std::vector<std::string_view> window;
    std::vector<uint64_t> records;
    for (uint64_t i = 0; i < 600; ++i) {
      const SampleLocation l = s.Locate(i);
      std::string_view p;
      ASSERT_TRUE(s.Fetch(s.cursor(0), l, &p).ok());
      window.push_back(p);
      records.push_back(l.record);
      if (window.size() > size_t(kLive)) {
        window.erase(window.begin());
        records.erase(records.begin());
      }
      for (size_t k = 0; k < window.size(); ++k) {
        ASSERT_EQ(window[k], Expected(**ds, records[k]))
            << "payload " << k << " of the live window, fetch " << i;
      }
    }
  }
}

// Records worth a read each (>= 16 KiB raw, JPEG) go through the read queue;
// small raw records do not start its threads: the source decides from the
// dataset, not from its caller.
TEST(RecordSourceTest, ReadsAheadOnlyRecordsWorthARead) {
  TempDir small, big;
  WriteRaw(small.path(), 20, 28, CompressionMode::kStore, 1 << 20);
  WriteRaw(big.path(), 20, 160, CompressionMode::kStore, 1 << 20);  // 25600 bytes
  LoaderOptions o;
  o.batch_size = 4;
  auto a = RecordSource::Open(small.path(), o, o, o.workers);
  auto b = RecordSource::Open(big.path(), o, o, o.workers);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->read_queue(), nullptr);
  EXPECT_NE((*b)->read_queue(), nullptr);
  o.read_depth = 0;
  auto c = RecordSource::Open(big.path(), o, o, o.workers);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->read_queue(), nullptr);
}

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

// The fetcher: each record's bytes as the shard holds them, from stored and
// compressed blocks; a block warmed first is decompressed once, by Warm, and
// the fetches of its records only slice it.
TEST(RecordFetcherTest, FetchesEachRecordAndAWarmedBlockIsNotDecompressedAgain) {
  for (CompressionMode mode : {CompressionMode::kStore, CompressionMode::kZstd}) {
    TempDir dir;
    WriteRaw(dir.path(), 64, 24, mode, /*block=*/2048);
    auto ds = Dataset::Open(dir.path());
    ASSERT_TRUE(ds.ok());
    BlockCache cache(ds->get(), 1 << 20);
    RecordFetcher f(ds->get(), &cache, /*queue=*/nullptr, 1);
    RecordFetcher::Cursor& c = f.cursor(0);
    const ShardReader& r = (*ds)->shard(0);
    f.Warm(BlockRef{0, 1}, c);
    const uint64_t warmed = f.stats().bytes;
    if (mode == CompressionMode::kZstd) {
      EXPECT_EQ(warmed, r.block(1).stored_size);
    }
    for (uint32_t i = 0; i < r.num_records(); ++i) {
      SampleLocation l;
      l.record = i;
      l.local = i;
      std::string_view p;
      const uint64_t before = f.stats().bytes;
      ASSERT_TRUE(f.Fetch(c, l, &p).ok());
      EXPECT_EQ(p, Expected(**ds, i)) << "record " << i;
      if (mode == CompressionMode::kZstd && r.record(i).block == 1) {
        EXPECT_EQ(f.stats().bytes, before) << "block 1 decompressed again for record " << i;
      }
    }
  }
}

TEST(SampleDecoderTest, RawRecordsAreCopiedOrTransposedAndSizeChecked) {
  RecordFormat f;
  f.kind = format::RecordKind::kRawU8;
  f.shape = {2, 3, 2};  // H, W, C
  auto nchw = SampleDecoder::Make(f, TransformParams(), Layout::kNCHW, 0, "d");
  auto nhwc = SampleDecoder::Make(f, TransformParams(), Layout::kNHWC, 0, "d");
  ASSERT_TRUE(nchw.ok() && nhwc.ok());
  EXPECT_EQ(nchw->sample_bytes(), 12u);
  std::string hwc;
  for (int i = 0; i < 12; ++i) hwc.push_back(static_cast<char>(i));
  SampleDecoder::State st;
  uint8_t out[12];
  ASSERT_TRUE(nhwc->Decode(st, hwc, 0, 0, out).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(out), 12), hwc);
  ASSERT_TRUE(nchw->Decode(st, hwc, 0, 0, out).ok());
  const uint8_t planes[12] = {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11};
  EXPECT_EQ(0, std::memcmp(out, planes, 12));
  Status s = nchw->Decode(st, hwc.substr(1), 0, 0, out);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.message(), "11 bytes, the record shape needs 12");
  f.kind = format::RecordKind::kBytes;
  EXPECT_TRUE(
      SampleDecoder::Make(f, TransformParams(), Layout::kNCHW, 0, "d").status().IsUnsupported());
}

// One rule for every front end: JPEG records take every transform, raw
// records only none and crop (pixels copied, none resampled), and the loader
// refuses the others by name rather than ignore them.
TEST(TransformRuleTest, RawRecordsTakeOnlyTransformNoneOrCropAndTheLoaderSaysSo) {
  for (const auto& [kind, name] : kTransformKindNames) {
    EXPECT_TRUE(TransformApplies(format::RecordKind::kJpeg, kind)) << name;
    EXPECT_EQ(TransformApplies(format::RecordKind::kRawU8, kind),
              kind == TransformKind::kNone || kind == TransformKind::kCrop)
        << name;
  }
  TempDir dir;
  WriteRaw(dir / "raw", 20, 4, CompressionMode::kStore, 1 << 20);
  LoaderOptions o;
  o.batch_size = 4;
  ASSERT_TRUE(Loader::Open(dir / "raw", o).ok()) << "transform none, the default";
  for (TransformKind kind : {TransformKind::kTrain, TransformKind::kVal, TransformKind::kResize}) {
    o.transform.kind = kind;
    auto l = Loader::Open(dir / "raw", o);
    ASSERT_FALSE(l.ok()) << TransformKindName(kind);
    EXPECT_TRUE(l.status().IsInvalidArgument());
    EXPECT_EQ(l.status().message(),
              dir / "raw" +
                  ": holds raw 4x4x1 records, which the loader returns as stored or cropped; "
                  "transform '" +
                  TransformKindName(kind) +
                  "' resizes JPEG records: use transform none, or crop (RandomCrop), and resize "
                  "or augment the batches after the loader if you need to");
  }
}

// A JPEG's crop depends on (seed, epoch, position) only: the same for any
// worker or state, another for another epoch; garbage is a Corruption.
TEST(SampleDecoderTest, JpegCropsAreKeyedAndGarbageIsCorruption) {
  RecordFormat f;
  f.kind = format::RecordKind::kJpeg;
  TransformParams t;
  t.kind = TransformKind::kTrain;
  t.size = 32;
  auto d = SampleDecoder::Make(f, t, Layout::kNCHW, 7, "d");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->sample_bytes(), 3u * 32 * 32);
  const std::string jpeg =
      testing::MakeJpeg(testing::SyntheticImage(120, 90, 3, 1), testing::JpegFlavor::kRgb);
  SampleDecoder::State a, b;
  std::vector<uint8_t> x(d->sample_bytes()), y(d->sample_bytes()), z(d->sample_bytes());
  ASSERT_TRUE(d->Decode(a, jpeg, 3, 11, x.data()).ok());
  ASSERT_TRUE(d->Decode(b, jpeg, 3, 11, y.data()).ok());
  EXPECT_EQ(x, y);
  bool differs = false;
  for (uint64_t e = 4; e < 8 && !differs; ++e) {
    ASSERT_TRUE(d->Decode(b, jpeg, e, 11, z.data()).ok());
    differs = z != x;
  }
  EXPECT_TRUE(differs);
  EXPECT_TRUE(d->Decode(a, "not a jpeg", 0, 0, x.data()).IsCorruption());
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

TEST(LoaderOptionsTest, EveryRangeIsCheckedInOnePlaceBeforeTheDatasetIsOpened) {
  EXPECT_TRUE(ValidateLoaderOptions(LoaderOptions()).ok());
  auto with = [](const std::function<void(LoaderOptions&)>& change) {
    LoaderOptions o;
    change(o);
    return o;
  };
  for (auto [o, why] : std::vector<std::pair<LoaderOptions, std::string>>{
           {with([](auto& o) { o.workers = 0; }), "workers must be in 1..256, not 0"},
           {with([](auto& o) { o.prefetch = kMaxPrefetch + 1; }), "prefetch must be in 1..1024"},
           {with([](auto& o) { o.batch_size = 0; }), "batch size must be in 1.."},
           {with([](auto& o) { o.rank = 2, o.world_size = 2; }),
            "rank 2 is not in 0..world_size-1"},
           {with([](auto& o) { o.world_size = kMaxWorldSize + 1; }), "world size must be at most"},
           {with([](auto& o) { o.read_depth = -2; }), "read depth must be in 0..1024"},
           {with([](auto& o) { o.read_ahead_bytes = 0; }), "read-ahead bytes"},
           {with([](auto& o) { o.transform.size = 0; }), "transform size must be in 1..4096"},
           {with([](auto& o) { o.transform.height = 10; }), "height and width together"},
           {with([](auto& o) { o.transform.flip_prob = 2; }), "flip probability"},
           {with([](auto& o) { o.transform.min_scale = std::nan(""); }), "crop scale range"},
           {with([](auto& o) { o.transform.max_ratio = 0.1; }), "aspect-ratio range"},
           {with([](auto& o) { o.transform.crop_fraction = 0; }), "val crop fraction"},
           {with([](auto& o) {
              o.transform.kind = TransformKind::kVal;
              o.transform.resize = 100;
            }),
            "CenterCrop 224x224 is larger than the Resize before it"}}) {
    Status s = ValidateLoaderOptions(o);
    EXPECT_TRUE(s.IsInvalidArgument()) << why;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
    // Loader::Open checks them before it looks for the dataset.
    auto loader = Loader::Open("/nonexistent/dataset", o);
    ASSERT_FALSE(loader.ok());
    EXPECT_EQ(loader.status().message(), s.message());
  }
}

TEST(DatasetWriterTest, ChecksLabelsAndSizesForEveryWriter) {
  TempDir dir;
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kRawU8;
  o.num_classes = 3;
  o.raw_record_size = 4;
  auto w = DatasetWriter::Create(dir / "a", o);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->Add("1234", 2, "ok").ok());
  Status s = (*w)->Add("1234", 3, "three");
  EXPECT_EQ(s.message(), dir / "a" + ": record 'three' (number 1): label 3 but only 3 classes");
  s = (*w)->Add("12345", 0, "long");
  EXPECT_NE(s.message().find("5 bytes, the shape needs 4"), std::string::npos);
  EXPECT_TRUE((*w)->Add("1234", -2, "neg").IsInvalidArgument());
  EXPECT_EQ((*w)->records(), 1u);
  // Labels are checked against the manifest's classes at Finish too, and a
  // refused Finish leaves no manifest: the directory is not a dataset.
  DatasetWriterOptions p;
  p.shard.kind = format::RecordKind::kBytes;
  auto v = DatasetWriter::Create(dir / "b", p);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE((*v)->Add("x", 5, "five").ok());
  Manifest m;
  m.record.kind = format::RecordKind::kBytes;
  m.classes = {"a", "b"};
  s = (*v)->Finish(m);
  EXPECT_NE(s.message().find("labels go up to 5 but the manifest lists 2 classes"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir / "b/manifest.json"));
}

}  // namespace
}  // namespace shardkit

namespace shardkit {
namespace {

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
