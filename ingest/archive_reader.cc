// The archive streamer: libarchive's tar and zip readers over the archive
// file (a .tar.gz inflated by GzipReader, a zip checked against its central
// directory by zip_check.h), inner tars read from the outer member's data.
#include "ingest/archive_reader.h"

#include <fcntl.h>
#include <locale.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "image/codec.h"  // SniffImageFormat
#include "ingest/gzip_reader.h"
#include "ingest/zip_check.h"
#include "shard/manifest.h"  // Printable
#include "storage/file_io.h"

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
  for (const char* suffix : {".tar", ".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tbz2", ".tar.xz",
                             ".txz", ".tar.zst", ".tzst"}) {
    if (EndsWith(path, suffix)) return true;
  }
  return false;
}

#ifdef SHARDKIT_WITH_LIBARCHIVE
namespace {

using ArchivePtr = std::unique_ptr<struct archive, int (*)(struct archive*)>;

// A member path made relative and clean as tar -x makes it: "./a//b" ->
// "a/b", "/a/b" -> "a/b" (GNU tar and bsdtar strip the leading '/'). False
// for a path that would leave the tree ("..").
bool CleanPath(const std::string& raw, std::string* out) {
  if (raw.empty()) return false;
  std::string clean;
  size_t i = raw.find_first_not_of('/');
  if (i == std::string::npos) i = raw.size();
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
  return true;
}

// The archive file itself, decompressed here for the tar reader: gzip by
// GzipReader (each member's CRC-32 and length), bzip2/xz/zstd by libarchive's
// raw reader (their block and stream checks), a plain tar passed through.
// Drain reads to the stream's very end, so a check in the last trailer is
// seen even though tar's end-of-archive comes before it.
class FileInput {
 public:
  ~FileInput() {
    if (raw_ != nullptr) archive_read_free(raw_);
    if (fd_ >= 0) ::close(fd_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    SK_RETURN_IF_ERROR(CheckRegularFile(path));  // a FIFO would block forever
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return Status::IOError(path + ": cannot open: " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd_, &st) == 0) size_ = static_cast<uint64_t>(st.st_size);
    unsigned char magic[4] = {0, 0, 0, 0};
    const ssize_t n = ::pread(fd_, magic, sizeof(magic), 0);
    if (n < 0) return Status::IOError(path + ": read failed: " + std::strerror(errno));
    gzip_ = n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    zip_ = n >= 4 && magic[0] == 'P' && magic[1] == 'K' && (magic[2] == 3 || magic[2] == 5);
    if (gzip_) return gunzip_.Open(fd_, path);
    if (!zip_) {
      out_.resize(1 << 20);
      raw_ = archive_read_new();
      archive_read_support_filter_bzip2(raw_);
      archive_read_support_filter_xz(raw_);
      archive_read_support_filter_zstd(raw_);
      archive_read_support_format_raw(raw_);
      struct archive_entry* e = nullptr;
      if (archive_read_open_fd(raw_, fd_, 1 << 20) != ARCHIVE_OK ||
          archive_read_next_header(raw_, &e) != ARCHIVE_OK) {
        const char* why = archive_error_string(raw_);
        return Status::Corruption(path + ": " + (why ? why : "empty, or not an archive"));
      }
    }
    return Status::OK();
  }
  // The tar stream: TarStreamRead below hands it to libarchive's tar reader.
  // Up to 1 MiB; 0 at the end; -1 on an error (error()).
  ssize_t Read(const void** data) {
    if (gzip_) return gunzip_.Read(data);
    if (done_) return 0;
    const la_ssize_t n = archive_read_data(raw_, out_.data(), out_.size());
    if (n < 0) {
      const char* why = archive_error_string(raw_);
      error_ = std::string("corrupt compressed data (") + (why ? why : "read error") + ")";
      return -1;
    }
    if (n == 0) done_ = true;
    consumed_ = static_cast<uint64_t>(archive_filter_bytes(raw_, -1));
    *data = out_.data();
    return n;
  }
  bool gzip() const { return gzip_; }
  bool zip() const { return zip_; }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  uint64_t consumed() const { return gzip_ ? gunzip_.consumed() : consumed_; }
  const std::string& error() const { return gzip_ ? gunzip_.error() : error_; }

  // Reads what is left of the stream, so its last check is made.
  Status Drain() {
    if (zip_) return Status::OK();
    const void* unused;
    ssize_t n;
    while ((n = Read(&unused)) > 0) {
    }
    if (n < 0) return Status::Corruption(path_ + ": " + error());
    return Status::OK();
  }

 private:
  std::string path_, error_;
  int fd_ = -1;
  uint64_t size_ = 0, consumed_ = 0;
  bool gzip_ = false, zip_ = false, done_ = false;
  GzipReader gunzip_;
  struct archive* raw_ = nullptr;  // bzip2, xz, zstd or none
  std::vector<unsigned char> out_;
};

la_ssize_t TarStreamRead(struct archive* a, void* data, const void** out) {
  auto* in = static_cast<FileInput*>(data);
  const ssize_t n = in->Read(out);
  if (n < 0) archive_set_error(a, EIO, "%s", in->error().c_str());
  return n;
}

// Reads an inner archive from the outer one's current member.
struct InnerSource {
  struct archive* outer = nullptr;
  std::vector<char> buffer = std::vector<char>(1 << 20);
  std::string outer_error;  // the outer archive failed (not the class tar)
};

la_ssize_t InnerRead(struct archive* inner, void* data, const void** out) {
  auto* src = static_cast<InnerSource*>(data);
  const la_ssize_t n = archive_read_data(src->outer, src->buffer.data(), src->buffer.size());
  *out = src->buffer.data();
  if (n < 0) {
    const char* e = archive_error_string(src->outer);
    src->outer_error = e != nullptr ? e : "read error";
    archive_set_error(inner, EIO, "%s", src->outer_error.c_str());
  }
  return n;
}

std::string ErrorOf(struct archive* a, const char* otherwise) {
  const char* e = archive_error_string(a);
  return e != nullptr ? e : otherwise;
}

struct Streamer {
  const ArchiveOptions& options;
  SampleSink* sink;
  const std::function<Status(ArchiveMember&&)>& member;
  FileInput* input = nullptr;
  struct archive* outer = nullptr;
  std::string outer_name;
  std::set<std::string> class_tars{};
  uint64_t members = 0, entries = 0;
  uint64_t zip_entries = 0;  // a zip's entries, each one its central directory lists
  int tar_of_tars = -1;      // unknown until the first member
  std::set<std::string> zip_names{};
  std::vector<ZipCentralEntry> zip_central{};  // ReadZipCentral's
  // The outer tar's members held back while its layout is unknown because
  // every file or folder so far had an absolute name (ClassTarsMember).
  std::vector<ArchiveMember> held{};
  uint64_t held_bytes = 0;
  bool absolute = false;  // the current outer member's name is absolute

  // A class tar's form: a top-level regular *.tar (a hard link is not one).
  static bool ClassTarForm(const std::string& path, mode_t type, bool hard_link) {
    return type == AE_IFREG && !hard_link && EndsWith(path, ".tar") &&
           path.find('/') == std::string::npos;
  }

  // Why a member that is neither a file nor a folder is not packed.
  static std::string NotRegular(mode_t type) {
    return std::string("not a regular file (") +
           (type == AE_IFLNK ? "a symbolic link, not followed" : "a device or FIFO") + ")";
  }

  // Up to the first 512 bytes of the current entry's data (the rest is
  // skipped by the next header): enough to tell an image or a tar.
  static Result<std::string> Head(struct archive* a, const std::string& where) {
    std::string head(512, '\0');
    size_t got = 0;
    while (got < head.size()) {
      const la_ssize_t n = archive_read_data(a, &head[got], head.size() - got);
      if (n < 0) return Status::Corruption(where + ": " + ErrorOf(a, "read error"));
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    head.resize(got);
    return head;
  }

  static constexpr const char* kStray = "not a class tar, in a tar of class tars (ILSVRC's layout)";
  static constexpr const char* kHardLinkStray =
      "a hard link in a tar of class tars (not followed: the member it names was read as it "
      "streamed by)";
  static std::string AbsoluteStray(const std::string& path) {
    return std::string(kStray) + ": an absolute path (tar -x writes it as " + Printable(path) +
           ", tar -xP outside the extraction)";
  }

  // A member of a tar of class tars. A class tar (a top-level regular *.tar
  // with a relative name) is read as its class. Every other member is stray,
  // whatever it is named, and is an unusable member (skipped by name and
  // counted; --strict fails on it), never followed or extracted: ILSVRC's
  // layout holds class tars only. Links (a hard link too: the member it
  // names was read as it streamed by), devices and FIFOs count as links; an
  // absolute name as an unsafe path, even /n04.tar: tar -x writes it as
  // n04.tar but tar -xP at the root, so which class it would be is the
  // extractor's guess; a folder, an image, an archive elsewhere or any
  // other file as outside the layout. ("..": skipped before, as anywhere.)
  // `absolute` is the member's, as ClassTarsMember found it.
  Status OuterMember(struct archive* a, struct archive_entry* e, const std::string& shown,
                     const std::string& path) {
    const mode_t type = archive_entry_filetype(e);
    const bool hard_link = archive_entry_hardlink(e) != nullptr;
    if (!absolute && ClassTarForm(path, type, hard_link)) {
      return Inner(a, shown, path.substr(0, path.size() - 4));
    }
    const std::string stray = kStray;
    if (hard_link) return sink->Skip(shown, kHardLinkStray, Unusable::kLink);
    if (type != AE_IFREG && type != AE_IFDIR) {
      return sink->Skip(shown, NotRegular(type), Unusable::kLink);
    }
    if (absolute) return sink->Skip(shown, AbsoluteStray(path), Unusable::kUnsafePath);
    if (type == AE_IFDIR) {
      return sink->Skip(shown, stray + ": a folder (its members are judged one by one)",
                        Unusable::kOutsideLayout);
    }
    SK_ASSIGN_OR_RETURN(const std::string head, Head(a, shown));
    const auto* h = reinterpret_cast<const unsigned char*>(head.data());
    std::string what;  // a README, a checksum list: nothing more to say
    if (SniffImageFormat(h, head.size()) != ImageFormat::kUnknown) {
      what =
          ": an image (the archive's first file, a class tar, told its layout; if it is a "
          "tree of images, pack its extraction)";
    } else if (LooksLikeArchive(path) ||
               (head.size() >= 262 && head.compare(257, 5, "ustar") == 0)) {
      what = path.find('/') != std::string::npos
                 ? ": an archive below a folder (class tars are top-level NAME.tar files)"
                 : ": an archive not named NAME.tar (a class tar's name)";
    }
    return sink->Skip(shown, stray + what, Unusable::kOutsideLayout);
  }

  // ILSVRC2012_img_train.tar's layout: a tar whose first file or folder with
  // a relative name is a class tar holds class tars; anywhere else a .tar is
  // a file. A link tells nothing, nor does an absolute name (a stray of a tar
  // of class tars may come first): until a member tells, those are held back
  // (Emit). True when the member was one of a tar of class tars, now read
  // as its class or skipped as a stray.
  Result<bool> ClassTarsMember(struct archive* a, struct archive_entry* e, const std::string& shown,
                               const std::string& raw, const std::string& path) {
    const mode_t t = archive_entry_filetype(e);
    const bool hard_link = archive_entry_hardlink(e) != nullptr;
    absolute = raw[0] == '/';
    if (tar_of_tars < 0 && !hard_link && !absolute && (t == AE_IFREG || t == AE_IFDIR)) {
      tar_of_tars = ClassTarForm(path, t, hard_link) ? 1 : 0;
      SK_RETURN_IF_ERROR(Release());
    }
    if (tar_of_tars != 1) return false;
    SK_RETURN_IF_ERROR(OuterMember(a, e, shown, path));
    return true;
  }

  // A member of the tree, held back while the outer tar's layout is unknown
  // and an absolute name came (ClassTarsMember); past 256 members or the
  // member size limit, they are a tree of absolute names (tar -cP's).
  Status Emit(ArchiveMember&& m, bool outer) {
    if (!outer || tar_of_tars >= 0 || (!absolute && held.empty())) return member(std::move(m));
    held_bytes += m.bytes.size();
    held.push_back(std::move(m));
    if (held.size() < 256 && held_bytes <= options.max_member_bytes) return Status::OK();
    tar_of_tars = 0;
    return Release();
  }

  // What was held back, once the layout is known: a tar of class tars'
  // strays (each an absolute name or a link), or the tree's members.
  Status Release() {
    std::vector<ArchiveMember> members = std::move(held);
    held.clear();
    held_bytes = 0;
    for (ArchiveMember& m : members) {
      if (tar_of_tars != 1) {
        SK_RETURN_IF_ERROR(member(std::move(m)));
      } else if (m.kind == ArchiveMember::Kind::kHardLink) {
        SK_RETURN_IF_ERROR(sink->Skip(m.name, kHardLinkStray, Unusable::kLink));
      } else {
        SK_RETURN_IF_ERROR(sink->Skip(m.name, AbsoluteStray(m.path), Unusable::kUnsafePath));
      }
    }
    return Status::OK();
  }

  void Progress() {
    const uint64_t done =
        input->gzip() ? input->consumed() : static_cast<uint64_t>(archive_filter_bytes(outer, -1));
    sink->Read(done, input->size());
  }

  // The current entry's data, at most max_member_bytes: a Corruption for a
  // damaged archive (the stream cannot go on), located at the member;
  // InvalidArgument when too big.
  Status ReadData(struct archive* a, const ErrorLocation& where, std::string* bytes) {
    bytes->clear();
    char buf[1 << 16];
    for (;;) {
      const la_ssize_t n = archive_read_data(a, buf, sizeof(buf));
      if (n == 0) return Status::OK();
      if (n < 0) return Status::At(Status::Code::kCorruption, where, ErrorOf(a, "read error"));
      bytes->append(buf, static_cast<size_t>(n));
      if (bytes->size() > options.max_member_bytes) {
        return Status::InvalidArgument("over the " +
                                       std::to_string(options.max_member_bytes >> 20) +
                                       " MiB limit once decompressed");
      }
    }
  }

  // The entry's name as extraction gives it: the bytes stored (tar), else
  // the UTF-8 form (a pax path, a zip name flagged UTF-8, in any locale).
  static bool NameOf(struct archive_entry* e, std::string* raw) {
    const char* n = archive_entry_pathname(e);
    if (n == nullptr) n = archive_entry_pathname_utf8(e);
    if (n == nullptr) return false;
    *raw = n;
    return true;
  }

  // One archive's entries. `prefix` is the class of an inner tar ("" for the
  // outer archive); inner tars are not descended into further.
  Status Entries(struct archive* a, const std::string& where, const std::string& prefix) {
    struct archive_entry* e = nullptr;
    for (;;) {
      SK_RETURN_IF_ERROR(sink->Interrupted());
      const int r = archive_read_next_header(a, &e);
      if (r == ARCHIVE_EOF) return prefix.empty() ? Release() : Status::OK();
      ++entries;
      if (r == ARCHIVE_FATAL || r == ARCHIVE_RETRY) {
        return Status::At(Status::Code::kCorruption, {where, ""},
                          ErrorOf(a, "unreadable archive header") +
                              (input->zip() && prefix.empty() ? " (a corrupt or truncated zip)"
                                                              : " (a corrupt or truncated tar)"));
      }
      if (input->zip() && prefix.empty() && ++zip_entries <= zip_central.size())
        SK_RETURN_IF_ERROR(CheckZipLocalName(input->fd(), zip_central[zip_entries - 1], where));
      std::string raw;
      if (!NameOf(e, &raw)) {
        SK_RETURN_IF_ERROR(sink->Skip(where + ":(entry " + std::to_string(entries) + ")",
                                      "a name that cannot be decoded", Unusable::kBadName));
        continue;
      }
      const std::string shown = where + ":" + Printable(raw);
      std::string path;
      if (!CleanPath(raw, &path)) {
        SK_RETURN_IF_ERROR(
            sink->Skip(shown, "a path outside the archive's tree", Unusable::kUnsafePath));
        continue;
      }
      if (path.empty()) continue;  // "." or "./": the tree's top
      if (prefix.empty() && input->zip() && !zip_names.insert(path).second) {
        return Status::InvalidArgument(shown +
                                       ": given twice in the zip (unzip would ask which to keep); "
                                       "refused");
      }
      const bool outer = prefix.empty() && !input->zip() && options.class_tars;
      if (outer) {
        SK_ASSIGN_OR_RETURN(const bool done, ClassTarsMember(a, e, shown, raw, path));
        if (done) continue;
      }
      ArchiveMember m;
      m.path = prefix.empty() ? path : prefix + "/" + path;
      m.name = shown;
      const mode_t type = archive_entry_filetype(e);
      const char* hardlink = archive_entry_hardlink(e);
      if (type == AE_IFDIR) {
        m.kind = ArchiveMember::Kind::kDir;
        SK_RETURN_IF_ERROR(Emit(std::move(m), outer));
        continue;
      }
      if (hardlink != nullptr) {
        std::string target;
        if (!CleanPath(hardlink, &target) || target.empty()) {
          SK_RETURN_IF_ERROR(
              sink->Skip(shown, "a hard link out of the archive's tree", Unusable::kUnsafePath));
          continue;
        }
        m.kind = ArchiveMember::Kind::kHardLink;
        m.target = prefix.empty() ? target : prefix + "/" + target;
        SK_RETURN_IF_ERROR(Emit(std::move(m), outer));
        continue;
      }
      if (type != AE_IFREG) {
        SK_RETURN_IF_ERROR(sink->Skip(shown, NotRegular(type), Unusable::kLink));
        continue;
      }
      if (archive_entry_size_is_set(e) &&
          static_cast<uint64_t>(archive_entry_size(e)) > options.max_member_bytes) {
        SK_RETURN_IF_ERROR(sink->Skip(shown,
                                      std::to_string(archive_entry_size(e)) + " bytes, over the " +
                                          std::to_string(options.max_member_bytes >> 20) +
                                          " MiB limit",
                                      Unusable::kTooBig));
        continue;
      }
      Status s = ReadData(a, {where, Printable(raw)}, &m.bytes);
      if (s.IsCorruption()) return s;
      if (!s.ok()) {
        SK_RETURN_IF_ERROR(sink->Skip(shown, s.message(), Unusable::kTooBig));
        continue;
      }
      ++members;
      SK_RETURN_IF_ERROR(Emit(std::move(m), outer));
      if ((members & 63) == 0) Progress();
    }
  }

  // An inner tar (ImageNet train's per-class tars): its members are the class's.
  Status Inner(struct archive* outer_archive, const std::string& where, const std::string& cls) {
    if (!class_tars.insert(cls).second) {
      return Status::InvalidArgument(where + ": a second tar for class " + Printable(cls) +
                                     " (refused: which one is the class?)");
    }
    ArchiveMember dir;  // the class exists even if its tar holds no image
    dir.kind = ArchiveMember::Kind::kDir;
    dir.path = cls;
    dir.name = where;
    SK_RETURN_IF_ERROR(member(std::move(dir)));
    ArchivePtr a(archive_read_new(), archive_read_free);
    archive_read_support_format_tar(a.get());
    archive_read_support_format_gnutar(a.get());
    InnerSource src;
    src.outer = outer_archive;
    if (archive_read_open(a.get(), &src, nullptr, InnerRead, nullptr) != ARCHIVE_OK) {
      if (!src.outer_error.empty()) return Status::Corruption(outer_name + ": " + src.outer_error);
      return sink->Skip(where, "not a readable tar: " + ErrorOf(a.get(), "unknown format"),
                        Unusable::kBadInnerTar);
    }
    Status s = Entries(a.get(), where, cls);
    if (!src.outer_error.empty()) {  // the archive itself is damaged: no dataset
      return Status::Corruption(outer_name + ": " + src.outer_error +
                                (input->gzip() ? "" : " (a corrupt or truncated archive)"));
    }
    const ErrorLocation* at = s.location();
    if (s.ok() || !s.IsCorruption() || at == nullptr || at->file != where) return s;
    // The class tar is damaged (the outer archive is fine: its next header
    // skips the unread remainder).
    const std::string why = at->member.empty() ? s.what() : at->member + ": " + s.what();
    return sink->Skip(where, why + "; the rest of the class tar", Unusable::kBadInnerTar);
  }
};

// Names as extraction gives them whatever the user's locale: libarchive
// converts a zip's UTF-8 names (and pax paths) to the locale's charset and
// loses them where it cannot (the C locale), so this thread reads in C.UTF-8
// while it streams; raw tar names pass through unchanged in any locale.
class Utf8Names {
 public:
  Utf8Names() : utf8_(newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0))) {
    if (utf8_ != static_cast<locale_t>(0)) old_ = uselocale(utf8_);
  }
  ~Utf8Names() {
    if (utf8_ == static_cast<locale_t>(0)) return;
    uselocale(old_);
    freelocale(utf8_);
  }

 private:
  locale_t utf8_;
  locale_t old_ = static_cast<locale_t>(0);
};

// A sink that keeps nothing (ReadArchiveMember's).
class QuietSink : public SampleSink {
 public:
  Status Add(Sample, std::string) override { return Status::OK(); }
  Result<int64_t> Hold(const std::string&, std::string) override { return int64_t{-1}; }
  Status Skip(const std::string&, const std::string&, Unusable) override { return Status::OK(); }
  void Note(const std::string&) override {}
  void Read(uint64_t, uint64_t) override {}
  Status Interrupted() const override { return Status::OK(); }
};

}  // namespace

Status StreamArchive(const std::string& path, const ArchiveOptions& options, SampleSink* sink,
                     const std::function<Status(ArchiveMember&&)>& member) {
  Utf8Names utf8;
  FileInput input;
  SK_RETURN_IF_ERROR(input.Open(path));
  ArchivePtr a(archive_read_new(), archive_read_free);
  int rc;
  if (input.zip()) {
    // Through the central directory, as unzip reads a zip: a zip whose
    // directory is damaged is an error, not its local headers' guess.
    // Every entry as one (no macOS resource forks folded into others), so
    // that the count below is the directory's.
    archive_read_support_format_zip_seekable(a.get());
    archive_read_set_format_option(a.get(), "zip", "mac-ext", nullptr);
    rc = archive_read_open_fd(a.get(), input.fd(), 1 << 20);
  } else {
    archive_read_support_format_tar(a.get());
    archive_read_support_format_gnutar(a.get());
    rc = archive_read_open(a.get(), &input, nullptr, TarStreamRead, nullptr);
  }
  if (rc != ARCHIVE_OK) {
    if (!input.error().empty()) return Status::Corruption(path + ": " + input.error());
    return Status::Corruption(path + ": " +
                              (input.zip() ? "a corrupt zip (its central directory is unreadable: "
                                           : "not a readable tar, tar.gz or zip archive (") +
                              ErrorOf(a.get(), "unknown") + ")");
  }
  Streamer st{options, sink, member, &input, a.get(), path};
  if (input.zip()) {
    st.zip_central = ReadZipCentral(input.fd(), input.size(), ReadZipEnd(input.fd(), input.size()));
  }
  SK_RETURN_IF_ERROR(st.Entries(a.get(), path, ""));
  if (input.zip()) {
    SK_RETURN_IF_ERROR(CheckZipEntries(path, input.fd(), input.size(), st.zip_entries));
  }
  SK_RETURN_IF_ERROR(input.Drain());
  st.Progress();
  return Status::OK();
}

Result<std::string> ReadArchiveMember(const std::string& archive, const std::string& suffix,
                                      uint64_t max_bytes) {
  // By path, as `tar -x` leaves the files: a path given twice is its later
  // member; two different paths that both end in suffix are ambiguous.
  std::string found, found_path;
  bool have = false;
  QuietSink quiet;
  ArchiveOptions options;
  options.max_member_bytes = max_bytes;
  options.class_tars = false;
  const std::string tail = "/" + suffix;
  Status s = StreamArchive(archive, options, &quiet, [&](ArchiveMember&& m) {
    const bool match =
        m.path == suffix || (m.path.size() > tail.size() &&
                             m.path.compare(m.path.size() - tail.size(), tail.size(), tail) == 0);
    if (m.kind != ArchiveMember::Kind::kFile || !match) return Status::OK();
    if (have && m.path != found_path) {
      return Status::InvalidArgument(archive + ": two members end in " + suffix + ": " +
                                     found_path + " and " + m.path + " (which is meant?)");
    }
    found = std::move(m.bytes);
    found_path = m.path;
    have = true;
    return Status::OK();
  });
  SK_RETURN_IF_ERROR(s);
  if (!have) return Status::NotFound(archive + ": no member " + suffix);
  return found;
}

#else  // no libarchive

Status StreamArchive(const std::string& path, const ArchiveOptions&, SampleSink*,
                     const std::function<Status(ArchiveMember&&)>&) {
  return Status::Unsupported(path +
                             ": this shardkit-pack was built without libarchive "
                             "(apt-get install libarchive-dev, then rebuild)");
}

Result<std::string> ReadArchiveMember(const std::string& archive, const std::string&, uint64_t) {
  return Status::Unsupported(archive + ": this shardkit-pack was built without libarchive");
}

#endif

}  // namespace shardkit
