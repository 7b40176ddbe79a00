// One layout for folder and archive trees; the folder walk; the archive scan.
#include "ingest/tree_source.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/random.h"  // Mix64
#include "image/codec.h"  // SniffImageFormat
#include "ingest/archive_reader.h"
#include "ingest/devkit.h"
#include "ingest/input_id.h"
#include "ingest/packer.h"  // kMaxSourceMember
#include "ingest/text.h"
#include "shard/manifest.h"  // IsValidUtf8, Printable
#include "storage/env.h"
#include "storage/file_io.h"
#include "storage/output_file.h"

namespace shardkit {

Result<std::vector<std::pair<std::string, std::string>>> ReadValLabels(
    const std::string& csv_path) {
  SK_ASSIGN_OR_RETURN(std::string text, Env::Default()->ReadFile(csv_path, 1ull << 30));
  std::vector<std::pair<std::string, std::string>> rows;
  std::unordered_map<std::string, size_t> row_of;
  std::vector<std::pair<int, std::string>> lines;  // each row's line and synset
  bool first = true;
  for (auto& [line_no, line] : TextLines(text)) {
    const bool header = first && line.rfind("ImageId", 0) == 0;
    first = false;
    if (header) continue;
    const size_t comma = line.find(',');
    auto field = [](std::string f) {  // surrounding spaces and quotes off
      const size_t b = f.find_first_not_of(" \t\""), e = f.find_last_not_of(" \t\"");
      return b == std::string::npos ? std::string() : f.substr(b, e - b + 1);
    };
    std::string id = comma == std::string::npos ? "" : field(line.substr(0, comma));
    std::string pred = comma == std::string::npos ? "" : field(line.substr(comma + 1));
    std::string synset = pred.substr(0, pred.find(' '));
    const std::string where = csv_path + ":" + std::to_string(line_no);
    if (id.empty() || synset.empty()) {
      return Status::InvalidArgument(where + ": expected 'ImageId,PredictionString', got '" +
                                     Printable(line.substr(0, 80)) + "'");
    }
    auto [it, fresh] = row_of.emplace(id, rows.size());
    if (!fresh) {
      const auto& [first_line, first_synset] = lines[it->second];
      return Status::InvalidArgument(where + ": image " + Printable(id) + " is listed again (" +
                                     (first_synset == synset ? "as before" : "as " + first_synset) +
                                     ", on line " + std::to_string(first_line) + ")");
    }
    lines.emplace_back(line_no, synset);
    rows.emplace_back(std::move(id), std::move(synset));
  }
  if (rows.empty()) return Status::InvalidArgument(csv_path + ": no labels");
  return rows;
}

namespace {

// The order a walk of sorted folder listings visits paths in: component by
// component ("sub/x" before "sub.jpg"), i.e. bytes with '/' below all others.
bool WalkOrder(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned ca = a[i] == '/' ? 0u : static_cast<unsigned char>(a[i]);
    const unsigned cb = b[i] == '/' ? 0u : static_cast<unsigned char>(b[i]);
    if (ca != cb) return ca < cb;
  }
  return a.size() < b.size();
}

// A folder's file is an image by its first bytes (a JPEG or PNG, as the
// Packer tells one), whatever its name.
Result<bool> IsImageFile(const std::string& path) {
  SK_RETURN_IF_ERROR(CheckRegularFile(path));
  SK_ASSIGN_OR_RETURN(auto file, Env::Default()->OpenForReads(path));
  uint8_t head[8] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(head), file->size()));
  SK_RETURN_IF_ERROR(file->Read(0, n, head));
  return SniffImageFormat(head, n) != ImageFormat::kUnknown;
}

// A folder's file as Sample::stamp: its size, modification and change
// times and inode, mixed (0 if it cannot be stat'ed: Read reports why).
uint64_t FileStamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  uint64_t h = Mix64(static_cast<uint64_t>(st.st_size));
  for (int64_t v : {int64_t{st.st_mtim.tv_sec}, int64_t{st.st_mtim.tv_nsec},
                    int64_t{st.st_ctim.tv_sec}, int64_t{st.st_ctim.tv_nsec},
                    static_cast<int64_t>(st.st_ino), static_cast<int64_t>(st.st_dev)}) {
    h = Mix64(h ^ static_cast<uint64_t>(v));
  }
  return h | 1;  // never 0, "unknown"
}

bool HiddenName(const std::string& c) { return c.empty() || c[0] == '.' || c == "__MACOSX"; }

bool Hidden(const std::string& path) {
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (HiddenName(path.substr(i, j - i))) return true;
    i = j + 1;
  }
  return false;
}

std::string Stem(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// A flat val folder's labels: the class list (the labels' synsets sorted, or
// a fixed list) and each file's label by its stem.
struct ValLabels {
  std::string source;  // the CSV or devkit, for messages
  std::unordered_map<std::string, std::string> synset_of;
  std::vector<std::string> classes;
  std::map<std::string, int32_t> index;

  static Result<ValLabels> Make(const TreeOptions& o) {
    if (!o.val_labels.empty() && !o.devkit.empty()) {
      return Status::InvalidArgument("give --val-labels or --devkit, not both");
    }
    ValLabels v;
    v.source = o.devkit.empty() ? o.val_labels : o.devkit;
    std::vector<std::pair<std::string, std::string>> rows;
    if (!o.devkit.empty()) {
      SK_ASSIGN_OR_RETURN(rows, ReadDevkitValLabels(o.devkit));
    } else {
      SK_ASSIGN_OR_RETURN(rows, ReadValLabels(o.val_labels));
    }
    v.synset_of.insert(rows.begin(), rows.end());
    v.classes = o.classes;
    if (v.classes.empty()) {
      std::set<std::string> synsets;
      for (const auto& r : rows) synsets.insert(r.second);
      v.classes.assign(synsets.begin(), synsets.end());
    }
    for (const auto& c : v.classes) {
      if (!IsValidUtf8(c)) {
        return Status::InvalidArgument(v.source + ": class '" + Printable(c) +
                                       "' is not valid UTF-8");
      }
    }
    for (size_t i = 0; i < v.classes.size(); ++i) v.index[v.classes[i]] = static_cast<int32_t>(i);
    return v;
  }
};

// A file of the tree, as a walk or an archive found it.
struct TreeFile {
  std::string path;  // clean, relative to SRC's top
  std::string name;  // for messages
  int64_t held = -1;
  uint64_t ref = 0;
  uint64_t stamp = 0;    // a folder's file: Sample::stamp
  bool removed = false;  // replaced by a folder of its path
  bool image = false;    // an archive member's: a JPEG or PNG by its first bytes
};

// Whether a file of the tree is an image, by its content (as the Packer
// tells one): an archive's members are known as they stream by, a folder's
// files are read for it.
using IsImageFn = std::function<Result<bool>(const TreeFile&)>;

// The layout both kinds of tree share: files and folders in, a Listing out.
class TreeLayout {
 public:
  TreeLayout(const TreeOptions& o, std::string where, IsImageFn is_image)
      : o_(o), where_(std::move(where)), is_image_(std::move(is_image)) {}

  // A folder; a file of that path is replaced by it, as tar -x replaces it.
  Status AddDir(const std::string& path, SampleSink* sink) {
    if (Hidden(path)) return Status::OK();
    SK_RETURN_IF_ERROR(CheckAncestors(path, path));
    auto it = index_.find(path);
    if (it != index_.end()) {
      SK_RETURN_IF_ERROR(sink->Skip(files_[it->second].name,
                                    "replaced by a folder of that name later in the archive, as "
                                    "tar -x replaces it",
                                    Unusable::kDuplicate));
      files_[it->second].removed = true;
      index_.erase(it);
    }
    dirs_.insert(path);
    return Status::OK();
  }
  // The same path again replaces the earlier file (tar -x keeps the last).
  Status AddFile(TreeFile f, SampleSink* sink) {
    if (Hidden(f.path)) return Status::OK();
    SK_RETURN_IF_ERROR(CheckAncestors(f.path, f.name));
    if (dirs_.count(f.path) > 0 || implied_.count(f.path) > 0) {
      return Status::InvalidArgument(f.name +
                                     ": a file where the archive has a folder (tar -x fails here "
                                     "too)");
    }
    auto [it, fresh] = index_.emplace(f.path, files_.size());
    if (!fresh) {
      SK_RETURN_IF_ERROR(sink->Skip(files_[it->second].name,
                                    "given twice in the archive; the later one is kept, as "
                                    "tar -x keeps it",
                                    Unusable::kDuplicate));
      files_[it->second] = std::move(f);
      return Status::OK();
    }
    files_.push_back(std::move(f));
    return Status::OK();
  }
  const TreeFile* Find(const std::string& path) const {
    auto it = index_.find(path);
    return it == index_.end() ? nullptr : &files_[it->second];
  }
  Result<Listing> Finish(SampleSink* sink);

 private:
  // Below `root` (components joined with '/'; "" for the top): the folders
  // one level down, and the files directly in it.
  void Level(const std::string& root, std::set<std::string>* folders,
             std::vector<const TreeFile*>* files) const;
  // Whether any of `files` is an image; one that cannot be read counts as
  // one (it stays in view, and is named when it is not packed).
  bool AnyImage(const std::vector<const TreeFile*>& files) const {
    for (const TreeFile* f : files) {
      Result<bool> image = is_image_(*f);
      if (!image.ok() || *image) return true;
    }
    return false;
  }
  Result<std::string> FindRoot() const;
  Status FlatVal(const std::vector<std::pair<std::string, const TreeFile*>>& below,
                 Listing* listing, SampleSink* sink) const;
  Status ClassFolders(const std::string& root, const std::string& shown_root,
                      const std::vector<std::pair<std::string, const TreeFile*>>& below,
                      Listing* listing, SampleSink* sink) const;
  Status SkipOrNote(const std::vector<const TreeFile*>& files, const std::string& shown_root,
                    const std::string& where, SampleSink* sink) const;

  // Every folder above `path` must be one: a file there is an archive no
  // tar can extract ("x" then "x/y.jpg"). Records the folders as implied.
  Status CheckAncestors(const std::string& path, const std::string& name) {
    for (size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      const std::string up = path.substr(0, slash);
      if (index_.count(up) > 0) {
        return Status::InvalidArgument(name + ": below " + Printable(up) +
                                       ", which is a file (tar -x fails here too)");
      }
      implied_.insert(up);
    }
    return Status::OK();
  }

  const TreeOptions& o_;
  const std::string where_;
  const IsImageFn is_image_;
  std::vector<TreeFile> files_;
  std::unordered_set<std::string> implied_;  // folders above files
  std::unordered_map<std::string, size_t> index_;
  std::set<std::string> dirs_;
};

void TreeLayout::Level(const std::string& root, std::set<std::string>* folders,
                       std::vector<const TreeFile*>* files) const {
  const std::string prefix = root.empty() ? "" : root + "/";
  auto visit = [&](const std::string& path, const TreeFile* file) {
    if (path.compare(0, prefix.size(), prefix) != 0 || path.size() == prefix.size()) return;
    const size_t slash = path.find('/', prefix.size());
    if (slash == std::string::npos) {
      if (file != nullptr) {
        files->push_back(file);
      } else {
        folders->insert(path.substr(prefix.size()));
      }
    } else {
      folders->insert(path.substr(prefix.size(), slash - prefix.size()));
    }
  };
  files->clear();
  for (const auto& f : files_) {
    if (!f.removed) visit(f.path, &f);
  }
  for (const auto& d : dirs_) visit(d, nullptr);
}

Result<std::string> TreeLayout::FindRoot() const {
  const bool flat = !o_.val_labels.empty() || !o_.devkit.empty();
  if (!o_.root.empty()) {
    std::string root;
    for (const auto& c : SplitList(o_.root, '/')) {
      if (!c.empty() && c != ".") root += (root.empty() ? "" : "/") + c;
    }
    std::set<std::string> folders;
    std::vector<const TreeFile*> files;
    Level(root, &folders, &files);
    if (!root.empty() && folders.empty() && files.empty()) {
      return Status::NotFound(where_ + ": no folder " + Printable(o_.root) + " (--root) in it");
    }
    return root;
  }
  // Down through wrappers (see tree_source.h): a folder with one folder and
  // no image, whose one folder has folders and no image of its own (a flat
  // val folder's: whatever it holds). Descending then leaves no image
  // beside the classes it makes; non-image files (a README) do not count.
  std::string root;
  for (int depth = 0; depth < 64; ++depth) {
    std::set<std::string> folders, below;
    std::vector<const TreeFile*> files, below_files;
    Level(root, &folders, &files);
    if (folders.size() != 1 || AnyImage(files)) break;
    const std::string next = (root.empty() ? "" : root + "/") + *folders.begin();
    Level(next, &below, &below_files);
    if (!flat && (below.empty() || AnyImage(below_files))) break;  // the one folder is a class
    root = next;
  }
  return root;
}

// A listed file as a sample.
void AddSample(const std::string& rel, const TreeFile* f, int32_t label, Listing* listing) {
  Sample s;
  s.key = rel;
  s.name = f->name;
  s.label = label;
  s.held = f->held;
  s.ref = f->ref;
  s.stamp = f->stamp;
  listing->samples.push_back(std::move(s));
}

Result<Listing> TreeLayout::Finish(SampleSink* sink) {
  const bool flat = !o_.val_labels.empty() || !o_.devkit.empty();
  SK_ASSIGN_OR_RETURN(const std::string root, FindRoot());
  const std::string prefix = root.empty() ? "" : root + "/";
  const std::string shown_root = where_ + (root.empty() ? "" : "/" + root);
  Listing listing;
  uint64_t outside = 0;
  std::vector<const TreeFile*> beside;  // under the root where the layout has no place
  // Each file: its path below the root, or why it is not a sample.
  std::vector<std::pair<std::string, const TreeFile*>> below;
  for (const auto& f : files_) {
    if (f.removed) continue;
    if (f.path.compare(0, prefix.size(), prefix) != 0) {
      ++outside;
      continue;
    }
    std::string rel = f.path.substr(prefix.size());
    const bool direct = rel.find('/') == std::string::npos;
    if (flat ? !direct : direct) {
      beside.push_back(&f);
      continue;
    }
    below.emplace_back(std::move(rel), &f);
  }
  std::sort(below.begin(), below.end(),
            [](const auto& a, const auto& b) { return WalkOrder(a.first, b.first); });
  if (flat) {
    SK_RETURN_IF_ERROR(FlatVal(below, &listing, sink));
    SK_RETURN_IF_ERROR(
        SkipOrNote(beside, shown_root, "in sub-folders of the flat val folder", sink));
  } else {
    SK_RETURN_IF_ERROR(ClassFolders(root, shown_root, below, &listing, sink));
    SK_RETURN_IF_ERROR(SkipOrNote(beside, shown_root, "beside the class folders", sink));
  }
  if (outside > 0) {
    sink->Note(where_ + ": " + std::to_string(outside) + " file(s) outside the root " +
               Printable(root) + (o_.root.empty() ? "" : " (--root)") + " (not packed)");
  }
  if (listing.samples.empty()) {
    return Status::InvalidArgument(shown_root + ": no image files found");
  }
  return listing;
}

// A flat val folder: each file labelled by its stem in the CSV or devkit.
Status TreeLayout::FlatVal(const std::vector<std::pair<std::string, const TreeFile*>>& below,
                           Listing* listing, SampleSink* sink) const {
  SK_ASSIGN_OR_RETURN(ValLabels val, ValLabels::Make(o_));
  listing->classes = val.classes;
  std::unordered_set<std::string> found;  // the labels' stems that name an image here
  for (const auto& [rel, f] : below) {
    auto it = val.synset_of.find(Stem(rel));
    if (it == val.synset_of.end()) {
      SK_RETURN_IF_ERROR(sink->Skip(f->name, "no label in " + val.source, Unusable::kNoLabel));
      continue;
    }
    found.insert(it->first);
    auto ci = val.index.find(it->second);
    if (ci == val.index.end()) {
      SK_RETURN_IF_ERROR(sink->Skip(f->name,
                                    "class " + Printable(it->second) + " is not in the class list",
                                    Unusable::kNoLabel));
      continue;
    }
    AddSample(rel, f, ci->second, listing);
  }
  // Labels for images the folder does not hold: a subset is fine, but said
  // (a folder cut short by a failed copy looks the same).
  if (found.size() < val.synset_of.size()) {
    std::string first;
    for (const auto& [stem, synset] : val.synset_of) {
      if (found.count(stem) == 0 && (first.empty() || stem < first)) first = stem;
    }
    sink->Note(val.source + ": " + std::to_string(val.synset_of.size() - found.size()) +
               " of its " + std::to_string(val.synset_of.size()) +
               " labelled images are not in the folder (the first: " + Printable(first) + ")");
  }
  return Status::OK();
}

// A class-folder tree: each folder at the root is a class (or the fixed
// list's), each file below one labelled by it.
Status TreeLayout::ClassFolders(const std::string& root, const std::string& shown_root,
                                const std::vector<std::pair<std::string, const TreeFile*>>& below,
                                Listing* listing, SampleSink* sink) const {
  std::set<std::string> folders;
  std::vector<const TreeFile*> unused;
  Level(root, &folders, &unused);
  if (folders.empty()) {
    return Status::InvalidArgument(
        shown_root +
        ": no class folders (for a flat validation folder pass --val-labels CSV or --devkit; "
        "for a tree deeper in SRC, --root)");
  }
  std::map<std::string, int32_t> index;
  std::vector<std::string> classes = o_.classes;
  for (const auto& dir : folders) {
    if (!IsValidUtf8(dir)) {
      SK_RETURN_IF_ERROR(sink->Skip(shown_root + "/" + Printable(dir),
                                    "a class folder name that is not valid UTF-8 (class names "
                                    "are UTF-8 text; rename the folder)",
                                    Unusable::kBadName));
      continue;
    }
    if (o_.classes.empty()) classes.push_back(dir);
  }
  for (size_t i = 0; i < classes.size(); ++i) index[classes[i]] = static_cast<int32_t>(i);
  std::map<std::string, uint64_t> count;
  for (const auto& [rel, f] : below) {
    const std::string cls = rel.substr(0, rel.find('/'));
    auto ci = index.find(cls);
    if (ci == index.end()) continue;  // a folder skipped above, or not in the class list
    count[cls]++;
    AddSample(rel, f, ci->second, listing);
  }
  for (const auto& dir : folders) {
    if (!IsValidUtf8(dir)) continue;
    if (index.count(dir) == 0) {
      SK_RETURN_IF_ERROR(sink->Skip(shown_root + "/" + dir, "a class folder not in the class list",
                                    Unusable::kOutsideList));
    } else if (count[dir] == 0) {
      SK_RETURN_IF_ERROR(sink->Skip(
          shown_root + "/" + dir,
          "an empty class folder (class " + std::to_string(index[dir]) + " has no images)",
          Unusable::kEmptyClass));
    }
  }
  // One class with folders of its own: as ImageFolder makes it, and said,
  // for the tree whose classes are those folders (a wrapper with an image
  // beside its classes, which the root rule does not descend through).
  if (folders.size() == 1 && o_.root.empty()) {
    const std::string only = (root.empty() ? "" : root + "/") + *folders.begin();
    std::set<std::string> sub;
    Level(only, &sub, &unused);
    if (!sub.empty()) {
      sink->Note(shown_root + ": one class, " + Printable(*folders.begin()) + ", with " +
                 std::to_string(sub.size()) +
                 " folder(s) in it (as ImageFolder makes it); if those are the classes, pass "
                 "--root " +
                 Printable(only));
    }
  }
  listing->classes = std::move(classes);
  return Status::OK();
}

// Files under the root where the layout has no place for them: an image
// among them is an unusable member (named, counted, fatal under --strict);
// the others (a README, a synset list) are noted together and not packed,
// as ImageFolder ignores them.
Status TreeLayout::SkipOrNote(const std::vector<const TreeFile*>& files,
                              const std::string& shown_root, const std::string& where,
                              SampleSink* sink) const {
  uint64_t others = 0;
  for (const TreeFile* f : files) {
    Result<bool> image = is_image_(*f);
    if (!image.ok()) {
      SK_RETURN_IF_ERROR(sink->Skip(f->name,
                                    "a file " + where +
                                        " that cannot be read to tell whether "
                                        "it is an image: " +
                                        image.status().message(),
                                    Unusable::kOutsideLayout));
    } else if (*image) {
      SK_RETURN_IF_ERROR(sink->Skip(f->name, "an image " + where + ", in no class (not packed)",
                                    Unusable::kOutsideLayout));
    } else {
      ++others;
    }
  }
  if (others > 0) {
    sink->Note(shown_root + ": " + std::to_string(others) + " file(s) " + where +
               " that are not images (not packed)");
  }
  return Status::OK();
}

// A tree's settings: SRC by its absolute path (the tasks of an array agree
// whatever their working directory; the Packer's plan covers the images'
// bytes), and the options that choose its samples and labels. Image trees
// take no class names ("class_names", as every pack command's settings).
Result<std::string> TreeSettings(const TreeOptions& o) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(o.src, ec);
  return SettingsText({{"command", "imagenet"},
                       {"class_names", ""},
                       {"src", ec ? o.src : abs.lexically_normal().string()},
                       {"val_labels", o.val_labels},
                       {"devkit", o.devkit},
                       {"root", o.root},
                       {"classes", o.classes}});
}

// ---- a folder

class FolderTree : public SampleSource {
 public:
  explicit FolderTree(const TreeOptions& o) : o_(o) {}
  std::string name() const override { return o_.src; }
  RecordSpec spec() const override { return RecordSpec(); }
  Result<std::string> Settings() const override { return TreeSettings(o_); }
  Result<Listing> Scan(SampleSink* sink) override {
    TreeLayout layout(o_, o_.src, [this](const TreeFile& f) { return IsImageFile(paths_[f.ref]); });
    std::set<std::pair<uint64_t, uint64_t>> visited;
    SK_RETURN_IF_ERROR(Walk(o_.src, "", 0, &visited, &layout, sink));
    return layout.Finish(sink);
  }
  // OUT inside the tree (or the tree itself) would pack the tool's own output.
  Status CheckOutput(const std::string& out) const override {
    if (CheckOutputOutsideInputs(out, {o_.src}).ok()) return Status::OK();
    return Status::InvalidArgument(out + ": OUT is inside SRC " + o_.src +
                                   " (the pack would read its own output); choose another OUT");
  }
  Status Read(const Sample& s, uint64_t max_bytes, std::string* bytes) const override {
    const std::string& path = paths_[s.ref];
    SK_ASSIGN_OR_RETURN(const uint64_t size, FileSize(path));
    if (size > max_bytes) {
      return Status::At(Status::Code::kInvalidArgument, {path, ""},
                        std::to_string(size) + " bytes, over the " +
                            std::to_string(max_bytes >> 20) + " MiB limit");
    }
    SK_ASSIGN_OR_RETURN(*bytes, Env::Default()->ReadFile(path, max_bytes));
    return Status::OK();
  }

 private:
  // Symbolic links are unusable members, as in an archive, unless
  // --follow-links; then each directory is visited once, by (device, inode):
  // a link back up ("sub -> ..", a class folder linking to the root) or to
  // another folder of the tree is noted and not followed, so no image is
  // packed twice.
  Status Walk(const std::string& dir, const std::string& rel, int depth,
              std::set<std::pair<uint64_t, uint64_t>>* visited, TreeLayout* layout,
              SampleSink* sink) {
    SK_RETURN_IF_ERROR(sink->Interrupted());
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return Status::OK();
    if (!visited->insert({st.st_dev, st.st_ino}).second) {
      sink->Note(dir +
                 ": a directory already visited (a symbolic link loop, or a link to another "
                 "folder of the tree); not followed");
      return Status::OK();
    }
    if (depth > 64) return Status::InvalidArgument(dir + ": folders nested more than 64 deep");
    if (!rel.empty()) SK_RETURN_IF_ERROR(layout->AddDir(rel, sink));
    SK_ASSIGN_OR_RETURN(auto entries, Env::Default()->ListDir(dir));
    for (const auto& e : entries) {
      if (HiddenName(e)) continue;
      const std::string path = JoinPath(dir, e), child = rel.empty() ? e : rel + "/" + e;
      struct stat lst;
      if (!o_.follow_links && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
        // As in an archive: a link is not followed (its extraction would
        // not be the tree's), unless the user trusts the tree's links.
        SK_RETURN_IF_ERROR(sink->Skip(path,
                                      "a symbolic link, not followed (--follow-links follows "
                                      "the links of a folder)",
                                      Unusable::kLink));
        continue;
      }
      if (IsDirectory(path)) {
        SK_RETURN_IF_ERROR(Walk(path, child, depth + 1, visited, layout, sink));
        continue;
      }
      TreeFile f;
      f.path = child;
      f.name = path;
      f.ref = paths_.size();
      f.stamp = FileStamp(path);
      paths_.push_back(path);
      SK_RETURN_IF_ERROR(layout->AddFile(std::move(f), sink));
    }
    return Status::OK();
  }

  TreeOptions o_;
  std::vector<std::string> paths_;
};

// ---- an archive

class ArchiveTree : public SampleSource {
 public:
  explicit ArchiveTree(const TreeOptions& o) : o_(o) {}
  std::string name() const override { return o_.src; }
  RecordSpec spec() const override { return RecordSpec(); }
  Result<std::string> Settings() const override { return TreeSettings(o_); }
  Result<Listing> Scan(SampleSink* sink) override {
    TreeLayout layout(o_, o_.src, [](const TreeFile& f) -> Result<bool> { return f.image; });
    ArchiveOptions options;
    options.max_member_bytes = kMaxSourceMember;
    SK_RETURN_IF_ERROR(StreamArchive(o_.src, options, sink, [&](ArchiveMember&& m) -> Status {
      TreeFile f;
      f.path = m.path;
      f.name = m.name;
      switch (m.kind) {
        case ArchiveMember::Kind::kDir:
          return layout.AddDir(m.path, sink);
        case ArchiveMember::Kind::kHardLink: {
          const TreeFile* target = layout.Find(m.target);
          if (target == nullptr) {
            return sink->Skip(
                m.name,
                "a hard link to " + Printable(m.target) + ", not a file before it in the archive",
                Unusable::kLink);
          }
          f.held = target->held;
          f.image = target->image;
          return layout.AddFile(std::move(f), sink);
        }
        case ArchiveMember::Kind::kFile:
          break;
      }
      f.image = SniffImageFormat(reinterpret_cast<const uint8_t*>(m.bytes.data()),
                                 m.bytes.size()) != ImageFormat::kUnknown;
      SK_ASSIGN_OR_RETURN(f.held, sink->Hold(m.name, std::move(m.bytes)));
      return layout.AddFile(std::move(f), sink);
    }));
    return layout.Finish(sink);
  }

 private:
  TreeOptions o_;
};

}  // namespace

Result<std::unique_ptr<SampleSource>> OpenTree(const TreeOptions& o) {
  struct stat st;
  if (::stat(o.src.c_str(), &st) != 0) {
    return Status::NotFound(o.src + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return std::unique_ptr<SampleSource>(new FolderTree(o));
  SK_RETURN_IF_ERROR(CheckRegularFile(o.src));  // a FIFO or device: refused before it is opened
  if (!ArchivesSupported()) {
    return Status::Unsupported(o.src + ": an archive, but this build has no libarchive");
  }
  if (::access(o.src.c_str(), R_OK) != 0) {
    return Status::IOError(o.src + ": cannot open: " + std::strerror(errno));
  }
  return std::unique_ptr<SampleSource>(new ArchiveTree(o));
}

}  // namespace shardkit
