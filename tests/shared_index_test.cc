// The shard index held through a shared read-only mapping (issue 34): every
// record's entry, label, key and bytes read through it equal what was written
// and what a private copy of the index gives; the mapping is the shard file's
// own pages (shared with every process that maps it), not private memory;
// opening reads O(blocks) of the index and the record entries are checked
// when the shard is first used.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "base/random.h"
#include "loader/loader.h"
#include "shard/shard.h"
#include "tests/storage_double.h"
#include "tests/test_util.h"

namespace shardkit {
namespace {

struct Written {
  std::vector<std::string> payloads, keys;
  std::vector<int32_t> labels;
};

// n records of varied sizes and keys (UTF-8 and empty ones among them), in
// shards of both codecs.
Written WriteDataset(const std::string& dir, int n, CompressionMode compression) {
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kBytes;
  o.shard.compression = compression;
  o.shard.block_size = 4096;
  o.shard_size = 64 << 10;
  auto w = DatasetWriter::Create(dir, o);
  EXPECT_TRUE(w.ok());
  KeyedRng rng(11);
  Written out;
  for (int i = 0; i < n; ++i) {
    std::string p(1 + rng.Below(900), '\0');
    for (auto& c : p) c = static_cast<char>(rng.Below(7));  // compressible
    const std::string key = i % 17 == 0 ? "" : "dög/" + std::to_string(i) + ".jpg";
    const int32_t label = i % 13 == 0 ? -1 : static_cast<int32_t>(rng.Below(5));
    EXPECT_TRUE((*w)->Add(p, label, key).ok());
    out.payloads.push_back(p);
    out.keys.push_back(key);
    out.labels.push_back(label);
  }
  Manifest m;
  m.record.kind = format::RecordKind::kBytes;
  for (int c = 0; c < 5; ++c) m.classes.push_back("c" + std::to_string(c));
  EXPECT_TRUE((*w)->Finish(m).ok());
  return out;
}

// Whether address p lies in a mapping of the file `path` (/proc/self/maps).
bool MappedFromFile(const void* p, const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || a < lo || a >= hi) continue;
    return line.size() >= path.size() &&
           line.compare(line.size() - path.size(), path.size(), path) == 0;
  }
  return false;
}

TEST(SharedIndexTest, EveryRecordReadsAsWrittenThroughTheMappedAndTheCopiedIndex) {
  for (CompressionMode c : {CompressionMode::kStore, CompressionMode::kZstd}) {
    testing::TempDir dir;
    const Written w = WriteDataset(dir / "ds", 3000, c);
    testing::StorageDouble copies;  // a backend that cannot map: the default private copy
    auto mapped = Dataset::Open(dir / "ds");
    auto copied = Dataset::Open(dir / "ds", &copies);
    ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
    ASSERT_TRUE(copied.ok()) << copied.status().ToString();
    ASSERT_EQ((*mapped)->num_records(), w.payloads.size());
    ASSERT_GT((*mapped)->num_shards(), 3u);
    ReadScratch s1, s2;
    for (uint64_t g = 0; g < w.payloads.size(); ++g) {
      auto [shard, local] = (*mapped)->Locate(g);
      const ShardReader& a = (*mapped)->shard(shard);
      const ShardReader& b = (*copied)->shard(shard);
      std::string_view pa, pb;
      ASSERT_TRUE(a.ReadRecord(local, &s1, &pa).ok());
      ASSERT_TRUE(b.ReadRecord(local, &s2, &pb).ok());
      EXPECT_EQ(pa, w.payloads[g]) << g;
      EXPECT_EQ(pb, w.payloads[g]) << g;
      EXPECT_EQ(a.record(local).label, w.labels[g]) << g;
      EXPECT_EQ(b.record(local).label, w.labels[g]) << g;
      EXPECT_EQ(a.key(local), w.keys[g]) << g;
      EXPECT_EQ(b.key(local), w.keys[g]) << g;
      const format::RecordEntry ea = a.record(local), eb = b.record(local);
      EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(&ea), sizeof(ea)),
                std::string_view(reinterpret_cast<const char*>(&eb), sizeof(eb)));
    }
  }
}

TEST(SharedIndexTest, ThePosixIndexIsTheShardFilesOwnPages) {
  testing::TempDir dir;
  WriteDataset(dir / "ds", 500, CompressionMode::kZstd);
  auto ds = Dataset::Open(dir / "ds");
  ASSERT_TRUE(ds.ok());
  const std::string path = JoinPath(dir / "ds", (*ds)->manifest().shards[0].file);
  auto file = Env::Default()->OpenForReads(path);
  ASSERT_TRUE(file.ok());
  const uint64_t at = (*file)->size() / 2 + 5;  // not page aligned
  auto region = (*file)->MapRegion(at, 100);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  std::string copy(100, '\0');
  ASSERT_TRUE((*file)->Read(at, 100, copy.data()).ok());
  EXPECT_EQ((*region)->bytes(), copy);
  EXPECT_TRUE(MappedFromFile((*region)->bytes().data(), path));
  // Out of range: refused like a read, naming the file.
  auto past = (*file)->MapRegion((*file)->size() - 10, 11);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find(path), std::string::npos);
}

// A damaged record entry (the index checksum no longer matches) is not read
// at open: the dataset opens, the loader delivers the shards before it, and
// the first batch that uses the damaged shard fails naming it.
TEST(SharedIndexTest, ADamagedIndexIsFoundWhenItsShardIsFirstUsedNamingTheShard) {
  testing::TempDir dir;
  testing::WriteRawDataset(dir / "ds", 3000, 8, CompressionMode::kZstd, 4096, 48 << 10);
  auto m = ReadManifest(dir / "ds");
  ASSERT_TRUE(m.ok());
  ASSERT_GT(m->shards.size(), 3u);
  const std::string path = JoinPath(dir / "ds", m->shards[2].file);
  {
    auto r = ShardReader::Open(path);
    ASSERT_TRUE(r.ok());
    // A label in the middle of the record entries: a plausible value, so only
    // the index checksum can tell.
    const uint64_t entries = (*r)->index_offset() + format::kIndexHeaderSize +
                             uint64_t{(*r)->num_blocks()} * format::kBlockEntrySize;
    std::string bytes = testing::ReadFile(path);
    bytes[entries + ((*r)->num_records() / 2) * format::kRecordEntrySize + 12] ^= 0x01;
    testing::WriteFile(path, bytes);
  }
  auto ds = Dataset::Open(dir / "ds");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  LoaderOptions o;
  o.batch_size = 10;
  o.workers = 2;
  o.shuffle = ShuffleMode::kNone;
  o.transform.kind = TransformKind::kNone;
  auto loader = Loader::Open(dir / "ds", o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  const uint64_t before = m->shards[0].records + m->shards[1].records;
  uint64_t delivered = 0;
  Status s;
  for (;;) {
    const Batch* b = nullptr;
    s = (*loader)->Next(&b);
    if (!s.ok() || b == nullptr) break;
    delivered += b->real_size;
  }
  ASSERT_FALSE(s.ok()) << "the damaged shard was read without an error";
  EXPECT_NE(s.message().find(m->shards[2].file + ": index checksum mismatch"), std::string::npos)
      << s.message();
  EXPECT_GE(delivered + 2 * o.batch_size, before) << "stopped before the damaged shard";
  EXPECT_LE(delivered, before);
}

}  // namespace
}  // namespace shardkit
