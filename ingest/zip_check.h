// A zip's central directory, read beside libarchive's zip reader to check
// what libarchive does not, as `unzip -t` checks it: that the directory gives
// as many entries as the zip's end record lists, and that each member's local
// header names it as the directory does. The archive streamer
// (archive_reader.h) checks every zip it reads with these. Files are read
// with pread(2) only, and the directory a window at a time (its size is the
// file's claim); no state, so safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardkit {

// What a zip's end-of-central-directory record says its central directory
// holds: `entries` members (the zip64 record's count where there is one).
// Found as libarchive's zip reader finds it (the last "PK\5\6" in the
// file's last 16 KiB), so both read the same record.
struct ZipEnd {
  bool found = false, zip64 = false;
  uint64_t entries = 0;
  uint64_t dir_offset = 0, dir_bytes = 0;  // the central directory
};

// The end record of the zip open at `fd`, `size` bytes long (`found` false
// where it has none).
ZipEnd ReadZipEnd(int fd, uint64_t size);

// A central directory entry: where its member's local header is, and where
// the member's name is in the directory.
struct ZipCentralEntry {
  uint64_t local = 0, name_at = 0;
  uint32_t name_bytes = 0;
};

// The central directory's entries sorted by their local headers' offsets
// (the order libarchive's seekable reader visits them in, so that checking
// each as it is read finds its header in the page cache). As many as parse;
// the entry count (CheckZipEntries) tells a directory that does not.
std::vector<ZipCentralEntry> ReadZipCentral(int fd, uint64_t size, const ZipEnd& end);

// A member's name in its local header must be its name in the central
// directory: unzip extracts by the central name (warning of the other),
// libarchive reports the local one, so a zip whose two names differ would
// pack another file, or class, than its extraction holds. `path` names the
// zip in the message.
Status CheckZipLocalName(int fd, const ZipCentralEntry& c, const std::string& path);

// A zip read to its end gave as many entries as its end record says its
// central directory holds; otherwise the directory is damaged. libarchive
// looks for the directory's first entry from where the end record says it
// starts (tolerating data prepended to the zip), so a directory overwritten
// with zeros or garbage reads as one with no entries, and one partly
// overwritten as one that starts later: only the count tells. An end record
// whose own count is wrong is damage too. unzip -t reports each of these. (A
// writer without zip64 that stored the count of 65,536 entries or more
// modulo 65,536 is accepted, as unzip accepts it.) `read`: the entries the
// zip at `fd` (`size` bytes) gave, read to its end.
Status CheckZipEntries(const std::string& path, int fd, uint64_t size, uint64_t read);

}  // namespace shardkit
