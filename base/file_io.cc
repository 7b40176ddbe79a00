// The POSIX filesystem's helpers, by path, with Status errors that name it:
// the publish primitives (through Env::Default(), base/posix_env.cc) and
// what only a local file has (page-cache eviction).
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

Result<uint32_t> FileCrc32c(const std::string& path) { return FileCrc32c(Env::Default(), path); }

}  // namespace shardkit
