// ReadPlanner: the order of a rank's epoch and what storage should do for
// it. Turns the rank's positions (Partition) into records (EpochSampler, with
// block-local windows materialised while their batches are filled), and
// before each fill schedules storage ahead of the workers: blocks to
// decompress in parallel, read-ahead hints, reads queued on the ReadQueue.
// It knows where records are and never reads their bytes (RecordFetcher does).
//
// Threading: StartEpoch and Prepare on the producer thread (or with no
// producer running); Locate from the workers between Prepare calls.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "loader/read_queue.h"
#include "loader/sampler.h"
#include "shard/block_cache.h"
#include "shard/dataset.h"

namespace shardkit {

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

// A block of a shard.
struct BlockRef {
  uint32_t shard = 0, block = 0;
};

// The dataset's blocks in dataset order (all shards' blocks concatenated).
struct BlockLayout {
  std::vector<uint32_t> sizes;   // records per block
  std::vector<BlockRef> blocks;  // dataset block -> (shard, block)
  bool compressed = false;       // some block is not stored
  uint64_t max_raw_bytes = 1;    // the largest block, decompressed
  static BlockLayout Of(const Dataset& ds);
};

class ReadPlanner {
 public:
  // Queued reads (ReadQueue) faster than this on average (page cache, local
  // NVMe) gain nothing from the queue and cost its hand-off: batches are then
  // read by their workers (with read-ahead hints), and every kProbeEvery-th
  // batch goes through the queue again, so that storage turning slow (or
  // fast) is noticed; the decision is taken at each probe batch from the
  // reads (at least kMinProbeReads) timed since the previous decision.
  static constexpr double kFastReadSeconds = 250e-6;
  static constexpr uint64_t kProbeEvery = 8;
  static constexpr uint64_t kMinProbeReads = 16;

  struct Setup {
    const Dataset* dataset = nullptr;
    const BlockCache* cache = nullptr;  // which blocks are decompressed already
    ReadQueue* queue = nullptr;         // where stored records are read ahead (or null)
    BlockLayout layout;
    Partition partition;                    // the rank's cut of a whole epoch
    ShuffleMode mode = ShuffleMode::kFull;  // never kAuto
    uint64_t seed = 0;
    uint32_t window = 1;    // block-local: blocks per window
    uint64_t max_warm = 1;  // blocks decompressed ahead per batch, at most
    int workers = 1;
    // Stored records worth a read each (JPEGs, large raw records): read
    // ahead one by one (queued, or hinted record by record).
    bool read_ahead_records = true;
  };
  explicit ReadPlanner(Setup setup);

  // This epoch's cut: the whole epoch's, or of the positions left of it.
  const Partition& partition() const { return part_; }
  ShuffleMode mode() const { return s_.mode; }
  bool compressed() const { return s_.layout.compressed; }
  uint32_t window() const { return s_.window; }

  // A new epoch's order, starting at batch `start_batch`; `rest`: only
  // these of its positions, cut as the rank's partition says (a resume on
  // another world or batch size); null: all of them. `order`: the epoch's
  // given order, not null exactly when the mode is kGiven; its positions
  // are cut into batches as the partition's batch size and drop_last say
  // (rank 0 of 1: a given order is the rank's already).
  void StartEpoch(uint64_t epoch, uint64_t start_batch,
                  std::shared_ptr<const EpochPositions> rest = nullptr, GivenOrder order = nullptr);
  // Before filling `spans` (consecutive batches): materialises the windows
  // they read, schedules the blocks they and the next ones need and starts
  // reading ahead. Then blocks_to_warm() lists the blocks to decompress
  // first (one worker each).
  void Prepare(const std::vector<BatchSpan>& spans);
  const std::vector<BlockRef>& blocks_to_warm() const { return warm_; }

  // The records the rank reads in epoch `epoch` from batch `first_batch` on
  // (of only the positions `rest`, where not null, cut as StartEpoch cuts
  // them; kGiven: of `order`, none without one), padding included: the
  // batches' sample ids, in order, located without reading anything.
  // Thread-safe; independent of the epoch in progress. EpochRecords: a
  // whole epoch's.
  std::vector<uint64_t> Records(uint64_t epoch, uint64_t first_batch,
                                std::shared_ptr<const EpochPositions> rest,
                                GivenOrder order = nullptr) const;
  // How many Records gives, without locating them.
  uint64_t CountRecords(uint64_t first_batch, std::shared_ptr<const EpochPositions> rest,
                        GivenOrder order = nullptr) const;
  std::vector<uint64_t> EpochRecords(uint64_t epoch) const { return Records(epoch, 0, nullptr); }
  // The rank's i-th sample of the epoch: the one place a record is located.
  SampleLocation Locate(uint64_t i) const {
    SampleLocation l;
    l.position = part_.Position(i);
    l.record = RecordAt(l.position);
    std::tie(l.shard, l.local) = s_.dataset->Locate(l.record);
    return l;
  }

 private:
  // The record at epoch position `position`: from a live window if one holds
  // it (block-local), else the sampler.
  uint64_t RecordAt(uint64_t position) const {
    for (const LiveWindow& lw : live_) {
      if (position >= lw.begin && position < lw.end) return lw.records[position - lw.begin];
    }
    return sampler_->RecordAt(position);
  }
  void PrepareWindows(const std::vector<BatchSpan>& spans);
  void ScheduleBlocks(uint64_t k);
  void ReadAhead(const std::vector<BatchSpan>& spans);
  void QueueRecords(const std::vector<BatchSpan>& spans);
  void HintBlocks(const std::vector<BatchSpan>& spans);
  void HintRecords(uint64_t k);
  bool WorkersReadBatch(uint64_t k);
  void FetchBlocksAhead(const std::vector<BatchSpan>& spans);
  void FetchBlocks(std::vector<BlockRef>* blocks) const;
  // The epoch's cut: of `order` where given, else of the whole epoch (or `rest` of it).
  Partition CutOf(std::shared_ptr<const EpochPositions> rest, const GivenOrder& order) const;
  // Whether any position may need any block (a full shuffle, a given order):
  // blocks are then decompressed on first use and records read one by one.
  bool random_order() const {
    return s_.mode == ShuffleMode::kFull || s_.mode == ShuffleMode::kGiven;
  }

  const Setup s_;
  const bool uncached_;  // reads bypass every cache: nothing to read ahead into
  const bool remote_;    // each read is a request to remote storage (Env::remote)
  // The queue's figures at the last probe (WorkersReadBatch).
  bool queue_fast_ = false;  // recent queued reads were faster than its hand-off
  uint64_t probe_reads_ = 0;
  double probe_seconds_ = 0;

  // Epoch state.
  Partition part_;
  std::unique_ptr<EpochSampler> sampler_;
  uint64_t scan_next_ = 0;        // samples before it have had their blocks scheduled
  uint64_t read_ahead_next_ = 0;  // records read ahead one by one: first batch not yet
  uint64_t read_ahead_pos_ = 0;   // otherwise: first sample whose blocks are not read ahead
  uint64_t fetched_ahead_ = 0;    // remote, full shuffle: first batch whose blocks are not fetched
  std::unordered_set<uint64_t> scheduled_;
  std::deque<uint64_t> ahead_;  // first positions of scheduled blocks past the current batch
  std::vector<BlockRef> warm_;  // to decompress now
  std::vector<uint32_t> segment_;
  std::vector<BlockRef> remote_blocks_;
  // Block-local: the materialised windows the batches being filled read.
  struct LiveWindow {
    size_t w = 0;
    uint64_t begin = 0, end = 0;
    std::vector<uint64_t> records;
  };
  std::vector<LiveWindow> live_, spare_live_;
};

}  // namespace shardkit
