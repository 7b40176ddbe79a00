// Archives read as a stream, never extracted: tar (ustar, pax, GNU; plain,
// gzip, bzip2, xz, zstd) and zip, with ImageNet's train tar of per-class tars
// descended into on the fly. Members reach the caller as bytes.
//
// Every checksum an archive carries is checked, so a damaged archive is an
// error naming it, never a dataset: a gzip stream is inflated with zlib
// (gzip_reader.h), which checks each member's CRC-32 and length to the
// stream's very end; tar headers carry a checksum libarchive checks; a zip is
// read through its central directory (as unzip reads it), each member's
// CRC-32 checked, and the directory must give as many entries as the zip's
// end record lists (zip_check.h: an overwritten or truncated directory is a
// corrupt zip, not a smaller one).
//
// Members that cannot be packed are named to the sink and skipped, never
// followed: paths with "..", symbolic links, devices and FIFOs, members over
// the size limit (a decompression bomb is never held), names that cannot be
// decoded, unreadable class tars. A leading '/' is stripped, as GNU tar and
// bsdtar strip it. A hard link to an earlier member is that member again (as
// tar -x makes it).
//
// A tar of class tars (ILSVRC2012_img_train.tar) is told by its first file
// or folder being a top-level *.tar. Its other top-level *.tar files with
// relative names are classes too; any other member, whatever it is named
// (an absolute name, a folder, a link, a device, an image, an archive below
// a folder, a README), is skipped by name as an unusable member: ILSVRC's
// layout holds class tars only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "ingest/source.h"

namespace shardkit {

// Whether this build reads archives (libarchive).
bool ArchivesSupported();

// Whether `path` names an archive by its name (.tar, .tar.gz, .tgz, .zip, ...).
bool LooksLikeArchive(const std::string& path);

struct ArchiveMember {
  enum class Kind { kFile, kDir, kHardLink };
  Kind kind = Kind::kFile;
  // The member's path in the tree it stands for, clean ("./a//b" -> "a/b");
  // an inner class tar's members as "CLASS/NAME" (CLASS the tar's name less .tar).
  std::string path;
  std::string name;    // for messages: "ARCHIVE:member"
  std::string bytes;   // kFile
  std::string target;  // kHardLink: the clean path of the member it links to
};

struct ArchiveOptions {
  uint64_t max_member_bytes = 64ull << 20;
  // A tar of class tars is read as one (above): each class tar as a folder
  // for its class, then its members below it. False: a .tar is a file.
  bool class_tars = true;
};

// Calls `member` for each member in archive order. Problems go to `sink`
// (Skip, and Interrupted is polled); progress to sink->Read. An error from
// `member` or the sink stops the stream and is returned.
Status StreamArchive(const std::string& path, const ArchiveOptions& options, SampleSink* sink,
                     const std::function<Status(ArchiveMember&&)>& member);

// One member of an archive by the end of its path (a devkit's file), at most
// max_bytes: a path given twice is its later member (as `tar -x` leaves it),
// and two different paths ending in `suffix` are an error naming both.
Result<std::string> ReadArchiveMember(const std::string& archive, const std::string& suffix,
                                      uint64_t max_bytes);

}  // namespace shardkit
