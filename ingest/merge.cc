// MergeParts: parts read and checked against each other, then their shards
// taken into one DatasetWriter, which publishes them and the manifest.
#include "ingest/merge.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shard/dataset_writer.h"
#include "shard/manifest.h"
#include "storage/file_io.h"

namespace shardkit {
namespace {

using nlohmann::json;

struct Part {
  std::string dir;
  Manifest m;
};

std::string PartName(const Part& p) {
  return "part " + std::to_string(p.m.part.index) + " of " + std::to_string(p.m.part.count);
}

json ParseObject(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

std::string Shape(const RecordFormat& f) {
  std::string s = RecordKindName(f.kind);
  for (size_t i = 0; i < f.shape.size(); ++i)
    s += (i == 0 ? " " : "x") + std::to_string(f.shape[i]);
  return s;
}

// What a part's settings differ in from the reference part's, as "key: A
// here, B in REF" (from the settings created_by carries), else the digests.
std::string SettingsDifference(const Part& p, const Part& ref) {
  const json a = ParseObject(p.m.created_by).value("settings", json::object());
  const json b = ParseObject(ref.m.created_by).value("settings", json::object());
  std::string diff;
  int shown = 0;
  auto add = [&](const std::string& key) {
    if (a.value(key, json()) == b.value(key, json()) || shown++ >= 3) return;
    diff += (diff.empty() ? "" : "; ") + key + ": " + a.value(key, json()).dump() + " here, " +
            b.value(key, json()).dump() + " in " + ref.dir;
  };
  for (const auto& [key, value] : a.items()) add(key);
  for (const auto& [key, value] : b.items())
    if (!a.contains(key)) add(key);
  if (!diff.empty()) return diff;
  return "settings digest " + p.m.part.settings + ", " + ref.dir + "'s is " + ref.m.part.settings;
}

// Made as the same dataset as `ref`: count, settings, record format,
// classes, size of the whole.
Status CheckSameDataset(const Part& p, const Part& ref) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(p.dir + ": " + why + " (parts made with other settings)");
  };
  if (p.m.part.count != ref.m.part.count) {
    return Status::InvalidArgument(p.dir + ": is " + PartName(p) + ", but " + ref.dir + " is " +
                                   PartName(ref) + " (parts of different splits)");
  }
  if (p.m.part.settings != ref.m.part.settings) {
    return Status::InvalidArgument(p.dir + ": made with other settings than " + ref.dir + " (" +
                                   SettingsDifference(p, ref) + ")");
  }
  if (p.m.record.kind != ref.m.record.kind || p.m.record.shape != ref.m.record.shape) {
    return bad("records are " + Shape(p.m.record) + ", " + ref.dir + "'s are " +
               Shape(ref.m.record));
  }
  if (p.m.classes != ref.m.classes) {
    return bad(std::to_string(p.m.classes.size()) + " classes, other than " + ref.dir + "'s " +
               std::to_string(ref.m.classes.size()));
  }
  if (p.m.part.total_records != ref.m.part.total_records) {
    return bad("a dataset of " + std::to_string(p.m.part.total_records) + " records, " + ref.dir +
               "'s of " + std::to_string(ref.m.part.total_records));
  }
  return Status::OK();
}

// Parts sorted by index: each index once, none missing.
Status CheckEveryPartOnce(const std::vector<Part>& parts) {
  const uint32_t count = parts[0].m.part.count;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].m.part.index == parts[i - 1].m.part.index) {
      return Status::InvalidArgument(parts[i].dir + ": " + PartName(parts[i]) + ", and so is " +
                                     parts[i - 1].dir + " (the parts overlap)");
    }
  }
  std::string missing;
  uint32_t n = 0;
  size_t next = 0;
  for (uint32_t index = 0; index < count; ++index) {
    if (next < parts.size() && parts[next].m.part.index == index) {
      ++next;
      continue;
    }
    if (n++ < 10) missing += (missing.empty() ? "" : ", ") + std::to_string(index);
  }
  if (n == 0) return Status::OK();
  std::string given;
  for (size_t i = 0; i < parts.size() && i < 4; ++i) {
    given +=
        (i == 0 ? "" : ", ") + parts[i].dir + " (" + std::to_string(parts[i].m.part.index) + ")";
  }
  return Status::InvalidArgument("missing part" + std::string(n > 1 ? "s " : " ") + missing +
                                 (n > 10 ? ", ..." : "") + " of " + std::to_string(count) +
                                 "; given: " + given + (parts.size() > 4 ? ", ..." : ""));
}

// Records and shards follow on from part to part, shards named as the
// whole names them, and together they are the whole.
Status CheckContiguous(const std::vector<Part>& parts) {
  uint64_t record = 0, shard = 0;
  const Part* prev = nullptr;
  for (const Part& p : parts) {
    const PartInfo& info = p.m.part;
    auto where = [&](const char* what, uint64_t at, uint64_t expected) {
      const std::string range =
          std::string(what) + " " + std::to_string(expected) + ".." + std::to_string(at);
      return Status::InvalidArgument(
          p.dir + ": " + PartName(p) + " starts at " + what + " " + std::to_string(at) + ", but " +
          (prev == nullptr ? std::string("the dataset starts at 0")
                           : "the parts before it end at " + std::to_string(expected)) +
          (at < expected ? " (the parts overlap)" : " (" + range + " are in no part)"));
    };
    if (info.first_record != record) return where("record", info.first_record, record);
    if (info.first_shard != shard) return where("shard", info.first_shard, shard);
    for (size_t k = 0; k < p.m.shards.size(); ++k) {
      const std::string name = ShardFileName(info.first_shard + k);
      if (p.m.shards[k].file != name) {
        return Status::InvalidArgument(p.dir + ": its shard " + std::to_string(k) + " is " +
                                       p.m.shards[k].file + "; the whole dataset names it " + name);
      }
    }
    record += p.m.records();
    shard += p.m.shards.size();
    prev = &p;
  }
  const Part& last = parts.back();
  if (record != last.m.part.total_records) {
    return Status::InvalidArgument(last.dir + ": the parts hold " + std::to_string(record) +
                                   " records, but each says the dataset has " +
                                   std::to_string(last.m.part.total_records));
  }
  return Status::OK();
}

// Every shard there, a regular file of the size part.json says: a part that
// lost a shard is refused before anything is written.
Status CheckShardFiles(const Part& p) {
  for (const ShardInfo& s : p.m.shards) {
    const std::string path = JoinPath(p.dir, s.file);
    if (!Env::Default()->FileExists(path)) {
      return Status::NotFound(path + ": missing (listed in " + kPartManifestName +
                              "; the part is damaged, prepare it again)");
    }
    SK_RETURN_IF_ERROR(CheckRegularFile(path));
    SK_ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
    if (size != s.bytes) {
      return Status::Corruption(path + ": " + std::to_string(size) + " bytes, " +
                                kPartManifestName + " says " + std::to_string(s.bytes) +
                                " (the part is damaged, prepare it again)");
    }
  }
  return Status::OK();
}

// OUT must be neither a part (publishing there would remove the part's
// shards) nor inside one (the part would change): OUT and each folder above
// it, compared with every part by device and inode, so a symlink or a bind
// mount does not hide one.
Status CheckOutIsNoPart(const std::string& out, const std::vector<Part>& parts) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::weakly_canonical(out, ec);
  if (ec) return Status::OK();  // not resolvable: the writer will say why
  for (bool top = true; !dir.empty(); top = false) {
    struct stat d;
    if (::stat(dir.c_str(), &d) == 0) {
      for (const Part& p : parts) {
        struct stat s;
        if (::stat(p.dir.c_str(), &s) != 0 || s.st_dev != d.st_dev || s.st_ino != d.st_ino)
          continue;
        return Status::InvalidArgument(out + (top ? " is the part " : " is inside the part ") +
                                       p.dir +
                                       ": merge into another directory (parts are only read, "
                                       "never changed)");
      }
    }
    if (dir == dir.root_path()) break;
    dir = dir.parent_path();
  }
  return Status::OK();
}

Result<std::vector<Part>> ReadParts(const MergeOptions& o) {
  if (o.parts.empty()) return Status::InvalidArgument("no parts to merge");
  std::vector<Part> parts;
  for (const std::string& dir : o.parts) {
    if (!IsDirectory(dir)) {
      return Status::NotFound(
          dir + ": " + (Env::Default()->FileExists(dir) ? "not a directory" : "no such directory") +
          " (a part is the directory --part wrote)");
    }
    SK_ASSIGN_OR_RETURN(Manifest m, ReadPartManifest(dir));
    parts.push_back({dir, std::move(m)});
  }
  std::stable_sort(parts.begin(), parts.end(),
                   [](const Part& a, const Part& b) { return a.m.part.index < b.m.part.index; });
  for (const Part& p : parts) SK_RETURN_IF_ERROR(CheckSameDataset(p, parts[0]));
  SK_RETURN_IF_ERROR(CheckEveryPartOnce(parts));
  SK_RETURN_IF_ERROR(CheckContiguous(parts));
  for (const Part& p : parts) SK_RETURN_IF_ERROR(CheckShardFiles(p));
  SK_RETURN_IF_ERROR(CheckOutIsNoPart(o.out, parts));
  return parts;
}

// Part 0's created_by, and who merged how many parts.
std::string MergedCreatedBy(const Part& first, const MergeOptions& o, size_t parts) {
  json j = ParseObject(first.m.created_by);
  json merged = ParseObject(o.merged_by);
  merged["parts"] = parts;
  merged["note"] = "merged from " + std::to_string(parts) +
                   " parts; created_by is part 0's, the bytes are a one-process run's";
  j["merged"] = merged;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

Status MergeParts(const MergeOptions& o, const MergeProgress& progress, MergeSummary* sum) {
  *sum = MergeSummary();
  const auto start = std::chrono::steady_clock::now();
  SK_ASSIGN_OR_RETURN(std::vector<Part> parts, ReadParts(o));
  for (const Part& p : parts) sum->shards += p.m.shards.size();
  DatasetWriterOptions wo;
  wo.overwrite = o.force;
  SK_ASSIGN_OR_RETURN(auto writer, DatasetWriter::Create(o.out, wo));
  uint64_t done = 0;
  for (const Part& p : parts) {
    for (const ShardInfo& s : p.m.shards) {
      if (o.interrupt != nullptr && o.interrupt->load(std::memory_order_relaxed)) {
        return Status::Aborted("interrupted; nothing of this merge is left in " + o.out);
      }
      bool linked = false;
      Status st = writer->AdoptShard(JoinPath(p.dir, s.file), s, p.m.classes.size(),
                                     p.m.record.kind, &linked);
      if (st.IsCorruption()) {
        return Status::Corruption(st.message() + " by " + JoinPath(p.dir, kPartManifestName) +
                                  " (the part is damaged, prepare it again)");
      }
      SK_RETURN_IF_ERROR(st);
      (linked ? sum->linked : sum->copied)++;
      sum->bytes += s.bytes;
      if (progress) progress(++done, sum->shards, sum->bytes, false);
    }
    sum->records += p.m.records();
  }
  Manifest m;
  m.record = parts[0].m.record;
  m.classes = parts[0].m.classes;
  m.created_by = MergedCreatedBy(parts[0], o, parts.size());
  SK_RETURN_IF_ERROR(writer->Finish(m));
  if (progress) progress(done, sum->shards, sum->bytes, true);
  sum->parts = parts.size();
  sum->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::OK();
}

}  // namespace shardkit
