// The POSIX filesystem's helpers, by path, with Status errors that name it.
#include "storage/file_io.h"

#include <sys/stat.h>

#include <cerrno>

#include "storage/posix_errors.h"

namespace shardkit {

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

}  // namespace shardkit
