// RecordSource: which bytes the loader reads, and reading them. Opens the
// dataset for a rank, picks the shuffle mode and tells the storage how it
// will be read (AccessHints: the storage picks its read path), then wires
// the two halves: a ReadPlanner (the epoch's order, block scheduling and
// read-ahead) and a RecordFetcher (cursors, memo, payload lifetimes), over
// one BlockCache and, for records worth a read each, one ReadQueue.
//
// Threading: Open, StartEpoch and Prepare run on the producer thread (or with
// no producer running); Locate, Fetch, WarmBlock run on the workers between
// Prepare calls, worker w always with cursor w.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "loader/options.h"
#include "loader/read_planner.h"
#include "loader/read_queue.h"
#include "loader/record_fetcher.h"
#include "shard/block_cache.h"
#include "shard/dataset.h"

namespace shardkit {

// The fetches' figures, and the read-ahead queue's.
struct RecordSourceStats : FetchStats {
  bool queued = false;  // reads went through the read queue: `queue` holds its figures
  ReadQueueStats queue;
  // What the storage did since the source opened: requests (object storage:
  // of the whole process), and the node cache's hits and misses.
  StorageCounters storage;
};

class RecordSource {
 public:
  using Cursor = RecordFetcher::Cursor;
  static constexpr int kLivePayloads = RecordFetcher::kLivePayloads;

  // Opens the dataset for `epoch` and `storage` with `workers` cursors:
  // picks the shuffle mode and the access hints, and whether records are
  // read ahead one by one (JPEGs and raw records of kReadAheadMinRecordBytes
  // or more: a read each is worth it).
  static Result<std::unique_ptr<RecordSource>> Open(const std::string& dir,
                                                    const EpochOptions& epoch,
                                                    const StorageOptions& storage, int workers);
  static constexpr size_t kReadAheadMinRecordBytes = 16 << 10;

  const Dataset& dataset() const { return *ds_; }
  const Partition& partition() const { return planner_->partition(); }
  ShuffleMode mode() const { return planner_->mode(); }
  // Why ShuffleMode::kAuto became mode() ("" when a mode was asked for).
  const std::string& shuffle_reason() const { return shuffle_reason_; }
  bool compressed() const { return planner_->compressed(); }
  uint32_t window() const { return planner_->window(); }  // block-local: blocks per window
  Cursor& cursor(int worker) { return fetcher_->cursor(worker); }
  int workers() const { return fetcher_->workers(); }
  // The read-ahead queue, where reads go through it (null otherwise).
  const ReadQueue* read_queue() const { return queue_.get(); }
  RecordSourceStats stats() const;
  void ResetStats();

  // A new epoch's order, starting at batch `start_batch` (of only the
  // positions `rest`, where not null; kGiven: the order given,
  // ReadPlanner::StartEpoch); the old epoch's queued reads are dropped.
  void StartEpoch(uint64_t epoch, uint64_t start_batch,
                  std::shared_ptr<const EpochPositions> rest = nullptr, GivenOrder order = nullptr);
  // Before filling `spans` (ReadPlanner::Prepare); payloads fetched before
  // are released. Then blocks_to_warm() blocks are decompressed first
  // (WarmBlock, one worker each).
  void Prepare(const std::vector<BatchSpan>& spans);
  size_t blocks_to_warm() const { return planner_->blocks_to_warm().size(); }
  void WarmBlock(size_t j, Cursor& c) { fetcher_->Warm(planner_->blocks_to_warm()[j], c); }

  // The rank's i-th sample of the epoch.
  SampleLocation Locate(uint64_t i) const { return planner_->Locate(i); }
  std::vector<uint64_t> EpochRecords(uint64_t epoch) const { return planner_->EpochRecords(epoch); }
  std::vector<uint64_t> Records(uint64_t epoch, uint64_t first_batch,
                                std::shared_ptr<const EpochPositions> rest,
                                GivenOrder order = nullptr) const {
    return planner_->Records(epoch, first_batch, std::move(rest), std::move(order));
  }
  uint64_t CountRecords(uint64_t first_batch, std::shared_ptr<const EpochPositions> rest,
                        GivenOrder order = nullptr) const {
    return planner_->CountRecords(first_batch, std::move(rest), std::move(order));
  }
  int32_t label(const SampleLocation& l) const { return ds_->shard(l.shard).label(l.local); }
  // The manifest's class count (0: unlabelled data); a label must be -1
  // (none) or below it, as VerifyDataset checks.
  size_t num_classes() const { return ds_->manifest().classes.size(); }
  // "shard-00001.sks: record 7 (block 0, offset 5488)", for error messages.
  std::string Where(const SampleLocation& l) const { return ds_->shard(l.shard).Where(l.local); }
  // Prefetches the index entry of `l` into the CPU cache (the next lookups).
  void TouchIndex(const SampleLocation& l) const { ds_->shard(l.shard).PrefetchEntry(l.local); }
  // RecordFetcher::Fetch.
  Status Fetch(Cursor& c, const SampleLocation& l, std::string_view* payload) {
    return fetcher_->Fetch(c, l, payload);
  }

 private:
  RecordSource() = default;

  std::unique_ptr<Env> cache_env_;  // the node cache over object storage, if asked for
  Env* env_ = nullptr;              // what the dataset is read through
  StorageCounters opened_;          // env_'s counters when the source opened
  std::unique_ptr<Dataset> ds_;     // (read through cache_env_: declared after it)
  std::string shuffle_reason_;
  std::unique_ptr<BlockCache> cache_;
  // Declared after ds_: destroyed (its threads joined) before the dataset.
  std::unique_ptr<ReadQueue> queue_;
  std::unique_ptr<ReadPlanner> planner_;
  std::unique_ptr<RecordFetcher> fetcher_;
};

}  // namespace shardkit
