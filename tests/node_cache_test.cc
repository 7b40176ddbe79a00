// The node cache (storage/remote/node_cache.h) over a counting storage double: what is
// read once is read from disk after (in another reader too), a chunk is
// fetched once however many readers want it at once, a damaged or truncated
// cache file is fetched again and never served, and the limit evicts the
// least recently used objects that nobody has open, never one in use and
// never a file the cache did not make.
#include "storage/remote/node_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include "shard/dataset.h"
#include "storage/file_io.h"
#include "tests/storage_double.h"
#include "tests/test_util.h"

namespace shardkit {
namespace {

using testing::StorageDouble;
using testing::TempDir;

constexpr uint64_t kChunk = kCacheChunkBytes;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The whole file through `env`, read in pieces of `piece` bytes.
std::string ReadAll(Env* env, const std::string& path, size_t piece = 100000) {
  auto f = env->OpenForReads(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  std::string out((*f)->size(), '\0');
  for (uint64_t off = 0; off < out.size(); off += piece) {
    const size_t n = std::min<uint64_t>(piece, out.size() - off);
    EXPECT_TRUE((*f)->Read(off, n, out.data() + off).ok());
  }
  return out;
}

// The cache's files for one object (NAME.map, NAME.data), by suffix.
std::vector<std::string> CacheFiles(const std::string& dir, const char* suffix) {
  std::vector<std::string> out;
  for (const auto& name : *Env::Default()->ListDir(dir)) {
    if (name.size() > 5 &&
        name.compare(name.size() - std::strlen(suffix), std::strlen(suffix), suffix) == 0) {
      out.push_back(JoinPath(dir, name));
    }
  }
  return out;
}

class NodeCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<Env> Cache(uint64_t limit = 0) {
    auto env = NewCachingEnv(&storage_, NodeCacheOptions{cache_.path(), limit});
    EXPECT_TRUE(env.ok()) << env.status().ToString();
    return std::move(env).value();
  }
  std::string Object(const std::string& name, size_t bytes, uint32_t seed) {
    const std::string path = JoinPath(data_.path(), name);
    WriteBytes(path, RandomBytes(bytes, seed));
    return path;
  }
  TempDir data_, cache_;
  StorageDouble storage_;
};

TEST_F(NodeCacheTest, WhatWasReadOnceIsReadFromDiskByEveryLaterReader) {
  const std::string path = Object("shard-00000.sks", 3 * kChunk + 12345, 1);
  const std::string want = *ReadFileToString(path, 1 << 30);
  auto env = Cache();
  EXPECT_EQ(ReadAll(env.get(), path), want);
  EXPECT_EQ(storage_.reads(), 4u);  // a fetch per chunk, whatever the pieces
  EXPECT_EQ(ReadAll(env.get(), path, 7777), want);
  auto later = Cache();  // another job naming the same directory
  EXPECT_EQ(ReadAll(later.get(), path, 333333), want);
  EXPECT_EQ(storage_.reads(), 4u);
  EXPECT_GE(*NodeCacheBytes(cache_.path()), want.size());
}

TEST_F(NodeCacheTest, ReadersAtOnceFetchEachChunkOnce) {
  const std::string path = Object("shard-00000.sks", 6 * kChunk, 2);
  const std::string want = *ReadFileToString(path, 1 << 30);
  storage_.set_latency_ns(2'000'000);  // fetches overlap
  // Separate caches over one directory: as separate processes (their own
  // descriptors, so their own locks), each reading every chunk.
  std::vector<std::thread> readers;
  std::vector<std::string> got(4);
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      auto env = Cache();
      got[r] = ReadAll(env.get(), path, kChunk / 3);
    });
  }
  for (auto& t : readers) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
  EXPECT_EQ(storage_.reads(), 6u);
}

TEST_F(NodeCacheTest, ADamagedChunkOnDiskIsFetchedAgainNeverServed) {
  const std::string path = Object("shard-00000.sks", 3 * kChunk, 3);
  const std::string want = *ReadFileToString(path, 1 << 30);
  ReadAll(Cache().get(), path);
  ASSERT_EQ(storage_.reads(), 3u);
  auto data = CacheFiles(cache_.path(), ".data");
  ASSERT_EQ(data.size(), 1u);
  std::string bytes = *ReadFileToString(data[0], 1 << 30);
  bytes[kChunk + 17] ^= 0x20;  // chunk 1
  WriteBytes(data[0], bytes);
  EXPECT_EQ(ReadAll(Cache().get(), path), want);
  EXPECT_EQ(storage_.reads(), 4u);  // chunk 1 again, the others from disk
}

TEST_F(NodeCacheTest, ACacheFileTruncatedByAKillIsFetchedAgain) {
  const std::string path = Object("shard-00000.sks", 4 * kChunk, 4);
  const std::string want = *ReadFileToString(path, 1 << 30);
  ReadAll(Cache().get(), path);
  auto data = CacheFiles(cache_.path(), ".data");
  ASSERT_EQ(data.size(), 1u);
  ASSERT_EQ(::truncate(data[0].c_str(), static_cast<off_t>(2 * kChunk + 100)), 0);
  EXPECT_EQ(ReadAll(Cache().get(), path), want);
  EXPECT_EQ(storage_.reads(), 4u + 2u);  // chunks 2 and 3
  // A map file cut in its header: the object is cached anew.
  auto map = CacheFiles(cache_.path(), ".map");
  ASSERT_EQ(::truncate(map[0].c_str(), 10), 0);
  EXPECT_EQ(ReadAll(Cache().get(), path), want);
  EXPECT_EQ(storage_.reads(), 6u + 4u);
}

TEST_F(NodeCacheTest, TheLimitEvictsTheLeastRecentlyUsedObjectNobodyHasOpen) {
  const std::string a = Object("a.sks", 2 * kChunk, 5), b = Object("b.sks", 2 * kChunk, 6);
  WriteBytes(JoinPath(cache_.path(), "notes.txt"), "not the cache's");
  auto env = Cache(3 * kChunk + 2 * 4096 + 8192);  // one object and a half
  ReadAll(env.get(), a);
  ASSERT_EQ(CacheFiles(cache_.path(), ".data").size(), 1u);
  EXPECT_EQ(ReadAll(env.get(), b), *ReadFileToString(b, 1 << 30));  // a goes
  EXPECT_EQ(CacheFiles(cache_.path(), ".data").size(), 1u);
  EXPECT_LE(*NodeCacheBytes(cache_.path()), 3 * kChunk + 2 * 4096 + 8192);
  EXPECT_TRUE(Env::Default()->FileExists(JoinPath(cache_.path(), "notes.txt")));
  const uint64_t before = storage_.reads();
  ReadAll(env.get(), b);
  EXPECT_EQ(storage_.reads(), before);  // b stayed
}

TEST_F(NodeCacheTest, WhatIsInUseIsNeverEvictedAndTheRestIsReadUncached) {
  const std::string a = Object("a.sks", 2 * kChunk, 7), b = Object("b.sks", 3 * kChunk, 8);
  auto env = Cache(3 * kChunk);
  auto held = env->OpenForReads(a);  // a reader in the middle of a
  ASSERT_TRUE(held.ok());
  std::string first(2 * kChunk, '\0');
  ASSERT_TRUE((*held)->Read(0, first.size(), first.data()).ok());
  auto other = Cache(3 * kChunk);  // another process with the same limit
  EXPECT_EQ(ReadAll(other.get(), b), *ReadFileToString(b, 1 << 30));
  EXPECT_LE(*NodeCacheBytes(cache_.path()), 3 * kChunk + kChunk);
  // a is whole and still read from disk.
  const uint64_t before = storage_.reads();
  std::string again(2 * kChunk, '\0');
  ASSERT_TRUE((*held)->Read(0, again.size(), again.data()).ok());
  EXPECT_EQ(again, *ReadFileToString(a, 1 << 30));
  EXPECT_EQ(storage_.reads(), before);
}

TEST_F(NodeCacheTest, ARangeAheadIsOneRequestForItsWholeChunksEachInOneRun) {
  // Storage's read-ahead keeps a limited number of requests in flight: a
  // request per chunk would leave the rest to be fetched one by one when
  // read, and a run overlapping one asked before would fetch its chunks
  // again. A chunk asked for before is asked for alone (storage finds it in
  // the run it holds, or fetches it if it let that go).
  using Hints = std::vector<std::pair<uint64_t, size_t>>;
  const std::string b = Object("b.sks", 5 * kChunk - 100, 11);
  auto env = Cache();
  auto f = env->OpenForReads(b);
  ASSERT_TRUE(f.ok());
  storage_.TakeHinted();
  (*f)->WillNeed(100, 2 * kChunk);  // chunks 0-2
  EXPECT_EQ(storage_.TakeHinted(), (Hints{{0, 3 * kChunk}}));
  (*f)->WillNeed(kChunk + 5, 4 * kChunk);  // chunks 1-4, past the end
  EXPECT_EQ(storage_.TakeHinted(),
            (Hints{{kChunk, kChunk}, {2 * kChunk, kChunk}, {3 * kChunk, 2 * kChunk - 100}}));
  f->reset();
  EXPECT_EQ(ReadAll(env.get(), b), *ReadFileToString(b, 1 << 30));
  storage_.TakeHinted();
  auto again = env->OpenForReads(b);  // all on disk: nothing asked of storage
  ASSERT_TRUE(again.ok());
  (*again)->WillNeed(0, 5 * kChunk);
  EXPECT_TRUE(storage_.TakeHinted().empty());
}

TEST_F(NodeCacheTest, WhileFullARangeAcrossChunkEndsIsOneRequestAheadAsWithoutACache) {
  // The cache full of an object in use: a range of another object over
  // three chunks is asked of storage ahead as it is, once (a request per
  // chunk would cost storage's latency per chunk), and read right.
  const std::string a = Object("a.sks", 2 * kChunk, 9), b = Object("b.sks", 3 * kChunk, 10);
  auto env = Cache(2 * kChunk + 3 * 8192);
  auto held = env->OpenForReads(a);
  ASSERT_TRUE(held.ok());
  std::string whole(2 * kChunk, '\0');
  ASSERT_TRUE((*held)->Read(0, whole.size(), whole.data()).ok());
  auto f = env->OpenForReads(b);
  ASSERT_TRUE(f.ok());
  char first;
  ASSERT_TRUE((*f)->Read(0, 1, &first).ok());  // no room: read uncached
  const uint64_t hints = storage_.hints();
  (*f)->WillNeed(kChunk - 100, kChunk + 200);
  EXPECT_EQ(storage_.hints(), hints + 1);
  std::string got(kChunk + 200, '\0');
  ASSERT_TRUE((*f)->Read(kChunk - 100, got.size(), got.data()).ok());
  EXPECT_EQ(got, ReadFileToString(b, 1 << 30)->substr(kChunk - 100, kChunk + 200));
  EXPECT_EQ(CacheFiles(cache_.path(), ".data").size(), 2u);
  EXPECT_LE(*NodeCacheBytes(cache_.path()), 2 * kChunk + 3 * 8192);
}

TEST_F(NodeCacheTest, ViewsSeeTheChunksOnDiskInPlaceAndAskForAReadOfTheRest) {
  // Views asked for (block-local reading): a range over chunks the cache
  // holds is seen in the data file's mapping, checked first; one the limit
  // keeps out is Unsupported (the shard reader reads it instead), and reads
  // of it still give the bytes.
  const std::string a = Object("a.sks", 2 * kChunk, 12), b = Object("b.sks", 2 * kChunk, 13);
  const std::string want_a = *ReadFileToString(a, 1 << 30), want_b = *ReadFileToString(b, 1 << 30);
  auto env = Cache(2 * kChunk + 3 * 8192);
  AccessHints views;
  views.views = true;
  auto fa = env->OpenForReads(a);
  ASSERT_TRUE(fa.ok());
  ASSERT_TRUE((*fa)->SetAccess(views).ok());
  ASSERT_TRUE((*fa)->mapped());
  std::string_view seen;
  ASSERT_TRUE((*fa)->View(kChunk - 10, 20, &seen).ok());
  EXPECT_EQ(seen, std::string_view(want_a).substr(kChunk - 10, 20));
  (*fa)->Release(0, 2 * kChunk);
  ASSERT_TRUE((*fa)->View(0, 2 * kChunk, &seen).ok());  // released pages come back from disk
  EXPECT_EQ(seen, want_a);
  const uint64_t reads = storage_.reads();
  auto fb = env->OpenForReads(b);  // a in use fills the cache
  ASSERT_TRUE(fb.ok());
  ASSERT_TRUE((*fb)->SetAccess(views).ok());
  EXPECT_TRUE((*fb)->View(100, 200, &seen).IsUnsupported());
  std::string got(200, '\0');
  ASSERT_TRUE((*fb)->Read(100, got.size(), got.data()).ok());
  EXPECT_EQ(got, want_b.substr(100, 200));
  EXPECT_EQ(storage_.reads(), reads + 1);
  // A chunk damaged on disk is fetched again before it is seen (where the
  // limit leaves room for it).
  std::string data;  // a's (b's is there too, empty: the limit kept it out)
  for (const std::string& f : CacheFiles(cache_.path(), ".data")) {
    if (*ReadFileToString(f, 1 << 30) == want_a) data = f;
  }
  ASSERT_FALSE(data.empty());
  fa->reset();
  std::string bytes = want_a;
  bytes[5] ^= 1;
  WriteBytes(data, bytes);
  auto roomy = Cache();  // another process, without a limit
  auto again = roomy->OpenForReads(a);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->SetAccess(views).ok());
  const uint64_t before = storage_.reads();
  ASSERT_TRUE((*again)->View(0, 10, &seen).ok());
  EXPECT_EQ(seen, std::string_view(want_a).substr(0, 10));
  EXPECT_EQ(storage_.reads(), before + 1);
}

TEST_F(NodeCacheTest, FetchesInFlightCountAgainstTheLimit) {
  // Many chunks fetched at once by one process: the ones not yet on disk
  // count, so the directory never passes the limit.
  std::vector<std::string> objects;
  for (int i = 0; i < 8; ++i) objects.push_back(Object("o" + std::to_string(i), kChunk, 20 + i));
  storage_.set_latency_ns(5'000'000);
  const uint64_t limit = 3 * kChunk + 8 * 8192;
  auto env = Cache(limit);
  std::vector<std::thread> readers;
  for (const auto& o : objects) {
    readers.emplace_back(
        [&, o] { EXPECT_EQ(ReadAll(env.get(), o), *ReadFileToString(o, 1 << 30)); });
  }
  for (auto& t : readers) t.join();
  EXPECT_LE(*NodeCacheBytes(cache_.path()), limit);
}

TEST_F(NodeCacheTest, AnUnwritableDirectoryIsRefusedByName) {
  const std::string file = JoinPath(cache_.path(), "a-file");
  WriteBytes(file, "x");
  auto env = NewCachingEnv(&storage_, NodeCacheOptions{file, 0});
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find(file), std::string::npos);
}

// A shard's block that arrived damaged (the network flipped a bit on its
// way into the cache) fails its checksum: the cache drops the chunk, fetches
// it once more and the read succeeds, with the good bytes on disk for every
// later reader. Damaged on every fetch: the checksum error, after one more.
class NodeCacheDamageTest : public NodeCacheTest {
 protected:
  // A compressed raw dataset in data_/ds; the offset of a byte inside block b.
  uint64_t Dataset(uint32_t b, CompressionMode mode = CompressionMode::kZstd) {
    testing::WriteRawDataset(ds_, 200, 16, mode, 50, 1 << 20);
    auto plain = Dataset::Open(ds_);
    EXPECT_TRUE(plain.ok()) << plain.status().ToString();
    return (*plain)->shard(0).block(b).offset + 10;
  }
  Status ReadBlock(Env* env, uint32_t b) {
    auto ds = Dataset::Open(ds_, env);
    if (!ds.ok()) return ds.status();
    ReadScratch scratch;
    std::vector<char> raw;
    return (*ds)->shard(0).ReadBlockInto(b, &scratch, &raw);
  }
  const std::string ds_ = JoinPath(data_.path(), "ds");
};

TEST_F(NodeCacheDamageTest, AChunkThatArrivedDamagedIsFetchedAgainOnce) {
  storage_.DamageReads("shard-00000.sks", Dataset(1), 1);
  auto env = Cache();
  EXPECT_TRUE(ReadBlock(env.get(), 1).ok());
  EXPECT_EQ(storage_.damaged(), 1);
  const uint64_t reads = storage_.reads();
  auto later = Cache();  // another process, later: the good bytes, from disk
  EXPECT_TRUE(ReadBlock(later.get(), 1).ok());
  EXPECT_EQ(storage_.reads(), reads + 1) << "its manifest only: the shard from the cache's disk";
}

// Stored records (JPEGs) are read and checked one by one: the same.
TEST_F(NodeCacheDamageTest, AStoredRecordThatArrivedDamagedIsFetchedAgainOnce) {
  storage_.DamageReads("shard-00000.sks", Dataset(1, CompressionMode::kStore), 1);
  auto env = Cache();
  auto ds = Dataset::Open(ds_, env.get());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const ShardReader& r = (*ds)->shard(0);
  ReadScratch scratch;
  std::string_view payload;
  uint32_t record = 0;  // block 1's first record: the damaged byte is its tenth
  while (r.record(record).block != 1) ++record;
  ASSERT_EQ(r.record(record).offset, 0u);
  EXPECT_TRUE(r.ReadRecord(record, &scratch, &payload).ok());
  EXPECT_EQ(storage_.damaged(), 1);
}

TEST_F(NodeCacheDamageTest, DamagedOnEveryFetchIsTheChecksumError) {
  storage_.DamageReads("shard-00000.sks", Dataset(2), 1000);
  auto env = Cache();
  const Status s = ReadBlock(env.get(), 2);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
  EXPECT_EQ(storage_.damaged(), 2) << "the first fetch and one more";
}

}  // namespace
}  // namespace shardkit
