// Staging: a dataset (a directory on a shared filesystem, or an s3:// or
// http(s):// URL) copied to node-local disk, and single files of a dataset
// fetched, each checked against the one manifest copy the stage fetched.
// `shardkit-pack get` and `slurm/stage.sh` are this, and only this.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "storage/env.h"

namespace shardkit {

struct StageOptions {
  int jobs = 8;  // shards copied at once (1..64)
  // Once set (a signal's handler), the stage stops: copies under way are
  // removed, no manifest is installed, and the error is Aborted.
  const Cancel* cancel = nullptr;
};

struct StageReport {
  uint64_t shards = 0, copied = 0, kept = 0;  // kept: already staged, intact
  uint64_t bytes_copied = 0;
  double seconds = 0;
  bool source_itself = false;  // DEST is the source: nothing was done
};

// Bytes copied so far of those to copy; called from the copying threads,
// one at a time.
using StageProgress = std::function<void(uint64_t done, uint64_t total)>;

// Copies the dataset `src` into the local directory `dest` (made if
// missing) so that `dest` is a whole dataset, or has no manifest:
//   the source manifest is fetched once; free space is checked first
//   (bytes of the shards not there intact); dest's manifest goes first;
//   each shard not already there intact (its size and CRC32C the manifest's)
//   is copied `jobs` at a time to a temporary name, checked against that
//   manifest copy and renamed; that manifest copy is installed last (one
//   replaced at the source meanwhile, by a push --force, never sits over
//   shards checked against the one before it).
// Stagers of one `dest` take turns (a lock in it, waited for, removed when
// done), so a node's ranks download once whoever calls it first; a rerun
// after a kill keeps what is intact and removes what was half-copied. A
// `dest` that is `src` itself (by path, link or mount) is left alone
// (report->source_itself); one inside `src` is refused. Shard names come
// from the manifest as data, never through a shell.
Status StageDataset(const std::string& src, const std::string& dest, const StageOptions& options,
                    const StageProgress& progress, StageReport* report);

// Copies the file `from` (a path or a URL) to the local file `to` (as
// storage/output_file.h resolves outputs: a regular file, replaced whole:
// copied to TO.tmp, checked, renamed). A shard its dataset's manifest names
// (or `manifest`, a local copy fetched before, when not empty) is checked
// against it: what came is the file that was published, or the copy is an
// error and nothing is kept. `to` may not be `from`, nor a file of `from`'s
// dataset or of another dataset.
Status FetchFile(const std::string& from, const std::string& to, const std::string& manifest);

// Copies `from` (a path or a URL: Env::ForPath) to the local file `to`
// (created or truncated); returns its CRC32C. A failed copy removes `to`.
Result<uint32_t> CopyToLocalFile(const std::string& from, const std::string& to,
                                 const Cancel* cancel = nullptr);

}  // namespace shardkit
