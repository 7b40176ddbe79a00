// The rules a tool's outputs are written by (storage/output_file.h): what a
// path names once links are followed, how each kind is written, and which
// outputs would overwrite an input.
#include "storage/output_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "storage/env.h"
#include "storage/file_io.h"
#include "storage/posix_errors.h"

namespace shardkit {

namespace {

// Bit fd is set when standard stream fd (0-2) was closed when the tool
// started (ReserveStandardStreams): /dev/stdout then names nothing of the
// user's, only the /dev/null put there.
unsigned g_closed_standard_streams = 0;
constexpr char kClosedStreamsVariable[] = "SHARDKIT_CLOSED_STD_STREAMS";

// The components of `path`, empty ones dropped.
std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= path.size()) {
    size_t slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    if (slash > at) out.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  return out;
}

// The absolute path `path` reaches: its longest existing prefix resolved
// (links followed), the rest taken lexically ("." dropped, ".." one up), so
// that "ds/ck/", "ds/x/.." and "./ds" all name a place inside or at ds.
// "" when not even the start resolves.
std::string AbsoluteResolved(const std::string& path) {
  const std::vector<std::string> parts = Components(path);
  const std::string start = !path.empty() && path[0] == '/' ? "/" : ".";
  for (size_t k = parts.size() + 1; k-- > 0;) {
    std::string prefix = start;
    for (size_t i = 0; i < k; ++i) prefix = JoinPath(prefix, parts[i]);
    char* real = ::realpath(prefix.c_str(), nullptr);
    if (real == nullptr) continue;
    std::string out = real;
    std::free(real);
    for (size_t i = k; i < parts.size(); ++i) {
      if (parts[i] == ".") continue;
      if (parts[i] == "..") {
        const size_t slash = out.rfind('/');
        out = slash == 0 || slash == std::string::npos ? "/" : out.substr(0, slash);
        continue;
      }
      out = JoinPath(out, parts[i]);
    }
    return out;
  }
  return "";
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

// The descriptor a path names by number (/dev/stdout, /dev/stderr,
// /dev/fd/N, /proc/self/fd/N, /proc/<this pid>/fd/N), or -1. Written
// through that descriptor, never reopened or resolved: it may be a pipe, a
// socket or a file opened for appending.
int DescriptorPath(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  const std::string pid = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (const std::string& prefix : {std::string("/dev/fd/"), std::string("/proc/self/fd/"),
                                    std::string("/proc/thread-self/fd/"), pid}) {
    if (path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string n = path.substr(prefix.size());
    if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos) {
      return -1;
    }
    return std::stoi(n);
  }
  return -1;
}

enum class OutputWay { kReplace, kThroughName, kThroughDescriptor };

// How the output file `path` is written, and where it lands (*target: the
// file to replace, the name to open, or the descriptor's number); an error
// naming `path` when it cannot be written at all.
Status ResolveOutputKind(const std::string& path, std::string* target, OutputWay* way) {
  *way = OutputWay::kReplace;
  if (path.empty()) return Status::InvalidArgument("an empty output path; name a file");
  if (const int fd = DescriptorPath(path); fd >= 0) {
    *way = OutputWay::kThroughDescriptor;
    *target = std::to_string(fd);
    if ((fd < 3 && (g_closed_standard_streams & (1u << fd)) != 0) || ::fcntl(fd, F_GETFD) < 0) {
      return Status::IOError(path + ": descriptor " + std::to_string(fd) +
                             " was not open when this command started; not written");
    }
    return Status::OK();
  }
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      *way = OutputWay::kThroughName;
      *target = path;
      return Status::OK();
    }
    if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);  // a directory, a socket...
    char* real = ::realpath(path.c_str(), nullptr);  // a link's file is replaced, the link stays
    if (real == nullptr) return Errno("cannot resolve", path, errno);
    *target = real;
    std::free(real);
    return Status::OK();
  }
  if (errno != ENOENT) return Errno("cannot write", path, errno);
  SK_ASSIGN_OR_RETURN(*target, ResolveOutput(path));  // a dangling link: the file it names
  if (!target->empty() && target->back() == '/') {
    return Status::InvalidArgument(path + ": names a directory (it ends in '/'); name a file");
  }
  const size_t slash = target->rfind('/');
  if (slash != std::string::npos && slash > 0 && !IsDirectory(target->substr(0, slash))) {
    return Status::IOError(path + ": cannot write: its directory " + target->substr(0, slash) +
                           " does not exist");
  }
  return Status::OK();
}

// Writes all of `data` with SIGPIPE held back: a reader that went away (a
// FIFO's, a pipe's) is EPIPE, an error naming `path`, not a signal that ends
// the tool; the SIGPIPE it raised is consumed.
Status WriteAll(int fd, const std::string& path, std::string_view data) {
  sigset_t pipe_signal, old;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
  Status s;
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      if (err == EPIPE && !sigismember(&old, SIGPIPE)) {
        const struct timespec now = {0, 0};
        sigtimedwait(&pipe_signal, nullptr, &now);
      }
      s = Errno("cannot write", path, err);
      break;
    }
    done += static_cast<size_t>(n);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return s;
}

// Writes `data` into an existing character device or FIFO in place. A FIFO
// nobody reads is refused (O_NONBLOCK) rather than waited on.
Status WriteThroughName(const std::string& path, std::string_view data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    struct stat st;
    if (errno == ENXIO && ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
      return Status::IOError(path + ": a FIFO that nothing reads; not written");
    }
    return Errno("cannot open for writing", path, errno);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  Status s = WriteAll(fd, path, data);
  if (::close(fd) != 0 && errno != EINTR && s.ok()) s = Errno("cannot write", path, errno);
  return s;
}

}  // namespace

unsigned ClosedStandardStreams() { return g_closed_standard_streams; }

void ReserveStandardStreams() {
  // A launcher's children (shardkit-train --nproc-per-node) inherit what it
  // found closed, through the environment: their fds are its /dev/null.
  if (const char* inherited = std::getenv(kClosedStreamsVariable); inherited != nullptr) {
    g_closed_standard_streams |= static_cast<unsigned>(std::atoi(inherited)) & 7u;
  }
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    const int null = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (null < 0) continue;
    if (null != fd) {
      ::dup2(null, fd);
      ::close(null);
    }
    g_closed_standard_streams |= 1u << fd;
  }
  if (g_closed_standard_streams != 0) {
    ::setenv(kClosedStreamsVariable, std::to_string(g_closed_standard_streams).c_str(), 1);
  }
}

Status WriteOutputFile(const std::string& path, std::string_view data) {
  std::string target;
  OutputWay way;
  SK_RETURN_IF_ERROR(ResolveOutputKind(path, &target, &way));
  if (way == OutputWay::kThroughDescriptor) return WriteAll(std::stoi(target), path, data);
  if (way == OutputWay::kThroughName) return WriteThroughName(path, data);
  return WriteFileAtomic(Env::Default(), target, data);
}

Status CheckOutputFile(const std::string& path) {
  std::string target;
  OutputWay way;
  return ResolveOutputKind(path, &target, &way);
}

Result<std::string> ResolveRegularOutput(const std::string& path) {
  std::string target;
  OutputWay way;
  SK_RETURN_IF_ERROR(ResolveOutputKind(path, &target, &way));
  if (way != OutputWay::kReplace) {
    return Status::InvalidArgument(path +
                                   ": is not a regular file, and this format is written "
                                   "only to one; name a file");
  }
  return target;
}

Status CheckOutputDir(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("an empty output directory; name one");
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
  if (DescriptorPath(output) >= 0) return Status::OK();  // written through, never replaced
  auto resolved = ResolveOutput(output);
  const std::string out = AbsoluteResolved(resolved.ok() ? *resolved : output);
  struct stat ost;
  const bool out_file =
      ::stat(output.c_str(), &ost) == 0 && !S_ISCHR(ost.st_mode) && !S_ISFIFO(ost.st_mode);
  auto clash = [&](const std::string& in, const std::string& how) {
    return Status::InvalidArgument(output + ": " + how + in +
                                   ", which this command reads or writes; write it elsewhere");
  };
  for (const std::string& in : inputs) {
    if (in.empty() || IsObjectStoreUrl(in)) continue;
    auto in_resolved = ResolveOutput(in);
    const std::string in_abs = AbsoluteResolved(in_resolved.ok() ? *in_resolved : in);
    // An output's temporary (X.tmp, replaced by X) is part of it.
    if (!out.empty() && !in_abs.empty() && out == in_abs + ".tmp") {
      return clash(in, "is the temporary file of ");
    }
    if (!out.empty() && !in_abs.empty() && out + ".tmp" == in_abs) {
      return clash(in, "has its temporary file at ");
    }
    struct stat ist;
    if (::stat(in.c_str(), &ist) != 0) {
      // Not there yet (a file this command writes too): the same path?
      if (!out.empty() && out == in_abs) return clash(in, "is also ");
      continue;
    }
    if (out_file && ost.st_dev == ist.st_dev && ost.st_ino == ist.st_ino) {
      return clash(in, S_ISDIR(ist.st_mode) ? "is " : "is the same file as ");
    }
    if (!S_ISDIR(ist.st_mode)) continue;
    if (!out.empty() && !in_abs.empty()) {
      const std::string prefix = in_abs.back() == '/' ? in_abs : in_abs + "/";
      if (out == in_abs || out.compare(0, prefix.size(), prefix) == 0) {
        return clash(in, "is inside ");
      }
    }
    // A dataset's files reached by other names: hard links, or shards that
    // are symbolic links to another directory's.
    if (!out_file) continue;
    auto names = Env::Default()->ListDir(in);
    if (!names.ok()) continue;
    for (const std::string& name : *names) {
      struct stat fst;
      const std::string f = JoinPath(in, name);
      if (::stat(f.c_str(), &fst) == 0 && fst.st_dev == ost.st_dev && fst.st_ino == ost.st_ino) {
        return clash(f, "is the same file as ");
      }
    }
  }
  return Status::OK();
}

}  // namespace shardkit
