// The loader over storage that is not the POSIX Env (tests/common/storage_double.h,
// no root, no FUSE): every byte goes through the Env and the batches are the
// ones the POSIX storage gives; on slow storage the read-ahead keeps several
// reads in flight; a failed read is an I/O error naming its shard and record
// (or block) in every shuffle mode and read path, never a replaced sample;
// and the loader tells the storage how it reads.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "loader/loader.h"
#include "shard/shard.h"
#include "storage/remote/node_cache.h"
#include "tests/common/storage_double.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::StorageDouble;
using testing::TempDir;

constexpr int kSide = 80;  // 80x80x3 = 19200 bytes: records the loader reads ahead one by one
constexpr size_t kBytes = size_t(kSide) * kSide * 3;

// Raw records of kBytes, record i filled from i, over several shards.
void WriteDataset(const std::string& dir, int n, CompressionMode compression) {
  testing::WriteRawDataset(dir, n, kSide, compression, 4 * kBytes, 24 * kBytes);
}

LoaderOptions Options(ShuffleMode mode, int read_depth) {
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.seed = 11;
  o.shuffle = mode;
  o.read_depth = read_depth;
  o.layout = Layout::kNHWC;
  return o;
}

// Every batch of epoch 1: sample ids and pixels, or the error that ended it.
struct Epoch {
  std::vector<uint64_t> ids;
  std::string pixels;
  Status error;
};
Epoch ReadEpoch(const std::string& dir, const LoaderOptions& o) {
  Epoch e;
  auto l = Loader::Open(dir, o);
  if (!l.ok()) {
    e.error = l.status();
    return e;
  }
  e.error = (*l)->StartEpoch(1);
  while (e.error.ok()) {
    const Batch* b = nullptr;
    e.error = (*l)->Next(&b);
    if (!e.error.ok() || b == nullptr) break;
    e.ids.insert(e.ids.end(), b->sample_ids, b->sample_ids + b->size);
    e.pixels.append(reinterpret_cast<const char*>(b->data), b->size * b->sample_bytes());
  }
  return e;
}

const ShuffleMode kModes[] = {ShuffleMode::kFull, ShuffleMode::kBlockLocal, ShuffleMode::kNone};
const CompressionMode kCompressions[] = {CompressionMode::kStore, CompressionMode::kZstd};

TEST(StorageTest, BatchesThroughAnotherEnvAreThePosixOnes) {
  for (CompressionMode c : kCompressions) {
    TempDir dir;
    WriteDataset(dir.path(), 60, c);
    // Every record's bytes, as stored, come through the Env at least once.
    uint64_t stored = 0;
    {
      auto ds = Dataset::Open(dir.path());
      ASSERT_TRUE(ds.ok());
      for (size_t s = 0; s < (*ds)->num_shards(); ++s) {
        for (uint32_t b = 0; b < (*ds)->shard(s).num_blocks(); ++b)
          stored += (*ds)->shard(s).block(b).stored_size;
      }
    }
    for (ShuffleMode mode : kModes) {
      for (int depth : {0, 8}) {
        SCOPED_TRACE(std::string(ShuffleModeName(mode)) + " depth " + std::to_string(depth) +
                     (c == CompressionMode::kZstd ? " zstd" : " stored"));
        LoaderOptions o = Options(mode, depth);
        const Epoch posix = ReadEpoch(dir.path(), o);
        ASSERT_TRUE(posix.error.ok()) << posix.error.ToString();
        StorageDouble env;
        o.env = &env;
        const Epoch other = ReadEpoch(dir.path(), o);
        ASSERT_TRUE(other.error.ok()) << other.error.ToString();
        EXPECT_EQ(other.ids, posix.ids);
        EXPECT_TRUE(other.pixels == posix.pixels);
        EXPECT_EQ(posix.ids.size(), 60u);
        EXPECT_GE(env.bytes(), stored) << "bytes read around the Env";
      }
    }
  }
}

constexpr int kSlowReadDepth = 8;

// On storage where a read takes a while, the reads ahead are in flight
// together: the double holds each read until four wait at once, which a
// reader that reads one record at a time never gets to.
TEST(StorageTest, SlowStorageHasManyReadsInFlight) {
  TempDir dir;
  WriteDataset(dir.path(), 64, CompressionMode::kStore);
  for (ShuffleMode mode : kModes) {
    SCOPED_TRACE(ShuffleModeName(mode));
    StorageDouble env;
    LoaderOptions o = Options(mode, kSlowReadDepth);
    o.workers = 1;
    o.env = &env;
    auto l = Loader::Open(dir.path(), o);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    env.set_latency_ns(200'000);
    env.GateUntilConcurrent(4, 60'000);  // the bound only ends a failing test
    ASSERT_TRUE((*l)->StartEpoch(0).ok());
    uint64_t samples = 0;
    for (;;) {
      const Batch* b = nullptr;
      ASSERT_TRUE((*l)->Next(&b).ok());
      if (b == nullptr) break;
      samples += static_cast<uint64_t>(b->size);
    }
    EXPECT_EQ(samples, 64u);
    EXPECT_TRUE(env.gate_opened())
        << "reads never waited four at a time (at most " << env.peak_in_flight() << " in flight)";
  }
}

// A read that fails at record 5 of the first shard: an I/O error that names
// the shard, in every mode, with and without the read queue, stored or
// compressed, and even under on_corrupt=skip (a replacement would hide a
// failing disk).
TEST(StorageTest, AFailedReadIsAnIOErrorNamingItsShard) {
  for (CompressionMode c : kCompressions) {
    TempDir dir;
    WriteDataset(dir.path(), 48, c);
    auto ds = Dataset::Open(dir.path());
    ASSERT_TRUE(ds.ok());
    const ShardReader& r = (*ds)->shard(0);
    const format::BlockEntry& b = r.block(r.record(5).block);
    const uint64_t offset =
        c == CompressionMode::kStore ? b.offset + r.record(5).offset : b.offset + b.stored_size / 2;
    for (ShuffleMode mode : kModes) {
      for (int depth : {0, 8}) {
        SCOPED_TRACE(std::string(ShuffleModeName(mode)) + " depth " + std::to_string(depth) +
                     (c == CompressionMode::kZstd ? " zstd" : " stored"));
        StorageDouble env;
        LoaderOptions o = Options(mode, depth);
        o.corrupt_policy = CorruptPolicy::kSkip;
        o.env = &env;
        auto l = Loader::Open(dir.path(), o);
        ASSERT_TRUE(l.ok()) << l.status().ToString();
        env.FailReads("shard-00000.sks", offset, 1);
        Status s = (*l)->StartEpoch(0);
        while (s.ok()) {
          const Batch* batch = nullptr;
          s = (*l)->Next(&batch);
          if (batch == nullptr) break;
        }
        EXPECT_TRUE(s.IsIOError()) << s.ToString();
        EXPECT_NE(s.message().find("shard-00000.sks"), std::string::npos) << s.ToString();
        EXPECT_NE(s.message().find("injected read error"), std::string::npos) << s.ToString();
        const std::string where = c == CompressionMode::kStore
                                      ? "record 5"
                                      : "block " + std::to_string(r.record(5).block);
        EXPECT_NE(s.message().find(where), std::string::npos) << s.ToString();
      }
    }
  }
}

// The loader says how it reads and the storage picks its read path: records
// at random for a full shuffle (around the cache where asked), sequential
// with views (mappings) otherwise, unless views are turned off.
// Storage that cannot map (object storage, this double) holds a shard's
// index as a copy read at open: checking its chunks later (each on first
// use) asks the storage for nothing more. A read-ahead hint per chunk would
// be a request each on object storage, and would crowd out the blocks'.
TEST(StorageTest, IndexChunksHeldAsACopyAskTheStorageForNothing) {
  TempDir dir;
  constexpr int kSmall = 4;  // 48-byte records: several index chunks per shard
  testing::WriteRawDataset(dir.path(), 5000, kSmall, CompressionMode::kZstd, 4096, 1 << 20);
  StorageDouble env;
  auto ds = Dataset::Open(dir.path(), &env);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const uint64_t reads = env.reads(), hints = env.hints();
  uint64_t chunks = 0;
  for (size_t s = 0; s < (*ds)->num_shards(); ++s) {
    const ShardReader& r = (*ds)->shard(s);
    ASSERT_TRUE(r.CheckIndex().ok());
    chunks += (r.num_records() + format::kChunkRecords - 1) / format::kChunkRecords;
  }
  EXPECT_GT(chunks, 2u);
  EXPECT_EQ(env.reads(), reads);
  EXPECT_EQ(env.hints(), hints);
}

TEST(StorageTest, ADatasetTheNodeCacheHoldsWholeIsReadAsALocalOne) {
  // Through the node cache, remote storage is read as remote (deep read
  // queues, requests merged) until the cache holds every shard whole; then
  // as a local dataset, though still shuffled as a remote one (the ranks of
  // other nodes may not hold it). Both read the batches the POSIX storage
  // gives.
  TempDir dir, cache;
  // Shards of 3 chunks or more: opening one caches its first and last only.
  testing::WriteRawDataset(dir.path(), 400, kSide, CompressionMode::kStore, 4 * kBytes,
                           200 * kBytes);
  const Epoch want = ReadEpoch(dir.path(), Options(ShuffleMode::kFull, 0));
  ASSERT_TRUE(want.error.ok()) << want.error.ToString();
  StorageDouble storage;
  storage.set_remote(true);
  auto env = NewCachingEnv(&storage, NodeCacheOptions{cache.path(), 0});
  ASSERT_TRUE(env.ok());
  auto before = Dataset::Open(dir.path(), env->get());
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_TRUE((*before)->remote_reads());
  LoaderOptions o = Options(ShuffleMode::kFull, kAutoReadDepth);
  o.env = &storage;
  o.cache_dir = cache.path();
  auto shuffle_reason = [&] {
    LoaderOptions a = o;
    a.shuffle = ShuffleMode::kAuto;
    auto l = Loader::Open(dir.path(), a);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? (*l)->shuffle_reason() : std::string();
  };
  const std::string reason = shuffle_reason();
  for (int pass = 0; pass < 2; ++pass) {
    const Epoch got = ReadEpoch(dir.path(), o);
    ASSERT_TRUE(got.error.ok()) << got.error.ToString();
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.pixels, want.pixels);
  }
  before->reset();
  auto after = Dataset::Open(dir.path(), env->get());
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE((*after)->remote_reads());
  EXPECT_TRUE((*after)->remote());  // what every rank agrees on (the shuffle) stays
  EXPECT_EQ(shuffle_reason(), reason);
  // Shards not on disk (the cache's files removed): remote again.
  after->reset();
  ASSERT_EQ(::system(("rm -f " + cache.path() + "/*").c_str()), 0);
  auto partly = Dataset::Open(dir.path(), env->get());
  ASSERT_TRUE(partly.ok());
  EXPECT_TRUE((*partly)->remote_reads());
}

TEST(StorageTest, TheLoaderTellsTheStorageHowItReads) {
  TempDir dir;
  WriteDataset(dir.path(), 16, CompressionMode::kZstd);
  using Pattern = AccessHints::Pattern;
  struct Case {
    ShuffleMode mode;
    bool mmap;
    DirectReads direct;
    Pattern pattern;
    bool views, uncached;
  } cases[] = {
      {ShuffleMode::kFull, true, DirectReads::kNever, Pattern::kRandom, false, false},
      {ShuffleMode::kFull, true, DirectReads::kAlways, Pattern::kRandom, false, true},
      {ShuffleMode::kBlockLocal, true, DirectReads::kAlways, Pattern::kSequential, true, false},
      {ShuffleMode::kNone, false, DirectReads::kAuto, Pattern::kSequential, false, false},
  };
  for (const Case& k : cases) {
    StorageDouble env;
    LoaderOptions o = Options(k.mode, 0);
    o.mmap = k.mmap;
    o.direct_reads = k.direct;
    o.env = &env;
    ASSERT_TRUE(Loader::Open(dir.path(), o).ok());
    const AccessHints h = env.last_hints();
    EXPECT_EQ(h.pattern, k.pattern) << ShuffleModeName(k.mode);
    EXPECT_EQ(h.views, k.views) << ShuffleModeName(k.mode);
    EXPECT_EQ(h.uncached, k.uncached) << ShuffleModeName(k.mode);
  }
}

// The POSIX backend picks its read path from the hints: a mapping where
// views are welcome, O_DIRECT for uncached random reads (where the
// filesystem has it: not tmpfs), pread otherwise; every path reads the same
// bytes.
TEST(StorageTest, ThePosixBackendPicksItsReadPathFromTheHints) {
  TempDir dir;
  WriteDataset(dir.path(), 8, CompressionMode::kStore);
  const std::string path = dir / "shard-00000.sks";
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  const bool has_direct = fd >= 0;
  if (fd >= 0) ::close(fd);
  const std::string bytes = testing::ReadFile(path);
  using Pattern = AccessHints::Pattern;
  struct Case {
    AccessHints hints;
    bool mapped, uncached;
  } cases[] = {
      {{Pattern::kSequential, /*views=*/true, /*uncached=*/false}, true, false},
      {{Pattern::kRandom, false, true}, false, has_direct},
      {{Pattern::kRandom, false, false}, false, false},
      {{Pattern::kSequential, false, true}, false, false},  // O_DIRECT is for random reads
  };
  for (const Case& k : cases) {
    auto f = Env::Default()->OpenForReads(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->SetAccess(k.hints).ok());
    EXPECT_EQ((*f)->mapped(), k.mapped);
    EXPECT_EQ((*f)->uncached(), k.uncached);
    std::string got(bytes.size() - 1001, '\0');
    ASSERT_TRUE((*f)->Read(1001, got.size(), got.data()).ok());
    EXPECT_TRUE(got == bytes.substr(1001));
    std::string_view view;
    EXPECT_EQ((*f)->View(7, 100, &view).ok(), k.mapped);
    if (k.mapped) {
      EXPECT_EQ(view, std::string_view(bytes).substr(7, 100));
    }
  }
}

}  // namespace
}  // namespace shardkit
