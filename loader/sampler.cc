// Epoch orders and per-rank partitions.
#include "loader/sampler.h"

#include <algorithm>

#include "base/random.h"

namespace shardkit {

const char* ShuffleModeName(ShuffleMode mode) { return NameOf(kShuffleModeNames, mode); }

bool ShuffleModeFromName(std::string_view name, ShuffleMode* mode) {
  return ValueOf(kShuffleModeNames, name, mode);
}

EpochSampler::EpochSampler(const std::vector<uint32_t>& block_sizes, ShuffleMode mode,
                           uint64_t seed, uint64_t epoch, uint32_t window)
    : mode_(mode),
      window_(std::max<uint32_t>(1, window)),
      seed_(seed),
      epoch_(epoch),
      block_sizes_(block_sizes) {
  block_first_.reserve(block_sizes.size());
  for (uint32_t s : block_sizes) {
    block_first_.push_back(n_);
    n_ += s;
  }
  if (mode_ == ShuffleMode::kFull) {
    full_ = KeyedPermutation(n_, seed, epoch);
  } else if (mode_ == ShuffleMode::kBlockLocal) {
    order_.resize(block_sizes.size());
    for (uint32_t b = 0; b < order_.size(); ++b) order_[b] = b;
    KeyedShuffle(&order_, KeyedRng(seed, epoch, 0xB10C));
    uint64_t pos = 0;
    for (size_t w = 0; w < order_.size(); w += window_) {
      window_start_.push_back(pos);
      for (size_t b = w; b < std::min(order_.size(), w + window_); ++b)
        pos += block_sizes_[order_[b]];
    }
    window_start_.push_back(pos);
  }
}

uint64_t EpochSampler::WindowRecordAt(uint64_t position) const {
  const size_t w = WindowOf(position);
  std::lock_guard<std::mutex> lock(last_mu_);
  if (last_window_ != w) {
    WindowRecords(w, &last_records_);
    last_window_ = w;
  }
  return last_records_[position - window_start_[w]];
}

size_t EpochSampler::WindowOf(uint64_t position) const {
  auto it = std::upper_bound(window_start_.begin(), window_start_.end(), position);
  return static_cast<size_t>(it - window_start_.begin()) - 1;
}

void EpochSampler::WindowRecords(size_t w, std::vector<uint64_t>* records) const {
  records->clear();
  records->reserve(window_start_[w + 1] - window_start_[w]);
  for (size_t k = w * window_; k < std::min(order_.size(), (w + 1) * window_); ++k) {
    const uint64_t first = block_first_[order_[k]];
    for (uint32_t i = 0; i < block_sizes_[order_[k]]; ++i) records->push_back(first + i);
  }
  KeyedShuffle(records, KeyedRng(seed_, epoch_, 0x3E1D0, w));
}

bool EpochSampler::Segment(uint64_t position, uint64_t* end, std::vector<uint32_t>* blocks) const {
  blocks->clear();
  if (mode_ == ShuffleMode::kNone) {
    auto it = std::upper_bound(block_first_.begin(), block_first_.end(), position);
    const size_t b = static_cast<size_t>(it - block_first_.begin()) - 1;
    blocks->push_back(static_cast<uint32_t>(b));
    *end = block_first_[b] + block_sizes_[b];
    return true;
  }
  if (mode_ == ShuffleMode::kBlockLocal) {
    const size_t w = WindowOf(position);
    for (size_t k = w * window_; k < std::min(order_.size(), (w + 1) * window_); ++k)
      blocks->push_back(order_[k]);
    *end = window_start_[w + 1];
    return true;
  }
  return false;
}

Result<Partition> Partition::Make(uint64_t n, int rank, int world_size, uint64_t batch_size,
                                  bool drop_last, bool strided) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return Status::InvalidArgument("rank " + std::to_string(rank) +
                                   " out of range for world size " + std::to_string(world_size));
  }
  if (batch_size < 1) return Status::InvalidArgument("batch size must be at least 1");
  Partition p;
  p.n = n;
  p.rank = rank;
  p.world_size = world_size;
  p.batch_size = batch_size;
  p.drop_last = drop_last;
  p.strided = strided;
  const uint64_t w = static_cast<uint64_t>(world_size), r = static_cast<uint64_t>(rank);
  p.per_rank = drop_last ? n / w : (n + w - 1) / w;
  if (strided) {
    p.real = std::min(p.per_rank, n > r ? (n - r + w - 1) / w : 0);
  } else {
    p.real = std::min(p.per_rank, n > r * p.per_rank ? n - r * p.per_rank : 0);
  }
  p.batches = drop_last ? p.per_rank / batch_size : (p.per_rank + batch_size - 1) / batch_size;
  if (p.batches == 0) {
    return Status::InvalidArgument("dataset of " + std::to_string(n) + " records gives rank " +
                                   std::to_string(rank) + " of " + std::to_string(world_size) +
                                   " no batch of " + std::to_string(batch_size) +
                                   (drop_last ? " (drop_last)" : ""));
  }
  return p;
}

uint64_t Partition::BatchLength(uint64_t b) const {
  const uint64_t begin = b * batch_size;
  return std::min(batch_size, per_rank - begin);
}

uint64_t Partition::BatchRealLength(uint64_t b) const {
  const uint64_t begin = b * batch_size;
  return begin >= real ? 0 : std::min(BatchLength(b), real - begin);
}

}  // namespace shardkit
