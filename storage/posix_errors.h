// The POSIX backend's error helpers (storage/posix_env.cc), shared with the
// POSIX file helpers (storage/file_io.cc). Internal to storage/.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/status.h"

namespace shardkit {

// "PATH: WHAT: strerror(err)", NotFound for ENOENT, else IOError.
Status Errno(const std::string& what, const std::string& path, int err);
// Something that is not a regular file where one is expected, by what it is.
Status NotRegular(const std::string& path, mode_t mode);
// Opens a regular file without blocking on a FIFO that replaced it since the
// caller's stat (O_NONBLOCK), then checks what was opened; *size, if given,
// receives its size.
Result<int> OpenRegular(const std::string& path, int flags, const char* what,
                        uint64_t* size = nullptr);

}  // namespace shardkit
