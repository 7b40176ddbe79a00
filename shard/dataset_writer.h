// DatasetWriter: appends records to a dataset directory, rolling over to a new
// shard at a size target, and publishes the manifest last. Every shard is
// written under a temporary name and renamed only in Finish, so a crash never
// leaves a file, or a directory, that looks complete and is not; a dataset
// being replaced (overwrite) stays whole until then; and a writer destroyed
// before Finish removes every file it made (and the directory, if it made it).
// A resumable writer (resume_fingerprint, or Resume) killed before Finish
// leaves its finished shards under their temporary names, and the next writer
// of the same fingerprint keeps them: fixed-record-count shards and shards cut
// by bytes alike.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "shard/manifest.h"
#include "shard/shard_reader.h"
#include "shard/shard_writer.h"
#include "storage/file_io.h"

namespace shardkit {

struct DatasetWriterOptions {
  // Where the dataset is written (its files, lock, renames, manifest): null
  // is the POSIX filesystem (Env::Default()). AdoptShard reads the shard it
  // adopts through it too, and links or copies it (Env::LinkOrCopyFile).
  Env* env = nullptr;
  uint64_t shard_size = 256ull << 20;  // target bytes per shard file
  ShardWriterOptions shard;
  bool overwrite = false;  // replace an existing dataset in the directory
  // Checked by Add, naming the record: labels below num_classes (0: any
  // label; Finish still checks them against the manifest's classes), and
  // raw records of exactly raw_record_size bytes (0: unchecked).
  uint64_t num_classes = 0;
  uint64_t raw_record_size = 0;
  // > 0: every shard holds exactly this many records (the last one fewer),
  // whatever their sizes, so where shards start is known before anything is
  // compressed (a dataset prepared in parts); 0: a new shard at shard_size.
  uint64_t records_per_shard = 0;
  // The index of the first shard, which names it: a part of a dataset keeps
  // the whole's names. Only a part (Finish with manifest.part set) starts
  // above 0.
  uint64_t first_shard = 0;
  // Non-empty: the run can be resumed, and this names everything that decides
  // its shards' bytes (settings, the source's content, the part). Written to
  // kResumeFileName once the first shard is finished and another begins,
  // removed by Finish and by a writer destroyed before it (what a kill leaves
  // is what a rerun resumes from). A writer that finds the same text there (a run of
  // the same settings killed before its manifest) keeps that run's finished
  // shards: the unbroken run of them from first_shard, at most
  // resume_max_shards, each read back whole, with exactly records_per_shard
  // records when that is > 0 (else at least one, and whatever Resume's check
  // accepts). Anything else starts over.
  std::string resume_fingerprint;
  uint64_t resume_max_shards = 0;
  // true: whether to resume is decided after Create, by Resume (a pack whose
  // records, so its fingerprint, are known only once its source is read; the
  // writer is created first for OUT's lock and the refusal to replace a
  // dataset). Until then a killed run's temporaries and fingerprint are left
  // as they are, by the writer's destruction too, and Add is refused.
  bool resume_later = false;
};

// The file in a dataset directory that names the run its temporaries belong to.
inline constexpr char kResumeFileName[] = ".shardkit-resume.json";

// Records in each shard of a dataset of fixed-size records of `raw_size`
// bytes: as many as fit in shard_size counting each as its payload and index
// entry, before compression, so a part knows where its shards start without
// compressing what comes before it.
uint64_t RecordsPerShard(uint64_t shard_size, uint64_t raw_size);

// How every writer of datasets (the Packer, bigMNIST through it, the Python
// Writer) stores records of `kind`: JPEGs stored (they do not shrink
// further); fixed-size raw records (raw_record_size bytes) zstd-compressed in
// shards of RecordsPerShard records, one process or many; other records
// compressed where it pays (kAuto), a shard at shard_size.
DatasetWriterOptions DatasetRules(format::RecordKind kind, uint64_t raw_record_size,
                                  uint64_t shard_size);

// Shard i of a dataset is named "shard-%05d.sks".
std::string ShardFileName(uint64_t index);
// The temporary name a shard is written under before it is published.
std::string TempShardFileName(uint64_t index);

// Makes `dir` ready for a new dataset: creates it; refuses a directory that
// holds a dataset or a part of one (manifest.json, part.json) unless
// `overwrite`, in which case that file is removed first so the directory stops
// being a dataset before any shard is touched; removes shard files and
// temporaries left by an interrupted run, except the temporaries of shards
// keep_first..keep_first+keep_temps-1 (a DatasetWriter's own, about to be
// published). Other files are left alone.
// Through `env` (null: Env::Default()).
Status PrepareOutputDir(const std::string& dir, bool overwrite, uint64_t keep_temps = 0,
                        uint64_t keep_first = 0, Env* env = nullptr);

// Renames the finished temporary file of shard `index` to its final name.
Status PublishShard(const std::string& dir, uint64_t index, Env* env = nullptr);

// Not thread-safe. Holds the directory's DirLock from Create() on, so two
// writers into one directory cannot interleave: the second Create() fails.
class DatasetWriter {
 public:
  static Result<std::unique_ptr<DatasetWriter>> Create(const std::string& dir,
                                                       const DatasetWriterOptions& options);
  // Decides, for a writer created with resume_later and before anything is
  // added, what resume_fingerprint and resume_max_shards decide in Create:
  // the finished shards of a killed run of `fingerprint` (empty: none) are
  // kept, each also passed, in order, to `accept` (null: every one), which
  // says whether it is the next shard this run would write (false: it and
  // those after it are not kept; an error fails Resume). Every other
  // temporary goes.
  using ShardCheck = std::function<Result<bool>(const ShardReader& shard)>;
  Status Resume(const std::string& fingerprint, uint64_t max_shards,
                const ShardCheck& accept = nullptr);
  // Before Finish (or after it failed): removes this writer's shards and
  // temporaries, and its directory (lock file included) if it made it.
  ~DatasetWriter();

  // Appends a record; label -1 is "none". A label or size the options rule
  // out is InvalidArgument naming the record by key and number, and nothing
  // is written for it.
  Status Add(std::string_view payload, int32_t label, std::string_view key);
  // Takes a finished shard file as the next shard (shardkit-pack merge),
  // through options.env (Env::LinkOrCopyFile): a hard link to `path` under
  // the shard's temporary name where the storage allows, else a copy; `path`
  // is only read, and a failed copy is its error, with nothing kept. Checked against
  // `expected` (size, whole-file CRC32C, record count), its header's record
  // kind against `kind` (ShardKindFits) and, with num_classes > 0, every
  // label (-1, or below num_classes): Corruption naming `path` if it
  // differs, and nothing is kept of it. *linked says which.
  Status AdoptShard(const std::string& path, const ShardInfo& expected, size_t num_classes,
                    format::RecordKind kind, bool* linked);
  // Closes the last shard and writes the manifest (part.json for a part:
  // manifest.part.count > 0, whose first_shard must be options.first_shard);
  // `manifest.shards` is filled in here and must be empty on entry. Refused,
  // with no manifest written and a dataset being replaced left whole, when
  // no record was added (every writer's rule: shardkit-pack, the Python
  // Writer, a merge) or a label is beyond the manifest's classes.
  Status Finish(Manifest manifest);

  uint64_t records() const { return records_; }
  uint64_t shards() const { return shards_.size(); }
  // Shards (and their records) kept from a killed run of the same fingerprint.
  uint64_t resumed_shards() const { return resumed_shards_; }
  uint64_t bytes_written() const;  // finished shards plus the open one's estimate

 private:
  DatasetWriter(std::string dir, const DatasetWriterOptions& options, Env* env,
                std::unique_ptr<DirLock> lock)
      : dir_(std::move(dir)), options_(options), env_(env), lock_(std::move(lock)) {}
  Status CloseShard();
  Status KeepFinishedShards(const ShardCheck& accept);
  Status RemoveOtherTemporaries();
  Status NoteResumable();
  uint64_t next_index() const { return options_.first_shard + shards_.size(); }

  std::string dir_;
  DatasetWriterOptions options_;
  Env* env_;
  std::unique_ptr<DirLock> lock_;  // held from Create until Finish (or destruction)
  std::unique_ptr<ShardWriter> current_;
  std::vector<ShardInfo> shards_;
  // Per shard: the kind of record its header names, and for an adopted
  // shard the file it came from (Finish names it if the manifest disagrees).
  std::vector<std::pair<format::RecordKind, std::string>> kinds_;
  uint64_t records_ = 0;
  int64_t max_label_ = -1;
  uint64_t finished_bytes_ = 0;
  bool finished_ = false;
  bool created_dir_ = false;
  uint64_t published_ = 0;  // shards renamed to their final names by Finish
  uint64_t resumed_shards_ = 0;
  bool fingerprint_written_ = false;  // kResumeFileName is this writer's
  bool resume_pending_ = false;       // created with resume_later, Resume not yet called
};

}  // namespace shardkit
