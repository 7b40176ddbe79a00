// libarchive streaming, with inner tars read from the outer member's data.
#include "tools/pack/archive_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "base/file_io.h"
#include "shard/manifest.h"  // Printable

#ifdef SHARDKIT_WITH_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

namespace shardkit {

bool ArchivesSupported() {
#ifdef SHARDKIT_WITH_LIBARCHIVE
  return true;
#else
  return false;
#endif
}

namespace {

// Case-insensitive, for a lowercase `suffix`: "x.TAR" ends with ".tar".
bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  if (s.size() < n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (std::tolower(static_cast<unsigned char>(s[s.size() - n + i])) != suffix[i]) return false;
  }
  return true;
}

}  // namespace

bool LooksLikeArchive(const std::string& path) {
  return EndsWith(path, ".tar") || EndsWith(path, ".tar.gz") || EndsWith(path, ".tgz") ||
         EndsWith(path, ".zip");
}

#ifdef SHARDKIT_WITH_LIBARCHIVE
namespace {

using ArchivePtr = std::unique_ptr<struct archive, int (*)(struct archive*)>;

// A member path made relative and clean: "./a//b" -> "a/b". False for a path
// that would leave the tree (".." anywhere, or absolute).
bool CleanPath(const std::string& raw, std::string* out) {
  if (raw.empty() || raw[0] == '/') return false;
  std::string clean;
  size_t i = 0;
  while (i <= raw.size()) {
    size_t j = raw.find('/', i);
    if (j == std::string::npos) j = raw.size();
    const std::string part = raw.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return false;
    if (!clean.empty()) clean += '/';
    clean += part;
  }
  *out = clean;
  return !clean.empty();
}

// Reads an inner archive from the outer one's current member.
struct InnerSource {
  struct archive* outer;
  std::vector<char> buffer = std::vector<char>(1 << 20);
};

la_ssize_t InnerRead(struct archive*, void* data, const void** out) {
  auto* src = static_cast<InnerSource*>(data);
  const la_ssize_t n = archive_read_data(src->outer, src->buffer.data(), src->buffer.size());
  *out = src->buffer.data();
  return n;
}

struct Streamer {
  uint64_t max_member_bytes;
  const std::function<Status(ArchiveMember&&)>& member;
  const std::function<void(const std::string&)>& report;
  const std::function<void(const ArchiveStats&)>& progress;
  ArchiveStats* stats;
  struct archive* outer = nullptr;
  std::string archive_name;

  void Progress() {
    if (outer != nullptr)
      stats->bytes_read = static_cast<uint64_t>(archive_filter_bytes(outer, -1));
    if (progress) progress(*stats);
  }

  // Reads the current entry's data into `bytes`, at most max_member_bytes.
  Status ReadData(struct archive* a, const std::string& where, std::string* bytes) {
    bytes->clear();
    char buf[1 << 16];
    for (;;) {
      const la_ssize_t n = archive_read_data(a, buf, sizeof(buf));
      if (n == 0) return Status::OK();
      if (n < 0) {
        return Status::Corruption(
            where + ": " + (archive_error_string(a) ? archive_error_string(a) : "read error"));
      }
      bytes->append(buf, static_cast<size_t>(n));
      if (bytes->size() > max_member_bytes) {
        return Status::InvalidArgument(where + ": over " + std::to_string(max_member_bytes >> 20) +
                                       " MiB");
      }
    }
  }

  // One archive's entries. `prefix` is the class of an inner tar ("" for the
  // outer archive); inner tars are not descended into further.
  Status Entries(struct archive* a, const std::string& where, const std::string& prefix,
                 bool* truncated) {
    struct archive_entry* e = nullptr;
    for (;;) {
      const int r = archive_read_next_header(a, &e);
      if (r == ARCHIVE_EOF) return Status::OK();
      if (r == ARCHIVE_FATAL || r == ARCHIVE_RETRY) {
        *truncated = true;
        return Status::Corruption(
            where + ": " +
            (archive_error_string(a) ? archive_error_string(a) : "unreadable archive header") +
            " (a truncated or corrupt archive?)");
      }
      const char* raw_name = archive_entry_pathname(e);
      const std::string raw = raw_name != nullptr ? raw_name : "";
      const std::string shown = where + ":" + Printable(raw);
      std::string path;
      if (!CleanPath(raw, &path)) {
        if (raw.empty() || raw == "." || raw == "./") continue;
        report(shown + ": a path outside the archive's tree (skipped)");
        stats->skipped_unsafe++;
        continue;
      }
      const mode_t type = archive_entry_filetype(e);
      if (type == AE_IFDIR) {
        ArchiveMember dir;
        dir.path = prefix.empty() ? path : prefix + "/" + path;
        dir.is_dir = true;
        SK_RETURN_IF_ERROR(member(std::move(dir)));
        continue;
      }
      if (type != AE_IFREG || archive_entry_hardlink(e) != nullptr) {
        report(shown + ": not a regular file (" +
               (type == AE_IFLNK            ? std::string("a symbolic link")
                : archive_entry_hardlink(e) ? "a hard link"
                                            : "a special file") +
               "; skipped)");
        stats->skipped_links++;
        continue;
      }
      if (archive_entry_size_is_set(e) &&
          static_cast<uint64_t>(archive_entry_size(e)) > max_member_bytes &&
          !(prefix.empty() && EndsWith(path, ".tar"))) {
        report(shown + ": " + std::to_string(archive_entry_size(e)) + " bytes, over the " +
               std::to_string(max_member_bytes >> 20) + " MiB limit (skipped)");
        stats->skipped_too_big++;
        continue;
      }
      if (prefix.empty() && EndsWith(path, ".tar") && path.find('/') == std::string::npos) {
        SK_RETURN_IF_ERROR(Inner(a, shown, path.substr(0, path.size() - 4)));
        continue;
      }
      ArchiveMember m;
      m.path = prefix.empty() ? path : prefix + "/" + path;
      Status s = ReadData(a, shown, &m.bytes);
      if (!s.ok()) {
        if (s.IsCorruption()) {
          *truncated = true;
          return s;
        }
        // Over the limit once decompressed: the rest is skipped, not held.
        report(s.message() + " once decompressed (skipped)");
        stats->skipped_too_big++;
        continue;
      }
      stats->members++;
      SK_RETURN_IF_ERROR(member(std::move(m)));
      if ((stats->members & 63) == 0) Progress();
    }
  }

  // An inner tar (ImageNet train's per-class tars): its members are the class's.
  Status Inner(struct archive* outer_archive, const std::string& where, const std::string& cls) {
    ArchiveMember dir;  // the class exists even if its tar holds no image
    dir.path = cls;
    dir.is_dir = true;
    SK_RETURN_IF_ERROR(member(std::move(dir)));
    ArchivePtr a(archive_read_new(), archive_read_free);
    archive_read_support_format_tar(a.get());
    InnerSource src{outer_archive};
    if (archive_read_open(a.get(), &src, nullptr, InnerRead, nullptr) != ARCHIVE_OK) {
      report(where + ": not a readable tar (skipped)");
      stats->bad_inner_tars++;
      return Status::OK();
    }
    bool truncated = false;
    Status s = Entries(a.get(), where, cls, &truncated);
    if (!s.ok() && !truncated) return s;  // the caller's own error
    if (!s.ok()) {
      report(s.message() + "; the rest of this class tar is skipped");
      stats->bad_inner_tars++;
    }
    // The outer member's unread remainder (after a corrupt inner tar) is skipped by
    // the next archive_read_next_header on the outer archive.
    return Status::OK();
  }
};

}  // namespace

Status StreamArchive(const std::string& path, uint64_t max_member_bytes,
                     const std::function<Status(ArchiveMember&&)>& member,
                     const std::function<void(const std::string&)>& report,
                     const std::function<void(const ArchiveStats&)>& progress,
                     ArchiveStats* stats) {
  *stats = ArchiveStats();
  // A FIFO or a device would block libarchive's open or read forever.
  SK_RETURN_IF_ERROR(CheckRegularFile(path));
  SK_ASSIGN_OR_RETURN(stats->archive_bytes, FileSize(path));
  ArchivePtr a(archive_read_new(), archive_read_free);
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_bzip2(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_filter_zstd(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  archive_read_support_format_zip(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 20) != ARCHIVE_OK) {
    return Status::IOError(
        path + ": " +
        (archive_error_string(a.get()) ? archive_error_string(a.get()) : "cannot open") +
        " (not a tar, tar.gz or zip archive?)");
  }
  Streamer st{max_member_bytes, member, report, progress, stats, a.get(), path};
  bool truncated = false;
  Status s = st.Entries(a.get(), path, "", &truncated);
  st.Progress();
  return s;
}

Result<std::string> ReadArchiveMember(const std::string& archive, const std::string& suffix,
                                      uint64_t max_bytes) {
  std::string found;
  bool have = false;
  ArchiveStats stats;
  Status s = StreamArchive(
      archive, max_bytes,
      [&](ArchiveMember&& m) {
        const std::string tail = "/" + suffix;
        const bool match = m.path == suffix ||
                           (m.path.size() > tail.size() &&
                            m.path.compare(m.path.size() - tail.size(), tail.size(), tail) == 0);
        if (!have && !m.is_dir && match) {
          found = std::move(m.bytes);
          have = true;
        }
        return Status::OK();
      },
      [](const std::string&) {}, nullptr, &stats);
  SK_RETURN_IF_ERROR(s);
  if (!have) return Status::NotFound(archive + ": no member " + suffix);
  return found;
}

#else  // no libarchive

Status StreamArchive(const std::string& path, uint64_t,
                     const std::function<Status(ArchiveMember&&)>&,
                     const std::function<void(const std::string&)>&,
                     const std::function<void(const ArchiveStats&)>&, ArchiveStats*) {
  return Status::Unsupported(path +
                             ": this shardkit-pack was built without libarchive "
                             "(apt-get install libarchive-dev, then rebuild)");
}

Result<std::string> ReadArchiveMember(const std::string& archive, const std::string&, uint64_t) {
  return Status::Unsupported(archive + ": this shardkit-pack was built without libarchive");
}

#endif

}  // namespace shardkit
