// MergeParts: the parts of a dataset prepared in pieces (--part I/N, each a
// directory of shards and part.json) joined into one dataset, the same bytes
// a one-process run writes. The parts are checked against each other before
// anything is written (all N there once, made with the same settings, their
// records and shards following each other), every shard against its part's
// part.json as it is taken (size, CRC32C, record count), and the manifest is
// written last: a merge that fails leaves OUT as it found it, with no
// manifest.json of its own. Parts are only read: their shards are hard-linked
// into OUT where the filesystem allows, else copied. Prints nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace shardkit {

struct MergeOptions {
  std::string out;
  std::vector<std::string> parts;  // directories, in any order
  bool force = false;              // replace a dataset in OUT (kept until done)
  std::string merged_by = "{}";    // JSON object: who merged (added to part 0's created_by)
  // Checked between shards; once true the merge stops, cleans up, returns Aborted.
  const std::atomic<bool>* interrupt = nullptr;
};

struct MergeSummary {
  uint64_t parts = 0, shards = 0, records = 0, bytes = 0;
  uint64_t linked = 0, copied = 0;  // shards
  double seconds = 0;
};

// Shards taken so far of `total`, and their bytes; `final` once at the end.
using MergeProgress =
    std::function<void(uint64_t done, uint64_t total, uint64_t bytes, bool final)>;

// Errors name the part directory (or its shard) and what is wrong with it:
// NotFound for a missing part.json or shard, Corruption for a shard that is
// not what part.json says, InvalidArgument for parts that do not make one
// dataset (overlapping, missing, made with other settings).
Status MergeParts(const MergeOptions& options, const MergeProgress& progress,
                  MergeSummary* summary);

}  // namespace shardkit
