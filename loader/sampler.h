// EpochSampler: which record each position of an epoch holds, and how a rank's
// share of an epoch is cut. Order depends only on (dataset layout, mode, seed,
// epoch). A full shuffle maps a position to a record in O(1) without
// materialising the permutation (a keyed Feistel network with cycle walking),
// so shuffling 72M samples costs no memory. A block-local shuffle is
// materialised one window at a time (a keyed Fisher-Yates over the window's
// records, a few nanoseconds per record instead of a Feistel evaluation per
// sample): memory is bounded by the window, not the dataset. A given order
// (ShuffleMode::kGiven: a sampler's indices) is held as given, shared.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "base/names.h"
#include "base/random.h"
#include "base/status.h"
#include "loader/options.h"

namespace shardkit {

// An epoch's order given by the caller (ShuffleMode::kGiven): global record
// numbers, this rank's, in the order they are read; repeats allowed (a
// sampler drawing with replacement). Immutable once given: the loader, its
// planner and a saved state share it.
using GivenOrder = std::shared_ptr<const std::vector<uint64_t>>;

class EpochSampler {
 public:
  // block_sizes: the number of records of each block, in dataset order (all
  // shards' blocks concatenated); records are numbered through them. `mode`
  // is not kAuto or kGiven.
  EpochSampler(const std::vector<uint32_t>& block_sizes, ShuffleMode mode, uint64_t seed,
               uint64_t epoch, uint32_t window);
  // ShuffleMode::kGiven: position p holds (*order)[p]; `order` is not null.
  explicit EpochSampler(GivenOrder order);
  uint64_t size() const { return n_; }
  // The record at `position` of this epoch's order; position < size().
  uint64_t RecordAt(uint64_t position) const {
    if (mode_ == ShuffleMode::kFull) return full_(position);
    if (mode_ == ShuffleMode::kBlockLocal) return WindowRecordAt(position);
    if (mode_ == ShuffleMode::kGiven) return (*given_)[position];
    return position;
  }
  // For kNone and kBlockLocal: the segment of the order that holds `position`
  // (one block, or one window of blocks): its end position and the blocks
  // (dataset order numbers) whose records it holds. Returns false for kFull
  // and kGiven, where any position may need any block.
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
  GivenOrder given_;
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

// EpochPositions: some of an epoch's positions, in order, as sorted disjoint
// ranges [begin, end): what is left of an epoch when it is resumed on another
// world or batch size (Partition::Remaining). Index j names the j-th of them.
class EpochPositions {
 public:
  using Range = std::pair<uint64_t, uint64_t>;
  // Checks that `ranges` are non-empty, sorted, disjoint and end by `n`.
  static Result<EpochPositions> Make(std::vector<Range> ranges, uint64_t n);
  static EpochPositions Whole(uint64_t n);
  uint64_t size() const { return size_; }
  const std::vector<Range>& ranges() const { return ranges_; }
  // The j-th position, j < size().
  uint64_t At(uint64_t j) const {
    if (ranges_.size() == 1) return ranges_[0].first + j;
    const size_t r = RangeOf(j);
    return ranges_[r].first + (j - first_[r]);
  }
  // How many positions from index j on follow each other (j, j+1, ... hold
  // At(j), At(j)+1, ...): up to the end of j's range.
  uint64_t RunFrom(uint64_t j) const {
    const size_t r = RangeOf(j);
    return first_[r] + (ranges_[r].second - ranges_[r].first) - j;
  }
  // These positions without the ones at the indices of `gone` (sorted,
  // disjoint index ranges).
  EpochPositions Without(const std::vector<Range>& gone) const;

 private:
  size_t RangeOf(uint64_t j) const;
  std::vector<Range> ranges_;
  std::vector<uint64_t> first_;  // the index of each range's first position
  uint64_t size_ = 0;
};

// How one rank's share of an epoch is cut, the same for every rank, so that
// DDP never waits at the end of an epoch for a rank with fewer batches. What
// is cut is the epoch's N positions, or after a resume on another world or
// batch size the positions left of it (`rest`); below, N is their number.
//   drop_last = false: each rank gets ceil(N / world) samples; the shortfall
//     is padded with the first positions of the epoch (as DistributedSampler
//     does); the last batch may be partial.
//   drop_last = true: each rank gets floor(N / world) samples (the tail of the
//     order is dropped) and only full batches.
// Strided (the default, DistributedSampler's layout): rank r holds positions
// r, r + world, r + 2 world, ... so that batch b of all ranks together is batch
// b of one rank with world times the batch. Contiguous (for block-local
// shuffling, where locality matters): rank r holds [r * per_rank, (r+1) * per_rank).
// The order itself (EpochSampler) never depends on the world size: after k
// batches of every rank, the positions read are a fixed set, and what remains
// (Remaining) can be cut again for any world and batch size.
struct Partition {
  uint64_t per_rank = 0;
  uint64_t real = 0;  // of per_rank, the samples that are not padding (they come first)
  uint64_t batches = 0;
  uint64_t batch_size = 0;
  bool drop_last = false;
  bool strided = true;
  int rank = 0, world_size = 1;
  uint64_t n = 0;                              // positions cut: the epoch's, or rest's
  std::shared_ptr<const EpochPositions> rest;  // null: the whole epoch [0, n)

  // A whole epoch of n records; refused when a rank would get no batch.
  static Result<Partition> Make(uint64_t n, int rank, int world_size, uint64_t batch_size,
                                bool drop_last, bool strided = true);
  // The same cut of `rest` (null: the whole epoch of n); may have no batch.
  // rank, world_size and batch_size must be valid (Make checks them).
  static Partition Cut(uint64_t n, std::shared_ptr<const EpochPositions> rest, int rank,
                       int world_size, uint64_t batch_size, bool drop_last, bool strided);
  // Epoch position of the rank's i-th sample, i < per_rank.
  uint64_t Position(uint64_t i) const {
    const uint64_t j = Index(i);
    return rest ? rest->At(j) : j;
  }
  // How many of the rank's samples from i on have consecutive positions below
  // `end` (at least 1): block scheduling walks a segment at a time with it.
  uint64_t Steps(uint64_t i, uint64_t end) const;
  // Samples in batch b (b < batches), and how many of them are not padding.
  uint64_t BatchLength(uint64_t b) const;
  uint64_t BatchRealLength(uint64_t b) const;
  // The positions every rank has read after its first k batches (padding
  // aside), and the ones left, which a resume on another world or batch
  // size cuts again. Every rank gives the same answer.
  EpochPositions Remaining(uint64_t k) const;

 private:
  // Index (among the n positions cut) of the rank's i-th sample: below n,
  // wrapping for padding.
  uint64_t Index(uint64_t i) const {
    const uint64_t w = static_cast<uint64_t>(world_size), r = static_cast<uint64_t>(rank);
    // Below 2n except when world > n: one subtraction instead of a division.
    const uint64_t v = strided ? i * w + r : r * per_rank + i;
    return v < n ? v : (v < 2 * n ? v - n : v % n);
  }
};

}  // namespace shardkit
