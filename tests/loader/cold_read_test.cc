// Cold storage: with the shards evicted from the page cache, the loader makes
// storage read about the bytes of the records it delivers, in every shuffle
// and read mode: random record reads never pull in the read-ahead window
// around each record (before: 113x on an 8 MB window), block-local reading
// is sequential. Measured with /proc/self/io's read_bytes; skipped where the
// filesystem reports none (tmpfs).
#include <gtest/gtest.h>

#include "base/random.h"
#include "loader/loader.h"
#include "shard/shard.h"
#include "storage/system.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

// n uncompressed 64x64x4 records (16 KiB each, about a small ImageNet JPEG).
void WriteDataset(const std::string& dir, int n) {
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kRawU8;
  o.shard.compression = CompressionMode::kStore;
  o.shard_size = 4u << 20;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok());
  KeyedRng rng(3);
  std::string px(64 * 64 * 4, '\0');
  for (int i = 0; i < n; ++i) {
    for (auto& c : px) c = static_cast<char>(rng.Below(256));
    ASSERT_TRUE((*w)->Add(px, i % 10, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {64, 64, 4};
  for (int c = 0; c < 10; ++c) m.classes.push_back("c" + std::to_string(c));
  ASSERT_TRUE((*w)->Finish(m).ok());
}

void Evict(const std::string& dir) {
  auto m = ReadManifest(dir);
  ASSERT_TRUE(m.ok());
  for (const auto& s : m->shards) ASSERT_TRUE(EvictFromPageCache(JoinPath(dir, s.file)).ok());
}

TEST(ColdReadTest, StorageReadsAreAboutTheRecordBytesInEveryMode) {
  testing::TempDir dir;
  WriteDataset(dir / "ds", 1200);  // 19.7 MB in 5 shards
  using Direct = LoaderOptions::DirectReads;
  struct Mode {
    const char* name;
    ShuffleMode shuffle;
    bool mmap;
    Direct direct;
    uint64_t batches;  // full shuffle: a fraction of the epoch; block-local: all of it
    double limit;      // storage bytes per delivered byte, beside the ring's read-ahead
  } modes[] = {
      {"full shuffle, mmap allowed", ShuffleMode::kFull, true, Direct::kNever, 20, 1.5},
      {"full shuffle, pread", ShuffleMode::kFull, false, Direct::kNever, 20, 1.5},
      {"full shuffle, O_DIRECT", ShuffleMode::kFull, false, Direct::kAlways, 20, 1.2},
      {"block-local, mmap", ShuffleMode::kBlockLocal, true, Direct::kAuto, 0, 1.05},
      {"block-local, pread", ShuffleMode::kBlockLocal, false, Direct::kAuto, 0, 1.05},
  };
  for (const Mode& mode : modes) {
    SCOPED_TRACE(mode.name);
    Evict(dir / "ds");
    const uint64_t io0 = StorageReadBytes();
    LoaderOptions o;
    o.batch_size = 20;
    o.workers = 2;
    o.prefetch = 1;  // the ring reads ahead of what is delivered: keep it short
    o.shuffle = mode.shuffle;
    o.mmap = mode.mmap;
    o.direct_reads = mode.direct;
    o.transform.kind = TransformKind::kNone;
    auto loader = Loader::Open(dir / "ds", o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    uint64_t delivered = 0;
    for (uint64_t k = 0; mode.batches == 0 || k < mode.batches; ++k) {
      const Batch* b = nullptr;
      ASSERT_TRUE((*loader)->Next(&b).ok());
      if (b == nullptr) break;
      delivered += b->sample_bytes() * b->real_size;
    }
    loader->reset();  // the ring's read-ahead is part of what was read
    const uint64_t read = StorageReadBytes() - io0;
    if (read == 0)
      GTEST_SKIP() << "this filesystem reports no read_bytes (tmpfs?): nothing to measure";
    const double ratio = double(read) / double(delivered);
    std::printf("%-28s %8.2f MB read for %8.2f MB delivered: %.2fx\n", mode.name, read / 1e6,
                delivered / 1e6, ratio);
    // The ring fills prefetch batches beyond the ones taken: allow for them.
    const double ahead = mode.batches == 0 ? 0 : 2.0 / double(mode.batches);
    EXPECT_LE(ratio, mode.limit + ahead) << read << " bytes read for " << delivered << " delivered";
  }
}

}  // namespace
}  // namespace shardkit
