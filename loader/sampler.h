// EpochSampler: which record each position of an epoch holds, and how a rank's
// share of an epoch is cut. Order depends only on (dataset layout, mode, seed,
// epoch). A full shuffle maps a position to a record in O(1) without
// materialising the permutation (a keyed Feistel network with cycle walking),
// so shuffling 72M samples costs no memory. A block-local shuffle is
// materialised one window at a time (a keyed Fisher-Yates over the window's
// records, a few nanoseconds per record instead of a Feistel evaluation per
// sample): memory is bounded by the window, not the dataset.
#pragma once

#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

#include "base/names.h"
#include "base/random.h"
#include "base/status.h"
#include "loader/options.h"

namespace shardkit {

class EpochSampler {
 public:
  // block_sizes: the number of records of each block, in dataset order (all
  // shards' blocks concatenated); records are numbered through them.
  EpochSampler(const std::vector<uint32_t>& block_sizes, ShuffleMode mode, uint64_t seed,
               uint64_t epoch, uint32_t window);
  uint64_t size() const { return n_; }
  // The record at `position` of this epoch's order; position < size().
  uint64_t RecordAt(uint64_t position) const {
    if (mode_ == ShuffleMode::kFull) return full_(position);
    if (mode_ == ShuffleMode::kBlockLocal) return WindowRecordAt(position);
    return position;
  }
  // For kNone and kBlockLocal: the segment of the order that holds `position`
  // (one block, or one window of blocks): its end position and the blocks
  // (dataset order numbers) whose records it holds. Returns false for kFull,
  // where any position may need any block.
  bool Segment(uint64_t position, uint64_t* end, std::vector<uint32_t>* blocks) const;

  // kBlockLocal: the window that holds `position`, its positions [begin, end),
  // and its records in epoch order (records->size() == end - begin). The
  // loader materialises the windows it is reading with WindowRecords; RecordAt
  // keeps the last window it built (thread-safe, for occasional lookups).
  size_t WindowOf(uint64_t position) const;
  uint64_t window_begin(size_t w) const { return window_start_[w]; }
  uint64_t window_end(size_t w) const { return window_start_[w + 1]; }
  void WindowRecords(size_t w, std::vector<uint64_t>* records) const;

 private:
  uint64_t WindowRecordAt(uint64_t position) const;
  ShuffleMode mode_;
  uint64_t n_ = 0;
  KeyedPermutation full_;
  // Block-local: the blocks in shuffled order, grouped in windows.
  std::vector<uint64_t> block_first_;   // first record of each block (dataset order)
  std::vector<uint32_t> order_;         // shuffled block order
  std::vector<uint64_t> window_start_;  // position where each window starts (+ end)
  uint32_t window_;
  uint64_t seed_ = 0, epoch_ = 0;
  std::vector<uint32_t> block_sizes_;
  mutable std::mutex last_mu_;  // RecordAt's one-window cache
  mutable size_t last_window_ = ~size_t{0};
  mutable std::vector<uint64_t> last_records_;
};

// How one rank's share of an epoch is cut, the same for every rank, so that
// DDP never waits at the end of an epoch for a rank with fewer batches.
//   drop_last = false: each rank gets ceil(N / world) samples; the shortfall
//     is padded with the first positions of the epoch (as DistributedSampler
//     does); the last batch may be partial.
//   drop_last = true: each rank gets floor(N / world) samples (the tail of the
//     order is dropped) and only full batches.
// Strided (the default, DistributedSampler's layout): rank r holds positions
// r, r + world, r + 2 world, ... so that batch b of all ranks together is batch
// b of one rank with world times the batch. Contiguous (for block-local
// shuffling, where locality matters): rank r holds [r * per_rank, (r+1) * per_rank).
struct Partition {
  uint64_t per_rank = 0;
  uint64_t real = 0;  // of per_rank, the samples that are not padding (they come first)
  uint64_t batches = 0;
  uint64_t batch_size = 0;
  bool drop_last = false;
  bool strided = true;
  int rank = 0, world_size = 1;
  uint64_t n = 0;

  static Result<Partition> Make(uint64_t n, int rank, int world_size, uint64_t batch_size,
                                bool drop_last, bool strided = true);
  // Epoch position of the rank's i-th sample, i < per_rank.
  uint64_t Position(uint64_t i) const {
    const uint64_t w = static_cast<uint64_t>(world_size), r = static_cast<uint64_t>(rank);
    // Below 2n except when world > n: one subtraction instead of a division.
    const uint64_t v = strided ? i * w + r : r * per_rank + i;
    return v < n ? v : (v < 2 * n ? v - n : v % n);
  }
  // Samples in batch b (b < batches), and how many of them are not padding.
  uint64_t BatchLength(uint64_t b) const;
  uint64_t BatchRealLength(uint64_t b) const;
};

}  // namespace shardkit
