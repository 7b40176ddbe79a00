// RecordSource: which bytes the loader reads, and reading them. Turns the
// rank's positions in an epoch (EpochSampler + Partition) into records of
// shards, fetches their payloads (one pread per stored record, or a slice of
// a decompressed block from the BlockCache), and schedules storage ahead of
// the workers: blocks to decompress in parallel, read-ahead hints for the
// next batches, block-local windows materialised while they are read.
//
// Threading: Open, StartEpoch and Prepare run on the producer thread (or with
// no producer running); Locate, Fetch, WarmBlock run on the workers between
// Prepare calls, worker w always with cursor w.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/names.h"
#include "base/status.h"
#include "loader/block_cache.h"
#include "loader/read_queue.h"
#include "loader/sampler.h"
#include "shard/dataset.h"

namespace shardkit {

// Full shuffle: read records with O_DIRECT (see RecordSourceOptions).
enum class DirectReads { kAuto, kAlways, kNever };
inline constexpr EnumName<DirectReads> kDirectReadsNames[] = {
    {DirectReads::kAuto, "auto"}, {DirectReads::kAlways, "on"}, {DirectReads::kNever, "off"}};

// How a rank reads its share of a dataset (the loader's options that concern
// bytes; LoaderOptions documents each).
struct RecordSourceOptions {
  int rank = 0;
  int world_size = 1;
  uint64_t batch_size = 32;
  bool drop_last = false;
  uint64_t seed = 0;
  ShuffleMode shuffle = ShuffleMode::kAuto;
  uint32_t block_window = 32;
  uint64_t block_cache_bytes = 1ull << 30;
  bool mmap = true;
  DirectReads direct_reads = DirectReads::kAuto;
  int read_depth = 32;
  uint64_t read_ahead_bytes = 64ull << 20;
  int workers = 1;  // cursors: one per worker thread
};

// Seconds summed over workers, bytes read, and the read-ahead queue's figures.
struct RecordSourceStats {
  double read_s = 0, decompress_s = 0;
  uint64_t bytes = 0;
  bool queued = false;  // reads went through the read queue: `queue` holds its figures
  ReadQueueStats queue;
};

// Batches [k, k + n) about to be filled: batch k's samples are the rank's
// samples [base, base + size).
struct BatchSpan {
  uint64_t k = 0, base = 0;
  int size = 0;
};

// One sample of the rank's epoch and where its record lives.
struct SampleLocation {
  uint64_t position = 0;  // in the epoch's order
  uint64_t record = 0;    // global record number
  uint32_t shard = 0, local = 0;
};

class RecordSource {
 public:
  // A payload from Fetch stays valid (unchanged, its memory held) during the
  // next kLivePayloads - 1 Fetch calls with the same cursor, and until the
  // next Prepare: a worker may keep that many payloads in flight, fetched
  // ahead of the one it decodes. Stored records are read into the cursor's
  // buffers in rotation, and a block a memo slot lets go of while one of
  // those payloads may point into it is retired into a ring of as many,
  // never freed under a payload (others go back to the cache's pool at once).
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

  // Opens the dataset for `options`: picks the shuffle mode and the read
  // path, and whether records are read ahead one by one (JPEGs and raw
  // records of kReadAheadMinRecordBytes or more: a read each is worth it).
  static Result<std::unique_ptr<RecordSource>> Open(const std::string& dir,
                                                    const RecordSourceOptions& options);
  static constexpr size_t kReadAheadMinRecordBytes = 16 << 10;

  const Dataset& dataset() const { return *ds_; }
  const Partition& partition() const { return part_; }
  ShuffleMode mode() const { return mode_; }
  bool compressed() const { return compressed_; }
  uint32_t window() const { return window_; }  // block-local: blocks per window
  Cursor& cursor(int worker) { return *cursors_[static_cast<size_t>(worker)]; }
  const Cursor& cursor(int worker) const { return *cursors_[static_cast<size_t>(worker)]; }
  int workers() const { return static_cast<int>(cursors_.size()); }
  // The read-ahead queue, where reads go through it (null otherwise).
  const ReadQueue* read_queue() const { return queue_.get(); }
  RecordSourceStats stats() const;
  void ResetStats();

  // A new epoch's order, starting at batch `start_batch`.
  void StartEpoch(uint64_t epoch, uint64_t start_batch);

  // Before filling `spans` (consecutive batches): materialises the windows
  // they read, schedules the blocks they and the next ones need, starts
  // read-ahead, and lets the cursors drop evicted blocks. Then blocks_to_warm()
  // lists the blocks to decompress (WarmBlock, one worker each) first.
  void Prepare(const std::vector<BatchSpan>& spans);
  size_t blocks_to_warm() const { return warm_.size(); }
  void WarmBlock(size_t j, Cursor& c);

  // The rank's i-th sample of the epoch.
  SampleLocation Locate(uint64_t i) const {
    SampleLocation l;
    l.position = part_.Position(i);
    l.record = RecordAt(l.position);
    std::tie(l.shard, l.local) = ds_->Locate(l.record);
    return l;
  }
  int32_t label(const SampleLocation& l) const { return ds_->shard(l.shard).record(l.local).label; }
  // "shard-00001.sks: record 7 (block 0, offset 5488)", for error messages.
  std::string Where(const SampleLocation& l) const { return ds_->shard(l.shard).Where(l.local); }
  // Prefetches the index entry of `l` into the CPU cache (the next lookups).
  void TouchIndex(const SampleLocation& l) const {
    __builtin_prefetch(&ds_->shard(l.shard).record(l.local));
  }

  // Fetches the record's payload into *payload (checksum verified), valid
  // as kLivePayloads says.
  Status Fetch(Cursor& c, const SampleLocation& l, std::string_view* payload);

 private:
  RecordSource() = default;
  // The record at `position`: from a live window if one holds it, else the sampler.
  uint64_t RecordAt(uint64_t position) const {
    for (const LiveWindow& lw : live_) {
      if (position >= lw.begin && position < lw.end) return lw.records[position - lw.begin];
    }
    return sampler_->RecordAt(position);
  }
  Status FetchSlow(Cursor& c, const SampleLocation& l, std::string_view* payload);
  void PrepareWindows(const std::vector<BatchSpan>& spans);
  void ScheduleBlocks(uint64_t k);
  void ReadAhead(const std::vector<BatchSpan>& spans);
  bool QueueIsSlower(uint64_t k);
  void ReleaseEvicted();
  // A memo miss: the block from the cache (decompressed by this call or
  // another worker), or its error with the memo slot cleared.
  Status FillMemo(Cursor& c, uint32_t shard, uint32_t block, uint64_t key, Cursor::Memo* m);
  static size_t MemoSlot(uint64_t key) { return (key ^ (key >> 29)) % Cursor::kMemoSlots; }

  std::unique_ptr<Dataset> ds_;
  std::unique_ptr<BlockCache> cache_;
  std::vector<std::unique_ptr<Cursor>> cursors_;
  Partition part_;
  ShuffleMode mode_ = ShuffleMode::kFull;
  uint64_t seed_ = 0;
  bool compressed_ = false;
  bool direct_ = false;  // records read with O_DIRECT: no page cache to read ahead into
  bool read_ahead_records_ = true;
  std::vector<uint32_t> block_sizes_;
  std::vector<std::pair<uint32_t, uint32_t>> global_blocks_;  // dataset block -> (shard, block)
  uint32_t window_ = 1;
  uint64_t max_warm_ = 1;  // blocks decompressed ahead per batch, at most
  int workers_ = 1;
  // Declared after ds_: destroyed (its threads joined) before the dataset.
  std::unique_ptr<ReadQueue> queue_;
  bool queue_fast_ = false;  // recent queued reads were faster than its hand-off
  uint64_t probe_reads_ = 0;
  double probe_seconds_ = 0;

  // Epoch state.
  std::unique_ptr<EpochSampler> sampler_;
  uint64_t scan_next_ = 0;        // samples before it have had their blocks scheduled
  uint64_t read_ahead_next_ = 0;  // full shuffle: first batch not yet read ahead
  uint64_t read_ahead_pos_ = 0;   // otherwise: first sample whose blocks are not read ahead
  std::unordered_set<uint64_t> scheduled_;
  std::deque<uint64_t> ahead_;  // first positions of scheduled blocks past the current batch
  std::vector<std::pair<uint32_t, uint32_t>> warm_;  // (shard, block) to decompress now
  std::vector<uint32_t> segment_;
  // Block-local: the materialised windows the batches being filled read.
  struct LiveWindow {
    size_t w = 0;
    uint64_t begin = 0, end = 0;
    std::vector<uint64_t> records;
  };
  std::vector<LiveWindow> live_, spare_live_;
};

// The common case, a record of a block the cursor's memo holds, is inline in
// the workers' loop; a stored record or a memo miss calls out of line.
inline Status RecordSource::Fetch(Cursor& c, const SampleLocation& l, std::string_view* payload) {
  ++c.fetches;
  const ShardReader& r = ds_->shard(l.shard);
  const format::RecordEntry& e = r.record(l.local);
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
