// The node cache: CachingEnv, its files (CachedFile), the chunk protocol
// between processes (OFD locks, waited for within a bound), which files it
// trusts (its user's own), and the limit and a full disk (Budget: usage and
// eviction).
#include "storage/remote/node_cache.h"
#include "storage/remote/digest.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "base/crc32c.h"
#include "storage/file_io.h"
#include "storage/posix_advice.h"
#include "storage/posix_errors.h"
#include "storage/remote/sigv4.h"

namespace shardkit {
namespace {

constexpr char kMagic[8] = {'S', 'K', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr uint64_t kHeaderBytes = 4096;    // then 8 bytes per chunk
constexpr uint32_t kPresent = 0x314b4843;  // "CHK1"
// Lock bytes of a map file's header: readers hold a shared lock on kInUse
// while they have the object open (an evictor's exclusive try fails then);
// kInit serialises the header's writing.
constexpr off_t kInUse = 0, kInit = 1;
// The directory is measured again after this many bytes were added; while
// the cache is full (the limit, a failed write) it is tried again after this
// many more bytes were asked for.
constexpr uint64_t kRescanBytes = 16 * kCacheChunkBytes;
// Chunks a process is fetching, counted against the limit before they are
// on disk (where a measure sees them), at most: the cache can exceed its
// limit by this much per process sharing it, no more.
constexpr uint64_t kMaxPendingBytes = 32 * kCacheChunkBytes;
// A request ahead (WillNeed) to storage for at most this many bytes.
constexpr uint64_t kMaxAheadBytes = 8 * kCacheChunkBytes;
// What CachedFile::WillNeed asked for a chunk, bits of asked_.
constexpr uint8_t kAskedStorage = 1, kAskedDisk = 2;
// A lock another process holds is tried again after these pauses, each
// twice the last: a fill that ends soon is noticed soon, a long one costs
// few tries.
constexpr std::chrono::milliseconds kFirstPause{1}, kMaxPause{50};

// An OFD lock taken without waiting (per open file description: released by
// the kernel when the process dies; threads of one process sharing a
// descriptor do not exclude each other, which the callers do themselves).
// False with errno EAGAIN or EACCES where another process holds a
// conflicting lock. Never F_OFD_SETLKW: a holder that is stopped would hold
// the waiter for as long, and nothing could end the wait.
bool TryLock(int fd, short type, off_t start, off_t len) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = len;
  for (;;) {
    if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;
    if (errno != EINTR) return false;
  }
}

void Unlock(int fd, off_t start, off_t len) { TryLock(fd, F_UNLCK, start, len); }

bool IsCacheName(const std::string& name, const char* suffix) {
  const size_t n = std::strlen(suffix);
  if (name.size() != 32 + n || name.compare(32, n, suffix) != 0) return false;
  return std::all_of(name.begin(), name.begin() + 32,
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The disk blocks of what is at `path` itself (a symlink is not followed).
uint64_t DiskBytes(const std::string& path, struct timespec* mtime = nullptr) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return 0;
  if (mtime != nullptr) *mtime = st.st_mtim;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// A cache file the cache may read, write and remove: a regular file of the
// process's effective user with one name. Anything else (another user's
// file, a symlink, a FIFO, a second name of a file elsewhere, which a write
// would change) is never used: in a directory other users can write, they
// could plant a map and data file pair whose checksums match bytes of their
// choosing.
bool Ours(const struct stat& st) {
  return S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && st.st_nlink == 1;
}

// Whether `path` still names the file open as `fd` (an evictor may have
// removed it, and a reader made a new one, since it was opened).
bool StillNamed(int fd, const std::string& path) {
  struct stat ours, there;
  return ::fstat(fd, &ours) == 0 && ::lstat(path.c_str(), &there) == 0 &&
         ours.st_ino == there.st_ino && ours.st_dev == there.st_dev;
}

// A cache file opened for reads and writes, created (0600) if missing and
// `create`: never through a symlink (O_NOFOLLOW), never a FIFO's blocking
// open (O_NONBLOCK, cleared after), and only if Ours; else an error naming it.
Result<int> OpenOwned(const std::string& path, bool create) {
  const int flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (create ? O_CREAT : 0);
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) {
    const int err = errno;
    return Errno(err == ELOOP ? "a symlink where a cache file belongs, not followed"
                              : "cannot open the cache file",
                 path, err);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Errno("cannot stat the cache file", path, err);
  }
  if (!Ours(st)) {
    ::close(fd);
    if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
    return Status::At(Status::Code::kInvalidArgument, {path, ""},
                      "a cache file not this user's own (owner uid " + std::to_string(st.st_uid) +
                          ", " + std::to_string(st.st_nlink) + " links): not used");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Refuses a directory in which another user could replace the cache's files
// (every file is checked too, Ours, but a directory that is the caller's and
// not open to others' writes keeps them from being removed or renamed): one
// that belongs to another user (root aside: root can replace anything
// anyway, and a root-owned sticky directory is the usual shared scratch
// space), or that others can write without the sticky bit.
Status CheckCacheDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Errno("cannot stat the cache directory", dir, errno);
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(dir + ": the cache directory is not a directory");
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return Status::InvalidArgument(dir + ": the cache directory belongs to uid " +
                                   std::to_string(st.st_uid) + ", not to this user (uid " +
                                   std::to_string(::geteuid()) +
                                   "): its owner could replace what it caches");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return Status::InvalidArgument(
        dir +
        ": the cache directory is writable by other users and not sticky, so they could "
        "replace what it caches (chmod go-w, or chmod +t)");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return Errno("cannot write the cache directory", dir, errno);
  }
  return Status::OK();
}

// The directory's limit, and whether its disk takes writes, shared by the
// files of one CachingEnv. Thread-safe.
class Budget {
 public:
  Budget(std::string dir, uint64_t limit) : dir_(std::move(dir)), limit_(limit) {}
  // Room for `bytes` more: true if they fit (after evicting what no process
  // has open, least recently used first); false: read uncached (the cache is
  // full, or `aborted` was set while this waited for fetches in flight). A
  // true is followed by Done(bytes) once they are written (or given up).
  bool Reserve(uint64_t bytes, const std::atomic<bool>& aborted);
  void Done(uint64_t bytes);
  // A write to the directory's disk failed (ENOSPC, EDQUOT, EIO...): full, as
  // at the limit, until kRescanBytes more bytes were asked for; then the
  // next Reserve tries again (a disk that got room again is used again).
  void WriteFailed();
  // Whether a read of `bytes` of a chunk not on disk goes straight to
  // storage, as asked, without trying the cache: while full, until
  // kRescanBytes more were asked for (counted here).
  bool Bypass(uint64_t bytes);
  // Wakes every Reserve waiting for fetches in flight (to see `aborted`).
  void Wake();
  const std::string& dir() const { return dir_; }
  // Chunk lookups of the readers of this Env: found on disk, or fetched
  // from storage (into the cache, or around it while it is full).
  std::atomic<uint64_t> hits{0}, misses{0};
  // Whether the cache takes no chunks now (the limit at the last measure, or
  // a failed write): reads go to storage uncached.
  bool full() const { return full_.load(std::memory_order_relaxed); }

 private:
  uint64_t Scan(std::vector<std::pair<struct timespec, std::string>>* objects);
  uint64_t EvictOne(const std::string& name);
  const std::string dir_;
  const uint64_t limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t estimate_ = 0, since_scan_ = kRescanBytes;
  uint64_t pending_ = 0;  // reserved, not written yet (a measure cannot see them)
  std::atomic<bool> full_{false};
};

uint64_t Budget::Scan(std::vector<std::pair<struct timespec, std::string>>* objects) {
  uint64_t total = 0;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return 0;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!IsCacheName(name, ".map")) continue;
    struct timespec mtime {};
    const std::string base = name.substr(0, 32);
    total += DiskBytes(JoinPath(dir_, name), &mtime) + DiskBytes(JoinPath(dir_, base + ".data"));
    objects->emplace_back(mtime, base);
  }
  ::closedir(d);
  std::sort(objects->begin(), objects->end(), [](const auto& a, const auto& b) {
    return a.first.tv_sec != b.first.tv_sec ? a.first.tv_sec < b.first.tv_sec
                                            : a.first.tv_nsec < b.first.tv_nsec;
  });
  return total;
}

// Removes an object of ours (both files Ours, or no data file) that nobody
// has open (its in-use lock taken); its bytes. Names that are symlinks or
// other users' files are left as they are.
uint64_t Budget::EvictOne(const std::string& name) {
  const std::string map = JoinPath(dir_, name + ".map"), data = JoinPath(dir_, name + ".data");
  auto fd = OpenOwned(map, /*create=*/false);
  if (!fd.ok()) return 0;
  struct stat st;
  const bool data_ours = ::lstat(data.c_str(), &st) == 0 ? Ours(st) : errno == ENOENT;
  uint64_t freed = 0;
  if (data_ours && TryLock(*fd, F_WRLCK, kInUse, 1) && StillNamed(*fd, map)) {
    freed = DiskBytes(map) + DiskBytes(data);
    ::unlink(data.c_str());
    ::unlink(map.c_str());
  }
  ::close(*fd);  // releases the lock
  return freed;
}

bool Budget::Reserve(uint64_t bytes, const std::atomic<bool>& aborted) {
  if (limit_ == 0 && !full()) return true;
  std::unique_lock<std::mutex> lock(mu_);
  // Full at the last measure or write: tried again only after kRescanBytes
  // more were asked for (a measure reads the whole directory; a disk that
  // was full is likely full still), uncached till then.
  if (full() && since_scan_ < kRescanBytes) {
    since_scan_ += bytes;
    return false;
  }
  if (limit_ == 0) {  // a failed write's pause is over: try the disk again
    full_.store(false, std::memory_order_relaxed);
    return true;
  }
  cv_.wait(lock,
           [&] { return aborted.load() || pending_ == 0 || pending_ + bytes <= kMaxPendingBytes; });
  if (aborted.load()) return false;
  if (since_scan_ < kRescanBytes && estimate_ + bytes <= limit_) {
    estimate_ += bytes;
    since_scan_ += bytes;
    pending_ += bytes;
    return true;
  }
  std::vector<std::pair<struct timespec, std::string>> objects;
  uint64_t used = Scan(&objects) + pending_;
  for (size_t i = 0; i < objects.size() && used + bytes > limit_; ++i) {
    used -= std::min(used, EvictOne(objects[i].second));
  }
  since_scan_ = 0;
  estimate_ = used;
  full_.store(used + bytes > limit_, std::memory_order_relaxed);
  if (used + bytes > limit_) return false;
  estimate_ += bytes;
  since_scan_ += bytes;
  pending_ += bytes;
  return true;
}

void Budget::Done(uint64_t bytes) {
  if (limit_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  pending_ -= std::min(pending_, bytes);
  cv_.notify_all();
}

void Budget::WriteFailed() {
  std::lock_guard<std::mutex> lock(mu_);
  full_.store(true, std::memory_order_relaxed);
  since_scan_ = 0;
}

bool Budget::Bypass(uint64_t bytes) {
  if (!full()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (!full() || since_scan_ >= kRescanBytes) return false;
  since_scan_ += bytes;
  return true;
}

void Budget::Wake() {
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

// A remote file read through the cache.
class CachedFile final : public RandomAccessFile {
 public:
  CachedFile(std::unique_ptr<RandomAccessFile> remote, std::shared_ptr<Budget> budget,
             std::chrono::milliseconds lock_wait)
      : remote_(std::move(remote)), budget_(std::move(budget)), lock_wait_(lock_wait) {}
  ~CachedFile() override;
  // The cache's files for it; on failure (a file storage cannot tell from a
  // replaced one, a cache file not ours, another process holding a lock
  // past lock_wait) it reads uncached.
  Status Open();

  const std::string& path() const override { return remote_->path(); }
  uint64_t size() const override { return remote_->size(); }
  std::string version() const override { return remote_->version(); }
  std::string identity() const override { return remote_->identity(); }
  std::optional<uint32_t> stored_crc32c() const override { return remote_->stored_crc32c(); }
  Status Read(uint64_t offset, size_t n, void* dst) const override;
  void WillNeed(uint64_t offset, size_t n) const override;
  // Ends reads in flight and later ones with an Aborted error, those waiting
  // in the cache too (for another thread's or process's fill of a chunk, or
  // for room among the fetches in flight).
  void Abort() const override;
  // Views (AccessHints::views) of the data file mapped, as a local file's:
  // of chunks on disk and checked; a range with a chunk the cache cannot
  // hold (the limit, a failed write) is Unsupported, to be read instead.
  // Reads and checks stay preads: a cache file cut short by something else
  // is fetched again, where a mapping would fault (SIGBUS).
  Status SetAccess(const AccessHints& hints) override;
  bool mapped() const override { return data_map_ != nullptr; }
  bool held_locally() const override;
  Status View(uint64_t offset, size_t n, std::string_view* out) const override;
  void Release(uint64_t offset, size_t n) const override;
  bool Forget(uint64_t offset, size_t n) const override;

 private:
  enum class Waited { kLocked, kGaveUp, kAborted };

  uint64_t chunks() const { return (size() + kCacheChunkBytes - 1) / kCacheChunkBytes; }
  uint64_t ChunkLength(uint64_t c) const {
    return std::min<uint64_t>(kCacheChunkBytes, size() - c * kCacheChunkBytes);
  }
  Status Aborted() const { return Status::Aborted(path() + ": read cancelled"); }
  // An OFD lock on the map file, polled (TryLock) with pauses from
  // kFirstPause up to kMaxPause: kLocked; kGaveUp once lock_wait_ passed
  // (at once if not `patient`), or on an error; kAborted as soon as the file
  // is aborted.
  Waited LockWithin(short type, off_t start, off_t len, bool patient) const;
  Status OpenMap(const std::string& map);
  bool InitHeader();
  // Whether chunk c is neither checked by this process nor on disk.
  bool Absent(uint64_t c) const {
    return checked_[c].load(std::memory_order_acquire) == 0 &&
           static_cast<uint32_t>(Entry(c)) != kPresent;
  }
  // Chunk c on disk and checked by this process (*cached), or not
  // cacheable now (the limit, a full disk, another process's lock held too
  // long): read it from storage. *held: this call read the chunk whole to
  // check or fetch it, and it is in the calling thread's buffer (Held()), so
  // its bytes need no second read.
  Status Ensure(uint64_t c, bool* cached, bool* held) const;
  static std::vector<char>& Held() {
    thread_local std::vector<char> buf;
    return buf;
  }
  // [pos, end) of chunk c into dst: from disk, or from storage where the
  // cache cannot hold the chunk.
  Status ReadChunk(uint64_t c, uint64_t pos, uint64_t end, char* dst) const;
  bool Verify(uint64_t c, std::vector<char>* buf) const;  // the entry's CRC over the chunk
  void AskAhead(uint64_t offset, size_t n) const;
  // *in_buf: buf holds the chunk (checked, or fetched from storage) even
  // where it could not be cached.
  Status Fill(uint64_t c, std::vector<char>* buf, bool* cached, bool* in_buf) const;
  // Writes a fetched chunk and then its entry; false (nothing of it kept) on
  // a failed write.
  bool Keep(uint64_t c, const std::vector<char>& buf) const;
  uint64_t Entry(uint64_t c) const {  // tag and CRC, as the shared mapping shows them
    uint64_t e;
    std::memcpy(&e, map_ + kHeaderBytes + 8 * c, 8);
    return e;
  }
  off_t EntryOffset(uint64_t c) const { return static_cast<off_t>(kHeaderBytes + 8 * c); }

  std::unique_ptr<RandomAccessFile> remote_;
  const std::shared_ptr<Budget> budget_;  // shared with the env, which may go first
  const std::chrono::milliseconds lock_wait_;
  std::string name_;
  int map_fd_ = -1, data_fd_ = -1;
  const char* map_ = nullptr;
  uint64_t map_bytes_ = 0;
  // The data file mapped (views): only for chunks checked by this process.
  // Cache files are never made shorter while in use (Open only lengthens a
  // file a killed process left short), so a mapped page is never cut away
  // by this code.
  const char* data_map_ = nullptr;
  bool usable_ = false;
  mutable std::atomic<bool> aborted_{false};
  mutable std::unique_ptr<std::atomic<uint8_t>[]> checked_;  // per chunk: verified by this process
  // Per chunk, what WillNeed asked for: kAskedStorage (whole, ahead), kAskedDisk.
  mutable std::unique_ptr<std::atomic<uint8_t>[]> asked_;
  // Per chunk: another process held its entry's lock past lock_wait_ (it may
  // be stopped); the lock is tried once, not waited for, until it is free.
  mutable std::unique_ptr<std::atomic<uint8_t>[]> stuck_;
  // Guards filling_; cv_ wakes the waits for a fill, for another process's
  // lock (LockWithin's pauses) and, on Abort, all of them.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::set<uint64_t> filling_;  // chunks a thread of this process is filling
};

CachedFile::~CachedFile() {
  if (data_map_ != nullptr) ::munmap(const_cast<char*>(data_map_), size());
  if (map_ != nullptr) ::munmap(const_cast<char*>(map_), map_bytes_);
  if (data_fd_ >= 0) ::close(data_fd_);
  if (map_fd_ >= 0) ::close(map_fd_);  // releases the in-use lock
}

void CachedFile::Abort() const {
  aborted_.store(true);
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
  budget_->Wake();
  remote_->Abort();
}

CachedFile::Waited CachedFile::LockWithin(short type, off_t start, off_t len, bool patient) const {
  const auto deadline = std::chrono::steady_clock::now() + lock_wait_;
  std::chrono::milliseconds pause = kFirstPause;
  for (;;) {
    if (TryLock(map_fd_, type, start, len)) return Waited::kLocked;
    if (errno != EAGAIN && errno != EACCES) return Waited::kGaveUp;
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_.load()) return Waited::kAborted;
    const auto now = std::chrono::steady_clock::now();
    if (!patient || now >= deadline) return Waited::kGaveUp;
    cv_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(pause, deadline - now),
                 [&] { return aborted_.load(); });
    pause = std::min(2 * pause, kMaxPause);
  }
}

// Writes the header of a new (or unreadable) map file, under the init lock.
bool CachedFile::InitHeader() {
  char header[kHeaderBytes] = {0};
  std::memcpy(header, kMagic, 8);
  const uint64_t size = this->size(), chunk = kCacheChunkBytes;
  std::memcpy(header + 8, &size, 8);
  std::memcpy(header + 16, &chunk, 8);
  // For a person looking: path(), which storage shows without secrets
  // (identity() is for telling objects apart, not for showing).
  const std::string about = path() + "\n" + version();
  std::memcpy(header + 24, about.data(), std::min<size_t>(about.size(), kHeaderBytes - 25));
  char current[24] = {0};
  const ssize_t got = ::pread(map_fd_, current, sizeof(current), 0);
  if (got == static_cast<ssize_t>(sizeof(current)) && std::memcmp(current, header, 24) == 0) {
    return true;  // written before (by another process, or an earlier job)
  }
  // A header half-written by a killed process: rewritten, but only when
  // nobody else has it open (rewriting it would pull their mapping away).
  if (got > 0 && !TryLock(map_fd_, F_WRLCK, kInUse, 1)) return false;
  const bool ok = ::ftruncate(map_fd_, 0) == 0 &&
                  ::ftruncate(map_fd_, static_cast<off_t>(kHeaderBytes + 8 * chunks())) == 0 &&
                  ::pwrite(map_fd_, header, kHeaderBytes, 0) == static_cast<ssize_t>(kHeaderBytes);
  if (got > 0) TryLock(map_fd_, F_RDLCK, kInUse, 1);
  return ok;
}

// map_fd_: the map file (Ours), this process's in-use lock on it. In use
// from that lock on; but an evictor may have removed the file between our
// open and our lock (it was not in use yet): then the lock is on a file
// nobody will find, and the data file we would create beside it would be
// counted by no one. Locked, the path must still be our file; else open it
// again.
Status CachedFile::OpenMap(const std::string& map) {
  for (int tries = 0;; ++tries) {
    SK_ASSIGN_OR_RETURN(map_fd_, OpenOwned(map, /*create=*/true));
    if (LockWithin(F_RDLCK, kInUse, 1, /*patient=*/true) != Waited::kLocked) {
      return Status::IOError(map + ": another process held it (stopped?) for longer than " +
                             std::to_string(lock_wait_.count()) + " ms: read uncached");
    }
    if (StillNamed(map_fd_, map)) return Status::OK();
    ::close(map_fd_);  // removed meanwhile
    map_fd_ = -1;
    if (tries == 100) return Status::IOError(map + ": removed as soon as created, again and again");
  }
}

Status CachedFile::Open() {
  // Named by what storage says these bytes are, and where (a name of the
  // path as written would be shared by two endpoints' objects, and by an
  // object and the one that replaced it where storage names no versions).
  const std::string identity = remote_->identity();
  if (identity.empty()) {
    return Status::Unsupported(path() +
                               ": storage cannot tell it from a replaced version: read uncached");
  }
  name_ = digest::Sha256Hex(identity + "\n" + std::to_string(size())).substr(0, 32);
  const std::string map = JoinPath(budget_->dir(), name_ + ".map");
  const std::string data = JoinPath(budget_->dir(), name_ + ".data");
  SK_RETURN_IF_ERROR(OpenMap(map));
  // Then the header, once, by whoever comes first.
  if (LockWithin(F_WRLCK, kInit, 1, /*patient=*/true) != Waited::kLocked) {
    return Status::IOError(map + ": another process held its header (stopped?) for longer than " +
                           std::to_string(lock_wait_.count()) + " ms: read uncached");
  }
  const bool header = InitHeader();
  Unlock(map_fd_, kInit, 1);
  if (!header) return Status::IOError(map + ": an unreadable cache file in use by another process");
  struct stat st;
  if (::fstat(map_fd_, &st) != 0) return Errno("cannot stat", map, errno);
  map_bytes_ = kHeaderBytes + 8 * chunks();
  if (static_cast<uint64_t>(st.st_size) < map_bytes_) {
    return Status::IOError(map + ": shorter than its chunk table");
  }
  void* p = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, map_fd_, 0);
  if (p == MAP_FAILED) return Errno("cannot map", map, errno);
  map_ = static_cast<const char*>(p);
  SK_ASSIGN_OR_RETURN(data_fd_, OpenOwned(data, /*create=*/true));
  if (::fstat(data_fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) != size()) {
    if (::ftruncate(data_fd_, static_cast<off_t>(size())) != 0) {
      return Errno("cannot size the cache file", data, errno);
    }
  }
  ::futimens(map_fd_, nullptr);  // used now: the last to go
  checked_.reset(new std::atomic<uint8_t>[chunks()]());
  asked_.reset(new std::atomic<uint8_t>[chunks()]());
  stuck_.reset(new std::atomic<uint8_t>[chunks()]());
  usable_ = true;
  return Status::OK();
}

bool CachedFile::Verify(uint64_t c, std::vector<char>* buf) const {
  const uint64_t e = Entry(c);
  if (static_cast<uint32_t>(e) != kPresent) return false;
  const uint64_t len = ChunkLength(c);
  buf->resize(len);
  const ssize_t got = ::pread(data_fd_, buf->data(), len, static_cast<off_t>(c * kCacheChunkBytes));
  return got == static_cast<ssize_t>(len) &&
         crc32c::Value(buf->data(), len) == static_cast<uint32_t>(e >> 32);
}

bool CachedFile::Keep(uint64_t c, const std::vector<char>& buf) const {
  const uint64_t len = buf.size(), offset = c * kCacheChunkBytes;
  const uint64_t entry = (uint64_t{crc32c::Value(buf.data(), len)} << 32) | kPresent;
  if (::pwrite(data_fd_, buf.data(), len, static_cast<off_t>(offset)) ==
          static_cast<ssize_t>(len) &&
      ::pwrite(map_fd_, &entry, 8, EntryOffset(c)) == 8) {
    return true;
  }
  // What a short write put on disk stays: its entry is not set, so nobody
  // takes it for the chunk (and punching it out could take away bytes that
  // another process checked before a Forget).
  return false;
}

// Under this process's claim on chunk c: the cross-process lock on its
// entry, then (if nobody filled it meanwhile) storage -> disk -> entry.
// Another process's lock held past lock_wait_ (a fill that is stopped, or on
// storage so slow that a second request costs little next to the wait): the
// chunk is read from storage, uncached.
Status CachedFile::Fill(uint64_t c, std::vector<char>* buf, bool* cached, bool* in_buf) const {
  *in_buf = false;
  const off_t at = EntryOffset(c);
  // A chunk whose lock was held too long is tried once, not waited for
  // again: each read of it would wait the whole bound.
  switch (LockWithin(F_WRLCK, at, 8, /*patient=*/stuck_[c].load() == 0)) {
    case Waited::kAborted:
      return Aborted();
    case Waited::kGaveUp:
      stuck_[c].store(1);
      *cached = false;
      return Status::OK();
    case Waited::kLocked:
      stuck_[c].store(0);
      break;
  }
  struct Unlocked {
    int fd;
    off_t at;
    ~Unlocked() { Unlock(fd, at, 8); }
  } unlock{map_fd_, at};
  if (Verify(c, buf)) {  // another process just filled it
    *in_buf = true;
    return Status::OK();
  }
  const uint64_t len = ChunkLength(c), offset = c * kCacheChunkBytes;
  if (!budget_->Reserve(len, aborted_)) {
    if (aborted_.load()) return Aborted();
    *cached = false;  // the cache is full (of what others read, or its disk): storage it is
    return Status::OK();
  }
  struct Written {
    Budget* budget;
    uint64_t len;
    ~Written() { budget->Done(len); }
  } written{budget_.get(), len};
  buf->resize(len);
  SK_RETURN_IF_ERROR(remote_->Read(offset, len, buf->data()));
  *in_buf = true;
  if (!Keep(c, *buf)) {
    *cached = false;  // a full disk: read from storage, as if uncached, until it may have room
    budget_->WriteFailed();
  }
  return Status::OK();
}

Status CachedFile::Ensure(uint64_t c, bool* cached, bool* held) const {
  *cached = true;
  *held = false;
  auto hit = [&] {
    budget_->hits.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  };
  if (checked_[c].load(std::memory_order_acquire) != 0) return hit();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return aborted_.load() || filling_.count(c) == 0; });
    if (aborted_.load()) return Aborted();
    if (checked_[c].load(std::memory_order_acquire) != 0) return hit();
    filling_.insert(c);
  }
  std::vector<char>& buf = Held();
  Status s;
  bool in_buf = Verify(c, &buf);
  (in_buf ? budget_->hits : budget_->misses).fetch_add(1, std::memory_order_relaxed);
  if (!in_buf) s = Fill(c, &buf, cached, &in_buf);
  if (s.ok() && *cached) checked_[c].store(1, std::memory_order_release);
  *held = s.ok() && in_buf;  // checked or fetched whole into buf just now
  std::lock_guard<std::mutex> lock(mu_);
  filling_.erase(c);
  cv_.notify_all();
  return s;
}

// A read or view over chunks to be fetched: one request for all of them,
// then each filled from it (an index; a header and its first block). Not
// while the cache is full: the range itself is then fetched, as the caller's
// own read-ahead asked for it (a request for a part of that would be another).
void CachedFile::AskAhead(uint64_t offset, size_t n) const {
  if (n > 0 && offset / kCacheChunkBytes != (offset + n - 1) / kCacheChunkBytes &&
      !budget_->full()) {
    WillNeed(offset, n);
  }
}

Status CachedFile::ReadChunk(uint64_t c, uint64_t pos, uint64_t end, char* dst) const {
  bool cached = false, held = false;
  SK_RETURN_IF_ERROR(Ensure(c, &cached, &held));
  const size_t len = static_cast<size_t>(end - pos);
  if (held) {
    std::memcpy(dst, Held().data() + (pos - c * kCacheChunkBytes), len);
    return Status::OK();
  }
  if (cached && ::pread(data_fd_, dst, len, static_cast<off_t>(pos)) == static_cast<ssize_t>(len)) {
    return Status::OK();
  }
  return remote_->Read(pos, len, dst);
}

// While the cache is full (the limit, a failed write), the bytes of chunks
// not on disk are read from storage as asked (a run of them in one request),
// never whole chunks that could not be kept; chunks on disk are still read
// from there.
Status CachedFile::Read(uint64_t offset, size_t n, void* dst) const {
  if (aborted_.load()) return Aborted();
  if (offset > size() || n > size() - offset) return remote_->Read(offset, n, dst);  // its error
  if (!usable_) return remote_->Read(offset, n, dst);
  AskAhead(offset, n);
  char* out = static_cast<char*>(dst);
  uint64_t direct = offset;  // [direct, pos): to be read from storage as asked
  for (uint64_t pos = offset; pos < offset + n;) {
    const uint64_t c = pos / kCacheChunkBytes;
    const uint64_t end = std::min<uint64_t>(offset + n, (c + 1) * kCacheChunkBytes);
    if (Absent(c) && budget_->Bypass(end - pos)) {
      budget_->misses.fetch_add(1, std::memory_order_relaxed);
      pos = end;
      continue;
    }
    if (direct < pos) {
      SK_RETURN_IF_ERROR(remote_->Read(direct, pos - direct, out + (direct - offset)));
    }
    SK_RETURN_IF_ERROR(ReadChunk(c, pos, end, out + (pos - offset)));
    pos = direct = end;
  }
  if (direct < offset + n) {
    return remote_->Read(direct, offset + n - direct, out + (direct - offset));
  }
  return Status::OK();
}

// Each chunk over the range made absent (under its entry's lock, once this
// process's filler of it is done) and unchecked here: the next read fetches
// it from storage and writes it again. Other processes that checked it keep
// their copy until a checksum fails for them too. A chunk whose lock another
// process holds past lock_wait_ is left as it is.
bool CachedFile::Forget(uint64_t offset, size_t n) const {
  if (!usable_ || n == 0 || offset >= size()) return false;
  bool dropped = false;
  const uint64_t last = std::min(chunks() - 1, (offset + n - 1) / kCacheChunkBytes);
  for (uint64_t c = offset / kCacheChunkBytes; c <= last; ++c) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return aborted_.load() || filling_.count(c) == 0; });
      if (aborted_.load()) return dropped;
      filling_.insert(c);
    }
    const off_t at = EntryOffset(c);
    if (LockWithin(F_WRLCK, at, 8, /*patient=*/true) == Waited::kLocked) {
      // Absent now, whoever made it so (another thread's or process's
      // Forget, or a fill the limit kept out): the next read fetches the
      // chunk, so a read again is worth it (once: the callers try once).
      const uint64_t absent = 0;
      dropped |=
          static_cast<uint32_t>(Entry(c)) != kPresent || ::pwrite(map_fd_, &absent, 8, at) == 8;
      Unlock(map_fd_, at, 8);
    }
    checked_[c].store(0, std::memory_order_release);
    std::lock_guard<std::mutex> lock(mu_);
    filling_.erase(c);
    cv_.notify_all();
  }
  return dropped;
}

bool CachedFile::held_locally() const {
  if (!usable_) return false;
  for (uint64_t c = 0; c < chunks(); ++c) {
    if (static_cast<uint32_t>(Entry(c)) != kPresent) return false;
  }
  // Entries over a data file that lost its bytes (cut short, or removed
  // before its map file by an evictor that died): fetched again, remote.
  struct stat st;
  return ::fstat(data_fd_, &st) == 0 && static_cast<uint64_t>(st.st_blocks) * 512 >= size();
}

Status CachedFile::SetAccess(const AccessHints& hints) {
  SK_RETURN_IF_ERROR(remote_->SetAccess(hints));
  if (!usable_) return Status::OK();
  AdviseKernel(data_fd_, nullptr, size(), hints.pattern);  // as for a local file
  if (!hints.views || data_map_ != nullptr || size() == 0) return Status::OK();
  void* p = ::mmap(nullptr, size(), PROT_READ, MAP_SHARED, data_fd_, 0);
  if (p != MAP_FAILED) data_map_ = static_cast<const char*>(p);  // else reads, as before
  return Status::OK();
}

Status CachedFile::View(uint64_t offset, size_t n, std::string_view* out) const {
  if (aborted_.load()) return Aborted();
  if (data_map_ == nullptr || offset > size() || n > size() - offset) {
    return RandomAccessFile::View(offset, n, out);
  }
  AskAhead(offset, n);
  for (uint64_t c = offset / kCacheChunkBytes; c * kCacheChunkBytes < offset + n; ++c) {
    // A chunk not on disk while the cache is full (the limit, a failed
    // write) would be fetched here and again by the read that follows: the
    // read alone.
    if (Absent(c) && budget_->full()) {
      return Status::Unsupported(path() + ": not in the node cache: read it");
    }
    bool cached = false, held = false;
    SK_RETURN_IF_ERROR(Ensure(c, &cached, &held));
    if (!cached) return Status::Unsupported(path() + ": not in the node cache: read it");
  }
  *out = std::string_view(data_map_ + offset, n);
  return Status::OK();
}

void CachedFile::Release(uint64_t offset, size_t n) const {
  ReleaseMappedPages(data_map_, size(), offset, n);  // as a local file's
}

// The chunks of the range not on disk yet, fetched ahead by storage: each run
// of them with one request (of at most kMaxAheadBytes), as the caller asked
// for the range (a request per chunk would make storage's latency a chunk's,
// and many small requests outrun the number storage keeps in flight, so that
// the rest are fetched when read, one at a time). The runs are of whole
// chunks, which Fill reads, each in one run (runs that overlapped the ones
// asked before would fetch their chunks again); a chunk asked for before is
// asked for again alone. While the cache is full (the limit, a failed write) they are only the
// range asked for, as without a cache (a whole chunk would sit in storage's read-ahead until every
// block of it was read, pushing out what is read sooner). Chunks on disk that this process has not
// checked yet have their pages read ahead, once (Verify reads them whole; a hint of pages already
// cached still walks the page cache, and callers hint a range again until it is read).
void CachedFile::WillNeed(uint64_t offset, size_t n) const {
  if (!usable_ || offset >= size()) return;
  const uint64_t end = std::min<uint64_t>(offset + n, size());
  const bool full = budget_->full();
  uint64_t from = 0, to = 0;    // the run to ask storage for (empty: from == to)
  uint64_t dfrom = 0, dto = 0;  // a run of chunks on disk, their pages read ahead
  auto flush = [&] {
    if (from < to) remote_->WillNeed(from, to - from);
    from = to = 0;
  };
  auto flush_disk = [&] {  // as a local file's (PosixFile::WillNeed)
    if (dfrom < dto) {
      ::posix_fadvise(data_fd_, static_cast<off_t>(dfrom), static_cast<off_t>(dto - dfrom),
                      POSIX_FADV_WILLNEED);
    }
    dfrom = dto = 0;
  };
  for (uint64_t c = offset / kCacheChunkBytes; c * kCacheChunkBytes < end; ++c) {
    const uint64_t chunk = c * kCacheChunkBytes, chunk_end = chunk + ChunkLength(c);
    if (checked_[c].load(std::memory_order_relaxed) != 0) {  // read from disk by now
      flush();
      flush_disk();
      continue;
    }
    if (static_cast<uint32_t>(Entry(c)) == kPresent) {  // on disk: Verify reads it whole
      flush();
      if ((asked_[c].fetch_or(kAskedDisk, std::memory_order_relaxed) & kAskedDisk) != 0) {
        flush_disk();
      } else {
        if (dfrom == dto) dfrom = chunk;
        dto = chunk_end;
      }
      continue;
    }
    flush_disk();
    if (!full &&
        (asked_[c].fetch_or(kAskedStorage, std::memory_order_relaxed) & kAskedStorage) != 0) {
      // Asked for before, in a run that storage may have dropped (too many
      // in flight) or let go: again, alone; storage finds it in the run
      // while it holds that (a lookup), else fetches it.
      flush();
      remote_->WillNeed(chunk, chunk_end - chunk);
      continue;
    }
    if (from < to && chunk_end - from > kMaxAheadBytes) flush();
    if (from == to) from = full ? std::max(offset, chunk) : chunk;
    to = full ? std::min(end, chunk_end) : chunk_end;
  }
  flush();
  flush_disk();
}

class CachingEnv final : public Env {
 public:
  CachingEnv(Env* remote, const NodeCacheOptions& o)
      : remote_(remote),
        budget_(std::make_shared<Budget>(o.dir, o.limit)),
        lock_wait_(o.lock_wait) {}
  Result<std::unique_ptr<RandomAccessFile>> OpenForReads(const std::string& path,
                                                         const Cancel* cancel) override {
    SK_ASSIGN_OR_RETURN(auto file, remote_->OpenForReads(path, cancel));
    auto cached = std::make_unique<CachedFile>(std::move(file), budget_, lock_wait_);
    cached->Open().IgnoreError();  // a cache that cannot be used: read from storage
    return std::unique_ptr<RandomAccessFile>(std::move(cached));
  }
  bool FileExists(const std::string& path) override { return remote_->FileExists(path); }
  Result<std::string> ReadFile(const std::string& path, uint64_t max_size,
                               const Cancel* cancel) override {
    return remote_->ReadFile(path, max_size, cancel);
  }
  bool remote() const override { return remote_->remote(); }
  StorageCounters counters() const override {
    StorageCounters c = remote_->counters();
    c.cache_hits = budget_->hits.load();
    c.cache_misses = budget_->misses.load();
    return c;
  }

 private:
  Env* const remote_;
  const std::shared_ptr<Budget> budget_;
  const std::chrono::milliseconds lock_wait_;
};

}  // namespace

Result<std::unique_ptr<Env>> NewCachingEnv(Env* remote, const NodeCacheOptions& options) {
  if (options.dir.empty()) return Status::InvalidArgument("a node cache needs a directory");
  SK_RETURN_IF_ERROR(Env::Default()->CreateDirs(options.dir));
  if (!IsDirectory(options.dir)) {
    return Status::InvalidArgument(options.dir + ": the cache directory is not a directory");
  }
  SK_RETURN_IF_ERROR(CheckCacheDir(options.dir));
  return std::unique_ptr<Env>(new CachingEnv(remote, options));
}

Result<uint64_t> NodeCacheBytes(const std::string& dir) {
  SK_ASSIGN_OR_RETURN(auto names, Env::Default()->ListDir(dir));
  uint64_t total = 0;
  for (const std::string& name : names) {
    if (IsCacheName(name, ".map") || IsCacheName(name, ".data")) {
      total += DiskBytes(JoinPath(dir, name));
    }
  }
  return total;
}

}  // namespace shardkit
