// POSIX file helpers with Status errors that name the path: a buffered writable
// file that checksums what it writes, and the atomic-publish primitives (fsync,
// rename, directory sync) datasets rely on. Reading goes through base/env.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
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
// Makes `to` (which must not exist) hold `from`'s bytes: a hard link where the
// filesystem allows one (the same filesystem; true), else a copy, synced
// (false). `from` is only read. A failed copy leaves no `to`.
Result<bool> LinkOrCopyFile(const std::string& from, const std::string& to);

}  // namespace shardkit
