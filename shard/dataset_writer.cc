// DatasetWriter and the directory-level publish protocol.
#include "shard/dataset_writer.h"

#include <algorithm>
#include <cstdio>

#include "shard/shard_reader.h"
#include "storage/file_io.h"

namespace shardkit {

std::string ShardFileName(uint64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard-%05llu.sks", static_cast<unsigned long long>(index));
  return buf;
}

std::string TempShardFileName(uint64_t index) { return "." + ShardFileName(index) + ".tmp"; }

uint64_t RecordsPerShard(uint64_t shard_size, uint64_t raw_size) {
  constexpr uint64_t kMaxRecordsPerShard = 1ull << 26;  // well inside a shard's index limits
  return std::clamp<uint64_t>(shard_size / (raw_size + format::kRecordEntrySize), 1,
                              kMaxRecordsPerShard);
}

DatasetWriterOptions DatasetRules(format::RecordKind kind, uint64_t raw_record_size,
                                  uint64_t shard_size) {
  DatasetWriterOptions o;
  o.shard_size = shard_size;
  o.shard.kind = kind;
  if (kind == format::RecordKind::kJpeg) {
    o.shard.compression = CompressionMode::kStore;
  } else if (kind == format::RecordKind::kRawU8 && raw_record_size > 0) {
    o.shard.compression = CompressionMode::kZstd;
    o.raw_record_size = raw_record_size;
    o.records_per_shard = RecordsPerShard(shard_size, raw_record_size);
  } else {
    o.shard.compression = CompressionMode::kAuto;
  }
  return o;
}

namespace {

bool EndsWith(const std::string& name, const char* suffix) {
  const std::string s(suffix);
  return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
}

// A temporary a writer makes: a shard being written, or the manifest's.
bool IsTemporary(const std::string& name) {
  return (name.rfind(".shard-", 0) == 0 && EndsWith(name, ".sks.tmp")) ||
         name == std::string(kManifestName) + ".tmp" ||
         name == std::string(kPartManifestName) + ".tmp";
}

bool IsOurs(const std::string& name) {
  return (name.rfind("shard-", 0) == 0 && EndsWith(name, ".sks")) || IsTemporary(name);
}

// The shard index of a temporary shard name (".shard-00042.sks.tmp" -> 42), or -1.
int64_t TempShardIndex(const std::string& name) {
  if (name.rfind(".shard-", 0) != 0 || !EndsWith(name, ".sks.tmp")) return -1;
  const std::string digits = name.substr(7, name.size() - 7 - 8);
  if (digits.empty() || digits.size() > 15 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoll(digits);
}

Status RefuseDatasetUnless(Env* env, const std::string& dir, bool overwrite) {
  if (overwrite) return Status::OK();
  if (env->FileExists(JoinPath(dir, kManifestName))) {
    return Status::InvalidArgument(
        dir + " already holds a dataset (" + kManifestName +
        " exists); replacing it must be asked for (shardkit-pack --force, "
        "shardkit.Writer(overwrite=True))");
  }
  if (env->FileExists(JoinPath(dir, kPartManifestName))) {
    return Status::InvalidArgument(
        dir + " already holds a part of a dataset (" + kPartManifestName +
        " exists); replacing it must be asked for (shardkit-pack --force, "
        "shardkit.Writer(overwrite=True))");
  }
  return Status::OK();
}

}  // namespace

Status PrepareOutputDir(const std::string& dir, bool overwrite, uint64_t keep_temps,
                        uint64_t keep_first, Env* env) {
  if (env == nullptr) env = Env::Default();
  SK_RETURN_IF_ERROR(env->CreateDirs(dir));
  SK_RETURN_IF_ERROR(RefuseDatasetUnless(env, dir, overwrite));
  for (const char* marker : {kManifestName, kPartManifestName}) {
    const std::string path = JoinPath(dir, marker);
    if (!env->FileExists(path)) continue;
    SK_RETURN_IF_ERROR(env->RemoveFile(path));
    SK_RETURN_IF_ERROR(env->SyncDir(dir));
  }
  SK_ASSIGN_OR_RETURN(auto names, env->ListDir(dir));
  for (const auto& name : names) {
    const int64_t temp = TempShardIndex(name);
    const bool keep = temp >= 0 && static_cast<uint64_t>(temp) >= keep_first &&
                      static_cast<uint64_t>(temp) - keep_first < keep_temps;
    if (IsOurs(name) && !keep) SK_RETURN_IF_ERROR(env->RemoveFile(JoinPath(dir, name)));
  }
  return Status::OK();
}

Status PublishShard(const std::string& dir, uint64_t index, Env* env) {
  return (env != nullptr ? env : Env::Default())
      ->RenameFile(JoinPath(dir, TempShardFileName(index)), JoinPath(dir, ShardFileName(index)));
}

Result<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(const std::string& dir,
                                                             const DatasetWriterOptions& options) {
  if (options.shard_size < 4096)
    return Status::InvalidArgument("shard size must be at least 4096 bytes");
  Env* env = options.env != nullptr ? options.env : Env::Default();
  const bool existed = env->FileExists(dir);
  SK_RETURN_IF_ERROR(env->CreateDirs(dir));
  SK_ASSIGN_OR_RETURN(auto lock, env->LockDir(dir));
  // A dataset already there stays whole until Finish replaces it (--force);
  // only what an interrupted run left (temporaries) goes now, or once Resume
  // has said what of it is kept.
  SK_RETURN_IF_ERROR(RefuseDatasetUnless(env, dir, options.overwrite));
  auto w = std::unique_ptr<DatasetWriter>(new DatasetWriter(dir, options, env, std::move(lock)));
  w->created_dir_ = !existed;
  if (options.resume_later) {
    w->resume_pending_ = true;
    return w;
  }
  SK_RETURN_IF_ERROR(w->KeepFinishedShards(nullptr));
  SK_RETURN_IF_ERROR(w->RemoveOtherTemporaries());
  return w;
}

Status DatasetWriter::Resume(const std::string& fingerprint, uint64_t max_shards,
                             const ShardCheck& accept) {
  if (!resume_pending_) {
    return Status::InvalidArgument(dir_ +
                                   ": Resume on a writer not created with resume_later, "
                                   "or called twice");
  }
  resume_pending_ = false;
  options_.resume_fingerprint = fingerprint;
  options_.resume_max_shards = max_shards;
  SK_RETURN_IF_ERROR(KeepFinishedShards(accept));
  return RemoveOtherTemporaries();
}

// The temporaries that are not this writer's kept shards: what a run of
// other settings, or the unkept rest of a killed one, left.
Status DatasetWriter::RemoveOtherTemporaries() {
  SK_ASSIGN_OR_RETURN(auto names, env_->ListDir(dir_));
  for (const auto& name : names) {
    const int64_t index = TempShardIndex(name);
    const bool kept = index >= 0 && static_cast<uint64_t>(index) >= options_.first_shard &&
                      static_cast<uint64_t>(index) < next_index();
    if (IsTemporary(name) && !kept) SK_RETURN_IF_ERROR(env_->RemoveFile(JoinPath(dir_, name)));
  }
  return Status::OK();
}

namespace {

// Every block of `r` reads back (stored CRC, decompression) and every record
// matches its checksum: a temporary shard is kept only whole, since the
// whole-file checksum the manifest records is computed from its bytes as
// they are now.
bool AllRecordsRead(const ShardReader& r) {
  ReadScratch scratch;
  for (uint32_t b = 0; b < r.num_blocks(); ++b) {
    std::string_view raw;
    if (!r.ReadBlock(b, &scratch, &raw).ok()) return false;
    const format::BlockEntry& be = r.block(b);
    for (uint32_t i = be.first_record; i < be.first_record + be.num_records; ++i) {
      std::string_view p;
      if (!r.RecordFromBlock(i, raw, &p).ok()) return false;
    }
  }
  return true;
}

}  // namespace

// A run of the same fingerprint killed before its manifest: its finished
// shards from first_shard on, in order, each read back whole (its index and
// whole-file checksum) and accepted, are kept. A fingerprint of other
// settings (or none) goes, and the temporaries with it.
Status DatasetWriter::KeepFinishedShards(const ShardCheck& accept) {
  const std::string path = JoinPath(dir_, kResumeFileName);
  if (!env_->FileExists(path)) return Status::OK();
  auto old = env_->ReadFile(path, 1 << 20);
  if (options_.resume_fingerprint.empty() || !old.ok() || *old != options_.resume_fingerprint) {
    return env_->RemoveFile(path);
  }
  fingerprint_written_ = true;
  while (shards_.size() < options_.resume_max_shards) {
    const std::string temp = JoinPath(dir_, TempShardFileName(next_index()));
    if (!env_->FileExists(temp)) break;
    auto r = ShardReader::Open(temp, env_);
    if (!r.ok() || !(*r)->CheckIndex().ok() || (*r)->num_records() == 0) break;
    if ((*r)->kind() != options_.shard.kind) break;
    const uint64_t per_shard = options_.records_per_shard;
    if (per_shard > 0 && (*r)->num_records() != per_shard) break;
    if (!AllRecordsRead(**r)) break;  // damaged since it was written: made again
    auto crc = FileCrc32c(env_, temp);
    if (!crc.ok()) break;
    if (accept != nullptr) {
      SK_ASSIGN_OR_RETURN(const bool same, accept(**r));
      if (!same) break;
    }
    ShardInfo info{ShardFileName(next_index()), (*r)->num_records(), (*r)->file_size(), 0, *crc};
    for (uint32_t i = 0; i < (*r)->num_records(); ++i) {
      info.raw_bytes += (*r)->record(i).length;
      max_label_ = std::max<int64_t>(max_label_, (*r)->label(i));
    }
    shards_.push_back(info);
    kinds_.emplace_back(options_.shard.kind, std::string());
    records_ += info.records;
    finished_bytes_ += info.bytes;
  }
  resumed_shards_ = shards_.size();
  return Status::OK();
}

// The first shard is finished and more follow: from now on a kill leaves
// something to resume, so the fingerprint names it.
Status DatasetWriter::NoteResumable() {
  if (options_.resume_fingerprint.empty() || fingerprint_written_) return Status::OK();
  SK_RETURN_IF_ERROR(
      WriteFileAtomic(env_, JoinPath(dir_, kResumeFileName), options_.resume_fingerprint));
  fingerprint_written_ = true;
  return Status::OK();
}

// Not finished: every file this writer made goes, and the directory too if
// it made it and nothing else is in it now.
DatasetWriter::~DatasetWriter() {
  if (finished_) return;
  current_.reset();
  // Resumption undecided, nothing written: the temporaries there are a
  // killed run's, left as they were found for a later run to resume from.
  for (uint64_t i = 0; !resume_pending_ && i <= shards_.size(); ++i) {
    const uint64_t index = options_.first_shard + i;
    env_->RemoveFile(JoinPath(dir_, TempShardFileName(index))).IgnoreError();
    if (i < published_) env_->RemoveFile(JoinPath(dir_, ShardFileName(index))).IgnoreError();
  }
  if (fingerprint_written_) env_->RemoveFile(JoinPath(dir_, kResumeFileName)).IgnoreError();
  lock_.reset();  // its file goes with it (a directory is left as it was found)
  if (created_dir_) env_->RemoveDir(dir_).IgnoreError();  // only if nothing else is in it
}

uint64_t DatasetWriter::bytes_written() const {
  return finished_bytes_ + (current_ ? current_->estimated_size() : 0);
}

Status DatasetWriter::Add(std::string_view payload, int32_t label, std::string_view key) {
  if (finished_) return Status::InvalidArgument(dir_ + ": Add after Finish");
  if (resume_pending_) return Status::InvalidArgument(dir_ + ": Add before Resume");
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(dir_ + ": record '" + Printable(key) + "' (number " +
                                   std::to_string(records_) + "): " + what);
  };
  if (label < -1)
    return bad("label " + std::to_string(label) + " (labels are -1 for none, or >= 0)");
  if (options_.num_classes > 0 && static_cast<uint64_t>(label + 1) > options_.num_classes) {
    return bad("label " + std::to_string(label) + " but only " +
               std::to_string(options_.num_classes) + " classes");
  }
  if (options_.raw_record_size > 0 && payload.size() != options_.raw_record_size) {
    return bad(std::to_string(payload.size()) + " bytes, the shape needs " +
               std::to_string(options_.raw_record_size));
  }
  const bool full = options_.records_per_shard > 0
                        ? current_ != nullptr && current_->records() >= options_.records_per_shard
                        : current_ != nullptr && current_->records() > 0 &&
                              current_->estimated_size() + payload.size() > options_.shard_size;
  if (full) {
    SK_RETURN_IF_ERROR(CloseShard());
    SK_RETURN_IF_ERROR(NoteResumable());
  }
  if (current_ == nullptr) {
    SK_ASSIGN_OR_RETURN(
        current_,
        ShardWriter::Create(JoinPath(dir_, TempShardFileName(next_index())), options_.shard, env_));
  }
  SK_RETURN_IF_ERROR(current_->Add(payload, label, key));
  ++records_;
  max_label_ = std::max<int64_t>(max_label_, label);
  return Status::OK();
}

// A full shard stays under its temporary name until Finish publishes them all.
Status DatasetWriter::CloseShard() {
  ShardInfo info;
  Status s = current_->Finish(&info);
  if (!s.ok()) return s;  // the destructor removes the temporary file
  current_.reset();
  info.file = ShardFileName(next_index());
  shards_.push_back(info);
  kinds_.emplace_back(options_.shard.kind, std::string());
  finished_bytes_ += info.bytes;
  return Status::OK();
}

Status DatasetWriter::AdoptShard(const std::string& path, const ShardInfo& expected,
                                 size_t num_classes, format::RecordKind kind, bool* linked) {
  if (finished_) return Status::InvalidArgument(dir_ + ": AdoptShard after Finish");
  if (resume_pending_) return Status::InvalidArgument(dir_ + ": AdoptShard before Resume");
  if (current_ != nullptr) SK_RETURN_IF_ERROR(CloseShard());
  const std::string temp = JoinPath(dir_, TempShardFileName(next_index()));
  SK_ASSIGN_OR_RETURN(*linked, env_->LinkOrCopyFile(path, temp));
  // What is checked is what landed in dir (the part's own file, if linked).
  auto bad = [&](const std::string& what) {
    env_->RemoveFile(temp).IgnoreError();
    return Status::Corruption(path + ": " + what);
  };
  auto file = env_->OpenForReads(temp);
  if (!file.ok()) return bad(file.status().message());
  if ((*file)->size() != expected.bytes) {
    return bad(std::to_string((*file)->size()) + " bytes, expected " +
               std::to_string(expected.bytes));
  }
  auto crc = FileCrc32c(env_, temp);
  if (!crc.ok()) return bad(crc.status().message());
  if (*crc != expected.crc32c) {
    return bad("CRC32C " + Crc32cHex(*crc) + ", expected " + Crc32cHex(expected.crc32c));
  }
  auto reader = ShardReader::Open(std::move(*file));
  if (!reader.ok()) return bad(reader.status().message());
  if (Status index = (*reader)->CheckIndex(); !index.ok()) return bad(index.message());
  if ((*reader)->num_records() != expected.records) {
    return bad("holds " + std::to_string((*reader)->num_records()) + " records, expected " +
               std::to_string(expected.records));
  }
  if (!ShardKindFits((*reader)->kind(), kind)) {
    return bad(std::string("holds records of kind '") + RecordKindName((*reader)->kind()) +
               "', expected '" + RecordKindName(kind) + "'");
  }
  for (uint32_t i = 0; num_classes > 0 && i < (*reader)->num_records(); ++i) {
    const int32_t label = (*reader)->label(i);
    if (label < -1 || label >= static_cast<int64_t>(num_classes)) {
      return bad("record " + std::to_string(i) + ": label " + std::to_string(label) +
                 " outside the " + std::to_string(num_classes) + " classes");
    }
  }
  ShardInfo info = expected;
  info.file = ShardFileName(next_index());
  shards_.push_back(info);
  kinds_.emplace_back((*reader)->kind(), path);
  records_ += info.records;
  finished_bytes_ += info.bytes;
  return Status::OK();
}

// The old dataset (if any) stops being one, the new shards take its shards'
// names, any old shard beyond them goes, and the manifest is written last.
Status DatasetWriter::Finish(Manifest manifest) {
  if (finished_) return Status::InvalidArgument(dir_ + ": Finish called twice");
  if (resume_pending_) return Status::InvalidArgument(dir_ + ": Finish before Resume");
  if (records_ == 0) {  // no dataset of nothing, whoever writes it
    return Status::InvalidArgument(dir_ +
                                   ": no record was added; nothing written (a dataset there is "
                                   "left as it was)");
  }
  if (!manifest.shards.empty()) return Status::InvalidArgument("manifest.shards must be empty");
  if (!manifest.classes.empty() && max_label_ >= static_cast<int64_t>(manifest.classes.size())) {
    return Status::InvalidArgument(dir_ + ": labels go up to " + std::to_string(max_label_) +
                                   " but the manifest lists " +
                                   std::to_string(manifest.classes.size()) + " classes");
  }
  const bool part = manifest.part.count > 0;
  if (part ? manifest.part.first_shard != options_.first_shard : options_.first_shard != 0) {
    return Status::InvalidArgument(
        dir_ + ": shards named from " + std::to_string(options_.first_shard) +
        " but the manifest's " +
        (part ? "part starts at shard " + std::to_string(manifest.part.first_shard)
              : std::string("whole dataset starts at shard 0")));
  }
  if (current_ != nullptr) SK_RETURN_IF_ERROR(CloseShard());
  // Each shard's header names its records' kind and readers check it
  // against the manifest's, so the two must agree here.
  for (size_t i = 0; i < kinds_.size(); ++i) {
    const auto& [kind, source] = kinds_[i];
    if (ShardKindFits(kind, manifest.record.kind)) continue;
    return Status::InvalidArgument(
        (source.empty() ? JoinPath(dir_, TempShardFileName(options_.first_shard + i)) : source) +
        ": " + ShardKindDisagreement(kind, manifest.record.kind));
  }
  SK_RETURN_IF_ERROR(
      PrepareOutputDir(dir_, /*overwrite=*/true, shards_.size(), options_.first_shard, env_));
  for (; published_ < shards_.size(); ++published_) {
    SK_RETURN_IF_ERROR(PublishShard(dir_, options_.first_shard + published_, env_));
  }
  SK_RETURN_IF_ERROR(env_->SyncDir(dir_));
  manifest.shards = shards_;
  if (manifest.created_at.empty()) manifest.created_at = UtcNow();
  SK_RETURN_IF_ERROR(part ? WritePartManifest(dir_, manifest, env_)
                          : WriteManifest(dir_, manifest, env_));
  finished_ = true;
  if (fingerprint_written_) env_->RemoveFile(JoinPath(dir_, kResumeFileName)).IgnoreError();
  lock_.reset();  // done writing: a finished dataset holds no lock file
  return Status::OK();
}

}  // namespace shardkit
