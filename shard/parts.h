// A dataset prepared in parts (--part I/N, a SLURM array's tasks): which part
// a command writes, and the shards and records that part holds. Every tool
// that writes parts (shardkit-pack, shardkit-augment) splits the same way, so
// `shardkit-pack merge` joins any of them into the one-process bytes.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace shardkit {

// The most parts a dataset may be prepared in (a merge reads every part.json).
inline constexpr uint32_t kMaxParts = 100000;

// --part I/N: part I (0-based) of N. count 0: the whole output.
struct PartSpec {
  uint32_t index = 0, count = 0;
  bool whole() const { return count == 0; }
};

// "I/N" with 0 <= I < N <= kMaxParts, decimal digits only; InvalidArgument
// saying what is wrong otherwise (the message does not name the flag).
Result<PartSpec> ParsePart(std::string_view text);

// The shards [first_shard, end_shard) and records [first_record, end_record)
// a part writes: the one-process run's shards split as evenly as whole shards
// allow, so a part's files have the names and bytes the whole's would.
struct PartRange {
  uint64_t first_shard = 0, end_shard = 0, first_record = 0, end_record = 0;
  uint64_t shards() const { return end_shard - first_shard; }
  uint64_t records() const { return end_record - first_record; }
};

// InvalidArgument if the output has fewer shards than parts (a part would be
// empty); the whole output for part.whole().
Result<PartRange> SplitIntoParts(PartSpec part, uint64_t total_records, uint64_t records_per_shard);

}  // namespace shardkit
