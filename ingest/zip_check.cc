// The zip checks: its end record and central directory parsed by hand, with
// pread(2).
#include "ingest/zip_check.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "shard/manifest.h"  // Printable

namespace shardkit {

namespace {

uint64_t LittleEndian(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

ZipEnd ReadZipEnd(int fd, uint64_t size) {
  ZipEnd end;
  const uint64_t tail = std::min<uint64_t>(size, 16 << 10);
  std::vector<unsigned char> t(tail);
  if (tail < 22 ||
      ::pread(fd, t.data(), tail, static_cast<off_t>(size - tail)) != static_cast<ssize_t>(tail)) {
    return end;
  }
  for (uint64_t i = tail - 22 + 1; i-- > 0;) {
    if (std::memcmp(&t[i], "PK\5\6", 4) != 0) continue;
    end.found = true;
    end.entries = LittleEndian(&t[i + 10], 2);
    end.dir_bytes = LittleEndian(&t[i + 12], 4);
    end.dir_offset = LittleEndian(&t[i + 16], 4);
    unsigned char record[56];
    if (i >= 20 && std::memcmp(&t[i - 20], "PK\6\7", 4) == 0 &&
        ::pread(fd, record, sizeof(record), static_cast<off_t>(LittleEndian(&t[i - 12], 8))) ==
            static_cast<ssize_t>(sizeof(record)) &&
        std::memcmp(record, "PK\6\6", 4) == 0) {
      end.zip64 = true;
      end.entries = LittleEndian(record + 32, 8);
      end.dir_bytes = LittleEndian(record + 40, 8);
      end.dir_offset = LittleEndian(record + 48, 8);
    }
    break;
  }
  return end;
}

std::vector<ZipCentralEntry> ReadZipCentral(int fd, uint64_t size, const ZipEnd& end) {
  std::vector<ZipCentralEntry> out;
  if (!end.found || end.dir_offset > size || end.dir_bytes > size - end.dir_offset) return out;
  // Read a window at a time (the directory's size is the file's claim: never
  // one allocation of it); an entry (at most 46 + 3 x 65,535 bytes) always
  // fits a window.
  std::vector<unsigned char> window;
  uint64_t window_at = 0;
  auto at = [&](uint64_t p, uint64_t n) -> const unsigned char* {
    if (p < window_at || p + n > window_at + window.size()) {
      window_at = p;
      window.resize(std::min<uint64_t>(std::max<uint64_t>(n, 4 << 20), end.dir_bytes - p));
      if (::pread(fd, window.data(), window.size(), static_cast<off_t>(end.dir_offset + p)) !=
          static_cast<ssize_t>(window.size())) {
        window.clear();
        return nullptr;
      }
    }
    return &window[p - window_at];
  };
  // Every entry the directory holds (its count in the end record may be
  // modulo 65,536: CheckZipEntries judges the count).
  for (uint64_t p = 0; p + 46 <= end.dir_bytes;) {
    const unsigned char* e = at(p, 46);
    if (e == nullptr || std::memcmp(e, "PK\1\2", 4) != 0) break;
    const uint64_t name = LittleEndian(e + 28, 2), extra = LittleEndian(e + 30, 2),
                   comment = LittleEndian(e + 32, 2), bytes = 46 + name + extra + comment;
    if (p + bytes > end.dir_bytes || (e = at(p, bytes)) == nullptr) break;
    ZipCentralEntry c{LittleEndian(e + 42, 4), end.dir_offset + p + 46,
                      static_cast<uint32_t>(name)};
    if (c.local == 0xFFFFFFFF) {  // in the zip64 extra field, after the sizes it replaces
      const uint64_t skip = (LittleEndian(e + 24, 4) == 0xFFFFFFFF ? 8 : 0) +
                            (LittleEndian(e + 20, 4) == 0xFFFFFFFF ? 8 : 0);
      for (uint64_t x = 46 + name; x + 4 <= 46 + name + extra;) {
        const uint64_t id = LittleEndian(e + x, 2), len = LittleEndian(e + x + 2, 2);
        if (id == 1 && skip + 8 <= len && x + 4 + len <= 46 + name + extra) {
          c.local = LittleEndian(e + x + 4 + skip, 8);
          break;
        }
        x += 4 + len;
      }
    }
    out.push_back(c);
    p += bytes;
  }
  std::sort(out.begin(), out.end(),
            [](const ZipCentralEntry& a, const ZipCentralEntry& b) { return a.local < b.local; });
  return out;
}

Status CheckZipLocalName(int fd, const ZipCentralEntry& c, const std::string& path) {
  unsigned char head[30];
  std::string local, central(c.name_bytes, '\0');
  const bool header = ::pread(fd, head, sizeof(head), static_cast<off_t>(c.local)) ==
                          static_cast<ssize_t>(sizeof(head)) &&
                      std::memcmp(head, "PK\3\4", 4) == 0;
  if (header) {
    local.resize(LittleEndian(head + 26, 2));
    if (::pread(fd, local.data(), local.size(), static_cast<off_t>(c.local + 30)) !=
        static_cast<ssize_t>(local.size())) {
      local = "(unreadable)";
    }
  }
  if (::pread(fd, central.data(), central.size(), static_cast<off_t>(c.name_at)) !=
      static_cast<ssize_t>(central.size())) {
    central = "(unreadable)";
  }
  if (header && local == central) return Status::OK();
  return Status::Corruption(
      path + ":" + Printable(central) + ": a corrupt zip: " +
      (header ? "its local header names it " + Printable(local)
              : std::string("no local header where the central directory says it is")) +
      " (unzip -t reports it too)");
}

Status CheckZipEntries(const std::string& path, int fd, uint64_t size, uint64_t read) {
  const ZipEnd end = ReadZipEnd(fd, size);
  if (!end.found || read == end.entries) return Status::OK();
  if (!end.zip64 && read > 0xFFFF && (read & 0xFFFF) == end.entries) return Status::OK();
  return Status::Corruption(path + ": a corrupt zip: its end record lists " +
                            std::to_string(end.entries) +
                            " entries but its central directory gives " + std::to_string(read) +
                            " (overwritten or truncated; unzip -t reports it too)");
}

}  // namespace shardkit
