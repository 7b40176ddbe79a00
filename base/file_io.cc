// The POSIX filesystem's helpers, by path, with Status errors that name it:
// the publish primitives (through Env::Default(), base/posix_env.cc) and
// what only a local file has (page-cache eviction, hard links).
#include "base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/crc32c.h"
#include "base/posix_errors.h"

namespace shardkit {

Result<std::string> ReadFileToString(const std::string& path, uint64_t max_size) {
  return Env::Default()->ReadFile(path, max_size);
}

Status WriteFileAtomic(const std::string& path, std::string_view data) {
  return WriteFileAtomic(Env::Default(), path, data);
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

Result<uint32_t> FileCrc32c(const std::string& path) {
  SK_ASSIGN_OR_RETURN(auto f, Env::Default()->OpenForReads(path));
  std::vector<char> buf(4 << 20);
  uint32_t crc = 0;
  for (uint64_t off = 0; off < f->size();) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), f->size() - off));
    SK_RETURN_IF_ERROR(f->Read(off, n, buf.data()));
    crc = crc32c::Extend(crc, buf.data(), n);
    off += n;
  }
  return crc;
}

Result<bool> LinkOrCopyFile(const std::string& from, const std::string& to) {
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
  SK_ASSIGN_OR_RETURN(auto in, Env::Default()->OpenForReads(from));
  SK_ASSIGN_OR_RETURN(auto out, WritableFile::Create(to));
  std::vector<char> buf(4 << 20);
  Status s;
  for (uint64_t off = 0; s.ok() && off < in->size();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), in->size() - off));
    s = in->Read(off, n, buf.data());
    if (s.ok()) s = out->Append(buf.data(), n);
    off += n;
  }
  if (s.ok()) s = out->Sync();
  if (s.ok()) s = out->Close();
  if (!s.ok()) {
    out.reset();
    RemoveFile(to).IgnoreError();
    return s;
  }
  return false;
}

}  // namespace shardkit
