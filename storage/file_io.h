// What only a local file has, by path, with Status errors that name the
// path: its kind, size, CRC, page-cache eviction. Everything a dataset's
// reader or writer does goes through an Env (storage/env.h: Env::Default() is
// POSIX); a tool's outputs follow storage/output_file.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "storage/env.h"

namespace shardkit {

// OK if `path` names a regular file (symlinks followed); otherwise an error
// naming it and what it is (a FIFO, a directory, a device). Never opens it.
// Every reader here refuses non-regular files this way before opening them.
Status CheckRegularFile(const std::string& path);
bool IsDirectory(const std::string& path);
Result<uint64_t> FileSize(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);
// Drops the file's clean pages from the page cache (posix_fadvise DONTNEED;
// no root needed), so the next read comes from storage: cold-read benchmarks.
// Pages that a process still maps stay.
Status EvictFromPageCache(const std::string& path);

}  // namespace shardkit
