// ImageNet packing: list, shuffle by seed, prepare images in parallel (OpenMP),
// append in order to a DatasetWriter.
#include "tools/pack/imagenet_pack.h"

#include "base/openmp.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include "base/file_io.h"
#include "base/random.h"
#include "image/codec.h"
#include "shard/shard.h"
#include "tools/common/progress.h"
#include "tools/pack/archive_source.h"
#include "tools/pack/devkit.h"

namespace shardkit {
namespace {

constexpr uint64_t kMaxSourceFile = 64ull << 20;

struct SourceFile {
  std::string path, key;
  int32_t label;
  // An archive member: its prepared bytes in the spill file (or its error).
  int64_t spill_offset = -1;
  uint64_t spill_size = 0;
  PreparedImage::Change change = PreparedImage::Change::kNone;
  std::string error;
};

SourceFile Source(std::string path, std::string key, int32_t label) {
  SourceFile f;
  f.path = std::move(path);
  f.key = std::move(key);
  f.label = label;
  return f;
}

}  // namespace

Result<std::vector<std::pair<std::string, std::string>>> ReadValLabels(
    const std::string& csv_path) {
  SK_ASSIGN_OR_RETURN(std::string text, ReadFileToString(csv_path, 1ull << 30));
  std::vector<std::pair<std::string, std::string>> rows;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line_no == 1 && line.rfind("ImageId", 0) == 0) continue;  // header
    size_t comma = line.find(',');
    if (comma == std::string::npos || comma == 0 || comma + 1 >= line.size()) {
      return Status::InvalidArgument(csv_path + ":" + std::to_string(line_no) +
                                     ": expected 'ImageId,PredictionString', got '" +
                                     line.substr(0, 80) + "'");
    }
    std::string id = line.substr(0, comma);
    std::string pred = line.substr(comma + 1);
    std::string synset = pred.substr(0, pred.find(' '));
    rows.emplace_back(std::move(id), std::move(synset));
  }
  if (rows.empty()) return Status::InvalidArgument(csv_path + ": no labels");
  return rows;
}

namespace {

// Val labels (image stem -> WNID) from --val-labels CSV or --devkit.
Result<std::vector<std::pair<std::string, std::string>>> ValLabelRows(
    const ImageNetPackOptions& o) {
  if (!o.val_labels.empty() && !o.devkit.empty())
    return Status::InvalidArgument("give --val-labels or --devkit, not both");
  if (!o.devkit.empty()) return ReadDevkitValLabels(o.devkit);
  return ReadValLabels(o.val_labels);
}

std::string Stem(const std::string& name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

std::map<std::string, int32_t> IndexOf(const std::vector<std::string>& classes) {
  std::map<std::string, int32_t> index;
  for (size_t i = 0; i < classes.size(); ++i) index[classes[i]] = static_cast<int32_t>(i);
  return index;
}

// A flat val folder's labels, from a folder or an archive alike: the class
// list (the labels' synsets sorted, or --classes-from's) and each file's
// label by its stem.
struct ValLabels {
  std::string source;  // the CSV or devkit, for messages
  std::map<std::string, std::string> synset_of;
  std::vector<std::string> classes;
  std::map<std::string, int32_t> index;

  static Result<ValLabels> Make(const ImageNetPackOptions& o,
                                std::vector<std::string> fixed_classes) {
    ValLabels v;
    v.source = o.devkit.empty() ? o.val_labels : o.devkit;
    SK_ASSIGN_OR_RETURN(auto rows, ValLabelRows(o));
    v.synset_of.insert(rows.begin(), rows.end());
    if (fixed_classes.empty()) {
      std::set<std::string> synsets;
      for (const auto& r : rows) synsets.insert(r.second);
      fixed_classes.assign(synsets.begin(), synsets.end());
    }
    for (const auto& c : fixed_classes) {
      if (!IsValidUtf8(c)) {
        return Status::InvalidArgument(v.source + ": class '" + Printable(c) +
                                       "' is not valid UTF-8");
      }
    }
    v.classes = std::move(fixed_classes);
    v.index = IndexOf(v.classes);
    return v;
  }

  // The label of file `name` (`shown` in reports), or -1 after saying why it is skipped.
  int32_t LabelOf(const std::string& name, const std::string& shown,
                  const std::function<void(const std::string&)>& report,
                  ImageNetPackSummary* summary) const {
    auto it = synset_of.find(Stem(name));
    if (it == synset_of.end()) {
      report(shown + ": no label in " + source + " (skipped)");
      summary->bad++;
      return -1;
    }
    auto ci = index.find(it->second);
    if (ci == index.end()) {
      report(shown + ": class " + it->second + " is not in the class list (skipped)");
      summary->bad++;
      return -1;
    }
    return ci->second;
  }
};

// The files of one class folder, in sub-folders too (as torchvision's
// ImageFolder walks them), keyed "class/sub/file". Hidden entries are
// skipped. Each directory of the tree is visited once, by (device, inode):
// a symbolic link back up (a class folder linking to the tree's root, or
// "sub -> ..") or to another class is reported by path and not followed, so
// no image is packed twice or under the wrong class.
Status ListClassFolder(const std::string& path, const std::string& key, int32_t label, int depth,
                       std::set<std::pair<uint64_t, uint64_t>>* visited,
                       const std::function<void(const std::string&)>& report,
                       std::vector<SourceFile>* files) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::OK();
  if (!visited->insert({st.st_dev, st.st_ino}).second) {
    report(path +
           ": a directory already visited (a symbolic link loop, or a link to another "
           "folder of the tree); not followed");
    return Status::OK();
  }
  if (depth > 64) return Status::InvalidArgument(path + ": folders nested more than 64 deep");
  SK_ASSIGN_OR_RETURN(auto entries, ListDir(path));
  for (const auto& e : entries) {
    if (e[0] == '.') continue;
    const std::string p = JoinPath(path, e);
    if (IsDirectory(p)) {
      SK_RETURN_IF_ERROR(
          ListClassFolder(p, key + "/" + e, label, depth + 1, visited, report, files));
    } else {
      files->push_back(Source(p, key + "/" + e, label));
    }
  }
  return Status::OK();
}

Status ListSources(const ImageNetPackOptions& o,
                   const std::function<void(const std::string&)>& report,
                   std::vector<std::string>* classes, std::vector<SourceFile>* files,
                   ImageNetPackSummary* summary) {
  std::vector<std::string> fixed_classes;
  if (!o.classes_from.empty()) {
    SK_ASSIGN_OR_RETURN(Manifest m, ReadManifest(o.classes_from));
    fixed_classes = m.classes;
  }
  if (!IsDirectory(o.src)) return Status::NotFound(o.src + ": not a directory");
  if (!o.val_labels.empty() || !o.devkit.empty()) {
    SK_ASSIGN_OR_RETURN(ValLabels val, ValLabels::Make(o, fixed_classes));
    *classes = val.classes;
    SK_ASSIGN_OR_RETURN(auto names, ListDir(o.src));
    for (const auto& name : names) {
      const std::string path = JoinPath(o.src, name);
      if (IsDirectory(path) || name[0] == '.') continue;
      const int32_t label = val.LabelOf(name, path, report, summary);
      if (label >= 0) files->push_back(Source(path, name, label));
    }
    return Status::OK();
  }
  SK_ASSIGN_OR_RETURN(auto names, ListDir(o.src));
  std::vector<std::string> dirs;
  for (const auto& name : names) {
    if (name[0] != '.' && IsDirectory(JoinPath(o.src, name))) dirs.push_back(name);
  }
  if (dirs.empty()) {
    return Status::InvalidArgument(
        o.src + ": no class folders (for a flat validation folder pass --val-labels CSV)");
  }
  for (const auto& dir : dirs) {
    if (!IsValidUtf8(dir)) {
      return Status::InvalidArgument(
          JoinPath(o.src, Printable(dir)) +
          ": class folder name is not valid UTF-8 (class names are stored as UTF-8 "
          "text); rename the folder");
    }
  }
  *classes = fixed_classes.empty() ? dirs : fixed_classes;
  // The root itself counts as visited: a class folder linking back to it is a loop.
  std::set<std::pair<uint64_t, uint64_t>> visited;
  struct stat root_st;
  if (::stat(o.src.c_str(), &root_st) == 0) visited.insert({root_st.st_dev, root_st.st_ino});
  const std::map<std::string, int32_t> index = IndexOf(*classes);
  for (const auto& dir : dirs) {
    auto ci = index.find(dir);
    if (ci == index.end()) {
      report(JoinPath(o.src, dir) + ": class folder not in the class list (skipped)");
      summary->bad++;
      continue;
    }
    const size_t before = files->size();
    SK_RETURN_IF_ERROR(
        ListClassFolder(JoinPath(o.src, dir), dir, ci->second, 0, &visited, report, files));
    const size_t n = files->size() - before;
    if (n == 0) {
      report(JoinPath(o.src, dir) + ": empty class folder (class " + std::to_string(ci->second) +
             " has no images)");
      summary->empty_classes++;
    }
  }
  return Status::OK();
}

// ---- archives

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

// The order a recursive walk of sorted folder listings visits paths in:
// component by component ("sub/x" before "sub.jpg", as the walker does).
bool WalkOrder(const std::string& a, const std::string& b) { return Components(a) < Components(b); }

// The spill file: prepared records in archive order, read back in the
// seeded order. In OUT, removed however the pack ends.
struct Spill {
  std::string path;
  int fd = -1;
  uint64_t end = 0;
  ~Spill() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
  Status Append(const std::string& bytes, int64_t* offset) {
    *offset = static_cast<int64_t>(end);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(end + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::IOError(path + ": write failed (is OUT's filesystem full?)");
      done += static_cast<size_t>(n);
    }
    end += bytes.size();
    return Status::OK();
  }
  Status Read(int64_t offset, uint64_t size, std::string* out) const {
    out->resize(size);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd, &(*out)[done], size - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::IOError(path + ": read failed");
      done += static_cast<size_t>(n);
    }
    return Status::OK();
  }
};

// The archive's counterpart of ListSources: the same classes, labels, keys
// and pre-shuffle order as the extracted tree, with each image read once,
// validated and converted in parallel as it streams by, and spilled.
Status ListArchive(const ImageNetPackOptions& o,
                   const std::function<void(const std::string&)>& report, Spill* spill,
                   std::vector<std::string>* classes, std::vector<SourceFile>* files,
                   ImageNetPackSummary* summary) {
  std::vector<std::string> fixed_classes;
  if (!o.classes_from.empty()) {
    SK_ASSIGN_OR_RETURN(Manifest m, ReadManifest(o.classes_from));
    fixed_classes = m.classes;
  }
  const bool val = !o.val_labels.empty() || !o.devkit.empty();
  ValLabels val_labels;
  if (val) {
    SK_ASSIGN_OR_RETURN(val_labels, ValLabels::Make(o, fixed_classes));
  }

  // Stream: members in batches, prepared on all cores, spilled in archive order.
  struct Entry {
    std::string path;
    SourceFile file;
  };
  std::vector<Entry> entries;
  std::set<std::string> dir_entries;
  std::vector<ArchiveMember> batch;
  size_t batch_bytes = 0;
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  auto flush = [&]() -> Status {
    const size_t n = batch.size();
    std::vector<Status> status(n);
    std::vector<PreparedImage> prepared(n);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (size_t i = 0; i < n; ++i) {
      status[i] = PrepareImage(batch[i].bytes, o.resize_short, o.quality, &prepared[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      Entry e;
      e.path = std::move(batch[i].path);
      summary->bytes_in += batch[i].bytes.size();
      if (status[i].ok()) {
        SK_RETURN_IF_ERROR(spill->Append(prepared[i].jpeg, &e.file.spill_offset));
        e.file.spill_size = prepared[i].jpeg.size();
        e.file.change = prepared[i].change;
      } else {
        e.file.error = status[i].message();
      }
      entries.push_back(std::move(e));
    }
    batch.clear();
    batch_bytes = 0;
    return Status::OK();
  };
  ArchiveStats astats;
  SK_ASSIGN_OR_RETURN(const uint64_t archive_size, FileSize(o.src));
  Progress progress("read " + o.src.substr(o.src.rfind('/') + 1), archive_size >> 20, "MB");
  Status streamed = StreamArchive(
      o.src, kMaxSourceFile,
      [&](ArchiveMember&& m) -> Status {
        if (m.is_dir) {
          dir_entries.insert(m.path);
          return Status::OK();
        }
        batch_bytes += m.bytes.size();
        batch.push_back(std::move(m));
        if (batch.size() >= static_cast<size_t>(threads) * 32 || batch_bytes >= (256u << 20)) {
          return flush();
        }
        return Status::OK();
      },
      report, [&](const ArchiveStats& a) { progress.Update(a.bytes_read >> 20, a.bytes_read); },
      &astats);
  SK_RETURN_IF_ERROR(streamed);
  SK_RETURN_IF_ERROR(flush());
  progress.Finish();
  summary->unsafe_members = astats.skipped_unsafe;
  summary->link_members = astats.skipped_links;
  summary->oversized_members = astats.skipped_too_big;
  summary->bad_inner_tars = astats.bad_inner_tars;

  // The tree's root: --archive-root, else the deepest folder that holds
  // every image member (a zip of "train/CLASS/..." packs like "train/").
  // Hidden entries (a component starting with '.', macOS's __MACOSX) are
  // skipped, as the folder walker skips hidden names.
  auto hidden = [](const std::string& p) {
    for (const auto& c : Components(p)) {
      if (c.empty() || c[0] == '.' || c == "__MACOSX") return true;
    }
    return false;
  };
  std::vector<std::string> root;
  if (!o.archive_root.empty()) {
    for (const auto& c : Components(o.archive_root)) {
      if (!c.empty() && c != ".") root.push_back(c);
    }
  } else {
    bool first = true;
    for (const auto& e : entries) {
      if (hidden(e.path)) continue;
      std::vector<std::string> dir = Components(e.path);
      dir.pop_back();  // the file name
      // Class-folder trees keep one folder (the class) below the root; a
      // flat val archive's root is where its files are.
      if (!val && !dir.empty()) dir.pop_back();
      if (first) {
        root = dir;
        first = false;
      } else {
        size_t k = 0;
        while (k < root.size() && k < dir.size() && root[k] == dir[k]) ++k;
        root.resize(k);
      }
    }
  }
  auto relative = [&](const std::string& p, std::string* rel) {
    const std::vector<std::string> c = Components(p);
    if (c.size() <= root.size() || !std::equal(root.begin(), root.end(), c.begin())) return false;
    rel->clear();
    for (size_t k = root.size(); k < c.size(); ++k) *rel += (rel->empty() ? "" : "/") + c[k];
    return true;
  };
  std::string root_text;
  for (const auto& c : root) root_text += c + "/";
  const std::string where = o.src + (root_text.empty() ? "" : ":" + root_text);
  uint64_t outside = 0;

  if (val) {
    *classes = val_labels.classes;
    std::vector<std::pair<std::string, SourceFile>> flat;
    for (auto& e : entries) {
      std::string rel;
      if (hidden(e.path)) continue;
      if (!relative(e.path, &rel)) {
        ++outside;
        continue;
      }
      if (rel.find('/') != std::string::npos) continue;  // a sub-folder: not the flat val folder
      const std::string shown = o.src + ":" + e.path;
      const int32_t label = val_labels.LabelOf(rel, shown, report, summary);
      if (label < 0) continue;
      SourceFile f = std::move(e.file);
      f.path = shown;
      f.key = rel;
      f.label = label;
      flat.emplace_back(rel, std::move(f));
    }
    std::sort(flat.begin(), flat.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });  // ListDir's order
    for (auto& [rel, f] : flat) files->push_back(std::move(f));
  } else {
    // Class folders: the first component below the root, of files and of
    // folder entries (an empty class folder, an image-less class tar).
    std::map<std::string, std::vector<std::pair<std::string, SourceFile>>> by_class;
    for (const auto& d : dir_entries) {
      std::string rel;
      if (!hidden(d) && relative(d, &rel)) by_class[rel.substr(0, rel.find('/'))];
    }
    for (auto& e : entries) {
      std::string rel;
      if (hidden(e.path)) continue;
      if (!relative(e.path, &rel)) {
        ++outside;
        continue;
      }
      const size_t slash = rel.find('/');
      if (slash == std::string::npos) continue;  // a file beside the class folders
      SourceFile f = std::move(e.file);
      f.path = o.src + ":" + e.path;
      f.key = rel;
      by_class[rel.substr(0, slash)].emplace_back(rel, std::move(f));
    }
    if (by_class.empty()) {
      return Status::InvalidArgument(
          where +
          ": no class folders (for a flat validation archive pass --val-labels CSV or "
          "--devkit; for a tree deeper in the archive, --archive-root)");
    }
    std::vector<std::string> dirs;
    for (const auto& [dir, unused] : by_class) {
      if (!IsValidUtf8(dir)) {
        return Status::InvalidArgument(where + Printable(dir) +
                                       ": class folder name is not valid UTF-8 (class names are "
                                       "stored as UTF-8 text)");
      }
      dirs.push_back(dir);
    }
    *classes = fixed_classes.empty() ? dirs : fixed_classes;
    const std::map<std::string, int32_t> index = IndexOf(*classes);
    for (auto& [dir, members] : by_class) {
      auto ci = index.find(dir);
      if (ci == index.end()) {
        report(where + dir + ": class folder not in the class list (skipped)");
        summary->bad++;
        continue;
      }
      if (members.empty()) {
        report(where + dir + ": empty class folder (class " + std::to_string(ci->second) +
               " has no images)");
        summary->empty_classes++;
        continue;
      }
      std::sort(members.begin(), members.end(),
                [](const auto& a, const auto& b) { return WalkOrder(a.first, b.first); });
      for (auto& [rel, f] : members) {
        f.label = ci->second;
        files->push_back(std::move(f));
      }
    }
  }
  if (outside > 0) {
    report(o.src + ": " + std::to_string(outside) + " member(s) outside --archive-root " +
           o.archive_root + " (skipped)");
  }
  return Status::OK();
}

}  // namespace

Status PackImageNet(const ImageNetPackOptions& o,
                    const std::function<void(const std::string&)>& report,
                    ImageNetPackSummary* summary) {
  *summary = ImageNetPackSummary();
  const auto start = std::chrono::steady_clock::now();
  if (o.resize_short < 0) return Status::InvalidArgument("--resize-short must be positive");
  if (o.quality < 1 || o.quality > 100)
    return Status::InvalidArgument("--quality must be in 1..100");
  std::vector<std::string> classes;
  std::vector<SourceFile> files;
  const bool archive = !IsDirectory(o.src) && FileExists(o.src);
  DatasetWriterOptions wo;
  wo.shard_size = o.shard_size;
  wo.overwrite = o.force;
  wo.shard.compression = CompressionMode::kStore;
  wo.shard.kind = format::RecordKind::kJpeg;
  std::unique_ptr<DatasetWriter> writer;
  Spill spill;
  if (archive) {
    SK_RETURN_IF_ERROR(CheckRegularFile(o.src));  // a FIFO or device: refused before it is opened
    if (!ArchivesSupported() || !LooksLikeArchive(o.src)) {
      return Status::InvalidArgument(
          o.src +
          (ArchivesSupported()
               ? ": not a folder, and not an archive by its name (.tar, .tar.gz, .tgz, .zip)"
               : ": an archive, but this shardkit-pack was built without libarchive"));
    }
    // OUT first (its lock, and the refusal to replace a dataset without
    // --force), before the archive is read; then the spill file beside the shards.
    SK_ASSIGN_OR_RETURN(writer, DatasetWriter::Create(o.out, wo));
    spill.path = JoinPath(o.out, ".shardkit-pack-spill");
    // A fresh file: never through a link someone left at that name.
    ::unlink(spill.path.c_str());
    spill.fd = ::open(spill.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (spill.fd < 0) return Status::IOError(spill.path + ": cannot create the spill file");
    SK_RETURN_IF_ERROR(ListArchive(o, report, &spill, &classes, &files, summary));
  } else {
    SK_RETURN_IF_ERROR(ListSources(o, report, &classes, &files, summary));
  }
  if (o.strict && (summary->bad > 0 || summary->empty_classes > 0)) {
    return Status::InvalidArgument(
        "--strict: " + std::to_string(summary->bad + summary->empty_classes) + " problem(s) in " +
        o.src);
  }
  if (files.empty()) return Status::InvalidArgument(o.src + ": no image files found");
  summary->files_seen = files.size() + summary->bad;
  summary->classes = classes.size();
  // A seeded order spreads every class over every shard.
  KeyedShuffle(&files, KeyedRng(o.seed, 0x1A6E7E7));

  if (writer == nullptr) {
    SK_ASSIGN_OR_RETURN(writer, DatasetWriter::Create(o.out, wo));
  }

  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  const size_t chunk = static_cast<size_t>(threads) * 64;
  Progress progress(archive ? "write shards" : "pack imagenet", files.size(), "files");
  struct Slot {
    Status status;
    PreparedImage image;
    uint64_t in_bytes = 0;
  };
  std::vector<Slot> slots(chunk);
  for (size_t begin = 0; begin < files.size(); begin += chunk) {
    const size_t n = std::min(chunk, files.size() - begin);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4)
    for (size_t i = 0; i < n; ++i) {
      Slot& s = slots[i];
      const SourceFile& f = files[begin + i];
      if (!f.error.empty()) {  // an archive member that failed as it streamed by
        s.status = Status::Corruption(f.path + ": " + f.error);
        continue;
      }
      if (f.spill_offset >= 0) {  // an archive member, prepared as it streamed by
        s.image.change = f.change;
        s.status = spill.Read(f.spill_offset, f.spill_size, &s.image.jpeg);
        continue;
      }
      auto size = FileSize(f.path);
      if (!size.ok()) {
        s.status = size.status();
        continue;
      }
      if (*size > kMaxSourceFile) {
        s.status = Status::InvalidArgument(f.path + ": " + std::to_string(*size) +
                                           " bytes, over the 64 MiB limit");
        continue;
      }
      auto bytes = ReadFileToString(f.path, kMaxSourceFile);
      if (!bytes.ok()) {
        s.status = bytes.status();
        continue;
      }
      s.in_bytes = bytes->size();
      s.status = PrepareImage(*bytes, o.resize_short, o.quality, &s.image).WithContext(f.path);
    }
    for (size_t i = 0; i < n; ++i) {
      Slot& s = slots[i];
      const SourceFile& f = files[begin + i];
      summary->bytes_in += s.in_bytes;
      if (!s.status.ok()) {
        report(s.status.message() + " (skipped)");
        summary->bad++;
        if (o.strict) return Status::InvalidArgument("--strict: " + s.status.message());
        continue;
      }
      switch (s.image.change) {
        case PreparedImage::Change::kCmyk:
          summary->converted_cmyk++;
          break;
        case PreparedImage::Change::kPng:
          summary->converted_png++;
          break;
        case PreparedImage::Change::kResized:
          summary->reencoded++;
          break;
        case PreparedImage::Change::kNone:
          break;
      }
      SK_RETURN_IF_ERROR(writer->Add(s.image.jpeg, f.label, f.key));
      summary->packed++;
      s.image.jpeg.clear();
      s.image.jpeg.shrink_to_fit();
    }
    progress.Update(begin + n, summary->bytes_in);
  }
  if (summary->packed == 0) return Status::InvalidArgument(o.src + ": no image could be packed");
  Manifest m;
  m.record.kind = format::RecordKind::kJpeg;
  m.classes = classes;
  m.created_by = o.created_by;
  summary->bytes_out = writer->bytes_written();
  SK_RETURN_IF_ERROR(writer->Finish(m));
  progress.Finish();
  summary->seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  SK_ASSIGN_OR_RETURN(Manifest written, ReadManifest(o.out));
  summary->shards = written.shards.size();
  summary->bytes_out = written.bytes();
  return Status::OK();
}

}  // namespace shardkit
