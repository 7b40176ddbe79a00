// The POSIX backend of the storage seam (storage/env.h): files read with pread,
// a read-only mapping or O_DIRECT, files written through a buffer, scratch
// files without a name, and the directory operations datasets are published
// with (rename, fsync of the directory, flock), and hard links (LinkOrCopyFile).
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "storage/file_io.h"
#include "storage/posix_advice.h"
#include "storage/posix_errors.h"

namespace shardkit {
namespace {

constexpr size_t kWriteBuffer = 1 << 20;

}  // namespace

Status Errno(const std::string& what, const std::string& path, int err) {
  return Status::At(err == ENOENT ? Status::Code::kNotFound : Status::Code::kIOError, {path, ""},
                    what + ": " + std::strerror(err));
}

// Something that is not a regular file where one is expected (a FIFO, a
// directory, a device) is refused by path: opening a FIFO for reading blocks
// until a writer appears, and reading a device may never end.
Status NotRegular(const std::string& path, mode_t mode) {
  const char* what = S_ISDIR(mode)    ? "a directory"
                     : S_ISFIFO(mode) ? "a named pipe (FIFO)"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                                      : "not a regular file";
  return Status::At(Status::Code::kInvalidArgument, {path, ""},
                    "is " + std::string(what) + ", not a regular file");
}

// Opens a regular file without blocking on a FIFO that replaced it since the
// caller's stat (O_NONBLOCK), then checks what was opened; *size, if given,
// receives its size.
Result<int> OpenRegular(const std::string& path, int flags, const char* what, uint64_t* size) {
  int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(what, path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Errno("cannot stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotRegular(path, st.st_mode);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

Status CheckRegularFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Errno("cannot open", path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  return Status::OK();
}

void AdviseKernel(int fd, const char* map, uint64_t size, AccessHints::Pattern pattern) {
  using Pattern = AccessHints::Pattern;
  const int fadv = pattern == Pattern::kRandom       ? POSIX_FADV_RANDOM
                   : pattern == Pattern::kSequential ? POSIX_FADV_SEQUENTIAL
                                                     : POSIX_FADV_NORMAL;
  ::posix_fadvise(fd, 0, 0, fadv);
  if (map != nullptr) {
    const int madv = pattern == Pattern::kRandom       ? MADV_RANDOM
                     : pattern == Pattern::kSequential ? MADV_SEQUENTIAL
                                                       : MADV_NORMAL;
    ::madvise(const_cast<char*>(map), size, madv);
  }
}

void ReleaseMappedPages(const char* map, uint64_t size, uint64_t offset, size_t n) {
  if (map == nullptr || offset >= size) return;
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  const uint64_t begin = (offset + page - 1) / page * page;
  const uint64_t end = std::min<uint64_t>(offset + n, size) / page * page;
  if (end > begin) ::madvise(const_cast<char*>(map) + begin, end - begin, MADV_DONTNEED);
}

namespace {

// The POSIX backend's file: pread, or a read-only mapping (views), or
// O_DIRECT (uncached random reads), as SetAccess's hints say.
class PosixFile final : public RandomAccessFile {
 public:
  PosixFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixFile() override;
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  Status Read(uint64_t offset, size_t n, void* dst) const override;
  Status SetAccess(const AccessHints& hints) override;
  bool mapped() const override { return map_ != nullptr; }
  Status View(uint64_t offset, size_t n, std::string_view* out) const override;
  bool uncached() const override { return direct_fd_ >= 0; }
  Result<std::unique_ptr<FileRegion>> MapRegion(uint64_t offset, size_t n) const override;
  void WillNeed(uint64_t offset, size_t n) const override;
  void Release(uint64_t offset, size_t n) const override;

 private:
  // Maps the whole file read-only, so that View() hands out its bytes without
  // a copy (the page cache is read in place). Only for files nobody truncates
  // while they are mapped (shards are immutable once renamed into place):
  // reading a page that a truncation or an I/O error took away raises SIGBUS
  // instead of returning an error.
  Status Map();
  // From now on Read() bypasses the page cache (O_DIRECT): it reads the
  // device sectors covering the range (512-byte aligned, 4096 where the
  // device needs it) into an aligned buffer and copies the range out, so a
  // random small record costs its own bytes plus less than a sector or two,
  // not whole pages. Returns false (and leaves buffered reads on) where the
  // filesystem has no O_DIRECT (tmpfs).
  bool EnableDirectReads();
  // The pattern told to the kernel, for the descriptor and the mapping:
  // kRandom turns read-ahead off, so a random record read (a page fault on
  // the mapping, or a pread) brings in the pages it touches and not the
  // device's read-ahead window (8 MB on some disks, more on GPFS/Lustre);
  // kSequential asks for aggressive read-ahead.
  void Advise(AccessHints::Pattern pattern) const;
  Status CheckRange(uint64_t offset, size_t n) const;
  Status ReadDirect(uint64_t offset, size_t n, char* dst) const;

  std::string path_;
  int fd_ = -1;
  int direct_fd_ = -1;
  mutable std::atomic<uint32_t> direct_align_{512};
  uint64_t size_ = 0;
  const char* map_ = nullptr;
};

PosixFile::~PosixFile() {
  if (map_ != nullptr) ::munmap(const_cast<char*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

bool PosixFile::EnableDirectReads() {
  if (direct_fd_ >= 0) return true;
  direct_fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECT | O_NONBLOCK | O_CLOEXEC);
  return direct_fd_ >= 0;
}

Status PosixFile::ReadDirect(uint64_t offset, size_t n, char* dst) const {
  // One aligned bounce buffer per thread, grown as needed.
  struct Buffer {
    char* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  for (;;) {
    const uint64_t align = direct_align_.load(std::memory_order_relaxed);
    const uint64_t begin = offset / align * align;
    const uint64_t end = std::min<uint64_t>((offset + n + align - 1) / align * align,
                                            (size_ + align - 1) / align * align);
    const size_t len = static_cast<size_t>(end - begin);
    if (buf.size < len) {
      std::free(buf.p);
      buf.size = (len + 65535) / 65536 * 65536;
      buf.p = static_cast<char*>(std::aligned_alloc(4096, buf.size));
      if (buf.p == nullptr) {
        buf.size = 0;
        return Status::IOError(path_ + ": cannot allocate a read buffer");
      }
    }
    size_t got = 0;
    int err = 0;
    while (got < len) {
      const ssize_t r =
          ::pread(direct_fd_, buf.p + got, len - got, static_cast<off_t>(begin + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        err = r < 0 ? errno : 0;
        break;
      }
      got += static_cast<size_t>(r);
    }
    if (err == EINVAL && align < 4096) {  // the device wants larger sectors
      direct_align_.store(4096, std::memory_order_relaxed);
      continue;
    }
    if (err != 0) return Errno("read failed at offset " + std::to_string(offset), path_, err);
    if (begin + got < offset + n) {
      return Status::At(Status::Code::kCorruption, {path_, ""},
                        "unexpected end of file at offset " + std::to_string(begin + got));
    }
    std::memcpy(dst, buf.p + (offset - begin), n);
    return Status::OK();
  }
}

Status PosixFile::CheckRange(uint64_t offset, size_t n) const {
  if (offset > size_ || n > size_ - offset) {
    return Status::At(Status::Code::kCorruption, {path_, ""},
                      "read of " + std::to_string(n) + " bytes at offset " +
                          std::to_string(offset) + " past end of file (" + std::to_string(size_) +
                          " bytes)");
  }
  return Status::OK();
}

Status PosixFile::Map() {
  if (map_ != nullptr || size_ == 0) return Status::OK();
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return Errno("cannot map", path_, errno);
  map_ = static_cast<const char*>(p);
  return Status::OK();
}

Status PosixFile::View(uint64_t offset, size_t n, std::string_view* out) const {
  SK_RETURN_IF_ERROR(CheckRange(offset, n));
  if (map_ == nullptr) return RandomAccessFile::View(offset, n, out);
  *out = std::string_view(map_ + offset, n);
  return Status::OK();
}

// A shared read-only mapping of whole pages around a file range.
class MappedRegion final : public FileRegion {
 public:
  MappedRegion(void* base, size_t length, std::string_view bytes) : base_(base), length_(length) {
    bytes_ = bytes;
  }
  ~MappedRegion() override { ::munmap(base_, length_); }
  // A shared file mapping's MADV_WILLNEED reads ahead in the page cache, as
  // the file's own WillNeed (POSIX_FADV_WILLNEED) does.
  void WillNeed(size_t offset, size_t n) const override {
    if (offset >= bytes_.size()) return;
    static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGE_SIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(bytes_.data() + offset) / page * page;
    const uintptr_t end =
        reinterpret_cast<uintptr_t>(bytes_.data() + offset) + std::min(n, bytes_.size() - offset);
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
  }

 private:
  void* base_;
  size_t length_;
};

Result<std::unique_ptr<FileRegion>> PosixFile::MapRegion(uint64_t offset, size_t n) const {
  SK_RETURN_IF_ERROR(CheckRange(offset, n));
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  const uint64_t begin = offset / page * page;
  const size_t length = static_cast<size_t>(offset + n - begin);
  void* p = n == 0 ? MAP_FAILED
                   : ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd_, static_cast<off_t>(begin));
  if (p == MAP_FAILED) return RandomAccessFile::MapRegion(offset, n);  // a private copy
  // A fault reads the page it needs, not the device's read-around window
  // (megabytes before it: the shard's blocks); whoever walks the whole region
  // asks for it first (WillNeed).
  ::madvise(p, length, MADV_RANDOM);
  return std::unique_ptr<FileRegion>(new MappedRegion(
      p, length, std::string_view(static_cast<const char*>(p) + (offset - begin), n)));
}

Status PosixFile::SetAccess(const AccessHints& hints) {
  if (hints.views) SK_RETURN_IF_ERROR(Map());
  // Where a filesystem has no O_DIRECT, its reads stay buffered.
  if (hints.uncached && hints.pattern == AccessHints::Pattern::kRandom) EnableDirectReads();
  Advise(hints.pattern);
  return Status::OK();
}

void PosixFile::Advise(AccessHints::Pattern pattern) const {
  AdviseKernel(fd_, map_, size_, pattern);
}

void PosixFile::WillNeed(uint64_t offset, size_t n) const {
  if (offset >= size_) return;
  ::posix_fadvise(fd_, static_cast<off_t>(offset),
                  static_cast<off_t>(std::min<uint64_t>(n, size_ - offset)), POSIX_FADV_WILLNEED);
}

void PosixFile::Release(uint64_t offset, size_t n) const {
  ReleaseMappedPages(map_, size_, offset, n);
}

Status PosixFile::Read(uint64_t offset, size_t n, void* dst) const {
  SK_RETURN_IF_ERROR(CheckRange(offset, n));
  if (map_ != nullptr) {
    std::memcpy(dst, map_ + offset, n);
    return Status::OK();
  }
  if (direct_fd_ >= 0) return ReadDirect(offset, n, static_cast<char*>(dst));
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("read failed at offset " + std::to_string(offset), path_, errno);
    }
    if (r == 0) {
      return Status::At(Status::Code::kCorruption, {path_, ""},
                        "unexpected end of file at offset " + std::to_string(offset));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::OK();
}

// Written through a 1 MiB buffer (large appends bypass it).
class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
    buf_.reserve(kWriteBuffer);
  }
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& path() const override { return path_; }
  Status Sync() override {
    SK_RETURN_IF_ERROR(FlushBuffer());
    if (::fsync(fd_) != 0) return Errno("fsync failed", path_, errno);
    return Status::OK();
  }
  Status Close() override {
    if (fd_ < 0) return Status::OK();
    Status s = FlushBuffer();
    if (::close(fd_) != 0 && s.ok()) s = Errno("close failed", path_, errno);
    fd_ = -1;
    return s;
  }

 protected:
  Status AppendBytes(const char* p, size_t n) override {
    if (fd_ < 0) return Status::IOError(path_ + ": append after close");
    if (buf_.size() + n <= kWriteBuffer) {
      buf_.insert(buf_.end(), p, p + n);
      return Status::OK();
    }
    SK_RETURN_IF_ERROR(FlushBuffer());
    if (n >= kWriteBuffer) return WriteAll(p, n);  // large write: bypass the buffer
    buf_.insert(buf_.end(), p, p + n);
    return Status::OK();
  }

 private:
  Status WriteAll(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Errno("write failed", path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::OK();
  }
  Status FlushBuffer() {
    SK_RETURN_IF_ERROR(WriteAll(buf_.data(), buf_.size()));
    buf_.clear();
    return Status::OK();
  }
  std::string path_;
  int fd_ = -1;
  std::vector<char> buf_;
};

// O_TMPFILE in the directory, else a name made and unlinked at once: written
// with pwrite, read with pread.
class PosixScratchFile final : public ScratchFile {
 public:
  PosixScratchFile(std::string dir, int fd) : name_(dir + ": scratch file"), fd_(fd) {}
  ~PosixScratchFile() override { ::close(fd_); }
  Status Append(const void* data, size_t n, uint64_t* offset) override {
    *offset = end_;
    const char* p = static_cast<const char*>(data);
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(end_ + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Errno("write failed", name_, w < 0 ? errno : ENOSPC);
      done += static_cast<size_t>(w);
    }
    end_ += n;
    return Status::OK();
  }
  Status Read(uint64_t offset, size_t n, void* dst) const override {
    char* p = static_cast<char*>(dst);
    for (size_t done = 0; done < n;) {
      const ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Errno("read failed at offset " + std::to_string(offset), name_, errno);
      if (r == 0) {
        return Status::Corruption(name_ + ": unexpected end of file at offset " +
                                  std::to_string(offset + done));
      }
      done += static_cast<size_t>(r);
    }
    return Status::OK();
  }

 private:
  std::string name_;
  int fd_;
  uint64_t end_ = 0;
};

// flock on DIR/.shardkit.lock, released when the descriptor closes.
// The lock file goes with the lock (a finished dataset holds none): removed
// while still locked, so a writer that opened it just before finds, once it
// holds it, that the name is no longer its file, and tries again.
class PosixDirLock final : public DirLock {
 public:
  PosixDirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixDirLock() override {
    ::unlink(path_.c_str());
    ::close(fd_);
  }

 private:
  int fd_;
  std::string path_;
};

// Whether `fd` is still the file at `path` (not one unlinked meanwhile).
bool StillAt(int fd, const std::string& path) {
  struct stat ours, there;
  return ::fstat(fd, &ours) == 0 && ::stat(path.c_str(), &there) == 0 &&
         ours.st_dev == there.st_dev && ours.st_ino == there.st_ino;
}

class PosixEnv final : public Env {
 public:
  // Local opens do not wait on storage: `cancel` has nothing to end.
  Result<std::unique_ptr<RandomAccessFile>> OpenForReads(const std::string& path,
                                                         const Cancel*) override {
    SK_RETURN_IF_ERROR(CheckRegularFile(path));
    uint64_t size = 0;
    SK_ASSIGN_OR_RETURN(int fd, OpenRegular(path, O_RDONLY, "cannot open", &size));
    return std::unique_ptr<RandomAccessFile>(new PosixFile(path, fd, size));
  }
  bool FileExists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
    SK_ASSIGN_OR_RETURN(int fd, OpenRegular(path, O_WRONLY | O_CREAT | O_TRUNC, "cannot create"));
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return Errno("cannot rename to " + to, from, errno);
    return Status::OK();
  }
  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", path, errno);
    return Status::OK();
  }
  Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open directory", dir, errno);
    Status s;
    if (::fsync(fd) != 0 && errno != EINVAL) s = Errno("fsync of directory failed", dir, errno);
    ::close(fd);
    return s;
  }
  Status CreateDirs(const std::string& dir) override {
    if (dir.empty() || IsDirectory(dir)) return Status::OK();
    auto slash = dir.find_last_of('/', dir.size() > 1 ? dir.size() - 2 : 0);
    if (slash != std::string::npos && slash > 0)
      SK_RETURN_IF_ERROR(CreateDirs(dir.substr(0, slash)));
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return Errno("cannot create directory", dir, errno);
    }
    return Status::OK();
  }
  Status RemoveDir(const std::string& dir) override {
    if (::rmdir(dir.c_str()) != 0) return Errno("cannot remove directory", dir, errno);
    return Status::OK();
  }
  Result<std::unique_ptr<ScratchFile>> NewScratchFile(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {  // a filesystem without O_TMPFILE
      const std::string path = JoinPath(dir, ".shardkit-scratch");
      ::unlink(path.c_str());
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) return Errno("cannot create a scratch file", path, errno);
      ::unlink(path.c_str());
    }
    return std::unique_ptr<ScratchFile>(new PosixScratchFile(dir, fd));
  }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Errno("cannot list directory", dir, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
  Result<std::unique_ptr<DirLock>> LockDir(const std::string& dir, bool wait,
                                           const Cancel* cancel) override {
    const std::string path = JoinPath(dir, kLockFileName);
    for (int tries = 0;; ++tries) {
      SK_ASSIGN_OR_RETURN(int fd, OpenRegular(path, O_RDWR | O_CREAT, "cannot create lock file"));
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        ::close(fd);
        if (err == EWOULDBLOCK && wait) {  // its turn: polled, so that a cancel is seen
          if (cancel != nullptr && cancel->load()) {
            return Status::Aborted(dir + ": cancelled while waiting for another writer");
          }
          std::this_thread::sleep_for(
              std::chrono::milliseconds(std::min(200, 5 << std::min(tries, 5))));
          tries = std::min(tries, 50);
          continue;
        }
        if (err == EWOULDBLOCK) {
          return Status::IOError(
              dir + ": another shardkit process is writing this dataset (lock held on " + path +
              "); wait for it to finish or choose another output directory");
        }
        return Errno("cannot lock", path, err);
      }
      if (StillAt(fd, path)) return std::unique_ptr<DirLock>(new PosixDirLock(fd, path));
      ::close(fd);  // the writer before us finished and removed it: a new one
      if (tries == 100) return Status::IOError(path + ": removed as soon as made, again and again");
    }
  }
  Result<bool> LinkOrCopyFile(const std::string& from, const std::string& to) override {
    SK_RETURN_IF_ERROR(CheckRegularFile(from));
    // AT_SYMLINK_FOLLOW: a symbolic link is followed to the file it names (a
    // bare link(2) would link the symlink itself, which may point elsewhere
    // once it sits in another directory).
    if (::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
    const int err = errno;
    // Another filesystem, or one without hard links: copy. Anything else (no
    // such file, no permission, `to` exists) is the error it is.
    if (err != EXDEV && err != EPERM && err != EMLINK && err != ENOTSUP && err != EOPNOTSUPP) {
      return Errno("cannot link to " + to, from, err);
    }
    return Env::LinkOrCopyFile(from, to);
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();  // never destroyed: used until exit
  return env;
}

Status EvictFromPageCache(const std::string& path) {
  SK_RETURN_IF_ERROR(CheckRegularFile(path));
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path, errno);
  const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (rc != 0) return Errno("cannot evict from the page cache", path, rc);
  return Status::OK();
}

}  // namespace shardkit
