// What the POSIX backend (storage/posix_env.cc) tells the kernel about a file it
// reads, shared with the node cache's files (storage/remote/node_cache.cc), which are
// local files too. Internal to storage/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "storage/env.h"

namespace shardkit {

// The read pattern for descriptor fd (posix_fadvise) and, if map is not null,
// for its mapping of size bytes (madvise): no read-ahead around a random
// record, more in sequence.
void AdviseKernel(int fd, const char* map, uint64_t size, AccessHints::Pattern pattern);

// The whole pages of [offset, offset + n) leave this process's mapping of
// size bytes (MADV_DONTNEED), not the page cache.
void ReleaseMappedPages(const char* map, uint64_t size, uint64_t offset, size_t n);

}  // namespace shardkit
