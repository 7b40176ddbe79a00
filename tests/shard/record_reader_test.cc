// Random access by record number costs a record, not a block: reading every
// record of a compressed dataset, in order or at random, from one thread or
// several, reads (and decompresses) each block once while the cache holds
// it, counted through the storage double; a stored record is one read of
// exactly its bytes; ShardReader::ReadRecord remembers its block in the
// scratch; a cache smaller than the dataset stays correct; a forked child,
// forked while another thread reads, reads with a cache of its own and never
// waits on its parent's; where every block fits, forked children and their
// parent decompress each block once between them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <thread>

#include "shard/dataset_writer.h"
#include "shard/record_reader.h"
#include "tests/common/storage_double.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::StorageDouble;
using testing::TempDir;

constexpr int kRecords = 128, kRecordBytes = 1024, kPerBlock = 16;

// Record i: kRecordBytes pseudo-random bytes (zstd barely shrinks them, so
// shards split as their raw sizes say), in blocks of about kPerBlock records,
// zstd or stored.
std::string Payload(int i) {
  std::string p(kRecordBytes, '\0');
  uint32_t x = 2654435761u * static_cast<uint32_t>(i + 1);
  for (int j = 0; j < kRecordBytes; ++j) {
    x = x * 1664525u + 1013904223u;
    p[j] = static_cast<char>(x >> 24);
  }
  return p;
}
void WriteDataset(const std::string& dir, CompressionMode compression) {
  DatasetWriterOptions o;
  o.shard.compression = compression;
  o.shard.block_size = kPerBlock * kRecordBytes;
  o.shard_size = 4 * kPerBlock * kRecordBytes + 4096;  // several shards
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < kRecords; ++i) ASSERT_TRUE((*w)->Add(Payload(i), 0, std::to_string(i)).ok());
  ASSERT_TRUE((*w)->Finish(Manifest{}).ok());
}

class RecordReaderTest : public ::testing::TestWithParam<CompressionMode> {
 protected:
  void SetUp() override {
    WriteDataset(dir_.path(), GetParam());
    auto ds = Dataset::Open(dir_.path(), &storage_);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    ds_ = std::move(*ds);
    for (size_t s = 0; s < ds_->num_shards(); ++s) blocks_ += ds_->shard(s).num_blocks();
    ASSERT_GT(ds_->num_shards(), 1u);
    ASSERT_GE(blocks_, 4u);  // several blocks of several records
    ASSERT_LE(blocks_, static_cast<uint64_t>(kRecords / 4));
  }
  bool compressed() const { return GetParam() == CompressionMode::kZstd; }
  // Reads the records in `order` with `reader`, checking every byte; the reads
  // of storage they took.
  uint64_t ReadAll(const RecordReader& reader, const std::vector<int>& order) {
    const uint64_t before = storage_.reads();
    RecordReader::Record rec;
    for (int i : order) {
      Status s = reader.Read(static_cast<uint64_t>(i), &rec);
      EXPECT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(rec.payload, Payload(i)) << "record " << i;
    }
    return storage_.reads() - before;
  }
  std::vector<int> InOrder() const {
    std::vector<int> v(kRecords);
    std::iota(v.begin(), v.end(), 0);
    return v;
  }
  std::vector<int> Shuffled(int seed) const {
    std::vector<int> v = InOrder();
    std::shuffle(v.begin(), v.end(), std::mt19937(seed));
    return v;
  }

  // The dataset through plain POSIX reads, for forking tests: the storage
  // double's locks, which a thread of the parent may hold at the fork, are
  // not a child's to take (POSIX reads take none).
  std::unique_ptr<Dataset> OpenPlain() {
    auto ds = Dataset::Open(dir_.path());
    EXPECT_TRUE(ds.ok()) << ds.status().ToString();
    return ds.ok() ? std::move(*ds) : nullptr;
  }

  TempDir dir_;
  StorageDouble storage_;
  std::unique_ptr<Dataset> ds_;
  uint64_t blocks_ = 0;
};

TEST_P(RecordReaderTest, EveryRecordInOrderThenAtRandomReadsEachBlockOnce) {
  RecordReader reader(ds_.get());
  // Compressed: a read per block, never one per record; stored: one per record.
  const uint64_t per_pass = compressed() ? blocks_ : kRecords;
  EXPECT_EQ(ReadAll(reader, InOrder()), per_pass);
  EXPECT_EQ(ReadAll(reader, Shuffled(1)), compressed() ? 0u : per_pass);
  EXPECT_EQ(reader.blocks_decompressed(), compressed() ? blocks_ : 0u);
  RecordReader fresh(ds_.get());
  EXPECT_EQ(ReadAll(fresh, Shuffled(2)), per_pass);
  EXPECT_EQ(fresh.blocks_decompressed(), compressed() ? blocks_ : 0u);
}

TEST_P(RecordReaderTest, AStoredRecordIsOneReadOfExactlyItsBytes) {
  if (compressed()) GTEST_SKIP() << "stored records only";
  RecordReader reader(ds_.get());
  RecordReader::Record rec;
  for (int i : Shuffled(3)) {
    const uint64_t reads = storage_.reads(), bytes = storage_.bytes();
    ASSERT_TRUE(reader.Read(static_cast<uint64_t>(i), &rec).ok());
    EXPECT_EQ(storage_.reads() - reads, 1u);
    EXPECT_EQ(storage_.bytes() - bytes, static_cast<uint64_t>(kRecordBytes));
  }
}

TEST_P(RecordReaderTest, ThreadsReadingAtOnceShareOneDecompressionPerBlock) {
  RecordReader reader(ds_.get());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      RecordReader::Record rec;
      for (int i : Shuffled(10 + t)) {
        ASSERT_TRUE(reader.Read(static_cast<uint64_t>(i), &rec).ok());
        ASSERT_EQ(rec.payload, Payload(i));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(reader.blocks_decompressed(), compressed() ? blocks_ : 0u);
}

TEST_P(RecordReaderTest, ACacheSmallerThanTheDataReadsInOrderOncePerBlockAndRandomlyRight) {
  const uint64_t block = ds_->shard(0).block(0).raw_size;
  RecordReader reader(ds_.get(), 2 * block);  // room for 2 of the blocks
  EXPECT_EQ(ReadAll(reader, InOrder()), compressed() ? blocks_ : kRecords);
  ReadAll(reader, Shuffled(4));  // checks every byte; blocks come and go
  if (compressed()) {
    EXPECT_GT(reader.blocks_decompressed(), blocks_);
  }
}

TEST_P(RecordReaderTest, ShardReaderReadRecordRemembersItsBlockInTheScratch) {
  ReadScratch scratch;
  const uint64_t before = storage_.reads();
  for (int i = 0; i < kRecords; ++i) {
    const auto [shard, local] = ds_->Locate(static_cast<uint64_t>(i));
    std::string_view p;
    ASSERT_TRUE(ds_->shard(shard).ReadRecord(local, &scratch, &p).ok());
    ASSERT_EQ(p, Payload(i));
  }
  EXPECT_EQ(storage_.reads() - before, compressed() ? blocks_ : kRecords);
  // Another shard's reader with the same scratch is not mistaken for the last one.
  const auto [shard, local] = ds_->Locate(0);
  std::string_view p;
  ASSERT_TRUE(ds_->shard(shard).ReadRecord(local, &scratch, &p).ok());
  EXPECT_EQ(p, Payload(0));
}

TEST_P(RecordReaderTest, AnUnreadableBlockIsAnErrorNamingItsShardAndLaterReadsRetry) {
  RecordReader reader(ds_.get());
  const std::string shard0 = ds_->manifest().shards[0].file;
  const format::BlockEntry& b = ds_->shard(0).block(1);
  storage_.FailReads(shard0, b.offset, b.stored_size);
  RecordReader::Record rec;
  Status s = reader.Read(kPerBlock + 1, &rec);  // record 1 of block 1
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(shard0), std::string::npos) << s.ToString();
  EXPECT_TRUE(reader.Read(0, &rec).ok());  // other blocks read on
}

TEST_P(RecordReaderTest, AForkedChildReadsWithACacheOfItsOwnWhileItsParentReads) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // GCC 12's sanitizer runtimes do not hold their allocator's lock across
  // fork (LLVM 15's do): a child forked while the busy thread allocates
  // waits on that lock forever. glibc's malloc, which users run, does.
  GTEST_SKIP() << "a sanitizer allocator is not fork-safe under a busy thread";
#endif
  const std::unique_ptr<Dataset> plain = OpenPlain();
  const uint64_t block = plain->shard(0).block(0).raw_size;
  RecordReader reader(plain.get(), 2 * block);  // small: the parent's thread keeps changing it
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    RecordReader::Record rec;
    for (uint64_t k = 0; !stop.load(); ++k) (void)reader.Read(k * 37 % kRecords, &rec);
  });
  for (int child = 0; child < 8; ++child) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // every record right, each block decompressed by this process once
      alarm(60);     // a child that waited on its parent's cache would be killed
      RecordReader::Record rec;
      int bad = 0;
      for (int i = 0; i < kRecords; ++i) {
        bad += !reader.Read(static_cast<uint64_t>(i), &rec).ok() || rec.payload != Payload(i);
      }
      const bool once = !compressed() || reader.blocks_decompressed() == blocks_;
      _exit(bad == 0 && once ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << child << " " << status;
  }
  stop = true;
  busy.join();
}

// Where every block fits the bound, a process and its forked children share
// one decompression per block, whoever reads first: a child that reads
// everything leaves nothing to decompress for its siblings, later or at the
// same time, nor for its parent.
TEST_P(RecordReaderTest, ForkedChildrenAndTheirParentDecompressEachBlockOnceBetweenThem) {
  if (!compressed()) GTEST_SKIP() << "compressed blocks only";
  RecordReader reader(ds_.get());  // the default bound holds every block
  std::atomic<bool> stop{false};
  std::thread busy([&] {  // a parent's thread reading while children fork (plain reads)
    const std::unique_ptr<Dataset> plain = OpenPlain();
    RecordReader other(plain.get());
    RecordReader::Record rec;
    for (uint64_t k = 0; !stop.load(); ++k) (void)other.Read(k * 37 % kRecords, &rec);
  });
  // Each child exits with the blocks it decompressed (or 255 for a wrong byte).
  auto child = [&](int seed) {
    const pid_t pid = fork();
    if (pid != 0) return pid;
    alarm(60);
    RecordReader::Record rec;
    for (int i : Shuffled(seed)) {
      if (!reader.Read(static_cast<uint64_t>(i), &rec).ok() || rec.payload != Payload(i))
        _exit(255);
    }
    _exit(static_cast<int>(reader.blocks_decompressed()));
  };
  auto decompressed_by = [](pid_t pid) {
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << status;
    return WEXITSTATUS(status);
  };
  EXPECT_EQ(decompressed_by(child(5)), static_cast<int>(blocks_));  // the first fills every block
  EXPECT_EQ(decompressed_by(child(6)), 0);                          // its sibling reads them
  std::vector<pid_t> together;
  for (int c = 0; c < 3; ++c) together.push_back(child(7 + c));
  for (pid_t pid : together) EXPECT_EQ(decompressed_by(pid), 0);
  const uint64_t reads = storage_.reads();
  EXPECT_EQ(ReadAll(reader, Shuffled(11)), 0u);  // nor for the parent
  EXPECT_EQ(reader.blocks_decompressed(), 0u);
  EXPECT_EQ(storage_.reads(), reads);
  stop = true;
  busy.join();
}

INSTANTIATE_TEST_SUITE_P(Compression, RecordReaderTest,
                         ::testing::Values(CompressionMode::kZstd, CompressionMode::kStore),
                         [](const ::testing::TestParamInfo<CompressionMode>& i) {
                           return i.param == CompressionMode::kZstd ? "Zstd" : "Stored";
                         });

}  // namespace
}  // namespace shardkit
