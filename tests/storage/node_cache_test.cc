// The node cache (storage/remote/node_cache.h) over a counting storage double: what is
// read once is read from disk after (in another reader too), a chunk is
// fetched once however many readers want it at once, a damaged or truncated
// cache file is fetched again and never served, and the limit evicts the
// least recently used objects that nobody has open, never one in use and
// never a file the cache did not make. A full disk is read as a full cache;
// another process stopped holding a lock holds no reader for long, and
// Abort ends the wait; files that are not the user's own are never used;
// objects are named by their identity.
#include "storage/remote/node_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "shard/dataset.h"
#include "storage/file_io.h"
#include "tests/common/storage_double.h"
#include "tests/common/test_util.h"

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

// A tmpfs of `size` ("8m") mounted at `dir` (made here) while it lives: a
// small disk that fills up. Needs root (CAP_SYS_ADMIN): ok() says whether it
// is mounted, error() why not.
class TmpfsMount {
 public:
  TmpfsMount(const std::string& dir, const std::string& size) : dir_(dir) {
    ::mkdir(dir.c_str(), 0700);
    const std::string options = "size=" + size + ",mode=0700";
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_, error_;
  bool mounted_ = false;
};

// A process that took OFD write locks on [start, start + len) of `path`
// (len 0: to its end) and was then stopped (SIGSTOP) holding them, as a
// filler stopped by a debugger or a suspended job is. holding() once it
// holds them and is stopped (it said so through a pipe; waitpid saw the
// stop). Killed and reaped when destroyed, however the test ends.
class StoppedHolder {
 public:
  StoppedHolder(const std::string& path, off_t start, off_t len) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {  // the child: system calls only, then stopped until killed
      // Killed with the test too, should it die before the destructor runs.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
      ::close(fds[0]);
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      fl.l_start = start;
      fl.l_len = len;
      const int fd = ::open(path.c_str(), O_RDWR);
      const char held = fd >= 0 && ::fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 1 : 0;
      if (::write(fds[1], &held, 1) != 1) ::_exit(1);
      ::raise(SIGSTOP);
      for (;;) ::pause();
    }
    ::close(fds[1]);
    char held = 0;
    int status = 0;
    holding_ = pid_ > 0 && ::read(fds[0], &held, 1) == 1 && held == 1 &&
               ::waitpid(pid_, &status, WUNTRACED) == pid_ && WIFSTOPPED(status);
    ::close(fds[0]);
  }
  StoppedHolder(const StoppedHolder&) = delete;
  StoppedHolder& operator=(const StoppedHolder&) = delete;
  ~StoppedHolder() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);  // stopped or not
    ::waitpid(pid_, nullptr, 0);
  }
  bool holding() const { return holding_; }

 private:
  pid_t pid_ = -1;
  bool holding_ = false;
};

// A map file's lock bytes past its in-use and init locks (bytes 0 and 1):
// every chunk's entry.
constexpr off_t kEntryLocks = 2;

class NodeCacheTest : public ::testing::Test {
 protected:
  std::unique_ptr<Env> Cache(uint64_t limit = 0,
                             std::chrono::milliseconds lock_wait = NodeCacheOptions().lock_wait) {
    NodeCacheOptions o;
    o.dir = cache_.path();
    o.limit = limit;
    o.lock_wait = lock_wait;
    auto env = NewCachingEnv(&storage_, o);
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
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
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
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
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
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
  ReadAll(Cache().get(), path);
  ASSERT_EQ(storage_.reads(), 3u);
  auto data = CacheFiles(cache_.path(), ".data");
  ASSERT_EQ(data.size(), 1u);
  std::string bytes = *Env::Default()->ReadFile(data[0], 1 << 30);
  bytes[kChunk + 17] ^= 0x20;  // chunk 1
  WriteBytes(data[0], bytes);
  EXPECT_EQ(ReadAll(Cache().get(), path), want);
  EXPECT_EQ(storage_.reads(), 4u);  // chunk 1 again, the others from disk
}

TEST_F(NodeCacheTest, ACacheFileTruncatedByAKillIsFetchedAgain) {
  const std::string path = Object("shard-00000.sks", 4 * kChunk, 4);
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
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
  EXPECT_EQ(ReadAll(env.get(), b), *Env::Default()->ReadFile(b, 1 << 30));  // a goes
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
  EXPECT_EQ(ReadAll(other.get(), b), *Env::Default()->ReadFile(b, 1 << 30));
  EXPECT_LE(*NodeCacheBytes(cache_.path()), 3 * kChunk + kChunk);
  // a is whole and still read from disk.
  const uint64_t before = storage_.reads();
  std::string again(2 * kChunk, '\0');
  ASSERT_TRUE((*held)->Read(0, again.size(), again.data()).ok());
  EXPECT_EQ(again, *Env::Default()->ReadFile(a, 1 << 30));
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
  EXPECT_EQ(ReadAll(env.get(), b), *Env::Default()->ReadFile(b, 1 << 30));
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
  EXPECT_EQ(got, Env::Default()->ReadFile(b, 1 << 30)->substr(kChunk - 100, kChunk + 200));
  EXPECT_EQ(CacheFiles(cache_.path(), ".data").size(), 2u);
  EXPECT_LE(*NodeCacheBytes(cache_.path()), 2 * kChunk + 3 * 8192);
}

TEST_F(NodeCacheTest, ViewsSeeTheChunksOnDiskInPlaceAndAskForAReadOfTheRest) {
  // Views asked for (block-local reading): a range over chunks the cache
  // holds is seen in the data file's mapping, checked first; one the limit
  // keeps out is Unsupported (the shard reader reads it instead), and reads
  // of it still give the bytes.
  const std::string a = Object("a.sks", 2 * kChunk, 12), b = Object("b.sks", 2 * kChunk, 13);
  const std::string want_a = *Env::Default()->ReadFile(a, 1 << 30),
                    want_b = *Env::Default()->ReadFile(b, 1 << 30);
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
    if (*Env::Default()->ReadFile(f, 1 << 30) == want_a) data = f;
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
        [&, o] { EXPECT_EQ(ReadAll(env.get(), o), *Env::Default()->ReadFile(o, 1 << 30)); });
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

TEST_F(NodeCacheTest, AFullDiskIsReadAsAFullCacheUntilItHasRoomAgain) {
  // The cache on a disk of 8 MiB with half a chunk free: a chunk fetched
  // cannot be written. From then on the chunks not on disk are read as
  // while the limit is reached: the bytes asked from storage (not a whole
  // chunk per record of 110 KB, 9 times its bytes), ahead only the range
  // asked, and no views; after 16 MiB more were asked for, the disk is tried
  // again, and used, having room by then.
  using Hints = std::vector<std::pair<uint64_t, size_t>>;
  const std::string disk = JoinPath(cache_.path(), "disk");
  TmpfsMount mount(disk, "8m");
  if (!mount.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (root only): " << mount.error();
  const std::string junk = JoinPath(disk, "junk");
  WriteBytes(junk, std::string(7 * kChunk + kChunk / 2, 'j'));
  const std::string path = Object("big.sks", 20 * kChunk, 30);
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
  auto env = NewCachingEnv(&storage_, NodeCacheOptions{disk, 0});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  auto f = (*env)->OpenForReads(path);
  ASSERT_TRUE(f.ok());
  AccessHints views;
  views.views = true;
  ASSERT_TRUE((*f)->SetAccess(views).ok());
  constexpr size_t kRecord = 110000;
  std::string got(kRecord, '\0');
  auto read_at = [&](uint64_t offset) {
    ASSERT_TRUE((*f)->Read(offset, kRecord, got.data()).ok());
    EXPECT_EQ(got, want.substr(offset, kRecord)) << "at " << offset;
  };
  read_at(0);
  ASSERT_EQ(storage_.bytes(), kChunk);  // chunk 0, which the disk could not take
  const uint64_t fetched = storage_.bytes();
  uint64_t offset = kRecord, asked = 0;
  for (; offset + kRecord <= 8 * kChunk; offset += kRecord, asked += kRecord) read_at(offset);
  EXPECT_EQ(storage_.bytes() - fetched, asked) << "the records' bytes, not their chunks";
  storage_.TakeHinted();
  (*f)->WillNeed(offset, 3 * kChunk);
  EXPECT_EQ(storage_.TakeHinted(), (Hints{{offset, 3 * kChunk}}));
  std::string_view seen;
  EXPECT_TRUE((*f)->View(offset, 100, &seen).IsUnsupported());
  ASSERT_EQ(::unlink(junk.c_str()), 0);  // room again
  for (; offset + kRecord <= want.size(); offset += kRecord) read_at(offset);
  const uint64_t reads = storage_.reads();
  read_at(want.size() - kRecord);
  EXPECT_EQ(storage_.reads(), reads) << "the last chunk was kept";
}

TEST_F(NodeCacheTest, AChunkWhoseFillerIsStoppedIsReadFromStorage) {
  // Another process took the chunks' entry locks to fill them and was
  // stopped before it let go: a reader gives up on it (here after 100 ms)
  // and reads the bytes asked from storage; with that process gone the
  // chunks are cached as ever.
  const std::string path = Object("shard.sks", 2 * kChunk, 31);
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
  auto env = Cache(0, std::chrono::milliseconds(100));
  auto f = env->OpenForReads(path);  // its cache files exist from here on
  ASSERT_TRUE(f.ok());
  const auto map = CacheFiles(cache_.path(), ".map");
  ASSERT_EQ(map.size(), 1u);
  {
    StoppedHolder filler(map[0], kEntryLocks, 0);
    ASSERT_TRUE(filler.holding());
    std::string got(1000, '\0');
    ASSERT_TRUE((*f)->Read(500, got.size(), got.data()).ok());
    EXPECT_EQ(got, want.substr(500, got.size()));
    ASSERT_TRUE((*f)->Read(700, got.size(), got.data()).ok());  // tried once, not waited for
    EXPECT_EQ(got, want.substr(700, got.size()));
    EXPECT_EQ(storage_.bytes(), 2 * got.size()) << "the bytes asked, not the chunk";
  }
  EXPECT_EQ(ReadAll(env.get(), path), want);
  const uint64_t reads = storage_.reads();
  EXPECT_EQ(ReadAll(Cache().get(), path), want);
  EXPECT_EQ(storage_.reads(), reads) << "cached once the filler was gone";
}

TEST_F(NodeCacheTest, AbortEndsReadsWaitingForAStoppedFiller) {
  // A wait for another process's lock that only Abort can end (its bound
  // ten minutes): a read waiting for the lock, and one waiting for that
  // read's fill in this process, end with Aborted.
  const std::string path = Object("shard.sks", 2 * kChunk, 32);
  auto env = Cache(0, std::chrono::minutes(10));
  auto f = env->OpenForReads(path);
  ASSERT_TRUE(f.ok());
  const auto map = CacheFiles(cache_.path(), ".map");
  ASSERT_EQ(map.size(), 1u);
  StoppedHolder filler(map[0], kEntryLocks, 0);
  ASSERT_TRUE(filler.holding());
  const uint64_t hints = storage_.hints();
  Status across, inside;
  std::thread a([&] {
    std::string got(20, '\0');
    across = (*f)->Read(kChunk - 10, got.size(), got.data());
  });
  storage_.WaitForHints(hints + 1);  // a asked ahead for both chunks: it is at chunk 0's lock
  std::thread b([&] {
    char got;
    inside = (*f)->Read(5, 1, &got);
  });
  (*f)->Abort();
  a.join();
  b.join();
  EXPECT_TRUE(across.IsAborted()) << across.ToString();
  EXPECT_TRUE(inside.IsAborted()) << inside.ToString();
}

TEST_F(NodeCacheTest, AStoppedProcessHoldingAnObjectsHeaderLeavesItUncached) {
  // The init lock (a process stopped while it writes the header) and the
  // in-use lock taken exclusively (an evictor stopped before it removes the
  // object): an open gives up on them and reads the object uncached.
  const std::string path = Object("shard.sks", 2 * kChunk, 33);
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
  auto env = Cache(0, std::chrono::milliseconds(100));
  ASSERT_TRUE(env->OpenForReads(path).ok());
  const auto map = CacheFiles(cache_.path(), ".map");
  ASSERT_EQ(map.size(), 1u);
  const uint64_t pieces = (want.size() + 99999) / 100000;
  for (const off_t lock : {off_t{1}, off_t{0}}) {
    StoppedHolder holder(map[0], lock, 1);
    ASSERT_TRUE(holder.holding());
    const uint64_t reads = storage_.reads();
    EXPECT_EQ(ReadAll(env.get(), path), want);
    EXPECT_EQ(storage_.reads() - reads, pieces) << "uncached: each read from storage as asked";
  }
}

TEST_F(NodeCacheTest, ASymlinkOrAnotherUsersFileAtACacheFilesNameIsNeverReadFrom) {
  // The files the cache makes are its user's alone (0600). Planted in their
  // place with the object's bytes and matching checksums: a symlink at the
  // data file's name, one at the map file's, the files given to another
  // user. None is read from: every byte comes from storage.
  const std::string path = Object("shard.sks", 2 * kChunk, 34);
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
  EXPECT_EQ(ReadAll(Cache().get(), path), want);
  const auto maps = CacheFiles(cache_.path(), ".map"), datas = CacheFiles(cache_.path(), ".data");
  ASSERT_EQ(maps.size(), 1u);
  ASSERT_EQ(datas.size(), 1u);
  const std::string map = maps[0], data = datas[0];
  for (const std::string& file : {map, data}) {
    struct stat st;
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << file;
  }
  const uint64_t pieces = (want.size() + 99999) / 100000;
  auto read_uncached = [&](const std::string& planted) {
    const uint64_t reads = storage_.reads();
    EXPECT_EQ(ReadAll(Cache().get(), path), want) << planted;
    EXPECT_EQ(storage_.reads() - reads, pieces) << planted << ": read from storage as asked";
  };
  const std::string elsewhere = JoinPath(data_.path(), "elsewhere");
  for (const std::string& file : {data, map}) {
    ASSERT_EQ(::rename(file.c_str(), elsewhere.c_str()), 0);
    ASSERT_EQ(::symlink(elsewhere.c_str(), file.c_str()), 0);
    read_uncached("a symlink at " + file);
    ASSERT_EQ(::unlink(file.c_str()), 0);
    ASSERT_EQ(::rename(elsewhere.c_str(), file.c_str()), 0);
  }
  ASSERT_EQ(::chown(map.c_str(), 12345, 12345), 0);
  ASSERT_EQ(::chown(data.c_str(), 12345, 12345), 0);
  read_uncached("another user's files");
  EXPECT_EQ(*Env::Default()->ReadFile(data, 1 << 30), want) << "left as they were";
}

TEST_F(NodeCacheTest, EvictionNeverRemovesAnotherUsersFilesNorASymlink) {
  const std::string a = Object("a.sks", 2 * kChunk, 35), b = Object("b.sks", 2 * kChunk, 36);
  auto env = Cache(3 * kChunk + 2 * 4096 + 8192);  // one object and a half
  ReadAll(env.get(), a);
  std::vector<std::string> theirs = CacheFiles(cache_.path(), ".map");
  ASSERT_EQ(theirs.size(), 1u);
  theirs.push_back(CacheFiles(cache_.path(), ".data").at(0));
  for (const std::string& file : theirs) ASSERT_EQ(::chown(file.c_str(), 12345, 12345), 0);
  const std::string outside = JoinPath(data_.path(), "outside");
  WriteBytes(outside, "not the cache's");
  const std::string link = JoinPath(cache_.path(), std::string(32, 'a') + ".map");
  ASSERT_EQ(::symlink(outside.c_str(), link.c_str()), 0);
  EXPECT_EQ(ReadAll(env.get(), b),
            *Env::Default()->ReadFile(b, 1 << 30));  // room for a chunk of it
  struct stat st;
  for (const std::string& file : theirs) {
    ASSERT_EQ(::lstat(file.c_str(), &st), 0) << file << " was removed";
    EXPECT_EQ(st.st_uid, 12345u);
  }
  ASSERT_EQ(::lstat(link.c_str(), &st), 0) << "the symlink was removed";
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(*Env::Default()->ReadFile(outside, 1 << 10), "not the cache's");
}

TEST_F(NodeCacheTest, ADirectoryOtherUsersCouldWriteIsRefusedByName) {
  const std::string dir = JoinPath(cache_.path(), "shared");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  auto open = [&] { return NewCachingEnv(&storage_, NodeCacheOptions{dir, 0}); };
  EXPECT_TRUE(open().ok());
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);  // anyone may replace its files
  auto env = open();
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find(dir), std::string::npos) << env.status().ToString();
  ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);  // sticky, as /tmp: each user's files are safe
  EXPECT_TRUE(open().ok());
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 12345, 12345), 0);  // another user's
  env = open();
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find(dir), std::string::npos) << env.status().ToString();
}

TEST_F(NodeCacheTest, ObjectsAreNamedByWhereAndWhichVersionTheyAre) {
  // The same path on two endpoints is two entries; an object replaced by
  // one of the same size is another; one whose storage names no versions
  // (identity() empty) is read uncached.
  const std::string path = Object("shard.sks", 2 * kChunk, 37);
  const std::string want = *Env::Default()->ReadFile(path, 1 << 30);
  storage_.set_location("https://west.example/");
  StorageDouble east;
  east.set_location("https://east.example/");
  auto west_cache = Cache();
  auto east_cache = NewCachingEnv(&east, NodeCacheOptions{cache_.path(), 0});
  ASSERT_TRUE(east_cache.ok());
  EXPECT_EQ(ReadAll(west_cache.get(), path), want);
  EXPECT_EQ(ReadAll(east_cache->get(), path), want);
  EXPECT_EQ(storage_.reads(), 2u);
  EXPECT_EQ(east.reads(), 2u) << "an entry of its own";
  EXPECT_EQ(CacheFiles(cache_.path(), ".map").size(), 2u);
  const std::string replaced = RandomBytes(want.size(), 38);
  WriteBytes(path, replaced);
  storage_.set_version("2");
  EXPECT_EQ(ReadAll(west_cache.get(), path), replaced);
  StorageDouble unversioned;
  unversioned.set_version("");
  auto plain_cache = NewCachingEnv(&unversioned, NodeCacheOptions{cache_.path(), 0});
  ASSERT_TRUE(plain_cache.ok());
  EXPECT_EQ(ReadAll(plain_cache->get(), path), replaced);
  EXPECT_EQ(ReadAll(plain_cache->get(), path), replaced);
  EXPECT_EQ(unversioned.reads(), 2 * ((want.size() + 99999) / 100000)) << "uncached, twice";
  EXPECT_EQ(CacheFiles(cache_.path(), ".map").size(), 3u);
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
