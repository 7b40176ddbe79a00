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

#include "base/crc32c.h"
#include "base/random.h"
#include "loader/loader.h"
#include "shard/shard.h"
#include "tests/common/storage_double.h"
#include "tests/common/test_util.h"

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

// Reads epoch 0 of `dir` in order, untransformed, until the end or an
// error (returned); *delivered counts the samples of the batches delivered.
Status ReadEpochInOrder(const std::string& dir, LoaderOptions o, uint64_t* delivered) {
  o.shuffle = ShuffleMode::kNone;
  o.transform.kind = TransformKind::kNone;
  SK_ASSIGN_OR_RETURN(auto loader, Loader::Open(dir, o));
  SK_RETURN_IF_ERROR(loader->StartEpoch(0));
  for (;;) {
    const Batch* b = nullptr;
    SK_RETURN_IF_ERROR(loader->Next(&b));
    if (b == nullptr) return Status::OK();
    *delivered += b->real_size;
  }
}

// Where shard `path`'s record entries start in the file.
uint64_t EntriesAt(const std::string& path) {
  auto r = ShardReader::Open(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return 0;
  return (*r)->index_offset() +
         format::EntriesOffset(format::kVersion, (*r)->num_blocks(), (*r)->num_records());
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
    const uint64_t entries = EntriesAt(path);
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
  const uint64_t before = m->shards[0].records + m->shards[1].records;
  uint64_t delivered = 0;
  const Status s = ReadEpochInOrder(dir / "ds", o, &delivered);
  ASSERT_FALSE(s.ok()) << "the damaged shard was read without an error";
  EXPECT_NE(s.message().find(m->shards[2].file + ": index checksum mismatch"), std::string::npos)
      << s.message();
  EXPECT_GE(delivered + 2 * o.batch_size, before) << "stopped before the damaged shard";
  EXPECT_LE(delivered, before);
}

// "records 1024-2047": chunk 1, as errors name it.
std::string Chunk1() {
  return "records " + std::to_string(format::kChunkRecords) + "-" +
         std::to_string(2 * format::kChunkRecords - 1);
}

// Version 2's chunk table: a damaged chunk of the record entries fails the
// reads of its own records only, naming the shard and the chunk's records;
// its entries read empty; the chunks around it read, each checked on its
// first use.
TEST(SharedIndexTest, ADamagedChunkFailsOnlyItsOwnRecords) {
  testing::TempDir dir;
  const std::string path = dir / "shard";
  const int n = 3 * format::kChunkRecords + 100;
  {
    ShardWriterOptions o;
    o.compression = CompressionMode::kStore;
    auto w = ShardWriter::Create(path, o);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < n; ++i)
      ASSERT_TRUE((*w)->Add(std::to_string(i), i % 7, "k" + std::to_string(i)).ok());
    ASSERT_TRUE((*w)->Finish(nullptr).ok());
  }
  const uint64_t entries = EntriesAt(path);
  std::string bytes = testing::ReadFile(path);
  const uint32_t damaged = format::kChunkRecords + 17;                         // in chunk 1
  bytes[entries + uint64_t{damaged} * format::kRecordEntrySize + 12] ^= 0x01;  // its label
  testing::WriteFile(path, bytes);

  auto r = ShardReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ReadScratch scratch;
  for (uint32_t i = 0; i < static_cast<uint32_t>(n); i += 97) {
    std::string_view p;
    Status s = (*r)->ReadRecord(i, &scratch, &p);
    if (i >> format::kChunkShift == 1) {
      ASSERT_FALSE(s.ok()) << i;
      EXPECT_NE(s.message().find(path + ": index checksum mismatch (" + Chunk1() + ")"),
                std::string::npos)
          << s.message();
      EXPECT_EQ((*r)->record(i).length, 0u);
      EXPECT_EQ((*r)->label(i), 0);
      EXPECT_TRUE((*r)->key(i).empty());
    } else {
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
      EXPECT_EQ(p, std::to_string(i));
      EXPECT_EQ((*r)->label(i), static_cast<int32_t>(i % 7));
      EXPECT_EQ((*r)->key(i), "k" + std::to_string(i));
    }
  }
  EXPECT_FALSE((*r)->CheckIndex().ok());
}

// A damaged key is found by its chunk's checksum, which spans the chunk's keys.
TEST(SharedIndexTest, ADamagedKeyFailsItsChunk) {
  testing::TempDir dir;
  const std::string path = dir / "shard";
  const int n = 2 * format::kChunkRecords;
  {
    auto w = ShardWriter::Create(path, ShardWriterOptions{});
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < n; ++i)
      ASSERT_TRUE((*w)->Add(std::to_string(i), 0, "k" + std::to_string(i)).ok());
    ASSERT_TRUE((*w)->Finish(nullptr).ok());
  }
  std::string bytes = testing::ReadFile(path);
  const size_t last_key = bytes.size() - format::kTrailerSize - 1;  // of record n - 1, in chunk 1
  bytes[last_key] ^= 0x01;
  testing::WriteFile(path, bytes);
  auto r = ShardReader::Open(path);
  ASSERT_TRUE(r.ok());
  ReadScratch scratch;
  std::string_view p;
  EXPECT_TRUE((*r)->ReadRecord(0, &scratch, &p).ok());
  Status s = (*r)->ReadRecord(n - 1, &scratch, &p);
  EXPECT_NE(s.message().find("index checksum mismatch (" + Chunk1() + ")"), std::string::npos)
      << s.ToString();
}

// In the loader, a record of a damaged chunk whose block is already
// decompressed (its earlier records came from chunk 0) fails; it is never
// sliced as an empty payload.
TEST(SharedIndexTest, TheLoaderStopsAtADamagedChunkInsideADecompressedBlock) {
  testing::TempDir dir;
  const int n = 3 * format::kChunkRecords;
  testing::WriteRawDataset(dir / "ds", n, 2, CompressionMode::kZstd, 64 << 10, 1 << 30);
  auto m = ReadManifest(dir / "ds");
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->shards.size(), 1u);
  const std::string path = JoinPath(dir / "ds", m->shards[0].file);
  {
    auto r = ShardReader::Open(path);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ((*r)->record(format::kChunkRecords - 1).block,
              (*r)->record(format::kChunkRecords).block)
        << "the test needs a block across the chunks' boundary";
    const uint64_t entries = EntriesAt(path);
    std::string bytes = testing::ReadFile(path);
    bytes[entries + (format::kChunkRecords + 5) * uint64_t{format::kRecordEntrySize} + 12] ^= 0x01;
    testing::WriteFile(path, bytes);
  }
  LoaderOptions o;
  o.batch_size = 64;
  o.workers = 1;
  uint64_t delivered = 0;
  const Status s = ReadEpochInOrder(dir / "ds", o, &delivered);
  ASSERT_FALSE(s.ok()) << "the damaged chunk was read without an error";
  EXPECT_NE(s.message().find("index checksum mismatch (" + Chunk1() + ")"), std::string::npos)
      << s.message();
  EXPECT_EQ(delivered, format::kChunkRecords);
}

// A version 1 shard (one checksum over the whole index, no chunk table) reads
// as before: every record, label and key; a damaged entry fails the first use.
std::string ToVersion1(const std::string& v2) {
  const uint64_t off = format::GetU64(v2.data() + v2.size() - 32);
  const uint64_t size = format::GetU64(v2.data() + v2.size() - 24);
  std::string index = v2.substr(off, size);
  const uint64_t blocks = format::GetU32(index.data()), records = format::GetU32(index.data() + 4);
  const uint64_t table = format::kIndexHeaderSize + blocks * format::kBlockEntrySize;
  index.erase(table, format::ChunkTableSize(2, records));
  std::string out = v2.substr(0, off) + index + v2.substr(v2.size() - 32);
  format::PutU32(out.data() + 8, 1);
  format::PutU32(out.data() + 28, crc32c::Value(out.data(), 28));
  char* trailer = out.data() + out.size() - 32;
  format::PutU64(trailer + 8, index.size());
  format::PutU32(trailer + 16, crc32c::Value(index.data(), index.size()));
  format::PutU32(trailer + 20, 1);
  return out;
}

TEST(SharedIndexTest, AVersion1ShardReadsAsBefore) {
  testing::TempDir dir;
  const std::string path = dir / "shard";
  const int n = format::kChunkRecords + 500;
  {
    ShardWriterOptions o;
    o.compression = CompressionMode::kZstd;
    o.block_size = 8192;
    auto w = ShardWriter::Create(path, o);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < n; ++i)
      ASSERT_TRUE(
          (*w)->Add("payload " + std::to_string(i), i % 5, "dög/" + std::to_string(i)).ok());
    ASSERT_TRUE((*w)->Finish(nullptr).ok());
  }
  const std::string v1 = ToVersion1(testing::ReadFile(path));
  testing::WriteFile(path, v1);
  {
    auto r = ShardReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE((*r)->CheckIndex().ok()) << (*r)->CheckIndex().ToString();
    ReadScratch scratch;
    for (uint32_t i = 0; i < static_cast<uint32_t>(n); ++i) {
      std::string_view p;
      ASSERT_TRUE((*r)->ReadRecord(i, &scratch, &p).ok()) << i;
      EXPECT_EQ(p, "payload " + std::to_string(i));
      EXPECT_EQ((*r)->label(i), static_cast<int32_t>(i % 5));
      EXPECT_EQ((*r)->key(i), "dög/" + std::to_string(i));
    }
  }
  // Damage the last record's entry: version 1 has one chunk, so record 0 fails.
  std::string bad = v1;
  const uint64_t index_end = bad.size() - 32;
  const uint64_t off = format::GetU64(bad.data() + index_end);
  auto r0 = ShardReader::Open(path);
  ASSERT_TRUE(r0.ok());
  const uint64_t entries = off + format::EntriesOffset(1, (*r0)->num_blocks(), n);
  bad[entries + uint64_t{n - 1} * format::kRecordEntrySize + 12] ^= 0x01;
  testing::WriteFile(path, bad);
  auto r = ShardReader::Open(path);
  ASSERT_TRUE(r.ok());
  ReadScratch scratch;
  std::string_view p;
  Status s = (*r)->ReadRecord(0, &scratch, &p);
  EXPECT_NE(s.message().find(path + ": index checksum mismatch"), std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace shardkit
