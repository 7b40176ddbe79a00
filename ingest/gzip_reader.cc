// gzip inflated by zlib, member after member, to the end of the file.
#include "ingest/gzip_reader.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shardkit {

#define SK_RETURN_NEG(expr)    \
  do {                         \
    if ((expr) < 0) return -1; \
  } while (0)

GzipReader::~GzipReader() {
  if (open_) inflateEnd(&z_);
}

Status GzipReader::Open(int fd, const std::string& path) {
  fd_ = fd;
  std::memset(&z_, 0, sizeof(z_));
  if (inflateInit2(&z_, 15 + 16) != Z_OK) return Status::IOError(path + ": zlib init failed");
  open_ = true;
  in_.resize(1 << 20);
  out_.resize(1 << 20);
  return Status::OK();
}

ssize_t GzipReader::Read(const void** data) {
  for (;;) {
    if (done_) return 0;
    if (z_.avail_in == 0 && !eof_) SK_RETURN_NEG(Fill());
    z_.next_out = out_.data();
    z_.avail_out = static_cast<uInt>(out_.size());
    const int rc = inflate(&z_, Z_NO_FLUSH);
    const size_t produced = out_.size() - z_.avail_out;
    if (rc == Z_STREAM_END) {
      SK_RETURN_NEG(NextMember());
    } else if (rc == Z_DATA_ERROR || rc == Z_MEM_ERROR || rc == Z_NEED_DICT) {
      return Fail(std::string("corrupt gzip data (") + (z_.msg ? z_.msg : "inflate failed") +
                  "; gzip -t reports it too)");
    } else if (rc == Z_BUF_ERROR && produced == 0 && eof_ && z_.avail_in == 0) {
      return Fail("truncated gzip stream (it ends before its last member's trailer)");
    }
    if (produced > 0) {
      *data = out_.data();
      return static_cast<ssize_t>(produced);
    }
  }
}

int GzipReader::Fail(const std::string& what) {
  error_ = what;
  return -1;
}

// Reads more input after what is left unread (kept at the buffer's front).
int GzipReader::Fill() {
  const size_t kept = z_.avail_in;
  if (kept > 0 && z_.next_in != in_.data()) std::memmove(in_.data(), z_.next_in, kept);
  ssize_t n;
  do {
    n = ::read(fd_, in_.data() + kept, in_.size() - kept);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Fail(std::string("read failed: ") + std::strerror(errno));
  if (n == 0) eof_ = true;
  consumed_ += static_cast<uint64_t>(n);
  z_.next_in = in_.data();
  z_.avail_in = static_cast<uInt>(kept + static_cast<size_t>(n));
  return 0;
}

// After a member's trailer: another gzip member, zero padding, or the end.
int GzipReader::NextMember() {
  for (;;) {
    while (z_.avail_in > 0 && *z_.next_in == 0) {  // zero padding (gzip ignores it)
      ++z_.next_in;
      --z_.avail_in;
      padding_ = true;
    }
    if (z_.avail_in >= 2 || (eof_ && z_.avail_in > 0)) break;
    if (eof_) {
      done_ = true;
      return 0;
    }
    SK_RETURN_NEG(Fill());  // a member's magic may straddle two reads
  }
  if (padding_ || z_.avail_in < 2 || z_.next_in[0] != 0x1f || z_.next_in[1] != 0x8b) {
    return Fail("trailing data after the gzip stream (not a gzip member)");
  }
  inflateReset(&z_);
  return 0;
}

#undef SK_RETURN_NEG

}  // namespace shardkit
