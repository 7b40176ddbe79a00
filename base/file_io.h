// POSIX file helpers with Status errors that name the path: a buffered writable
// file that checksums what it writes, a pread-based random access file, and the
// atomic-publish primitives (fsync, rename, directory sync) datasets rely on.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace shardkit {

// Append-only file. Not thread-safe. Keeps a CRC32C of every byte appended.
class WritableFile {
 public:
  static Result<std::unique_ptr<WritableFile>> Create(const std::string& path);
  ~WritableFile();
  WritableFile(const WritableFile&) = delete;
  WritableFile& operator=(const WritableFile&) = delete;

  Status Append(const void* data, size_t n);
  Status Append(std::string_view s) { return Append(s.data(), s.size()); }
  Status Sync();   // flush buffer and fsync
  Status Close();  // flush and close; idempotent
  uint64_t size() const { return size_; }
  uint32_t crc32c() const { return crc_; }
  const std::string& path() const { return path_; }

 private:
  WritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  Status FlushBuffer();
  Status WriteAll(const char* p, size_t n);
  std::string path_;
  int fd_ = -1;
  std::vector<char> buf_;
  uint64_t size_ = 0;
  uint32_t crc_ = 0;
};

// Read-only file for positioned reads. Thread-safe: Read uses pread.
class RandomAccessFile {
 public:
  static Result<std::unique_ptr<RandomAccessFile>> Open(const std::string& path);
  ~RandomAccessFile();
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;

  // Reads exactly n bytes at offset into dst; a short read is a Corruption error.
  Status Read(uint64_t offset, size_t n, void* dst) const;
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Maps the whole file read-only, so that View() can hand out its bytes
  // without a copy (the page cache is read in place). Only for files that
  // nobody truncates while they are mapped (shards are immutable once
  // renamed into place): reading a page that a truncation or an I/O error
  // took away raises SIGBUS instead of returning an error.
  Status Map();
  bool mapped() const { return map_ != nullptr; }
  // If mapped: points *out at n bytes at offset (bounds-checked like Read).
  Status View(uint64_t offset, size_t n, std::string_view* out) const;

  // How the file will be read, told to the kernel for the descriptor and the
  // mapping: kRandom turns read-ahead off, so a random record read (a page
  // fault on the mapping, or a pread) brings in the pages it touches and not
  // the device's read-ahead window (8 MB on some disks, more on GPFS/Lustre);
  // kSequential asks for aggressive read-ahead. Hints only: never an error.
  enum class Access { kNormal, kRandom, kSequential };
  void Advise(Access access) const;
  // From now on Read() bypasses the page cache (O_DIRECT): it reads the
  // device sectors covering the range (512-byte aligned, 4096 where the
  // device needs it) into an aligned buffer and copies the range out, so a
  // random small record costs its own bytes plus less than a sector or two,
  // not whole pages. For datasets larger than memory, where caching is
  // futile. Returns false (and leaves buffered reads on) where the
  // filesystem has no O_DIRECT (tmpfs). Call before any reads.
  bool EnableDirectReads();
  bool direct() const { return direct_fd_ >= 0; }
  // Starts reading [offset, offset + n) into the page cache in the background.
  void WillNeed(uint64_t offset, size_t n) const;
  // If mapped: unmaps the whole pages inside [offset, offset + n) from this
  // process (MADV_DONTNEED; the page cache keeps them), so that streaming a
  // dataset through the mapping does not grow the resident set with it.
  void Release(uint64_t offset, size_t n) const;

 private:
  RandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  Status CheckRange(uint64_t offset, size_t n) const;
  Status ReadDirect(uint64_t offset, size_t n, char* dst) const;
  std::string path_;
  int fd_ = -1;
  int direct_fd_ = -1;
  mutable std::atomic<uint32_t> direct_align_{512};
  uint64_t size_ = 0;
  const char* map_ = nullptr;
};

// OK if `path` names a regular file (symlinks followed); otherwise an error
// naming it and what it is (a FIFO, a directory, a device). Never opens it.
// Every reader here refuses non-regular files this way before opening them.
Status CheckRegularFile(const std::string& path);
// An exclusive advisory lock (flock) on DIR/.shardkit.lock, held until
// destroyed: one writer per dataset directory at a time. A second writer is
// refused at once, not queued, with an error that names the directory.
class DirLock {
 public:
  static Result<std::unique_ptr<DirLock>> Acquire(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};
inline constexpr char kLockFileName[] = ".shardkit.lock";

Result<std::string> ReadFileToString(const std::string& path, uint64_t max_size);
// Writes `data` to path.tmp, fsyncs, renames over path, then fsyncs the directory.
Status WriteFileAtomic(const std::string& path, std::string_view data);
Status RenameFile(const std::string& from, const std::string& to);
Status RemoveFile(const std::string& path);  // NotFound is not an error
Status SyncDir(const std::string& dir);
Status CreateDirs(const std::string& dir);
bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);
Result<uint64_t> FileSize(const std::string& path);
// Names (not paths) of the entries of dir, sorted.
Result<std::vector<std::string>> ListDir(const std::string& dir);
std::string JoinPath(const std::string& a, const std::string& b);
// Drops the file's clean pages from the page cache (posix_fadvise DONTNEED;
// no root needed), so the next read comes from storage: cold-read benchmarks.
// Pages that a process still maps stay.
Status EvictFromPageCache(const std::string& path);
// Streams a file's bytes through CRC32C.
Result<uint32_t> FileCrc32c(const std::string& path);

}  // namespace shardkit
