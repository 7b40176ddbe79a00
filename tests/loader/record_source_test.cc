// The loader's first stage alone: RecordSource (payloads and how long they
// live; which records go through the read queue) and the RecordFetcher under
// it (each record's bytes; a warmed block is decompressed once).
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "loader/options.h"
#include "loader/record_fetcher.h"
#include "loader/record_source.h"
#include "shard/block_cache.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"
#include "tests/loader/loader_test_util.h"

namespace shardkit {
namespace {

using testing::Expected;
using testing::TempDir;
using testing::WriteRaw;

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

}  // namespace
}  // namespace shardkit
