// Image members of an archive, streamed: ImageNet's official tars (a tar of
// per-class tars, or a flat val tar) and tar/tar.gz/zip files of a
// class-folder tree, read sequentially with libarchive, inner tars descended
// into on the fly. Nothing is extracted: members reach the caller as bytes.
//
// Hostile members are named and counted, never followed: paths with ".." or
// an absolute path, symbolic and hard links, devices and other non-regular
// members, members over the size limit (decompression bombs are skipped
// without being held), and corrupt inner tars. A truncated or corrupt outer
// archive is an error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace shardkit {

// Whether shardkit-pack was built with libarchive.
bool ArchivesSupported();

// Whether `path` names an archive shardkit reads (by its name: .tar, .tar.gz,
// .tgz, .zip).
bool LooksLikeArchive(const std::string& path);

struct ArchiveMember {
  // The member's path in the tree it stands for: an inner class tar's
  // members as "CLASS/NAME" (CLASS the inner tar's name without .tar),
  // others as stored, without a leading "./".
  std::string path;
  std::string bytes;
  bool is_dir = false;  // a folder (an inner class tar counts as one): no bytes
};

struct ArchiveStats {
  uint64_t members = 0;          // regular files delivered
  uint64_t skipped_unsafe = 0;   // ".." or absolute paths
  uint64_t skipped_links = 0;    // symbolic and hard links, devices, FIFOs
  uint64_t skipped_too_big = 0;  // over max_member_bytes
  uint64_t bad_inner_tars = 0;   // inner tars that could not be read to the end
  uint64_t archive_bytes = 0;    // the archive's size on disk
  uint64_t bytes_read = 0;       // of it, read so far
};

// Calls `member` for each regular file, in archive order, from this thread;
// `report` for each member skipped, with its path and why. `progress` (may be
// null) is called now and then with the stats so far. An error from `member`
// stops the stream and is returned.
Status StreamArchive(const std::string& path, uint64_t max_member_bytes,
                     const std::function<Status(ArchiveMember&&)>& member,
                     const std::function<void(const std::string&)>& report,
                     const std::function<void(const ArchiveStats&)>& progress, ArchiveStats* stats);

// One member of an archive by its path (a devkit's file), at most max_bytes.
Result<std::string> ReadArchiveMember(const std::string& archive, const std::string& suffix,
                                      uint64_t max_bytes);

}  // namespace shardkit
