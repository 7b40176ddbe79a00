// WebDataset tar shards through the archive reader, members grouped by key.
#include "ingest/webdataset_source.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "ingest/archive_reader.h"
#include "ingest/input_id.h"
#include "ingest/packer.h"  // kMaxSourceMember
#include "ingest/text.h"
#include "shard/manifest.h"  // Printable
#include "storage/file_io.h"

namespace shardkit {

namespace {

// ExpandShardPattern, saying in *too_many whether it failed for the count of
// paths (rather than the pattern's form): the enclosing level then names its
// own pattern in that error.
Result<std::vector<std::string>> Expand(const std::string& pattern, size_t max_paths,
                                        bool* too_many) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) return std::vector<std::string>{pattern};
  const size_t close = pattern.find('}', open);
  if (close == std::string::npos) {
    return Status::InvalidArgument(Printable(pattern) + ": a '{' without its '}'");
  }
  const std::string body = pattern.substr(open + 1, close - open - 1);
  std::vector<std::string> choices;
  const size_t dots = body.find("..");
  if (dots != std::string::npos) {
    const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    auto number = [](const std::string& s, uint64_t* v) {
      if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos)
        return false;
      *v = std::stoull(s);
      return true;
    };
    uint64_t lo = 0, hi = 0;
    if (!number(a, &lo) || !number(b, &hi) || hi < lo) {
      return Status::InvalidArgument(pattern + ": {" + body +
                                     "} is not a range of numbers {A..B} with A <= B");
    }
    if (hi - lo >= max_paths) {
      *too_many = true;
      return Status::InvalidArgument(pattern + ": more than " + std::to_string(max_paths) +
                                     " shards");
    }
    for (uint64_t v = lo; v <= hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < a.size()) digits.insert(0, a.size() - digits.size(), '0');
      choices.push_back(std::move(digits));
    }
  } else {
    choices = SplitList(body, ',');
  }
  const std::string too_many_paths =
      pattern + ": more than " + std::to_string(max_paths) + " shards";
  if (choices.size() > max_paths) {
    *too_many = true;
    return Status::InvalidArgument(too_many_paths);
  }
  auto tails = Expand(pattern.substr(close + 1), max_paths / choices.size(), too_many);
  if (!tails.ok()) return *too_many ? Status::InvalidArgument(too_many_paths) : tails.status();
  if (choices.size() * tails->size() > max_paths) {
    *too_many = true;
    return Status::InvalidArgument(too_many_paths);
  }
  std::vector<std::string> paths;
  const std::string head = pattern.substr(0, open);
  for (const auto& c : choices) {
    for (const auto& t : *tails) paths.push_back(head + c + t);
  }
  return paths;
}

}  // namespace

Result<std::vector<std::string>> ExpandShardPattern(const std::string& pattern, size_t max_paths) {
  bool too_many = false;
  return Expand(pattern, max_paths, &too_many);
}

namespace {

class WebDataset : public SampleSource {
 public:
  WebDataset(std::vector<std::string> patterns, std::vector<std::string> shards,
             std::vector<std::string> class_names)
      : patterns_(std::move(patterns)),
        shards_(std::move(shards)),
        class_names_(std::move(class_names)) {}
  std::string name() const override {
    return shards_.size() == 1 ? shards_[0]
                               : shards_[0] + " (+" + std::to_string(shards_.size() - 1) + ")";
  }
  RecordSpec spec() const override { return RecordSpec(); }
  // The shards as named (the Packer's plan covers the images' bytes).
  Result<std::string> Settings() const override {
    return SettingsText({{"command", "webdataset"},
                         {"class_names", JoinList(class_names_)},
                         {"shards", patterns_}});
  }

  Result<Listing> Scan(SampleSink* sink) override {
    ArchiveOptions options;
    options.max_member_bytes = kMaxSourceMember;
    options.class_tars = false;
    for (const auto& shard : shards_) {
      SK_RETURN_IF_ERROR(StreamArchive(shard, options, sink, [&](ArchiveMember&& m) -> Status {
        if (m.kind == ArchiveMember::Kind::kDir) return Status::OK();
        if (m.kind == ArchiveMember::Kind::kHardLink) {
          return sink->Skip(m.name, "a hard link (not followed in a WebDataset shard)",
                            Unusable::kLink);
        }
        // base_plus_ext: the key is the path up to the first dot of the file name.
        const size_t slash = m.path.rfind('/');
        const size_t dot = m.path.find('.', slash == std::string::npos ? 0 : slash + 1);
        const size_t base = slash == std::string::npos ? 0 : slash + 1;
        if (dot == std::string::npos || dot == base || dot + 1 == m.path.size()) {
          // No extension, or a hidden name ("._a.jpg"): no sample's (WebDataset skips it too).
          return Status::OK();
        }
        const std::string key = m.path.substr(0, dot);
        const std::string ext = m.path.substr(dot + 1);  // as stored: x.JPG and x.jpg are two
        if (key != key_) SK_RETURN_IF_ERROR(Emit(sink));
        key_ = key;
        where_ = shard + ":" + Printable(key);
        auto [it, fresh] = parts_.emplace(ext, std::string());
        if (!fresh && twice_.empty()) twice_ = Printable(key + "." + ext);
        it->second = std::move(m.bytes);
        return Status::OK();
      }));
      SK_RETURN_IF_ERROR(Emit(sink));
    }
    Listing listing;
    SK_ASSIGN_OR_RETURN(listing.classes, ClassesFor(max_label_, class_names_, name() + " .cls"));
    return listing;
  }

 private:
  // The group of members read so far as one sample.
  Status Emit(SampleSink* sink) {
    if (parts_.empty()) return Status::OK();
    std::map<std::string, std::string> parts = std::move(parts_);
    parts_.clear();
    const std::string key = std::move(key_), twice = std::move(twice_);
    key_.clear();
    twice_.clear();
    // A member given twice: WebDataset refuses the shard ("duplicate file
    // name"), so neither copy is the sample's; the key is not packed.
    if (!twice.empty()) {
      return sink->Skip(where_,
                        twice + " given twice in the shard (WebDataset refuses it): not packed",
                        Unusable::kDuplicate);
    }
    // The sample's image and class number, by extension in any case.
    std::vector<std::map<std::string, std::string>::iterator> images, labels;
    for (auto it = parts.begin(); it != parts.end(); ++it) {
      std::string lower = it->first;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "jpg" || lower == "jpeg" || lower == "png") images.push_back(it);
      if (lower == "cls") labels.push_back(it);
    }
    // Two images (or two class numbers) for one key: WebDataset hands its
    // user whichever the user's decoder names first, so the source does not
    // say which is the sample. Neither is packed; the key is named with
    // both members, as an unusable member (fatal under --strict).
    for (const auto* role : {&images, &labels}) {
      if (role->size() < 2) continue;
      std::string members;
      for (const auto& it : *role) members += (members.empty() ? "" : ", ") + key + "." + it->first;
      return sink->Skip(where_,
                        std::string("two ") + (role == &images ? "images" : "class numbers") +
                            " for one key (" + Printable(members) +
                            "): which is the sample? Neither is packed",
                        Unusable::kDuplicate);
    }
    if (images.empty()) {
      return sink->Skip(where_, "no image (.jpg, .jpeg or .png) in this sample",
                        Unusable::kBadImage);
    }
    if (labels.empty()) return sink->Skip(where_, "no .cls in this sample", Unusable::kNoLabel);
    std::string* image = &images.front()->second;
    std::string text = labels.front()->second;
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    size_t b = 0;
    while (b < text.size() && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    text = text.substr(b);
    if (text.empty() || text.size() > 9 ||
        text.find_first_not_of("0123456789") != std::string::npos) {
      return sink->Skip(where_,
                        ".cls holds '" + Printable(text.substr(0, 40)) + "', not a class number",
                        Unusable::kNoLabel);
    }
    Sample s;
    s.key = key;
    s.name = where_;
    s.label = std::stoi(text);
    max_label_ = std::max<int64_t>(max_label_, s.label);
    return sink->Add(std::move(s), std::move(*image));
  }

  std::vector<std::string> patterns_, shards_, class_names_;  // patterns_: as given
  std::string key_, where_;
  std::string twice_;  // the first member of this key given twice, if any
  std::map<std::string, std::string> parts_;
  int64_t max_label_ = 0;
};

}  // namespace

Result<std::unique_ptr<SampleSource>> OpenWebDataset(const std::vector<std::string>& patterns,
                                                     const std::vector<std::string>& class_names) {
  if (!ArchivesSupported()) {
    return Status::Unsupported("WebDataset shards are tars, and this build has no libarchive");
  }
  std::vector<std::string> shards;
  for (const auto& p : patterns) {
    SK_ASSIGN_OR_RETURN(auto paths, ExpandShardPattern(p));
    for (auto& path : paths) {
      SK_RETURN_IF_ERROR(CheckRegularFile(path));
      if (::access(path.c_str(), R_OK) != 0) {
        return Status::IOError(path + ": cannot open: " + std::strerror(errno));
      }
      shards.push_back(std::move(path));
    }
  }
  if (shards.empty()) return Status::InvalidArgument("no WebDataset shards given");
  return std::unique_ptr<SampleSource>(new WebDataset(patterns, std::move(shards), class_names));
}

}  // namespace shardkit
