// GzipReader: a gzip file inflated by zlib as a stream and checked to its
// very end, as `gzip -t` checks it: each member's CRC-32 and length, members
// one after another (as pigz or a concatenation makes them), zero padding
// after the last and nothing else. The archive streamer (archive_reader.h)
// reads a .tar.gz's tar through it.
#pragma once

#include <sys/types.h>  // ssize_t
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardkit {

// One stream; not thread-safe. Reads the descriptor it is opened on (not
// owned, kept open by the caller) with read(2), from its current offset.
class GzipReader {
 public:
  GzipReader() = default;
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;
  ~GzipReader();

  // Starts inflating `fd`; messages name it as `path`.
  Status Open(int fd, const std::string& path);
  // Up to 1 MiB of inflated bytes at *data, valid until the next call; 0 at
  // the stream's end; -1 on an error, which error() says (the shape of
  // libarchive's read callback, which hands it on).
  ssize_t Read(const void** data);
  // The compressed bytes read so far (progress through the file).
  uint64_t consumed() const { return consumed_; }
  const std::string& error() const { return error_; }

 private:
  int Fail(const std::string& what);
  int Fill();
  int NextMember();

  std::string error_;
  int fd_ = -1;
  uint64_t consumed_ = 0;
  bool open_ = false, eof_ = false, done_ = false, padding_ = false;
  z_stream z_;
  std::vector<unsigned char> in_, out_;
};

}  // namespace shardkit
