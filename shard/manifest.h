// Manifest: the manifest.json that makes a directory of shards a dataset. It is
// written last and atomically; a directory without one is not a dataset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "shard/shard_format.h"
#include "shard/shard_writer.h"
#include "storage/env.h"

namespace shardkit {

inline constexpr char kManifestName[] = "manifest.json";
// A part of a dataset prepared in pieces (--part I/N) has part.json instead:
// the same schema plus "part", so a part is never opened as the whole dataset.
inline constexpr char kPartManifestName[] = "part.json";
inline constexpr int kManifestVersion = 1;

struct RecordFormat {
  format::RecordKind kind = format::RecordKind::kBytes;
  std::vector<int64_t> shape;        // raw_u8 only: {H, W, C}
  uint64_t raw_record_size() const;  // product of shape (raw_u8), else 0
};

// Which piece of a dataset prepared in N pieces a part is: its records are
// [first_record, first_record + records) of the whole, its shards keep the
// whole's names from first_shard on, and `settings` is a digest of every
// setting that decides the bytes (parts made with other settings do not
// merge). count == 0: not a part.
struct PartInfo {
  uint32_t index = 0, count = 0;
  uint64_t first_record = 0, first_shard = 0;
  uint64_t total_records = 0;  // of the whole dataset
  std::string settings;
};

// PartInfo::settings: 32 hex digits summarising `canonical` (a canonical
// text of every setting that decides the bytes), for every tool that writes
// parts. Not cryptographic: it tells apart parts made with other settings, it
// does not resist forgery.
std::string SettingsDigest(std::string_view canonical);

struct Manifest {
  RecordFormat record;
  std::vector<std::string> classes;  // label i is classes[i]; may be empty
  std::vector<ShardInfo> shards;
  std::string created_by = "{}";  // JSON object: tool, argv, options
  std::string created_at;         // UTC, ISO 8601
  PartInfo part;                  // part.json only

  uint64_t records() const;
  uint64_t bytes() const;
  uint64_t raw_bytes() const;
};

// NameOf(format::kRecordKindNames, kind): "jpeg", "raw_u8" or "bytes".
const char* RecordKindName(format::RecordKind kind);
// Whether a shard whose header names `header` may hold a manifest's records
// of kind `manifest`: the same kind, or a header of 'bytes', the shard
// writer's default, which C++ writers left as it was while nothing read it
// (the manifest speaks for such a shard's records).
bool ShardKindFits(format::RecordKind header, format::RecordKind manifest);
// What a shard that does not fit says: "holds records of kind 'jpeg', the
// manifest says 'raw_u8'".
std::string ShardKindDisagreement(format::RecordKind header, format::RecordKind manifest);
// What a writer decides before its first record, checked as ParseManifest
// and WriteManifest check it, so a writer can refuse it up front:
// InvalidArgument saying what is wrong. A raw_u8 record's shape is [H, W, C],
// each in 1..65536, at most format::kMaxRecordSize bytes; other kinds have no
// shape. Class names are valid UTF-8 (IsValidUtf8).
Status CheckRecordFormat(const RecordFormat& f);
Status CheckClassNames(const std::vector<std::string>& classes);
// The class list of labels given as numbers without names: "0", "1", ...,
// up to max_label (none for max_label < 0: no record is labelled). Labels
// of kMaxNumberedClasses and more are refused (an unnormalised label, not a
// class count): InvalidArgument naming `where`, with `hint` (how to name the
// classes or relabel).
inline constexpr int64_t kMaxNumberedClasses = 1 << 20;
Result<std::vector<std::string>> NumberedClasses(int64_t max_label, const std::string& where,
                                                 const std::string& hint);
std::string ManifestToJson(const Manifest& m);
// `where` names the source in error messages.
Result<Manifest> ParseManifest(std::string_view json, const std::string& where);
// Through `env` (null: Env::ForPath(dir)); `cancel` as Env::ReadFile takes it.
Result<Manifest> ReadManifest(const std::string& dir, Env* env = nullptr,
                              const Cancel* cancel = nullptr);
// Atomic: temporary file, fsync, rename, directory fsync (WriteFileAtomic),
// through `env` (null: Env::Default()).
Status WriteManifest(const std::string& dir, const Manifest& m, Env* env = nullptr);
// A part's part.json (m.part.count > 0), written and read the same way.
Status WritePartManifest(const std::string& dir, const Manifest& m, Env* env = nullptr);
Result<Manifest> ReadPartManifest(const std::string& dir);
std::string UtcNow();
// Manifests are UTF-8 JSON: class names must be valid UTF-8 to be stored
// losslessly (WriteManifest refuses others). Printable() shows any string in
// a one-line message, invalid bytes and control characters as \xNN.
bool IsValidUtf8(std::string_view s);
std::string Printable(std::string_view s);
std::string Crc32cHex(uint32_t crc);

}  // namespace shardkit
