// POSIX file helpers by path, with Status errors that name the path: the
// atomic-publish primitives (fsync, rename, directory sync) datasets rely on,
// through Env::Default() (base/posix_env.cc), and what only a local file has.
// WritableFile and DirLock are base/env.h's; another storage is written
// through its Env.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"
#include "base/status.h"

namespace shardkit {

// OK if `path` names a regular file (symlinks followed); otherwise an error
// naming it and what it is (a FIFO, a directory, a device). Never opens it.
// Every reader here refuses non-regular files this way before opening them.
Status CheckRegularFile(const std::string& path);
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
// FileCrc32c(Env::Default(), path) (base/env.h).
Result<uint32_t> FileCrc32c(const std::string& path);

}  // namespace shardkit
