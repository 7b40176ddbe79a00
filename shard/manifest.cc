// Manifest (de)serialisation with nlohmann::json; every field is checked on read.
#include "shard/manifest.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <set>

#include "base/random.h"
#include "shard/parts.h"
#include "storage/file_io.h"

namespace shardkit {

using nlohmann::json;

uint64_t RecordFormat::raw_record_size() const {
  if (kind != format::RecordKind::kRawU8 || shape.empty()) return 0;
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t Manifest::records() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.records;
  return n;
}
uint64_t Manifest::bytes() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.bytes;
  return n;
}
uint64_t Manifest::raw_bytes() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.raw_bytes;
  return n;
}

const char* RecordKindName(format::RecordKind kind) {
  return NameOf(format::kRecordKindNames, kind);
}

bool ShardKindFits(format::RecordKind header, format::RecordKind manifest) {
  return header == manifest || header == format::RecordKind::kBytes;
}

std::string ShardKindDisagreement(format::RecordKind header, format::RecordKind manifest) {
  return std::string("holds records of kind '") + RecordKindName(header) +
         "', the manifest says '" + RecordKindName(manifest) + "'";
}

Status CheckRecordFormat(const RecordFormat& f) {
  std::string shape = "[";
  for (size_t i = 0; i < f.shape.size(); ++i)
    shape += (i > 0 ? ", " : "") + std::to_string(f.shape[i]);
  shape += "]";
  bool known = false;
  for (const auto& e : format::kRecordKindNames) known |= e.value == f.kind;
  if (!known) {
    return Status::InvalidArgument("record kind " + std::to_string(static_cast<int>(f.kind)) +
                                   " is none of " + NameList(format::kRecordKindNames));
  }
  if (f.kind != format::RecordKind::kRawU8) {
    if (f.shape.empty()) return Status::OK();
    return Status::InvalidArgument("shape " + shape + " is for raw_u8 records only, not " +
                                   RecordKindName(f.kind));
  }
  if (f.shape.size() != 3)
    return Status::InvalidArgument("raw_u8 shape must be [H, W, C], not " + shape);
  for (int64_t d : f.shape) {
    if (d < 1 || d > 65536) {
      return Status::InvalidArgument("raw_u8 shape " + shape +
                                     " has a dimension out of range (each must be in 1..65536)");
    }
  }
  if (f.raw_record_size() > format::kMaxRecordSize) {
    return Status::InvalidArgument(
        "raw_u8 shape " + shape + " too large (" + std::to_string(f.raw_record_size()) +
        " bytes a record, at most " + std::to_string(format::kMaxRecordSize) + ")");
  }
  return Status::OK();
}

Status CheckClassNames(const std::vector<std::string>& classes) {
  for (size_t c = 0; c < classes.size(); ++c) {
    if (!IsValidUtf8(classes[c])) {
      return Status::InvalidArgument(
          "class " + std::to_string(c) + " name '" + Printable(classes[c]) +
          "' is not valid UTF-8; manifests store class names as UTF-8 text");
    }
  }
  return Status::OK();
}

Result<std::vector<std::string>> NumberedClasses(int64_t max_label, const std::string& where,
                                                 const std::string& hint) {
  if (max_label >= kMaxNumberedClasses) {
    return Status::InvalidArgument(where + ": labels go up to " + std::to_string(max_label) + "; " +
                                   hint);
  }
  std::vector<std::string> classes;
  for (int64_t c = 0; c <= max_label; ++c) classes.push_back(std::to_string(c));
  return classes;
}

std::string Crc32cHex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", crc);
  return buf;
}

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else
      return false;
    if (i + static_cast<size_t>(n) >= s.size()) return false;  // truncated sequence
    for (int k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;  // overlong, surrogate
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

std::string Printable(std::string_view s) {
  std::string out;
  const bool utf8 = IsValidUtf8(s);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F || (!utf8 && c >= 0x80)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

std::string ManifestToJson(const Manifest& m) {
  json j;
  j["format"] = "shardkit-dataset";
  j["version"] = kManifestVersion;
  json rec;
  rec["kind"] = RecordKindName(m.record.kind);
  if (!m.record.shape.empty()) rec["shape"] = m.record.shape;
  j["record"] = rec;
  j["records"] = m.records();
  j["bytes"] = m.bytes();
  j["raw_bytes"] = m.raw_bytes();
  j["classes"] = m.classes;
  json shards = json::array();
  for (const auto& s : m.shards) {
    shards.push_back({{"file", s.file},
                      {"records", s.records},
                      {"bytes", s.bytes},
                      {"raw_bytes", s.raw_bytes},
                      {"crc32c", Crc32cHex(s.crc32c)}});
  }
  j["shards"] = shards;
  json created =
      json::parse(m.created_by.empty() ? "{}" : m.created_by, nullptr, /*allow_exceptions=*/false);
  j["created_by"] = created.is_discarded() ? json::object() : created;
  j["created_at"] = m.created_at;
  if (m.part.count > 0) {
    j["part"] = {{"index", m.part.index},
                 {"count", m.part.count},
                 {"first_record", m.part.first_record},
                 {"first_shard", m.part.first_shard},
                 {"total_records", m.part.total_records},
                 {"settings", m.part.settings}};
  }
  // Class names are checked by WriteManifest (CheckClassNames); anything else (paths in
  // created_by) is informational and may hold any bytes: replaced, never thrown.
  return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<Manifest> ParseManifest(std::string_view text, const std::string& where) {
  auto bad = [&](const std::string& what) { return Status::Corruption(where + ": " + what); };
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not valid JSON");
  if (!j.is_object()) return bad("not a JSON object");
  try {
    if (j.value("format", "") != "shardkit-dataset")
      return bad("\"format\" is not \"shardkit-dataset\"");
    const int version = j.at("version").get<int>();
    if (version > kManifestVersion) {
      return Status::Unsupported(where + ": manifest version " + std::to_string(version) +
                                 " is newer than this build reads; upgrade shardkit");
    }
    Manifest m;
    const json& rec = j.at("record");
    const std::string kind = rec.at("kind").get<std::string>();
    if (!ValueOf(format::kRecordKindNames, kind, &m.record.kind))
      return bad("unknown record kind \"" + kind + "\"");
    if (m.record.kind == format::RecordKind::kRawU8)
      m.record.shape = rec.at("shape").get<std::vector<int64_t>>();
    if (Status s = CheckRecordFormat(m.record); !s.ok()) return bad(s.message());
    m.classes = j.at("classes").get<std::vector<std::string>>();
    std::set<std::string> seen;
    for (const json& s : j.at("shards")) {
      ShardInfo info;
      info.file = s.at("file").get<std::string>();
      // A plain name: no directory, not hidden, no control characters (a
      // newline or a NUL in a name is no shard's, and ends a path early).
      const bool control = std::any_of(info.file.begin(), info.file.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      });
      if (info.file.empty() || info.file.find('/') != std::string::npos || info.file[0] == '.' ||
          control || info.file == "manifest.json") {
        return bad("shard file name \"" + info.file + "\" is not a plain file name");
      }
      if (!seen.insert(info.file).second) {
        return bad("shard \"" + info.file +
                   "\" is listed more than once (its records would be read twice)");
      }
      info.records = s.at("records").get<uint64_t>();
      info.bytes = s.at("bytes").get<uint64_t>();
      info.raw_bytes = s.value("raw_bytes", uint64_t{0});
      const std::string crc = s.at("crc32c").get<std::string>();
      char* end = nullptr;
      unsigned long v = std::strtoul(crc.c_str(), &end, 16);
      if (crc.size() != 8 || *end != '\0')
        return bad("shard " + info.file + ": bad crc32c \"" + crc + "\"");
      info.crc32c = static_cast<uint32_t>(v);
      m.shards.push_back(std::move(info));
    }
    if (j.contains("records") && j["records"].get<uint64_t>() != m.records()) {
      return bad("\"records\" (" + std::to_string(j["records"].get<uint64_t>()) +
                 ") disagrees with the sum over shards (" + std::to_string(m.records()) + ")");
    }
    if (j.contains("created_by")) m.created_by = j["created_by"].dump();
    m.created_at = j.value("created_at", "");
    if (j.contains("part")) {
      const json& p = j.at("part");
      m.part.index = p.at("index").get<uint32_t>();
      m.part.count = p.at("count").get<uint32_t>();
      m.part.first_record = p.at("first_record").get<uint64_t>();
      m.part.first_shard = p.at("first_shard").get<uint64_t>();
      m.part.total_records = p.at("total_records").get<uint64_t>();
      m.part.settings = p.at("settings").get<std::string>();
      if (m.part.count == 0 || m.part.index >= m.part.count || m.part.count > kMaxParts) {
        return bad("part " + std::to_string(m.part.index) + " of " + std::to_string(m.part.count) +
                   " is not a part (at most " + std::to_string(kMaxParts) + " parts)");
      }
    }
    return m;
  } catch (const json::exception& e) {
    return bad(std::string("malformed manifest: ") + e.what());
  }
}

namespace {

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// What to do with a local file given where a dataset directory is expected:
// the shardkit-pack command that packs it, by what its name says it is.
std::string PackFileFirst(const std::string& path) {
  std::string name = path.substr(path.rfind('/') + 1);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string how;
  if (EndsWith(name, ".mat")) {
    how =
        "shardkit-pack svhn FILE OUT (SVHN's *_32x32.mat), or shardkit-pack mat FILE OUT "
        "--images NAME --labels NAME";
  } else if (EndsWith(name, ".tar") || EndsWith(name, ".tar.gz") || EndsWith(name, ".tgz") ||
             EndsWith(name, ".zip")) {
    how =
        "shardkit-pack imagenet FILE OUT (class folders, or ImageNet's tarballs), or "
        "shardkit-pack webdataset 'FILE' OUT";
  } else if (EndsWith(name, ".h5") || EndsWith(name, ".hdf5")) {
    how = "shardkit-pack hdf5 FILE OUT --images DATASET --labels DATASET";
  } else if (name.find("ubyte") != std::string::npos) {
    how = "shardkit-pack idx --images FILE --labels FILE OUT";
  } else {
    return path + ": a file, not a dataset directory (a dataset is a directory holding " +
           kManifestName + "; docs/ingest.md says how to pack one)";
  }
  return path + ": a file, not a dataset directory; pack it first: " + how;
}

// Whether a local directory without a manifest looks like images waiting to
// be packed: image files, or folders (classes) in it.
bool LooksLikeImages(const std::string& dir) {
  auto names = Env::Default()->ListDir(dir);
  if (!names.ok()) return false;
  for (const std::string& n : *names) {
    std::string lower = n;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (EndsWith(lower, ".jpg") || EndsWith(lower, ".jpeg") || EndsWith(lower, ".png") ||
        (n[0] != '.' && IsDirectory(JoinPath(dir, n)))) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<Manifest> ReadManifest(const std::string& dir, Env* env, const Cancel* cancel) {
  if (env == nullptr) {
    SK_ASSIGN_OR_RETURN(env, Env::ForPath(dir));
  }
  if (!env->remote() && !dir.empty() && Env::Default()->FileExists(dir) && !IsDirectory(dir)) {
    return Status::InvalidArgument(PackFileFirst(dir));
  }
  const std::string path = JoinPath(dir, kManifestName);
  auto read = env->ReadFile(path, 256ull << 20, cancel);
  if (!read.ok() && read.status().IsNotFound()) {
    if (!env->remote() && !env->FileExists(dir)) {
      return Status::NotFound(dir + ": no such file or directory");
    }
    if (!env->remote() && LooksLikeImages(dir)) {
      return Status::NotFound(dir + ": no " + kManifestName +
                              ": images, not a shardkit dataset; pack it first: shardkit-pack "
                              "imagenet " +
                              dir + " OUT");
    }
    return Status::NotFound(dir + ": no " + kManifestName +
                            " (not a shardkit dataset, or packing did not finish)");
  }
  SK_ASSIGN_OR_RETURN(std::string text, std::move(read));
  SK_ASSIGN_OR_RETURN(Manifest m, ParseManifest(text, path));
  if (m.part.count > 0) {
    return Status::Corruption(path + ": describes part " + std::to_string(m.part.index) + " of " +
                              std::to_string(m.part.count) +
                              " of a dataset, not a whole one: join the parts with "
                              "shardkit-pack merge");
  }
  return m;
}

Status WritePartManifest(const std::string& dir, const Manifest& m, Env* env) {
  if (m.part.count == 0) return Status::InvalidArgument(dir + ": a part manifest without a part");
  SK_RETURN_IF_ERROR(CheckRecordFormat(m.record).WithContext(dir));
  SK_RETURN_IF_ERROR(CheckClassNames(m.classes).WithContext(dir));
  return WriteFileAtomic(env != nullptr ? env : Env::Default(), JoinPath(dir, kPartManifestName),
                         ManifestToJson(m));
}

Result<Manifest> ReadPartManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, kPartManifestName);
  if (!Env::Default()->FileExists(path)) {
    return Status::NotFound(dir + ": no " + kPartManifestName +
                            " (not a part, or preparing it did not finish)");
  }
  SK_ASSIGN_OR_RETURN(std::string text, Env::Default()->ReadFile(path, 256ull << 20));
  SK_ASSIGN_OR_RETURN(Manifest m, ParseManifest(text, path));
  if (m.part.count == 0) return Status::Corruption(path + ": has no \"part\"");
  return m;
}

Status WriteManifest(const std::string& dir, const Manifest& m, Env* env) {
  if (m.part.count > 0)
    return Status::InvalidArgument(dir + ": a part's manifest is part.json (WritePartManifest)");
  SK_RETURN_IF_ERROR(CheckRecordFormat(m.record).WithContext(dir));
  SK_RETURN_IF_ERROR(CheckClassNames(m.classes).WithContext(dir));
  return WriteFileAtomic(env != nullptr ? env : Env::Default(), JoinPath(dir, kManifestName),
                         ManifestToJson(m));
}

std::string SettingsDigest(std::string_view canonical) {
  // Two Mix64 chains over little-endian 8-byte words, with different starts.
  uint64_t a = 0x5348415244ull, b = 0x4B49545F5345ull;
  for (size_t i = 0; i < canonical.size(); i += 8) {
    uint64_t word = 0;
    for (size_t j = 0; j < 8 && i + j < canonical.size(); ++j)
      word |= uint64_t{static_cast<uint8_t>(canonical[i + j])} << (8 * j);
    a = Mix64(a ^ word);
    b = Mix64(b + word * 0x9E3779B97F4A7C15ull);
  }
  a = Mix64(a ^ canonical.size());
  b = Mix64(b ^ ~uint64_t{canonical.size()});
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return hex;
}

}  // namespace shardkit
