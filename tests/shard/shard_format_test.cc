// Scenario tests for the shard format: round trips across sizes and block
// boundaries, and every kind of damage the reader and verify must catch.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <string>
#include <vector>

#include "base/crc32c.h"
#include "shard/shard.h"
#include "tests/common/storage_double.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::string Payload(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed * 7) % 251 ^ (i >> 5));
  return s;
}

// Record sizes that fall on, before and after block boundaries, with empty ones.
const std::vector<size_t> kSizesAcrossBlocks = {0,    1,    2,    63, 64,    65, 0,     1000,
                                                4095, 4096, 4097, 0,  10000, 3,  70000, 0};

struct Written {
  std::vector<std::string> payloads;
};

Written WriteShard(const std::string& path, const std::vector<size_t>& sizes, CompressionMode mode,
                   uint32_t block_size, int compression_threads = 1) {
  ShardWriterOptions o;
  o.compression = mode;
  o.block_size = block_size;
  o.compression_threads = compression_threads;
  auto w = ShardWriter::Create(path, o);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  Written out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.payloads.push_back(Payload(sizes[i], i));
    EXPECT_TRUE(
        (*w)->Add(out.payloads.back(), static_cast<int32_t>(i % 7), "key" + std::to_string(i))
            .ok());
  }
  ShardInfo sum;
  Status s = (*w)->Finish(&sum);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sum.records, sizes.size());
  return out;
}

void ExpectRoundTrip(const std::string& path, const Written& w) {
  auto r = ShardReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)->num_records(), w.payloads.size());
  ReadScratch scratch;
  for (uint32_t i = 0; i < w.payloads.size(); ++i) {
    std::string_view p;
    Status s = (*r)->ReadRecord(i, &scratch, &p);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(p, w.payloads[i]) << "record " << i;
    EXPECT_EQ((*r)->record(i).label, static_cast<int32_t>(i % 7));
    EXPECT_EQ((*r)->key(i), "key" + std::to_string(i));
  }
}

TEST(ShardRoundTrip, ManySizesIncludingEmptyAcrossBlockBoundaries) {
  TempDir dir;
  const std::vector<size_t>& sizes = kSizesAcrossBlocks;
  for (CompressionMode mode :
       {CompressionMode::kStore, CompressionMode::kZstd, CompressionMode::kAuto}) {
    for (uint32_t block : {1u, 64u, 4096u, 1u << 20}) {
      std::string path = dir / ("s" + std::to_string(int(mode)) + "_" + std::to_string(block));
      Written w = WriteShard(path, sizes, mode, block);
      ExpectRoundTrip(path, w);
    }
  }
}

// Blocks compressed several at once are the bytes of one at a time, for
// every mode and block count (a multiple of the threads, or not, or fewer).
TEST(ShardRoundTrip, BlocksCompressedOnSeveralThreadsAreTheSameFile) {
  TempDir dir;
  const std::vector<size_t>& sizes = kSizesAcrossBlocks;
  for (CompressionMode mode :
       {CompressionMode::kStore, CompressionMode::kZstd, CompressionMode::kAuto}) {
    for (uint32_t block : {1u, 64u, 4096u, 1u << 20}) {
      const std::string one = dir / "one", many = dir / "many";
      WriteShard(one, sizes, mode, block, 1);
      for (int threads : {2, 3, 5}) {
        Written w = WriteShard(many, sizes, mode, block, threads);
        EXPECT_EQ(ReadFile(many), ReadFile(one))
            << int(mode) << " block " << block << " threads " << threads;
        ExpectRoundTrip(many, w);
      }
    }
  }
}

TEST(ShardRoundTrip, EmptyShard) {
  TempDir dir;
  Written w = WriteShard(dir / "empty", {}, CompressionMode::kZstd, 4096);
  auto r = ShardReader::Open(dir / "empty");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->num_records(), 0u);
}

TEST(ShardRoundTrip, BlockReadsMatchRecordReads) {
  TempDir dir;
  std::vector<size_t> sizes(200, 784);
  Written w = WriteShard(dir / "s", sizes, CompressionMode::kZstd, 8192);
  auto r = ShardReader::Open(dir / "s");
  ASSERT_TRUE(r.ok());
  EXPECT_GT((*r)->num_blocks(), 10u);
  ReadScratch scratch;
  for (uint32_t b = 0; b < (*r)->num_blocks(); ++b) {
    std::string_view raw;
    ASSERT_TRUE((*r)->ReadBlock(b, &scratch, &raw).ok());
    const auto& be = (*r)->block(b);
    for (uint32_t i = be.first_record; i < be.first_record + be.num_records; ++i) {
      std::string_view p;
      ASSERT_TRUE((*r)->RecordFromBlock(i, raw, &p).ok());
      EXPECT_EQ(p, w.payloads[i]);
    }
  }
}

// --- damage -----------------------------------------------------------------

class DamagedShard : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_ / "shard";
    std::vector<size_t> sizes(50, 300);
    written_ = WriteShard(path_, sizes, CompressionMode::kZstd, 2048);
    bytes_ = ReadFile(path_);
  }
  void Save(const std::string& bytes) { WriteFile(path_, bytes); }
  uint64_t IndexOffset() const { return format::GetU64(bytes_.data() + bytes_.size() - 32); }
  // Where record 0's entry starts in the index.
  static char* Entries(std::string* index) {
    return index->data() + format::EntriesOffset(format::kVersion, format::GetU32(index->data()),
                                                 format::GetU32(index->data() + 4));
  }
  // Rewrites the index with `edit` applied and correct checksums (the
  // chunks', the header and tables', the whole index's), so that the checks
  // behind the checksums are what gets tested.
  template <typename F>
  void EditIndex(F edit) {
    const uint64_t off = IndexOffset();
    const uint64_t size = format::GetU64(bytes_.data() + bytes_.size() - 32 + 8);
    std::string index = bytes_.substr(off, size);
    edit(&index);
    const uint64_t records = format::GetU32(index.data() + 4);
    const uint64_t entries = Entries(&index) - index.data();
    const uint64_t keys = format::GetU64(index.data() + 8);
    if (entries + records * format::kRecordEntrySize + keys == index.size()) {
      char* table = index.data() + entries - format::ChunkTableSize(format::kVersion, records);
      for (uint64_t c = 0; c < format::NumChunks(records); ++c) {
        const uint64_t first = c * format::kChunkRecords;
        uint32_t crc = 0;
        format::ChunkCrc(index.data() + entries + first * format::kRecordEntrySize,
                         std::min<uint64_t>(format::kChunkRecords, records - first),
                         std::string_view(index).substr(index.size() - keys), &crc);
        format::PutU32(table + 4 * c, crc);
      }
      format::PutU32(index.data() + entries - 4, crc32c::Value(index.data(), entries - 4));
    }
    std::string out = bytes_.substr(0, off) + index + bytes_.substr(bytes_.size() - 32);
    format::PutU64(out.data() + out.size() - 32 + 8, index.size());
    format::PutU32(out.data() + out.size() - 32 + 16, crc32c::Value(index.data(), index.size()));
    Save(out);
  }
  Status OpenStatus() { return ShardReader::Open(path_).status(); }
  // Open, then the first use of the record entries (checked lazily, once).
  Status UseStatus() {
    auto r = ShardReader::Open(path_);
    return r.ok() ? (*r)->CheckIndex() : r.status();
  }

  TempDir dir_;
  std::string path_;
  Written written_;
  std::string bytes_;
};

TEST_F(DamagedShard, TruncatedShardIsRejectedAtOpen) {
  for (size_t keep : {size_t{0}, size_t{10}, size_t{40}, bytes_.size() / 2, bytes_.size() - 1}) {
    Save(bytes_.substr(0, keep));
    Status s = OpenStatus();
    EXPECT_TRUE(s.IsCorruption()) << keep << ": " << s.ToString();
    EXPECT_NE(s.message().find(path_), std::string::npos) << "error must name the file";
  }
}

TEST_F(DamagedShard, FlippedBitInPayloadFailsThatRecordOnly) {
  // Use a stored shard so a payload bit maps to exactly one record.
  std::vector<size_t> sizes(20, 100);
  Written w = WriteShard(path_, sizes, CompressionMode::kStore, 1 << 20);
  std::string b = ReadFile(path_);
  b[format::kHeaderSize + 5 * 100 + 17] ^= 0x10;  // record 5
  Save(b);
  auto r = ShardReader::Open(path_);
  ASSERT_TRUE(r.ok()) << "payload damage is found on read, not open";
  ReadScratch scratch;
  for (uint32_t i = 0; i < 20; ++i) {
    std::string_view p;
    Status s = (*r)->ReadRecord(i, &scratch, &p);
    if (i == 5) {
      EXPECT_TRUE(s.IsCorruption());
      EXPECT_NE(s.message().find("record 5"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.message();
    } else {
      EXPECT_TRUE(s.ok()) << i << ": " << s.ToString();
    }
  }
}

TEST_F(DamagedShard, FlippedBitInCompressedBlockIsCaughtByBlockChecksum) {
  bytes_[format::kHeaderSize + 20] ^= 0x01;
  Save(bytes_);
  auto r = ShardReader::Open(path_);
  ASSERT_TRUE(r.ok());
  ReadScratch scratch;
  std::string_view p;
  Status s = (*r)->ReadRecord(0, &scratch, &p);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("block 0"), std::string::npos) << s.message();
}

TEST_F(DamagedShard, FlippedBitInIndex) {
  bytes_[IndexOffset() + 20] ^= 0x04;
  Save(bytes_);
  Status s = UseStatus();
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("index"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
}

// Open reads only the index's counts and block table; a damaged record entry
// or key is found when the shard is first used: every read then fails with an
// error naming the shard, and the entries read as empty (never out of range).
TEST_F(DamagedShard, FlippedBitAnywhereInTheIndexIsFoundAtFirstUseNamingTheShard) {
  const size_t begin = IndexOffset(), end = bytes_.size() - format::kTrailerSize;
  for (size_t pos = begin; pos < end; ++pos) {
    std::string b = bytes_;
    b[pos] ^= 0x10;
    Save(b);
    auto r = ShardReader::Open(path_);
    if (!r.ok()) {  // the counts or the block table: refused at open
      EXPECT_TRUE(r.status().IsCorruption()) << pos;
      continue;
    }
    const uint32_t n = (*r)->num_records();
    ReadScratch scratch;
    std::string_view p;
    Status s = (*r)->ReadRecord(n / 2, &scratch, &p);
    ASSERT_FALSE(s.ok()) << "index byte " << pos - begin;
    EXPECT_NE(s.message().find(path_ + ": index"), std::string::npos) << s.message();
    EXPECT_EQ((*r)->CheckIndex().message(), s.message());
    for (uint32_t i = 0; i < n; ++i) {
      EXPECT_EQ((*r)->record(i).length, 0u);
      EXPECT_TRUE((*r)->key(i).empty());
    }
  }
}

TEST_F(DamagedShard, FlippedBitInTrailer) {
  for (size_t pos : {size_t{1}, size_t{9}, size_t{17}, size_t{21}, size_t{26}}) {
    std::string b = bytes_;
    b[b.size() - 32 + pos] ^= 0x02;
    Save(b);
    Status s = UseStatus();  // byte 17: the index checksum, compared at first use
    EXPECT_FALSE(s.ok()) << "trailer byte " << pos;
  }
}

TEST_F(DamagedShard, BadMagic) {
  bytes_[0] = 'X';
  Save(bytes_);
  Status s = OpenStatus();
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("magic"), std::string::npos);
}

TEST_F(DamagedShard, NewerVersionIsUnsupportedWithAHint) {
  format::PutU32(bytes_.data() + 8, format::kVersion + 1);
  format::PutU32(bytes_.data() + 28, crc32c::Value(bytes_.data(), 28));
  Save(bytes_);
  Status s = OpenStatus();
  EXPECT_TRUE(s.IsUnsupported()) << s.ToString();
  EXPECT_NE(s.message().find("upgrade"), std::string::npos);
}

TEST_F(DamagedShard, IndexPointingPastTheEnd) {
  format::PutU64(bytes_.data() + bytes_.size() - 32, bytes_.size() + 100);
  Save(bytes_);
  Status s = OpenStatus();
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("does not fit"), std::string::npos) << s.message();
}

TEST_F(DamagedShard, BlockExtendingPastTheIndex) {
  EditIndex([](std::string* index) {
    format::PutU32(index->data() + format::kIndexHeaderSize + 8, 1u << 30);  // block 0 stored size
  });
  Status s = OpenStatus();
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("block 0"), std::string::npos) << s.message();
}

TEST_F(DamagedShard, HugeDeclaredRecordLengthIsRefusedBeforeAllocation) {
  EditIndex([](std::string* index) {
    format::PutU32(Entries(index) + 8, 0xFFFFFFF0u);  // record 0's length
  });
  Status s = UseStatus();
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("record 0"), std::string::npos) << s.message();
}

TEST_F(DamagedShard, HugeDeclaredBlockSizeIsRefused) {
  EditIndex([](std::string* index) {
    format::PutU32(index->data() + format::kIndexHeaderSize + 12, 0xFFFFFFFFu);  // raw size
  });
  Status s = OpenStatus();
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("over the limit"), std::string::npos) << s.message();
}

TEST_F(DamagedShard, ImplausibleRecordCountIsRefused) {
  EditIndex([](std::string* index) { format::PutU32(index->data() + 4, 0xFFFFFFFFu); });
  EXPECT_TRUE(OpenStatus().IsCorruption());
}

TEST_F(DamagedShard, ZstdFrameExpandingPastItsCapIsRefused) {
  // Replace block 0 by a frame that decompresses to far more than its declared raw size.
  std::string big(1 << 20, 'a');
  std::string frame(ZSTD_compressBound(big.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), big.data(), big.size(), 1));
  ShardWriterOptions o;
  o.compression = CompressionMode::kStore;
  auto w = ShardWriter::Create(path_, o);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Add(frame, 0, "bomb").ok());
  ASSERT_TRUE((*w)->Finish(nullptr).ok());
  std::string b = ReadFile(path_);
  bytes_ = b;
  EditIndex([&](std::string* index) {
    char* blk = index->data() + format::kIndexHeaderSize;
    format::PutU32(blk + 12, 1000);  // raw size: 1000 bytes
    format::PutU32(blk + 16, static_cast<uint32_t>(format::Codec::kZstd));
    format::PutU32(Entries(index) + 8, 1000);
  });
  auto r = ShardReader::Open(path_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ReadScratch scratch;
  std::string_view p;
  Status s = (*r)->ReadRecord(0, &scratch, &p);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_LE(scratch.raw.capacity(), 1u << 16) << "must not allocate the bomb's size";
}

// --- datasets -----------------------------------------------------------------

Status WriteDataset(const std::string& dir, int records, uint64_t shard_size) {
  DatasetWriterOptions o;
  o.shard_size = shard_size;
  o.shard.kind = format::RecordKind::kRawU8;
  o.shard.block_size = 1024;
  SK_ASSIGN_OR_RETURN(auto w, DatasetWriter::Create(dir, o));
  for (int i = 0; i < records; ++i) {
    SK_RETURN_IF_ERROR(w->Add(Payload(64, i), i % 3, std::to_string(i)));
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {8, 8, 1};
  m.classes = {"a", "b", "c"};
  return w->Finish(m);
}

std::vector<std::string> VerifyProblems(const std::string& dir, VerifyReport* r) {
  std::vector<std::string> problems;
  Status s = VerifyDataset(
      dir, 2, [&](const VerifyProblem& p) { problems.push_back(p.message); }, r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return problems;
}

TEST(DatasetTest, WriterRollsShardsAndVerifyPasses) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 1000, 8192).ok());
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_GT((*ds)->num_shards(), 3u);
  EXPECT_EQ((*ds)->num_records(), 1000u);
  auto [s, l] = (*ds)->Locate(999);
  EXPECT_EQ(s, (*ds)->num_shards() - 1);
  EXPECT_EQ((*ds)->shard_first_record(s) + l, 999u);
  VerifyReport r;
  EXPECT_TRUE(VerifyProblems(dir.path(), &r).empty());
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.records, 1000u);
}

TEST(DatasetTest, NoTemporaryFilesRemainAfterFinish) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 300, 8192).ok());
  for (const auto& name : *Env::Default()->ListDir(dir.path())) {
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
  }
}

// A part (records_per_shard, first_shard) writes the whole's shard names and
// part.json; a writer adopting those shards (merge) publishes the same bytes,
// and refuses a shard that is not what its entry says, keeping nothing of it.
TEST(DatasetTest, APartIsNamedAsTheWholeAndItsShardsAreAdoptedOnlyIntact) {
  TempDir dir;
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kRawU8;
  o.records_per_shard = 7;
  o.first_shard = 3;
  auto w = DatasetWriter::Create(dir / "part", o);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*w)->Add(Payload(64, i), 0, std::to_string(i)).ok());
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {8, 8, 1};
  EXPECT_TRUE((*w)->Finish(m).IsInvalidArgument()) << "shards from 3 are a part's";
  w->reset();
  w = DatasetWriter::Create(dir / "part", o);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*w)->Add(Payload(64, i), 0, std::to_string(i)).ok());
  m.part = {1, 2, 21, 3, 41, "s"};
  ASSERT_TRUE((*w)->Finish(m).ok());
  auto part = ReadPartManifest(dir / "part");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  ASSERT_EQ(part->shards.size(), 3u);
  EXPECT_EQ(part->shards[0].file, "shard-00003.sks");
  EXPECT_EQ(part->shards[2].records, 6u);
  EXPECT_FALSE(DatasetWriter::Create(dir / "part", DatasetWriterOptions()).ok())
      << "a part is not replaced without overwrite";

  auto adopter = DatasetWriter::Create(dir / "whole", DatasetWriterOptions());
  ASSERT_TRUE(adopter.ok());
  bool linked = false;
  ShardInfo wrong = part->shards[0];
  wrong.crc32c ^= 1;
  Status s = (*adopter)->AdoptShard(dir / "part/shard-00003.sks", wrong, 0,
                                    format::RecordKind::kRawU8, &linked);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("shard-00003.sks: CRC32C"), std::string::npos) << s.ToString();
  EXPECT_FALSE(Env::Default()->FileExists(dir / "whole/.shard-00000.sks.tmp"))
      << "nothing kept of it";
  // A raw_u8 shard where the part says JPEG: refused before it is kept.
  s = (*adopter)->AdoptShard(dir / "part/shard-00003.sks", part->shards[0], 0,
                             format::RecordKind::kJpeg, &linked);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("shard-00003.sks: holds records of kind 'raw_u8', expected 'jpeg'"),
            std::string::npos)
      << s.ToString();
  EXPECT_FALSE(Env::Default()->FileExists(dir / "whole/.shard-00000.sks.tmp"))
      << "nothing kept of it";
  for (const auto& info : part->shards) {
    ASSERT_TRUE(
        (*adopter)
            ->AdoptShard(dir / ("part/" + info.file), info, 0, format::RecordKind::kRawU8, &linked)
            .ok());
    EXPECT_TRUE(linked);
  }
  Manifest whole;
  whole.record = m.record;
  ASSERT_TRUE((*adopter)->Finish(whole).ok());
  auto back = ReadManifest(dir / "whole");
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->shards.size(), 3u);
  EXPECT_EQ(back->shards[0].file, "shard-00000.sks");
  EXPECT_EQ(ReadFile(dir / "whole/shard-00000.sks"), ReadFile(dir / "part/shard-00003.sks"));
  EXPECT_TRUE(ReadPartManifest(dir / "part").ok()) << "the part is left as it was";
}

// Adopting goes through the writer's Env, whatever it is: a WriteFaultEnv
// (which links nothing, so Env's own copy runs) is charged every byte of the
// shards, and when its disk fills up during a copy the adoption fails with
// the disk's error and nothing of it looks complete: no temporary, and once
// the writer is gone, no manifest and no shard.
TEST(DatasetTest, AShardIsAdoptedThroughTheWritersEnvAndAFullDiskKeepsNothing) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir / "src", 300, 8192).ok());
  auto src = ReadManifest(dir / "src");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_GE(src->shards.size(), 2u);

  testing::WriteFaultEnv full(src->shards[0].bytes - 1);
  DatasetWriterOptions o;
  o.env = &full;
  {
    auto w = DatasetWriter::Create(dir / "full", o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    bool linked = true;
    Status s = (*w)->AdoptShard(dir / ("src/" + src->shards[0].file), src->shards[0], 0,
                                format::RecordKind::kRawU8, &linked);
    EXPECT_TRUE(s.IsIOError()) << s.ToString();
    EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.ToString();
    EXPECT_GE(full.refused(), 1u);
    EXPECT_FALSE(Env::Default()->FileExists(dir / "full/.shard-00000.sks.tmp"))
        << "nothing kept of the copy";
  }
  if (Env::Default()->FileExists(dir / "full")) {
    for (const auto& name : *Env::Default()->ListDir(dir / "full"))
      ADD_FAILURE() << "left behind: " << name;
  }

  testing::WriteFaultEnv room;
  o.env = &room;
  auto w = DatasetWriter::Create(dir / "whole", o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  uint64_t bytes = 0;
  for (const auto& info : src->shards) {
    bool linked = true;
    ASSERT_TRUE(
        (*w)->AdoptShard(dir / ("src/" + info.file), info, 0, format::RecordKind::kRawU8, &linked)
            .ok());
    EXPECT_FALSE(linked) << "this Env copies";
    bytes += info.bytes;
  }
  Manifest whole;
  whole.record = src->record;
  ASSERT_TRUE((*w)->Finish(whole).ok());
  EXPECT_GE(room.written(), bytes) << "every shard's bytes went through the Env";
  auto back = ReadManifest(dir / "whole");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->shards.size(), src->shards.size());
  for (const auto& info : back->shards) {
    EXPECT_EQ(ReadFile(dir / ("whole/" + info.file)), ReadFile(dir / ("src/" + info.file)));
  }
}

TEST(DatasetTest, DirectoryWithoutManifestIsNotADataset) {
  TempDir dir;
  {
    DatasetWriterOptions o;
    auto w = DatasetWriter::Create(dir.path(), o);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add("abc", 0, "k").ok());
    // destroyed without Finish: an interrupted pack
  }
  auto ds = Dataset::Open(dir.path());
  EXPECT_TRUE(ds.status().IsNotFound());
  EXPECT_NE(ds.status().message().find("manifest.json"), std::string::npos);
  // Nothing stays in a folder it did not make: the temporary shard and the
  // writers' lock file (which goes with the lock) are gone.
  EXPECT_EQ(*Env::Default()->ListDir(dir.path()), std::vector<std::string>{})
      << "the unfinished shard's temporary file and the lock file must be gone";
}

TEST(DatasetTest, RefusesToOverwriteADatasetUnlessAsked) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 10, 8192).ok());
  Status s = WriteDataset(dir.path(), 10, 8192);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("--force"), std::string::npos);
}

TEST(DatasetTest, RestartAfterInterruptionRemovesLeftovers) {
  TempDir dir;
  WriteFile(dir / "shard-00007.sks", "stale");
  WriteFile(dir / ".shard-00008.sks.tmp", "stale");
  WriteFile(dir / "notes.txt", "user file");
  ASSERT_TRUE(WriteDataset(dir.path(), 10, 1 << 20).ok());
  EXPECT_FALSE(Env::Default()->FileExists(dir / "shard-00007.sks"));
  EXPECT_FALSE(Env::Default()->FileExists(dir / ".shard-00008.sks.tmp"));
  EXPECT_TRUE(Env::Default()->FileExists(dir / "notes.txt"));
}

// The killed run: a child that finishes 3 shards (fingerprint "F"), begins
// a 4th and dies without its destructors.
void KilledRun(const std::string& dir, const DatasetWriterOptions& o) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto w = DatasetWriter::Create(dir, o);
    if (!w.ok() || !(*w)->Resume("F", UINT64_MAX).ok()) _exit(2);
    for (int i = 0; (*w)->shards() < 3; ++i) {
      if (!(*w)->Add(Payload(1000, i), i % 3, std::to_string(i)).ok()) _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A writer that decides resumption after Create (a pack that knows its
// records only once its source is read): until Resume, a killed run's
// temporaries stay, even when this writer is destroyed, and nothing can be
// added; Resume with the killed run's fingerprint keeps the finished shards
// its check accepts, in order, and removes the rest; another fingerprint
// keeps none.
TEST(DatasetTest, AWriterResumingLaterKeepsAKilledRunsShardsOnlyWhenToldAndAccepted) {
  TempDir dir;
  DatasetWriterOptions o;
  o.shard_size = 8192;  // shards cut by bytes
  o.shard.kind = format::RecordKind::kRawU8;
  o.resume_later = true;
  KilledRun(dir.path(), o);
  ASSERT_TRUE(Env::Default()->FileExists(dir / TempShardFileName(3)));
  ASSERT_TRUE(Env::Default()->FileExists(dir / kResumeFileName));
  {
    auto w = DatasetWriter::Create(dir.path(), o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_TRUE((*w)->Add("x", 0, "k").IsInvalidArgument());
  }  // destroyed undecided: the killed run's files are as they were
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(Env::Default()->FileExists(dir / TempShardFileName(i))) << i;
  EXPECT_TRUE(Env::Default()->FileExists(dir / kResumeFileName));
  {
    auto w = DatasetWriter::Create(dir.path(), o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    int checked = 0;
    ASSERT_TRUE((*w)->Resume("F", UINT64_MAX,
                             [&](const ShardReader& shard) -> Result<bool> {
                               EXPECT_GT(shard.num_records(), 1u);
                               return ++checked <= 2;
                             })
                    .ok());
    EXPECT_EQ(checked, 3);  // the third refused: it and those after it go
    EXPECT_EQ((*w)->resumed_shards(), 2u);
    EXPECT_FALSE(Env::Default()->FileExists(dir / TempShardFileName(2)));
    EXPECT_FALSE(Env::Default()->FileExists(dir / TempShardFileName(3)));
    EXPECT_TRUE((*w)->Resume("F", UINT64_MAX).IsInvalidArgument()) << "decided once";
  }  // destroyed after deciding: what it kept goes, as any unfinished writer's
  EXPECT_FALSE(Env::Default()->FileExists(dir / TempShardFileName(0)));
  EXPECT_FALSE(Env::Default()->FileExists(dir / kResumeFileName));
}

// A finished temporary shard damaged after it was written (a flipped byte in
// a block) is not kept: its whole-file checksum would be taken from the
// damaged bytes, and the finished dataset would fail verify.
TEST(DatasetTest, ResumeKeepsOnlyTemporaryShardsWhoseBlocksAllCheck) {
  TempDir dir;
  DatasetWriterOptions o;
  o.shard_size = 8192;
  o.shard.kind = format::RecordKind::kRawU8;
  o.resume_later = true;
  KilledRun(dir.path(), o);
  {
    auto r = ShardReader::Open(dir / TempShardFileName(1));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const uint64_t off = (*r)->block(0).offset + 5;
    std::string bytes = testing::ReadFile(dir / TempShardFileName(1));
    bytes[off] ^= 0x40;
    testing::WriteFile(dir / TempShardFileName(1), bytes);
  }
  auto w = DatasetWriter::Create(dir.path(), o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Resume("F", UINT64_MAX).ok());
  EXPECT_EQ((*w)->resumed_shards(), 1u)
      << "shard 1 is damaged: it and those after it are made again";
  EXPECT_FALSE(Env::Default()->FileExists(dir / TempShardFileName(1)));
  EXPECT_FALSE(Env::Default()->FileExists(dir / TempShardFileName(2)));
}

TEST(DatasetTest, MissingShard) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 1000, 8192).ok());
  ASSERT_TRUE(Env::Default()->RemoveFile(dir / "shard-00001.sks").ok());
  auto ds = Dataset::Open(dir.path());
  EXPECT_TRUE(ds.status().IsNotFound());
  EXPECT_NE(ds.status().message().find("shard-00001.sks"), std::string::npos);
  VerifyReport r;
  auto problems = VerifyProblems(dir.path(), &r);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("shard-00001.sks: missing"), std::string::npos) << problems[0];
  EXPECT_EQ(r.shards_bad, 1u);
}

TEST(DatasetTest, ManifestThatDisagreesWithItsShards) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 1000, 8192).ok());
  auto m = ReadManifest(dir.path());
  ASSERT_TRUE(m.ok());
  m->shards[0].records += 1;
  m->shards[1].bytes -= 1;
  m->shards[2].crc32c ^= 1;
  ASSERT_TRUE(WriteManifest(dir.path(), *m).ok());
  EXPECT_TRUE(Dataset::Open(dir.path()).status().IsCorruption());
  VerifyReport r;
  auto problems = VerifyProblems(dir.path(), &r);
  EXPECT_EQ(r.shards_bad, 3u);
  const std::string all = testing::JoinLines(problems);
  EXPECT_NE(all.find("shard-00000.sks: holds"), std::string::npos) << all;
  EXPECT_NE(all.find("shard-00001.sks: size"), std::string::npos) << all;
  EXPECT_NE(all.find("shard-00002.sks: file checksum"), std::string::npos) << all;
}

// A manifest edited to another record kind than its shards' headers name
// would have the loader decode raw bytes as JPEG, or JPEG bytes as pixels:
// opening and verifying name the shard, and no writer publishes such a pair.
TEST(DatasetTest, AManifestOfAnotherRecordKindThanItsShardsIsRefused) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 100, 1 << 20).ok());
  auto m = ReadManifest(dir.path());
  ASSERT_TRUE(m.ok());
  m->record.kind = format::RecordKind::kBytes;
  m->record.shape.clear();
  ASSERT_TRUE(WriteManifest(dir.path(), *m).ok());
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.status().IsCorruption()) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find(
                "shard-00000.sks: holds records of kind 'raw_u8', the manifest says 'bytes'"),
            std::string::npos)
      << ds.status().message();
  VerifyReport r;
  auto problems = VerifyProblems(dir.path(), &r);
  EXPECT_EQ(r.shards_bad, 1u);
  EXPECT_EQ(r.records_bad, 100u);
  EXPECT_NE(testing::JoinLines(problems).find("holds records of kind 'raw_u8'"), std::string::npos)
      << testing::JoinLines(problems);

  TempDir other;
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kJpeg;
  auto w = DatasetWriter::Create(other.path(), o);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Add(Payload(64, 1), 0, "a").ok());
  Manifest raw;
  raw.record.kind = format::RecordKind::kRawU8;
  raw.record.shape = {8, 8, 1};
  Status s = (*w)->Finish(raw);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("holds records of kind 'jpeg', the manifest says 'raw_u8'"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(Env::Default()->FileExists(other / "manifest.json"));
}

// Shards whose header says 'bytes', the shard writer's default, are what C++
// writers made while nothing read the header: the manifest speaks for them.
TEST(DatasetTest, ShardsOfTheDefaultKindOpenUnderAnyManifest) {
  TempDir dir;
  DatasetWriterOptions o;  // shard.kind left at kBytes
  auto w = DatasetWriter::Create(dir.path(), o);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*w)->Add(Payload(64, i), 0, std::to_string(i)).ok());
  Manifest raw;
  raw.record.kind = format::RecordKind::kRawU8;
  raw.record.shape = {8, 8, 1};
  ASSERT_TRUE((*w)->Finish(raw).ok());
  EXPECT_TRUE(Dataset::Open(dir.path()).ok());
  VerifyReport r;
  EXPECT_TRUE(VerifyProblems(dir.path(), &r).empty());
  EXPECT_TRUE(r.ok());
}

// A header naming no known kind is a damaged shard, named at open.
TEST_F(DamagedShard, UnknownRecordKindIsRefusedAtOpen) {
  std::string b = bytes_;
  format::PutU32(b.data() + 16, 7);
  format::PutU32(b.data() + 28, crc32c::Value(b.data(), 28));
  Save(b);
  Status s = OpenStatus();
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("unknown record kind 7"), std::string::npos) << s.message();
}

TEST(DatasetTest, VerifyNamesTheDamagedRecord) {
  TempDir dir;
  DatasetWriterOptions o;
  o.shard.compression = CompressionMode::kStore;
  auto w = DatasetWriter::Create(dir.path(), o);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*w)->Add(Payload(100, i), 0, std::to_string(i)).ok());
  Manifest m;
  ASSERT_TRUE((*w)->Finish(m).ok());
  std::string b = ReadFile(dir / "shard-00000.sks");
  b[format::kHeaderSize + 3 * 100 + 50] ^= 0x40;
  WriteFile(dir / "shard-00000.sks", b);
  VerifyReport r;
  auto problems = VerifyProblems(dir.path(), &r);
  EXPECT_EQ(r.records_bad, 1u);
  const std::string all = testing::JoinLines(problems);
  EXPECT_NE(all.find("shard-00000.sks: record 3"), std::string::npos) << all;
}

TEST(ManifestTest, RejectsMalformedAndUnsafeManifests) {
  const std::string ok_shard =
      R"({"file":"shard-00000.sks","records":1,"bytes":10,"crc32c":"0000abcd"})";
  auto parse = [](const std::string& s) { return ParseManifest(s, "m.json").status(); };
  EXPECT_TRUE(parse("not json").IsCorruption());
  EXPECT_TRUE(parse("[]").IsCorruption());
  EXPECT_TRUE(parse(R"({"format":"other","version":1})").IsCorruption());
  EXPECT_TRUE(
      parse(
          R"({"format":"shardkit-dataset","version":99,"record":{"kind":"jpeg"},"classes":[],"shards":[]})")
          .IsUnsupported());
  EXPECT_TRUE(
      parse(
          R"({"format":"shardkit-dataset","version":1,"record":{"kind":"jpeg"},"classes":[],"shards":[)" +
          std::string(R"({"file":"../etc/passwd","records":1,"bytes":1,"crc32c":"00000000"}]})"))
          .IsCorruption());
  EXPECT_TRUE(
      parse(
          R"({"format":"shardkit-dataset","version":1,"record":{"kind":"raw_u8","shape":[0,1,1]},"classes":[],"shards":[]})")
          .IsCorruption());
  EXPECT_TRUE(
      parse(
          R"({"format":"shardkit-dataset","version":1,"record":{"kind":"jpeg"},"classes":[],"records":5,"shards":[)" +
          ok_shard + "]}")
          .IsCorruption());
  auto good = ParseManifest(
      R"({"format":"shardkit-dataset","version":1,"record":{"kind":"jpeg"},"classes":["x"],"shards":[)" +
          ok_shard + "]}",
      "m.json");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->shards[0].crc32c, 0xabcdu);
}

TEST(ManifestTest, APartIsWrittenAsPartJsonAndNeverOpensAsADataset) {
  TempDir dir;
  Manifest m;
  m.record.kind = format::RecordKind::kBytes;
  m.part.index = 2;
  m.part.count = 4;
  m.part.first_record = 300;
  m.part.first_shard = 3;
  m.part.total_records = 1000;
  m.part.settings = "abc";
  EXPECT_TRUE(WriteManifest(dir.path(), m).IsInvalidArgument());
  ASSERT_TRUE(WritePartManifest(dir.path(), m).ok());
  auto back = ReadPartManifest(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->part.index, 2u);
  EXPECT_EQ(back->part.count, 4u);
  EXPECT_EQ(back->part.first_record, 300u);
  EXPECT_EQ(back->part.first_shard, 3u);
  EXPECT_EQ(back->part.total_records, 1000u);
  EXPECT_EQ(back->part.settings, "abc");
  EXPECT_TRUE(ReadManifest(dir.path()).status().IsNotFound()) << "a part is not a dataset";
  // Renamed to manifest.json, it is still refused as a whole dataset.
  testing::WriteFile(dir / "manifest.json", testing::ReadFile(dir / "part.json"));
  Status s = ReadManifest(dir.path()).status();
  EXPECT_NE(s.message().find("part 2 of 4"), std::string::npos) << s.ToString();
  m.part.index = 4;
  testing::WriteFile(dir / "part.json", ManifestToJson(m));
  EXPECT_TRUE(ReadPartManifest(dir.path()).status().IsCorruption());
}

}  // namespace
}  // namespace shardkit
