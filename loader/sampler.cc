// Epoch orders and per-rank partitions.
#include "loader/sampler.h"

#include <algorithm>

#include "base/random.h"

namespace shardkit {

const char* ShuffleModeName(ShuffleMode mode) {
  return mode == ShuffleMode::kGiven ? "given" : NameOf(kShuffleModeNames, mode);
}

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

EpochSampler::EpochSampler(GivenOrder order)
    : mode_(ShuffleMode::kGiven), n_(order->size()), given_(std::move(order)), window_(1) {}

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

Result<EpochPositions> EpochPositions::Make(std::vector<Range> ranges, uint64_t n) {
  EpochPositions e;
  uint64_t last_end = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (r.first >= r.second || r.second > n || (i > 0 && r.first < last_end)) {
      return Status::InvalidArgument(
          "epoch positions [" + std::to_string(r.first) + ", " + std::to_string(r.second) +
          ") are empty, out of order, overlap or end past the epoch's " + std::to_string(n));
    }
    last_end = r.second;
    e.first_.push_back(e.size_);
    e.size_ += r.second - r.first;
  }
  e.ranges_ = std::move(ranges);
  return e;
}

EpochPositions EpochPositions::Whole(uint64_t n) {
  EpochPositions e;
  if (n > 0) {
    e.ranges_.push_back({0, n});
    e.first_.push_back(0);
    e.size_ = n;
  }
  return e;
}

size_t EpochPositions::RangeOf(uint64_t j) const {
  auto it = std::upper_bound(first_.begin(), first_.end(), j);
  return static_cast<size_t>(it - first_.begin()) - 1;
}

EpochPositions EpochPositions::Without(const std::vector<Range>& gone) const {
  // Walk the kept index ranges (the complement of `gone`) and map each to
  // position ranges, merging neighbours.
  std::vector<Range> out;
  auto keep = [&](uint64_t a, uint64_t b) {  // indices [a, b)
    while (a < b) {
      const uint64_t pos = At(a), run = std::min(RunFrom(a), b - a);
      if (!out.empty() && out.back().second == pos) {
        out.back().second += run;
      } else {
        out.push_back({pos, pos + run});
      }
      a += run;
    }
  };
  uint64_t next = 0;
  for (const Range& g : gone) {
    keep(next, std::min(g.first, size_));
    next = std::max(next, g.second);
  }
  keep(next, size_);
  EpochPositions e;
  for (const Range& r : out) {
    e.first_.push_back(e.size_);
    e.size_ += r.second - r.first;
  }
  e.ranges_ = std::move(out);
  return e;
}

Partition Partition::Cut(uint64_t n, std::shared_ptr<const EpochPositions> rest, int rank,
                         int world_size, uint64_t batch_size, bool drop_last, bool strided) {
  Partition p;
  p.n = rest ? rest->size() : n;
  p.rest = std::move(rest);
  p.rank = rank;
  p.world_size = world_size;
  p.batch_size = batch_size;
  p.drop_last = drop_last;
  p.strided = strided;
  n = p.n;
  const uint64_t w = static_cast<uint64_t>(world_size), r = static_cast<uint64_t>(rank);
  p.per_rank = drop_last ? n / w : (n + w - 1) / w;
  if (strided) {
    p.real = std::min(p.per_rank, n > r ? (n - r + w - 1) / w : 0);
  } else {
    p.real = std::min(p.per_rank, n > r * p.per_rank ? n - r * p.per_rank : 0);
  }
  p.batches = drop_last ? p.per_rank / batch_size : (p.per_rank + batch_size - 1) / batch_size;
  return p;
}

Result<Partition> Partition::Make(uint64_t n, int rank, int world_size, uint64_t batch_size,
                                  bool drop_last, bool strided) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return Status::InvalidArgument("rank " + std::to_string(rank) +
                                   " out of range for world size " + std::to_string(world_size));
  }
  if (batch_size < 1) return Status::InvalidArgument("batch size must be at least 1");
  Partition p = Cut(n, nullptr, rank, world_size, batch_size, drop_last, strided);
  if (p.batches == 0) {
    return Status::InvalidArgument("dataset of " + std::to_string(n) + " records gives rank " +
                                   std::to_string(rank) + " of " + std::to_string(world_size) +
                                   " no batch of " + std::to_string(batch_size) +
                                   (drop_last ? " (drop_last)" : ""));
  }
  return p;
}

uint64_t Partition::Steps(uint64_t i, uint64_t end) const {
  const uint64_t w = static_cast<uint64_t>(world_size), r = static_cast<uint64_t>(rank);
  const uint64_t v = strided ? i * w + r : r * per_rank + i;
  if (v >= n || i >= per_rank) return 1;  // padding: one at a time
  // Indices [v, limit) map to consecutive positions below `end`.
  const uint64_t pos = Position(i);
  if (end <= pos) return 1;
  uint64_t limit = std::min(n, v + (end - pos));
  if (rest) limit = std::min(limit, v + rest->RunFrom(v));
  const uint64_t stride = strided ? w : 1;
  const uint64_t steps = (limit - v + stride - 1) / stride;
  return std::max<uint64_t>(1, std::min(steps, per_rank - i));
}

EpochPositions Partition::Remaining(uint64_t k) const {
  // Read: the indices of every rank's first k batches that are not padding.
  std::vector<EpochPositions::Range> read;
  const uint64_t take = std::min(per_rank, k * batch_size);
  const uint64_t w = static_cast<uint64_t>(world_size);
  if (strided) {
    // Rank r's i-th sample is index i * w + r: together, [0, take * w).
    if (take > 0) read.push_back({0, std::min(n, take * w)});
  } else {
    for (uint64_t r = 0; r < w; ++r) {
      const uint64_t a = r * per_rank, b = std::min(n, r * per_rank + take);
      if (a >= b) break;  // this rank's share and the later ones are padding
      if (!read.empty() && read.back().second == a) {
        read.back().second = b;  // whole shares read: one range
      } else {
        read.push_back({a, b});
      }
    }
  }
  return rest ? rest->Without(read) : EpochPositions::Whole(n).Without(read);
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
