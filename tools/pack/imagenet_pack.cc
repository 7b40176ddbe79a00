// ImageNet packing: list, shuffle by seed, prepare images in parallel (OpenMP),
// append in order to a DatasetWriter.
#include "tools/pack/imagenet_pack.h"

#include "base/openmp.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <sys/stat.h>

#include "base/random.h"
#include "image/codec.h"
#include "shard/shard.h"
#include "tools/common/progress.h"

namespace shardkit {
namespace {

constexpr uint64_t kMaxSourceFile = 64ull << 20;

struct SourceFile {
  std::string path, key;
  int32_t label;
};

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

std::string Stem(const std::string& name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// The files of one class folder, in sub-folders too (as torchvision's
// ImageFolder walks them), keyed "class/sub/file". Hidden entries are
// skipped; a directory reached twice (a symlink loop) is walked once.
Status ListClassFolder(const std::string& path, const std::string& key, int32_t label, int depth,
                       std::set<std::pair<uint64_t, uint64_t>>* visited,
                       std::vector<SourceFile>* files) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !visited->insert({st.st_dev, st.st_ino}).second)
    return Status::OK();
  if (depth > 64) return Status::InvalidArgument(path + ": folders nested more than 64 deep");
  SK_ASSIGN_OR_RETURN(auto entries, ListDir(path));
  for (const auto& e : entries) {
    if (e[0] == '.') continue;
    const std::string p = JoinPath(path, e);
    if (IsDirectory(p)) {
      SK_RETURN_IF_ERROR(ListClassFolder(p, key + "/" + e, label, depth + 1, visited, files));
    } else {
      files->push_back({p, key + "/" + e, label});
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
  if (!o.val_labels.empty()) {
    SK_ASSIGN_OR_RETURN(auto rows, ReadValLabels(o.val_labels));
    std::map<std::string, std::string> label_of(rows.begin(), rows.end());
    if (fixed_classes.empty()) {
      std::set<std::string> synsets;
      for (const auto& r : rows) synsets.insert(r.second);
      fixed_classes.assign(synsets.begin(), synsets.end());
    }
    *classes = fixed_classes;
    for (const auto& c : *classes) {
      if (!IsValidUtf8(c)) {
        return Status::InvalidArgument(o.val_labels + ": class '" + Printable(c) +
                                       "' is not valid UTF-8");
      }
    }
    std::map<std::string, int32_t> index;
    for (size_t i = 0; i < classes->size(); ++i) index[(*classes)[i]] = static_cast<int32_t>(i);
    SK_ASSIGN_OR_RETURN(auto names, ListDir(o.src));
    for (const auto& name : names) {
      const std::string path = JoinPath(o.src, name);
      if (IsDirectory(path) || name[0] == '.') continue;
      auto it = label_of.find(Stem(name));
      if (it == label_of.end()) {
        report(path + ": no label in " + o.val_labels + " (skipped)");
        summary->bad++;
        continue;
      }
      auto ci = index.find(it->second);
      if (ci == index.end()) {
        report(path + ": class " + it->second + " is not in the class list (skipped)");
        summary->bad++;
        continue;
      }
      files->push_back({path, name, ci->second});
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
  std::map<std::string, int32_t> index;
  for (size_t i = 0; i < classes->size(); ++i) index[(*classes)[i]] = static_cast<int32_t>(i);
  for (const auto& dir : dirs) {
    auto ci = index.find(dir);
    if (ci == index.end()) {
      report(JoinPath(o.src, dir) + ": class folder not in the class list (skipped)");
      summary->bad++;
      continue;
    }
    const size_t before = files->size();
    std::set<std::pair<uint64_t, uint64_t>> visited;
    SK_RETURN_IF_ERROR(ListClassFolder(JoinPath(o.src, dir), dir, ci->second, 0, &visited, files));
    const size_t n = files->size() - before;
    if (n == 0) {
      report(JoinPath(o.src, dir) + ": empty class folder (class " + std::to_string(ci->second) +
             " has no images)");
      summary->empty_classes++;
    }
  }
  return Status::OK();
}

}  // namespace

Status PackImageNet(const ImageNetPackOptions& o,
                    const std::function<void(const std::string&)>& report,
                    ImageNetPackSummary* summary) {
  *summary = ImageNetPackSummary();
  if (o.resize_short < 0) return Status::InvalidArgument("--resize-short must be positive");
  if (o.quality < 1 || o.quality > 100)
    return Status::InvalidArgument("--quality must be in 1..100");
  std::vector<std::string> classes;
  std::vector<SourceFile> files;
  SK_RETURN_IF_ERROR(ListSources(o, report, &classes, &files, summary));
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

  DatasetWriterOptions wo;
  wo.shard_size = o.shard_size;
  wo.overwrite = o.force;
  wo.shard.compression = CompressionMode::kStore;
  wo.shard.kind = format::RecordKind::kJpeg;
  SK_ASSIGN_OR_RETURN(auto writer, DatasetWriter::Create(o.out, wo));

  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  const size_t chunk = static_cast<size_t>(threads) * 64;
  Progress progress("pack imagenet", files.size(), "files");
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
  summary->seconds = progress.elapsed_seconds();
  SK_ASSIGN_OR_RETURN(Manifest written, ReadManifest(o.out));
  summary->shards = written.shards.size();
  summary->bytes_out = written.bytes();
  return Status::OK();
}

}  // namespace shardkit
