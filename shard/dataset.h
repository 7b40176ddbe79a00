// Dataset: a dataset directory opened for reading (manifest plus one
// ShardReader per shard), and VerifyDataset, the full integrity check.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "shard/manifest.h"
#include "shard/shard_reader.h"

namespace shardkit {

// Immutable after Open(); safe to read from many threads (see ShardReader).
class Dataset {
 public:
  // Reads the manifest and opens every shard, checking that each exists, has
  // the size and record count the manifest says, and has a valid header,
  // trailer and index block table: O(shards) bytes, whatever the records. A
  // shard's record entries are checked when it is first used (ShardReader).
  // Does not read payloads (VerifyDataset does).
  // Reads through `env` (null: the Env `dir` names, Env::ForPath: a
  // directory, or an s3:// or http(s):// URL). Once `cancel` is set (a
  // signal, a reader closing), an open waiting on remote storage ends with
  // Aborted.
  static Result<std::unique_ptr<Dataset>> Open(const std::string& dir, Env* env = nullptr,
                                               const Cancel* cancel = nullptr);
  // Reads in flight and later ones fail at once (RandomAccessFile::Abort):
  // for a prompt shutdown of a reader of slow storage.
  void AbortReads() const;

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  size_t num_shards() const { return shards_.size(); }
  const ShardReader& shard(size_t i) const { return *shards_[i]; }
  uint64_t num_records() const { return first_record_.back(); }
  uint64_t shard_first_record(size_t i) const { return first_record_[i]; }
  // How every shard will be read (ShardReader::SetAccess); before payload reads.
  Status SetAccess(const AccessHints& hints) {
    for (auto& s : shards_) SK_RETURN_IF_ERROR(s->SetAccess(hints));
    return Status::OK();
  }
  // Whether its storage is remote (Env::remote): each read a request.
  bool remote() const { return remote_; }
  // Whether, remote, a node cache held every shard whole on local disk when
  // it was opened (RandomAccessFile::held_locally): reads cost a local
  // file's. A node's own state: what every rank must agree on (the shuffle)
  // goes by remote() alone.
  bool held_locally() const { return held_locally_; }
  bool remote_reads() const { return remote_ && !held_locally_; }
  // Whether every shard's reads bypass the caches.
  bool uncached() const {
    for (const auto& s : shards_)
      if (!s->uncached()) return false;
    return !shards_.empty();
  }
  // Global record number -> (shard, record within the shard). global < num_records().
  std::pair<uint32_t, uint32_t> Locate(uint64_t global) const;

 private:
  std::string dir_;
  bool remote_ = false;
  bool held_locally_ = false;
  Manifest manifest_;
  std::vector<std::unique_ptr<ShardReader>> shards_;
  std::vector<uint64_t> first_record_;  // size num_shards + 1
};

// What a dataset holds, from its manifest and its shards' indexes (no
// payload is read): records per class in label order, records without a
// label (-1, or a dataset without classes), labels outside the class list.
struct DatasetSummary {
  std::vector<uint64_t> class_counts;
  uint64_t unlabeled = 0, labels_outside_classes = 0;
};
// An error: a shard's index is damaged (verify tells more).
Result<DatasetSummary> Summarize(const Dataset& ds);

// What a problem reported for a shard that could not be read ends with.
inline constexpr char kNotChecked[] = " (not checked: a read failed)";

struct VerifyReport {
  uint64_t shards = 0, shards_bad = 0;
  uint64_t records = 0, records_bad = 0;
  uint64_t bytes = 0;
  // Shards whose bytes could not be read (a storage or network error, not
  // bad data): not checked, so neither good nor bad.
  uint64_t shards_unreadable = 0;
  bool ok() const { return shards_bad == 0 && records_bad == 0 && shards_unreadable == 0; }
};

// One problem verify found: bad data (a checksum, a size, a count that is
// not the manifest's), or a shard that could not be read (storage, network),
// so neither good nor bad. The message names the shard and record.
struct VerifyProblem {
  enum class Kind { kBad, kUnchecked } kind = Kind::kBad;
  std::string message;  // an unchecked one ends with kNotChecked
};
using VerifyReporter = std::function<void(const VerifyProblem&)>;

// Checks every shard against the manifest (presence, size, whole-file CRC32C,
// record count), then every block and record checksum, the record sizes of
// raw_u8 datasets and labels against the class list. Each problem is passed
// to `report` (called from one thread at a time; may be null). Returns an
// error only when the dataset cannot be checked at all (no readable
// manifest); a dataset with problems returns OK and a report whose ok() is
// false.
// `dir` may be an s3:// or http(s):// URL (read through Env::ForPath).
Status VerifyDataset(const std::string& dir, int threads, const VerifyReporter& report,
                     VerifyReport* out);

}  // namespace shardkit
