// BlockCache: one decompression per block however many workers ask at once,
// a bound in bytes with the oldest block dropped first, dropped blocks still
// valid for their holders, and damaged blocks reported to every asker.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "shard/block_cache.h"
#include "shard/dataset_writer.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;

// 8 zstd blocks of 16 records of 1 KB (compressible): record i is bytes i % 251.
void WriteCompressed(const std::string& dir) {
  DatasetWriterOptions o;
  o.shard.compression = CompressionMode::kZstd;
  o.shard.block_size = 16 << 10;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < 128; ++i) {
    ASSERT_TRUE(
        (*w)->Add(std::string(1024, static_cast<char>(i % 251)), 0, std::to_string(i)).ok());
  }
  ASSERT_TRUE((*w)->Finish(Manifest{}).ok());
}

class BlockCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteCompressed(dir_.path());
    auto ds = Dataset::Open(dir_.path());
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    ds_ = std::move(*ds);
    ASSERT_EQ(ds_->shard(0).num_blocks(), 8u);
    block_bytes_ = ds_->shard(0).block(0).raw_size;
  }
  TempDir dir_;
  std::unique_ptr<Dataset> ds_;
  uint64_t block_bytes_ = 0;
};

TEST_F(BlockCacheTest, ManyWorkersAskingAtOnceDecompressOnce) {
  BlockCache cache(ds_.get(), 1 << 30);
  std::atomic<int> decompressions{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&] {
      ReadScratch scratch;
      for (uint32_t b = 0; b < 8; ++b) {
        bool did = false;
        auto block = cache.Get(0, b, &scratch, &did);
        EXPECT_TRUE(block->status.ok());
        EXPECT_EQ(block->raw.size(), block_bytes_);
        EXPECT_EQ(block->view()[0], static_cast<char>(b * 16 % 251));
        decompressions += did;
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(decompressions.load(), 8);
  EXPECT_EQ(cache.bytes(), 8 * block_bytes_);
}

TEST_F(BlockCacheTest, TheOldestBlockIsDroppedAndStaysValidForItsHolder) {
  BlockCache cache(ds_.get(), 3 * block_bytes_);  // room for 3 blocks
  ReadScratch scratch;
  bool did = false;
  auto first = cache.Get(0, 0, &scratch, &did);
  for (uint32_t b = 1; b < 4; ++b) cache.Get(0, b, &scratch, &did);
  EXPECT_FALSE(cache.Contains(BlockCache::MakeKey(0, 0)));
  EXPECT_TRUE(cache.Contains(BlockCache::MakeKey(0, 3)));
  EXPECT_LE(cache.bytes(), 3 * block_bytes_);
  EXPECT_TRUE(first->evicted.load());
  EXPECT_EQ(first->raw.size(), block_bytes_);  // still readable by whoever holds it
  EXPECT_EQ(first->view()[5 * 1024], static_cast<char>(5));
  // Asking again decompresses it again.
  cache.Get(0, 0, &scratch, &did);
  EXPECT_TRUE(did);
}

TEST_F(BlockCacheTest, ADamagedBlockIsAnErrorForEveryAsker) {
  // Flip a byte inside block 2's stored bytes.
  const format::BlockEntry& e = ds_->shard(0).block(2);
  const std::string path = ds_->shard(0).path();
  std::string bytes = testing::ReadFile(path);
  bytes[e.offset + e.stored_size / 2] ^= 0x40;
  testing::WriteFile(path, bytes);
  auto ds = Dataset::Open(dir_.path());
  ASSERT_TRUE(ds.ok());
  BlockCache cache(ds->get(), 1 << 30);
  ReadScratch scratch;
  bool did = false;
  for (int ask = 0; ask < 2; ++ask) {
    auto block = cache.Get(0, 2, &scratch, &did);
    EXPECT_TRUE(block->status.IsCorruption()) << block->status.ToString();
    EXPECT_NE(block->status.message().find("shard-00000.sks"), std::string::npos)
        << block->status.message();
  }
  EXPECT_TRUE(cache.Get(0, 1, &scratch, &did)->status.ok());
}

}  // namespace
}  // namespace shardkit
