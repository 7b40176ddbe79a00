// RecordFetcher: a record's bytes, for the workers. A stored record is read
// with one read of its bytes (or taken from the ReadQueue, which read it
// ahead); a record of a compressed block is a slice of the block,
// decompressed once into the BlockCache and remembered by the worker's cursor
// (its memo). States how long a payload lives, and keeps it alive that long.
//
// Threading: Fetch and Warm on the workers, worker w always with cursor w;
// ReleaseEvicted between fills (no worker fetching).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "loader/read_planner.h"
#include "loader/read_queue.h"
#include "shard/block_cache.h"
#include "shard/dataset.h"

namespace shardkit {

// Seconds summed over workers, and bytes read.
struct FetchStats {
  double read_s = 0, decompress_s = 0;
  uint64_t bytes = 0;
};

class RecordFetcher {
 public:
  // A payload from Fetch stays valid (unchanged, its memory held) during the
  // next kLivePayloads - 1 Fetch calls with the same cursor, and until the
  // next ReleaseEvicted: a worker may keep that many payloads in flight,
  // fetched ahead of the one it decodes. Stored records are read into the
  // cursor's buffers in rotation, and a block a memo slot lets go of while
  // one of those payloads may point into it is retired into a ring of as
  // many, never freed under a payload (others go back to the cache's pool at
  // once).
  static constexpr int kLivePayloads = 5;

  // A worker's reading state: buffers, the blocks it last used, counters.
  struct Cursor {
    ReadScratch scratch;  // block reads for decompression
    struct Memo {
      uint64_t key = ~uint64_t{0};
      uint64_t last_use = 0;  // the cursor's fetch that last sliced this block
      std::shared_ptr<BlockCache::Block> block;
    };
    static constexpr size_t kMemoSlots = 32;
    Memo memo[kMemoSlots];
    struct StoredBuffer {
      ReadScratch scratch;       // a stored record read by the worker
      std::vector<char> queued;  // or taken from the read queue
    };
    StoredBuffer stored[kLivePayloads];
    std::shared_ptr<BlockCache::Block> retired[kLivePayloads];
    unsigned next_stored = 0, next_retired = 0;
    uint64_t fetches = 0;  // Fetch calls so far: payloads of the last kLivePayloads are live
    std::atomic<uint64_t> read_ns{0}, decompress_ns{0}, bytes{0};
  };

  // queue: where stored records read ahead wait (null: none).
  RecordFetcher(const Dataset* dataset, BlockCache* cache, ReadQueue* queue, int workers);

  Cursor& cursor(int worker) { return *cursors_[static_cast<size_t>(worker)]; }
  const Cursor& cursor(int worker) const { return *cursors_[static_cast<size_t>(worker)]; }
  int workers() const { return static_cast<int>(cursors_.size()); }

  // Fetches the record's payload into *payload (checksum verified), valid
  // as kLivePayloads says.
  Status Fetch(Cursor& c, const SampleLocation& l, std::string_view* payload);
  // Decompresses block b into the cache (if no other worker has), so that
  // the fetches after it slice it. Errors stay with the block: its records'
  // fetches return them.
  void Warm(BlockRef b, Cursor& c);
  // Between fills: no payload lives on, and cursors let go of blocks the
  // cache has dropped.
  void ReleaseEvicted();

  FetchStats stats() const;
  void ResetStats();

 private:
  Status FetchSlow(Cursor& c, const SampleLocation& l, std::string_view* payload);
  // A memo miss: the block from the cache (decompressed by this call or
  // another worker), or its error with the memo slot cleared.
  Status FillMemo(Cursor& c, uint32_t shard, uint32_t block, uint64_t key, Cursor::Memo* m);
  // The block from the cache, with the time and bytes of its decompression
  // counted if this call did it.
  std::shared_ptr<BlockCache::Block> GetBlock(Cursor& c, uint32_t shard, uint32_t block);
  static size_t MemoSlot(uint64_t key) { return (key ^ (key >> 29)) % Cursor::kMemoSlots; }

  const Dataset* ds_;
  BlockCache* cache_;
  ReadQueue* queue_;
  std::vector<std::unique_ptr<Cursor>> cursors_;
};

// The common case, a record of a block the cursor's memo holds, is inline in
// the workers' loop; a stored record or a memo miss calls out of line.
inline Status RecordFetcher::Fetch(Cursor& c, const SampleLocation& l, std::string_view* payload) {
  ++c.fetches;
  const ShardReader& r = ds_->shard(l.shard);
  format::RecordEntry e;
  if (__builtin_expect(!r.entry(l.local, &e), 0)) return r.CheckRecord(l.local);
  if (__builtin_expect(r.block(e.block).codec != static_cast<uint32_t>(format::Codec::kStored),
                       1)) {
    const uint64_t key = BlockCache::MakeKey(l.shard, e.block);
    Cursor::Memo& m = c.memo[MemoSlot(key)];
    if (__builtin_expect(m.key == key && m.block != nullptr, 1)) {
      // The block passed its CRC (stored bytes) and decompressed to exactly its
      // declared size, so its records are what was written: slice, no second CRC.
      *payload = m.block->view().substr(e.offset, e.length);
      m.last_use = c.fetches;
      return Status::OK();
    }
  }
  return FetchSlow(c, l, payload);
}

}  // namespace shardkit
