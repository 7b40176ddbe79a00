// Loader scenarios: ranks disjoint and covering, determinism across worker
// counts, resume, layouts, corrupt records under both policies, errors and
// destruction mid-epoch, leases, and the JPEG transforms end to end against a
// naive reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <set>

#include "image/codec.h"
#include "loader/loader.h"
#include "loader/loader_state.h"
#include "loader/resolution_schedule.h"
#include "loader/transforms.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::JpegFlavor;
using testing::MakeJpeg;
using testing::MeanAbsDiff;
using testing::NaiveCropResize;
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

// shuffle auto says which mode it chose and why; the records an epoch will
// read (a DistributedSampler's indices, for Python's loader.sampler) are
// the batches' sample ids, in every mode, without reading anything.
TEST(LoaderTest, AutoShuffleSaysWhyAndEpochRecordsAreTheBatchesIds) {
  TempDir dir;
  WriteRawDataset(dir.path(), 3000, 16384);
  LoaderOptions o;
  o.batch_size = 64;
  o.world_size = 3;
  o.rank = 1;
  {
    auto l = Loader::Open(dir.path(), o);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ((*l)->shuffle_mode(), ShuffleMode::kFull);
    EXPECT_NE((*l)->shuffle_reason().find("fits the block cache"), std::string::npos)
        << (*l)->shuffle_reason();
  }
  o.block_cache_bytes = 4096;
  {
    auto l = Loader::Open(dir.path(), o);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ((*l)->shuffle_mode(), ShuffleMode::kBlockLocal);
    EXPECT_NE((*l)->shuffle_reason().find("more than the 4.1 KB block cache"), std::string::npos)
        << (*l)->shuffle_reason();
  }
  for (ShuffleMode mode : {ShuffleMode::kFull, ShuffleMode::kBlockLocal, ShuffleMode::kNone}) {
    o.shuffle = mode;
    for (bool drop_last : {false, true}) {
      o.drop_last = drop_last;
      auto l = Loader::Open(dir.path(), o);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      EXPECT_EQ((*l)->shuffle_reason(), "") << "asked for, not chosen";
      for (uint64_t epoch : {0, 3}) {
        std::vector<uint64_t> read;
        for (const auto& b : ReadEpoch(dir.path(), o, epoch).ids)
          read.insert(read.end(), b.begin(), b.end());
        EXPECT_EQ((*l)->EpochRecords(epoch), read)
            << ShuffleModeName(mode) << " epoch " << epoch << " drop_last " << drop_last;
      }
    }
  }
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
  for (ShuffleMode mode : {ShuffleMode::kFull, ShuffleMode::kBlockLocal, ShuffleMode::kNone}) {
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

// The batch ids of one pass: BeginPass, at most `max` batches, EndPass.
std::vector<std::vector<uint64_t>> Pass(Loader* l, size_t max = SIZE_MAX) {
  std::vector<std::vector<uint64_t>> ids;
  EXPECT_TRUE(l->BeginPass().ok());
  while (ids.size() < max) {
    const Batch* b = nullptr;
    EXPECT_TRUE(l->Next(&b).ok());
    if (b == nullptr) break;
    ids.emplace_back(b->sample_ids, b->sample_ids + b->size);
  }
  l->EndPass();
  return ids;
}

// The rules an iterator protocol (Python's loader) reads the core by: a pass
// read to its end is followed by the next epoch, one stopped early by the
// same epoch from its start; set_epoch chooses; a restored position survives
// a peek at its epoch's first (or last) batch until a pass reads it to its
// end; state() between passes says where the next pass starts.
TEST(LoaderTest, PassesFollowTheEpochAndKeepARestoredPositionUntilItsEndIsSeen) {
  TempDir dir;
  WriteRawDataset(dir.path(), 100, 4096);
  LoaderOptions o;
  o.batch_size = 16;  // 7 batches
  o.workers = 2;
  auto l = Loader::Open(dir.path(), o);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  Loader& a = **l;
  EXPECT_EQ(a.pass_epoch(), 0u);
  const auto e0 = Pass(&a);
  ASSERT_EQ(e0.size(), 7u);
  EXPECT_EQ(a.pass_epoch(), 1u);
  EXPECT_EQ(a.state().epoch, 1u);
  EXPECT_EQ(a.state().batch, 0u);
  const auto peek = Pass(&a, 1);  // epoch 1, stopped early: the next pass reads it again
  EXPECT_EQ(a.pass_epoch(), 1u);
  LoaderState between = a.state();
  EXPECT_EQ(between.epoch, 1u);
  EXPECT_EQ(between.batch, 0u);
  const auto e1 = Pass(&a);
  ASSERT_EQ(e1.size(), 7u);
  EXPECT_EQ(peek[0], e1[0]);
  EXPECT_NE(e0, e1);
  a.SetEpoch(0);
  EXPECT_EQ(a.pass_epoch(), 0u);
  EXPECT_EQ(Pass(&a), e0);

  // Stopped after 3 batches of epoch 1 inside a pass: state() is that position.
  ASSERT_TRUE(a.BeginPass().ok());  // epoch 1 (epoch 0 was read to its end)
  for (int i = 0; i < 3; ++i) {
    const Batch* b = nullptr;
    ASSERT_TRUE(a.Next(&b).ok());
    ASSERT_NE(b, nullptr);
  }
  const LoaderState saved = a.state();
  EXPECT_EQ(saved.epoch, 1u);
  EXPECT_EQ(saved.batch, 3u);
  a.EndPass();

  auto m = Loader::Open(dir.path(), o);
  ASSERT_TRUE(m.ok());
  Loader& b = **m;
  ASSERT_TRUE(b.Restore(saved).ok());
  EXPECT_EQ(b.pass_epoch(), 1u);
  EXPECT_EQ(b.state().batch, 3u);
  b.SetEpoch(1);                     // the script's set_epoch of the saved epoch
  EXPECT_EQ(Pass(&b, 1)[0], e1[3]);  // a peek does not use up the position
  EXPECT_EQ(b.state().batch, 3u);
  const auto rest = Pass(&b, 4);  // up to the last batch, its end not seen yet
  EXPECT_EQ(rest.back(), e1.back());
  EXPECT_EQ(b.pass_epoch(), 1u);  // ... so the position still holds
  const auto whole_rest = Pass(&b);
  ASSERT_EQ(whole_rest.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(whole_rest[i], e1[3 + i]);
  EXPECT_EQ(b.pass_epoch(), 2u);
  b.SetEpoch(1);  // the saved position was used up: epoch 1 again is the whole epoch
  EXPECT_EQ(Pass(&b), e1);
  // Another epoch chosen after a restore drops the saved position.
  auto n = Loader::Open(dir.path(), o);
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE((*n)->Restore(saved).ok());
  (*n)->SetEpoch(0);
  EXPECT_EQ(Pass(n->get()), e0);
  (*n)->SetEpoch(1);
  EXPECT_EQ(Pass(n->get()), e1);
}
// A sampler's indices for each epoch.
std::vector<uint64_t> SamplerOrder(uint64_t epoch, size_t n, uint64_t records) {
  std::vector<uint64_t> order;
  for (size_t i = 0; i < n; ++i) order.push_back(Mix64(epoch * 1000 + i) % records);  // repeats too
  return order;
}

// An order given for each epoch (a sampler's indices) is read in that order,
// in batches of batch_size (drop_last drops the short one), the same with
// any number of workers, with compressed blocks decompressed on first use.
TEST(LoaderTest, AGivenOrderIsReadInItsOrderWhateverTheWorkers) {
  TempDir dir;
  WriteRawDataset(dir.path(), 300, 4096, 32);
  LoaderOptions o;
  o.shuffle = ShuffleMode::kGiven;
  o.batch_size = 8;
  std::string first_bytes;
  for (int workers : {1, 3}) {
    for (bool drop_last : {false, true}) {
      o.workers = workers;
      o.drop_last = drop_last;
      auto l = Loader::Open(dir.path(), o);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      EXPECT_EQ((*l)->shuffle_mode(), ShuffleMode::kGiven);
      for (uint64_t epoch = 0; epoch < 2; ++epoch) {
        const std::vector<uint64_t> order = SamplerOrder(epoch, 37 + epoch * 10, 300);
        ASSERT_TRUE((*l)->SetEpochOrder(epoch, order).ok());
        ASSERT_TRUE((*l)->StartEpoch(epoch).ok());
        std::vector<uint64_t> read;
        std::string bytes;
        for (;;) {
          const Batch* b = nullptr;
          ASSERT_TRUE((*l)->Next(&b).ok());
          if (b == nullptr) break;
          const size_t kept = drop_last ? order.size() / 8 * 8 : order.size();
          EXPECT_EQ(static_cast<size_t>(b->size), std::min<size_t>(8, kept - read.size()));
          for (int i = 0; i < b->size; ++i) {
            read.push_back(b->sample_ids[i]);
            EXPECT_EQ(b->data[i * 12], b->sample_ids[i] & 0xFF) << "the record's own bytes";
          }
          bytes.append(reinterpret_cast<const char*>(b->data), b->sample_bytes() * b->size);
        }
        const size_t kept = drop_last ? order.size() / 8 * 8 : order.size();
        EXPECT_EQ(read, std::vector<uint64_t>(order.begin(), order.begin() + kept));
        if (epoch == 1 && !drop_last) {
          if (first_bytes.empty()) first_bytes = bytes;
          EXPECT_EQ(bytes, first_bytes) << workers << " workers";
        }
      }
    }
  }
}

// A state mid-way through a given order holds the order, and a new loader
// continues from it exactly, without the order being given again; a state
// at an epoch's start holds none, and the next pass then needs its order.
TEST(LoaderTest, AGivenOrderResumesMidEpochFromTheOrderItsStateHolds) {
  TempDir dir;
  WriteRawDataset(dir.path(), 200, 4096, 32);
  LoaderOptions o;
  o.shuffle = ShuffleMode::kGiven;
  o.batch_size = 5;
  o.workers = 2;
  const std::vector<uint64_t> order = SamplerOrder(3, 33, 200);
  auto a = Loader::Open(dir.path(), o);
  ASSERT_TRUE(a.ok());
  (*a)->SetEpoch(3);
  ASSERT_TRUE((*a)->SetEpochOrder(3, order).ok());
  const auto whole = Pass(a->get());
  ASSERT_EQ(whole.size(), 7u);
  EXPECT_EQ((*a)->state().order, std::vector<uint64_t>()) << "read to its end: nothing to keep";
  (*a)->SetEpoch(3);
  ASSERT_TRUE((*a)->SetEpochOrder(3, order).ok());
  ASSERT_TRUE((*a)->BeginPass().ok());
  EXPECT_EQ((*a)->state().order, order) << "a pass begun keeps its order from batch 0 on";
  for (int i = 0; i < 2; ++i) {
    const Batch* b = nullptr;
    ASSERT_TRUE((*a)->Next(&b).ok());
  }
  Result<LoaderState> saved = LoaderStateFromJson(LoaderStateToJson((*a)->state()));
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->shuffle, "given");
  EXPECT_EQ(saved->batch, 2u);
  EXPECT_EQ(saved->order, order);

  auto b = Loader::Open(dir.path(), o);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->Restore(*saved).ok());
  (*b)->EndPass();
  EXPECT_TRUE((*b)->PassResumes());
  const auto rest = Pass(b->get());
  EXPECT_EQ(rest, std::vector<std::vector<uint64_t>>(whole.begin() + 2, whole.end()));
  EXPECT_FALSE((*b)->PassResumes());
  EXPECT_EQ((*b)->pass_epoch(), 4u);
  Status s = (*b)->BeginPass();
  EXPECT_EQ(s.message(),
            "epoch 4 has no order: this loader reads the orders it is given (a sampler's "
            "indices); give the epoch's with SetEpochOrder before starting it");
  // Another batch size mid-epoch: the rest of the order, cut again.
  o.batch_size = 4;
  auto c = Loader::Open(dir.path(), o);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Restore(*saved).ok());
  std::vector<uint64_t> cut;
  for (const auto& batch : Pass(c->get())) cut.insert(cut.end(), batch.begin(), batch.end());
  EXPECT_EQ(cut, std::vector<uint64_t>(order.begin() + 10, order.end()));
  // At an epoch's start a state restores the epoch only; its order comes next.
  LoaderState start = *saved;
  start.batch = 0;
  start.order.clear();
  ASSERT_TRUE((*c)->Restore(start).ok());
  EXPECT_FALSE((*c)->PassResumes());
  EXPECT_EQ((*c)->pass_epoch(), 3u);
  EXPECT_EQ((*c)->state().epoch, 3u);
  // Mid-epoch without its order, or with a record the dataset lacks: refused.
  LoaderState orderless = *saved;
  orderless.order.clear();
  EXPECT_EQ((*c)->Restore(orderless).message(),
            "loader state: mid-way through epoch 3 of a given order, but it holds no 'order' to "
            "continue");
  LoaderState alien = *saved;
  alien.order[4] = 200;
  EXPECT_EQ((*c)->Restore(alien).message(),
            "loader state: its order names record 200 (at position 4), and the dataset has 200 "
            "records");
}

TEST(LoaderTest, GivenOrdersAreCheckedWhereTheyAreGiven) {
  TempDir dir;
  WriteRawDataset(dir.path(), 50, 4096);
  LoaderOptions o;
  o.batch_size = 8;
  o.shuffle = ShuffleMode::kGiven;
  o.world_size = 2;
  auto two = Loader::Open(dir.path(), o);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().message(),
            "world size 2 with orders given (a sampler's indices): a given order is this rank's "
            "already, and the loader does not partition it again; give world size 1, and let the "
            "sampler partition (DistributedSampler's num_replicas and rank)");
  o.world_size = 1;
  auto l = Loader::Open(dir.path(), o);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->SetEpochOrder(0, {3, 50}).message(),
            "epoch 0's order: index 50 (at position 1) is not a record of the dataset, which has "
            "50 (0..49)");
  ASSERT_TRUE((*l)->SetEpochOrder(0, {}).ok());  // a sampler that yields nothing: no batch
  ASSERT_TRUE((*l)->StartEpoch(0).ok());
  const Batch* b = nullptr;
  ASSERT_TRUE((*l)->Next(&b).ok());
  EXPECT_EQ(b, nullptr);
  o.shuffle = ShuffleMode::kFull;
  auto own = Loader::Open(dir.path(), o);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ((*own)->SetEpochOrder(0, {1}).message(),
            "SetEpochOrder: this loader orders its epochs itself (shuffle 'full'); open it with "
            "ShuffleMode::kGiven to give their orders");
}

// RandomCrop of raw records: each sample is the window its keyed draw chose
// of the padded record (PadCrop), flipped as drawn, in either layout.
TEST(LoaderTest, RandomCropOfRawRecordsCopiesTheDrawnWindow) {
  TempDir dir;
  WriteRawDataset(dir.path(), 40, 4096);  // 4x3x1 records
  LoaderOptions o;
  o.batch_size = 8;
  o.seed = 9;
  o.shuffle = ShuffleMode::kNone;
  o.transform.kind = TransformKind::kCrop;
  o.transform.height = 4;
  o.transform.width = 3;
  o.transform.pad_left = o.transform.pad_right = 2;
  o.transform.pad_top = 1;
  o.transform.padding_mode = PaddingMode::kReflect;
  o.transform.flip_prob = 0.5;
  auto l = Started(dir.path(), o, 2);
  ASSERT_NE(l, nullptr);
  int flipped = 0;
  for (uint64_t batch = 0; batch < 5; ++batch) {
    const Batch* b = nullptr;
    ASSERT_TRUE(l->Next(&b).ok());
    ASSERT_NE(b, nullptr);
    for (int i = 0; i < b->size; ++i) {
      std::string record(12, static_cast<char>(b->sample_ids[i] % 251));
      record[0] = static_cast<char>(b->sample_ids[i] & 0xFF);
      record[1] = 0;
      KeyedRng rng(o.seed, 2, batch * 8 + i, 0xC20B);  // the loader's key: (seed, epoch, position)
      Result<CropDecision> crop = RandomCrop(3, 4, o.transform, &rng);
      ASSERT_TRUE(crop.ok());
      flipped += crop->flip;
      uint8_t want[12];
      PadCropScratch scratch;
      PadCrop(reinterpret_cast<const uint8_t*>(record.data()), 3, 4, 1, o.transform, *crop,
              Layout::kNCHW, want, &scratch);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(want), 12),
                std::string(reinterpret_cast<const char*>(b->data + i * 12), 12))
          << "record " << b->sample_ids[i];
    }
  }
  EXPECT_GT(flipped, 5);
  EXPECT_LT(flipped, 35);
  // Padded, a crop larger than the record is refused when the loader opens.
  o.transform.height = 7;
  auto big = Loader::Open(dir.path(), o);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("RandomCrop 7x3 of an image of 4x3, 5x7 once padded"),
            std::string::npos)
      << big.status().message();
}

TEST(LoaderTest, NchwAndNhwcLayouts) {
  TempDir dir;
  // 2x2x3 records: pixel p channel c = 10 * p + c.
  DatasetWriterOptions wo;
  wo.shard.kind = format::RecordKind::kRawU8;
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
  o.shard.kind = format::RecordKind::kRawU8;
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

// A label the manifest's classes do not cover is a corrupt record, named
// (VerifyDataset's rule: -1, unlabelled, or below the class count); a
// training run would otherwise index past its classifier's outputs.
TEST(LoaderTest, LabelOutsideTheClassesIsACorruptRecord) {
  TempDir dir;
  DatasetWriterOptions wo;
  wo.shard.kind = format::RecordKind::kRawU8;
  auto w = DatasetWriter::Create(dir.path(), wo);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 40; ++i) {
    const int32_t label = i == 17 ? 3 : i == 5 ? -1 : i % 3;
    ASSERT_TRUE((*w)->Add(std::string(12, char(i)), label, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {4, 3, 1};
  m.classes = {"a", "b", "c", "d"};
  ASSERT_TRUE((*w)->Finish(m).ok());
  // The writer refuses such labels: a manifest edited afterwards has them.
  auto edited = ReadManifest(dir.path());
  ASSERT_TRUE(edited.ok());
  edited->classes.pop_back();
  ASSERT_TRUE(WriteManifest(dir.path(), *edited).ok());
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  auto l = Started(dir.path(), o);
  ASSERT_NE(l, nullptr);
  Status err;
  std::set<int32_t> labels;
  for (int i = 0; i < 10 && err.ok(); ++i) {
    const Batch* b = nullptr;
    err = l->Next(&b);
    if (err.ok() && b == nullptr) break;
    if (err.ok()) labels.insert(b->labels, b->labels + b->size);
  }
  ASSERT_FALSE(err.ok()) << "label 3 of 3 classes reached a batch";
  EXPECT_TRUE(err.IsCorruption()) << err.ToString();
  EXPECT_NE(err.message().find("record 17"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find("label 3 outside the manifest's 3 classes"), std::string::npos)
      << err.message();
  EXPECT_EQ(labels.count(3), 0u);

  o.corrupt_policy = CorruptPolicy::kSkip;  // the record is replaced; -1 passes
  auto l2 = Started(dir.path(), o);
  ASSERT_NE(l2, nullptr);
  std::set<uint64_t> ids;
  for (;;) {
    const Batch* b = nullptr;
    ASSERT_TRUE(l2->Next(&b).ok());
    if (b == nullptr) break;
    for (int i = 0; i < b->size; ++i) {
      ids.insert(b->sample_ids[i]);
      EXPECT_GE(b->labels[i], -1);
      EXPECT_LT(b->labels[i], 3);
    }
  }
  EXPECT_EQ(ids.count(17), 0u);
  EXPECT_EQ(ids.count(5), 1u) << "an unlabelled record is valid data";
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
  EXPECT_EQ(st.corrupt_records, 2u);
  EXPECT_EQ(st.samples_replaced, 2u);
  ASSERT_EQ(st.corrupt_messages.size(), 2u);
}

TEST(LoaderTest, SkipBudgetExceededIsAnError) {
  TempDir dir;
  WriteStoredRawDataset(dir.path(), 100);
  for (uint32_t v : {3u, 13u, 23u, 33u}) CorruptRecord(dir.path(), v);
  LoaderOptions o;
  o.batch_size = 100;
  o.shuffle = ShuffleMode::kNone;
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

// A lease keeps its batch: held while 20 more batches go through a 2-slot
// ring, its bytes, labels and ids are those an uninterrupted read gave; it
// outlives the loader; and the memory comes from the consumer's allocator.
TEST(LoaderTest, LeasedBatchesKeepTheirValuesWhileTheLoaderMovesOn) {
  TempDir dir;
  WriteRawDataset(dir.path(), 1000);
  LoaderOptions o;
  o.batch_size = 16;
  o.prefetch = 2;
  o.workers = 2;
  const Seen want = ReadEpoch(dir.path(), o, 3);
  std::atomic<int> allocated{0};
  o.allocator = [&](size_t bytes) {
    ++allocated;
    return DefaultSlotAllocator(bytes);
  };
  std::shared_ptr<const Batch> kept, late;
  {
    auto l = Started(dir.path(), o, 3);
    ASSERT_NE(l, nullptr);
    for (uint64_t k = 0; k < 25; ++k) {
      std::shared_ptr<const Batch> b;
      ASSERT_TRUE(l->Next(&b).ok());
      ASSERT_NE(b, nullptr);
      if (k == 2) kept = b;
      if (k == 24) late = b;
    }
    EXPECT_EQ(l->next_batch(), 25u);
    EXPECT_EQ(l->epoch(), 3u);
  }  // the loader is gone; the leases stay
  EXPECT_GT(allocated.load(), 0);
  for (const auto& b : {kept, late}) {
    const uint64_t k = b->index;
    EXPECT_EQ(std::vector<uint64_t>(b->sample_ids, b->sample_ids + b->size), want.ids[k]);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b->data), b->sample_bytes() * b->size),
              want.bytes[k]);
    for (int i = 0; i < b->size; ++i) EXPECT_EQ(b->labels[i], int32_t(b->sample_ids[i] % 10));
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
  o.shuffle = ShuffleMode::kNone;
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
  o.shuffle = ShuffleMode::kNone;
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

// Every batch of the epoch the loader has started, as bytes (ids and pixels).
Seen ReadRest(Loader* l) {
  Seen seen;
  for (;;) {
    const Batch* b = nullptr;
    Status s = l->Next(&b);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok() || b == nullptr) break;
    seen.ids.emplace_back(b->sample_ids, b->sample_ids + b->size);
    seen.bytes.emplace_back(reinterpret_cast<const char*>(b->data), b->sample_bytes() * b->size);
  }
  return seen;
}

TEST_F(JpegLoaderTest, SetSizeBetweenEpochsGivesTheBatchesOfALoaderOpenedAtThatSize) {
  for (TransformKind kind : {TransformKind::kTrain, TransformKind::kVal, TransformKind::kResize}) {
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
      LoaderOptions o;
      o.batch_size = 4;  // 6 records: a full batch and a padded one
      o.workers = 2;
      o.seed = 5;
      o.layout = layout;
      o.transform.kind = kind;
      o.transform.size = 64;
      auto l = Loader::Open(dir_.path(), o);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      Loader& loader = **l;
      const int sizes[] = {64, 40, 96, 64};
      for (uint64_t epoch = 0; epoch < 4; ++epoch) {
        const int size = sizes[epoch];
        ASSERT_TRUE(loader.SetSize(size).ok());
        EXPECT_EQ(loader.height(), size);
        EXPECT_EQ(loader.width(), size);
        ASSERT_TRUE(loader.StartEpoch(epoch).ok());
        Seen got = ReadRest(&loader);
        LoaderOptions fresh = o;
        fresh.transform.size = size;
        Seen want = ReadEpoch(dir_.path(), fresh, epoch);
        ASSERT_EQ(got.bytes.size(), 2u);
        EXPECT_EQ(got.ids, want.ids);
        EXPECT_TRUE(got.bytes == want.bytes)
            << TransformKindName(kind) << " epoch " << epoch << " at " << size;
        EXPECT_EQ(got.bytes[0].size(), size_t(4) * 3 * size * size);
      }
    }
  }
}

TEST_F(JpegLoaderTest, SetSizeIsRefusedMidEpochAndLeavesHeldBatchesAlone) {
  LoaderOptions o;
  o.batch_size = 2;
  o.transform.kind = TransformKind::kTrain;
  o.transform.size = 48;
  auto l = Started(dir_.path(), o, 0);
  ASSERT_NE(l, nullptr);
  std::shared_ptr<const Batch> held;
  ASSERT_TRUE(l->Next(&held).ok());
  ASSERT_NE(held, nullptr);
  const std::string before(reinterpret_cast<const char*>(held->data),
                           held->sample_bytes() * held->size);
  Status mid = l->SetSize(32);
  EXPECT_EQ(mid.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(mid.message().find("between epochs"), std::string::npos) << mid.ToString();
  EXPECT_EQ(l->height(), 48);
  Seen rest = ReadRest(l.get());  // the epoch goes on at its size
  EXPECT_EQ(rest.bytes.size(), 2u);
  ASSERT_TRUE(l->SetSize(32).ok());  // read to its end: between epochs
  ASSERT_TRUE(l->StartEpoch(1).ok());
  Seen next = ReadRest(l.get());
  ASSERT_EQ(next.bytes.size(), 3u);
  EXPECT_EQ(next.bytes[0].size(), size_t(2) * 3 * 32 * 32);
  EXPECT_EQ(held->height, 48);  // the lease of the old size is as it was
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(held->data), held->sample_bytes() * held->size),
      before);
  EXPECT_EQ(l->SetSize(0).code(), Status::Code::kInvalidArgument);  // the loader's own bounds
  EXPECT_EQ(l->SetSize(5000).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(l->height(), 32);
}

TEST_F(JpegLoaderTest, StateKeepsTheSizeAndRestoreSetsItBack) {
  LoaderOptions o;
  o.batch_size = 2;
  o.workers = 2;
  o.seed = 3;
  o.transform.kind = TransformKind::kTrain;
  o.transform.size = 64;
  auto a = Loader::Open(dir_.path(), o);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->SetSize(40).ok());
  ASSERT_TRUE((*a)->StartEpoch(3).ok());
  const Batch* first = nullptr;
  ASSERT_TRUE((*a)->Next(&first).ok());
  auto saved = LoaderStateFromJson(LoaderStateToJson((*a)->state()));
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->size, 40);
  Seen want = ReadRest(a->get());
  ASSERT_EQ(want.bytes.size(), 2u);

  auto b = Loader::Open(dir_.path(), o);  // opened at 64, as a restarted job's
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->Restore(*saved).ok());
  EXPECT_EQ((*b)->height(), 40);
  // Restore started the saved epoch at its batch.
  Seen got = ReadRest(b->get());
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_TRUE(got.bytes == want.bytes);

  // A state another transform made is refused, and changes nothing.
  LoaderOptions other = o;
  other.transform.min_scale = 0.35;
  auto c = Loader::Open(dir_.path(), other);
  ASSERT_TRUE(c.ok());
  Status refused = (*c)->Restore(*saved);
  EXPECT_EQ(refused.code(), Status::Code::kInvalidArgument) << refused.ToString();
  EXPECT_EQ((*c)->height(), 64);
}

TEST(LoaderTest, RawRecordsAsStoredHaveNoSizeToSet) {
  TempDir dir;
  WriteRawDataset(dir.path(), 20);
  LoaderOptions o;
  o.batch_size = 4;
  auto l = Loader::Open(dir.path(), o);
  ASSERT_TRUE(l.ok());
  Status s = (*l)->SetSize(8);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("as stored"), std::string::npos) << s.ToString();
  EXPECT_EQ((*l)->state().size, 0);
}

TEST(ResolutionScheduleTest, SidesAreFfcvsRampRoundedToMultiplesOf32) {
  // numpy: int(np.round(np.interp([e], [start, end], [min, max])[0] / 32)) * 32
  auto s = MakeResolutionSchedule(160, 192, 65, 76);
  ASSERT_TRUE(s.ok());
  const int want[] = {160, 160, 160, 160, 160, 160, 160, 160, 160, 160,
                      160, 192, 192, 192, 192, 192, 192, 192, 192, 192};
  for (int e = 60; e < 80; ++e) EXPECT_EQ(s->SizeAt(e), want[e - 60]) << e;
  auto r = ParseResolutionSchedule("128:224:0:8");
  ASSERT_TRUE(r.ok());
  const int ramp[] = {128, 128, 160, 160, 192, 192, 192, 224, 224, 224};
  for (int e = 0; e < 10; ++e) EXPECT_EQ(r->SizeAt(e), ramp[e]) << e;
  auto halves = ParseResolutionSchedule("160:192:2:10");  // 176 / 32 = 5.5: half to even
  ASSERT_TRUE(halves.ok());
  EXPECT_EQ(halves->SizeAt(6), 192);
  auto flat = ParseResolutionSchedule("64:64:3:3");
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->SizeAt(0), 64);
  EXPECT_EQ(flat->SizeAt(1000000), 64);
  EXPECT_FALSE(ResolutionSchedule().active());
}

TEST(ResolutionScheduleTest, BadTextIsRefusedSayingWhat) {
  const std::pair<const char*, const char*> bad[] = {
      {"", "not a whole number"},
      {"160:192:65", "four numbers"},
      {"160:192:65:76:1", "four numbers"},
      {"192:160:0:5", "MIN is larger"},
      {"160:192:9:5", "START is after"},
      {"8:192:0:5", "16..4096"},
      {"160:9000:0:5", "16..4096"},
      {"160:192:-1:5", "not a whole number"},
      {"160:192:x:5", "not a whole number"},
      {"160::0:5", "not a whole number"},
      {"160:192:0:99999999", "not a whole number"},
      {"160:192:0:2000000", "0..1000000"},
  };
  for (const auto& [text, why] : bad) {
    auto r = ParseResolutionSchedule(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("--resolution-schedule"), std::string::npos);
  }
}

}  // namespace
}  // namespace shardkit
