// RecordReader: a dataset's records by number, in any order, each read
// costing a record, not a block. A record of a compressed block is sliced
// from the block, decompressed once into memory the reader's callers share,
// bounded in bytes: where every block's decompressed bytes fit the bound, one
// shared mapping that a process and the children it forks after making the
// reader (a torch DataLoader's workers, epoch after epoch) fill together, each
// block once; otherwise a BlockCache per process, oldest blocks dropped first.
// So reading a block's records one by one, in order or at random,
// decompresses (and, from object storage, fetches) it once while it stays
// in memory; a record of a stored block is one read of its own bytes. What is read is checked as
// the loader checks it: a stored record against its own checksum, a compressed block against its
// checksum and its declared size when it is read (its records are then what was written: they are
// sliced without a second checksum).
//
// Threading: Read from any number of threads and processes forked after
// the reader was made. A forked child gets an empty cache of its own: the
// parent's, which another of its threads may have been changing at the fork,
// is left as it was, never touched; the shared mapping needs no lock (a
// block being filled by one process is read into its own cache by another,
// never waited for).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "shard/block_cache.h"
#include "shard/dataset.h"

namespace shardkit {

class RecordReader {
 public:
  // The default bound of the cache: as the loader's (LoaderOptions).
  static constexpr uint64_t kDefaultCacheBytes = 256ull << 20;

  // Reads `dataset` (which must outlive the reader), keeping at most
  // cache_bytes of decompressed blocks (and always the one being read).
  RecordReader(const Dataset* dataset, uint64_t cache_bytes = kDefaultCacheBytes);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // A record's bytes, and what keeps them alive while the Record lives (and
  // the reader: a Record must not outlive it): the cached block it lies in,
  // or its own buffer.
  struct Record {
    std::string_view payload;
    std::shared_ptr<const BlockCache::Block> block;
    std::vector<char> bytes;
  };
  // Record `global` (< the dataset's num_records()) into *out, checked.
  // Errors name the shard and record.
  Status Read(uint64_t global, Record* out) const;
  // The same where that needs no storage and no wait (the record's block is
  // cached and ready): true with *out filled; false otherwise (then Read).
  // For callers that give up a lock (Python's GIL) only around slow reads.
  bool ReadCached(uint64_t global, Record* out) const;

  // Blocks this process decompressed for reads so far (a child counts from
  // its fork; a block a sibling or the parent put in the shared mapping
  // counts for that one).
  uint64_t blocks_decompressed() const;

 private:
  struct State;
  struct Arena;
  static std::unique_ptr<Arena> MakeArena(const Dataset& ds, uint64_t bound);
  // This process's state (a forked child makes its own at its first use).
  State* Live() const;

  const Dataset* ds_;
  const uint64_t cache_bytes_;
  const std::unique_ptr<Arena> arena_;  // every block, shared with forks; null: the cache
  mutable std::atomic<State*> state_;
};

}  // namespace shardkit
