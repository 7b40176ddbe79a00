// The POSIX filesystem's helpers, by path, with Status errors that name it:
// the publish primitives (through Env::Default(), base/posix_env.cc) and
// what only a local file has (page-cache eviction).
#include "base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/crc32c.h"
#include "base/posix_errors.h"

namespace shardkit {

Result<std::string> ReadFileToString(const std::string& path, uint64_t max_size) {
  return Env::Default()->ReadFile(path, max_size);
}

namespace {

// The real path of `path`'s directory joined with its last component (which
// need not exist), or "" when the directory cannot be resolved.
std::string RealPathOfParent(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  char* real = ::realpath(dir.c_str(), nullptr);
  if (real == nullptr) return "";
  std::string out = real;
  std::free(real);
  if (base.empty() || base == ".") return out;
  return JoinPath(out, base);
}

// Where writing `path` lands: a symbolic link is followed to the file it names
// (which need not exist yet).
Result<std::string> ResolveOutput(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::vector<char> buf(4096);
    const ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size() - 1);
    if (n < 0) return Errno("cannot read the symbolic link", p, errno);
    std::string target(buf.data(), static_cast<size_t>(n));
    if (target.empty() || target[0] != '/') {
      const size_t slash = p.rfind('/');
      if (slash != std::string::npos) target = p.substr(0, slash + 1) + target;
    }
    p = target;
  }
  return Status::IOError(path + ": too many levels of symbolic links");
}

// Where writing the output file `path` lands (*target), and whether it is to
// be written in place (*through: a character device or FIFO, opened by the
// name given, which may be a /proc magic link such as /dev/stdout); an error
// naming `path` when it cannot be written at all.
Status ResolveOutputKind(const std::string& path, std::string* target, bool* through) {
  *through = false;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      *through = true;
      *target = path;
      return Status::OK();
    }
    if (!S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(path + ": is " +
                                     (S_ISDIR(st.st_mode)    ? std::string("a directory")
                                      : S_ISBLK(st.st_mode)  ? std::string("a block device")
                                      : S_ISSOCK(st.st_mode) ? std::string("a socket")
                                                             : std::string("not a regular file")) +
                                     ", not a file this command writes; name a file");
    }
    char* real = ::realpath(path.c_str(), nullptr);  // a link's file is replaced, the link stays
    if (real == nullptr) return Errno("cannot resolve", path, errno);
    *target = real;
    std::free(real);
    return Status::OK();
  }
  if (errno != ENOENT) return Errno("cannot write", path, errno);
  SK_ASSIGN_OR_RETURN(*target, ResolveOutput(path));  // a dangling link: the file it names
  const size_t slash = target->rfind('/');
  if (slash != std::string::npos && slash > 0 && !IsDirectory(target->substr(0, slash))) {
    return Status::IOError(path + ": cannot write: its directory " + target->substr(0, slash) +
                           " does not exist");
  }
  return Status::OK();
}

// Writes `data` into an existing character device or FIFO in place. A FIFO
// nobody reads is refused (O_NONBLOCK) rather than waited on.
Status WriteThrough(const std::string& path, const std::string& target, std::string_view data) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENXIO) return Status::IOError(path + ": a FIFO that nothing reads; not written");
    return Errno("cannot open for writing", path, errno);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return Errno("cannot write", path, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && errno != EINTR) return Errno("cannot write", path, errno);
  return Status::OK();
}

}  // namespace

Status WriteFileAtomic(const std::string& path, std::string_view data) {
  std::string target;
  bool through = false;
  SK_RETURN_IF_ERROR(ResolveOutputKind(path, &target, &through));
  if (through) return WriteThrough(path, target, data);
  return WriteFileAtomic(Env::Default(), target, data);
}

Status CheckOutputFile(const std::string& path) {
  std::string target;
  bool through = false;
  return ResolveOutputKind(path, &target, &through);
}

Result<std::string> ResolveRegularOutput(const std::string& path) {
  std::string target;
  bool through = false;
  SK_RETURN_IF_ERROR(ResolveOutputKind(path, &target, &through));
  if (through) {
    return Status::InvalidArgument(path +
                                   ": is not a regular file, and this format is written "
                                   "only to one; name a file");
  }
  return target;
}

Status CheckOutputDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Errno("cannot use as an output directory", dir, errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(dir + ": exists and is not a directory; name a directory");
  }
  return Status::OK();
}

Status CheckOutputOutsideInputs(const std::string& output, const std::vector<std::string>& inputs) {
  auto resolved = ResolveOutput(output);
  const std::string out = RealPathOfParent(resolved.ok() ? *resolved : output);
  struct stat ost;
  const bool out_exists = ::stat(output.c_str(), &ost) == 0;
  for (const std::string& in : inputs) {
    if (in.empty() || in.find("://") != std::string::npos) continue;
    struct stat ist;
    if (::stat(in.c_str(), &ist) != 0) {
      // Not there yet (a file this command will also write): the same path?
      auto in_resolved = ResolveOutput(in);
      if (!out.empty() && out == RealPathOfParent(in_resolved.ok() ? *in_resolved : in)) {
        return Status::InvalidArgument(output + ": is also " + in +
                                       ", which this command writes; write it elsewhere");
      }
      continue;
    }
    bool clash = out_exists && ost.st_dev == ist.st_dev && ost.st_ino == ist.st_ino &&
                 !S_ISCHR(ost.st_mode) && !S_ISFIFO(ost.st_mode);
    if (!clash && S_ISDIR(ist.st_mode) && !out.empty()) {
      char* real = ::realpath(in.c_str(), nullptr);
      if (real != nullptr) {
        std::string dir = real;
        std::free(real);
        if (dir.back() != '/') dir += '/';
        clash = out.compare(0, dir.size(), dir) == 0 || out + "/" == dir;
      }
    }
    if (clash) {
      return Status::InvalidArgument(output + ": is " +
                                     (S_ISDIR(ist.st_mode) ? "inside " : "the same file as ") + in +
                                     ", which this command reads or writes; write it elsewhere");
    }
  }
  return Status::OK();
}

Status RenameFile(const std::string& from, const std::string& to) {
  return Env::Default()->RenameFile(from, to);
}

Status RemoveFile(const std::string& path) { return Env::Default()->RemoveFile(path); }

Status SyncDir(const std::string& dir) { return Env::Default()->SyncDir(dir); }

Status CreateDirs(const std::string& dir) { return Env::Default()->CreateDirs(dir); }

Result<std::vector<std::string>> ListDir(const std::string& dir) {
  return Env::Default()->ListDir(dir);
}

bool FileExists(const std::string& path) { return Env::Default()->FileExists(path); }

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<uint64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Errno("cannot stat", path, errno);
  return static_cast<uint64_t>(st.st_size);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

Result<uint32_t> FileCrc32c(const std::string& path) { return FileCrc32c(Env::Default(), path); }

}  // namespace shardkit
