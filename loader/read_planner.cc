#include "loader/read_planner.h"

#include <algorithm>
#include <cassert>

namespace shardkit {

// Records read ahead one by one: batches beyond the ones being filled whose
// records are hinted (page cache) or queued (the queue's byte budget bounds
// what is read of them).
constexpr uint64_t kReadAheadBatches = 2;
// Remote storage: segments (blocks, or block-local windows) beyond the ones
// being read whose blocks are fetched in the background, so that a window's
// blocks arrive while the one before it is read.
constexpr int kRemoteAheadSegments = 2;

BlockLayout BlockLayout::Of(const Dataset& ds) {
  BlockLayout l;
  for (size_t s = 0; s < ds.num_shards(); ++s) {
    const ShardReader& r = ds.shard(s);
    for (uint32_t b = 0; b < r.num_blocks(); ++b) {
      l.sizes.push_back(r.block(b).num_records);
      l.blocks.push_back(BlockRef{static_cast<uint32_t>(s), b});
      l.compressed |= r.block(b).codec != static_cast<uint32_t>(format::Codec::kStored);
      l.max_raw_bytes = std::max<uint64_t>(l.max_raw_bytes, r.block(b).raw_size);
    }
  }
  return l;
}

ReadPlanner::ReadPlanner(Setup setup)
    : s_(std::move(setup)),
      uncached_(s_.dataset->uncached()),
      remote_(s_.dataset->remote_reads()),
      part_(s_.partition) {}

Partition ReadPlanner::CutOf(std::shared_ptr<const EpochPositions> rest,
                             const GivenOrder& order) const {
  const Partition& whole = s_.partition;
  if (s_.mode == ShuffleMode::kGiven) {
    return Partition::Cut(order ? order->size() : 0, std::move(rest), 0, 1, whole.batch_size,
                          whole.drop_last, /*strided=*/true);
  }
  return rest ? Partition::Cut(whole.n, std::move(rest), whole.rank, whole.world_size,
                               whole.batch_size, whole.drop_last, whole.strided)
              : whole;
}

void ReadPlanner::StartEpoch(uint64_t epoch, uint64_t start_batch,
                             std::shared_ptr<const EpochPositions> rest, GivenOrder order) {
  assert((s_.mode == ShuffleMode::kGiven) == (order != nullptr));
  part_ = CutOf(std::move(rest), order);
  sampler_ =
      order ? std::make_unique<EpochSampler>(std::move(order))
            : std::make_unique<EpochSampler>(s_.layout.sizes, s_.mode, s_.seed, epoch, s_.window);
  scan_next_ = start_batch * part_.batch_size;
  read_ahead_next_ = start_batch;
  fetched_ahead_ = start_batch;
  read_ahead_pos_ = start_batch * part_.batch_size;
  scheduled_.clear();
  ahead_.clear();
  live_.clear();
}

namespace {

// The rank's samples of partition p from batch first_batch on: [begin, end).
std::pair<uint64_t, uint64_t> PassSpan(const Partition& p, uint64_t first_batch) {
  const uint64_t end = p.drop_last ? p.batches * p.batch_size : p.per_rank;
  return {std::min(end, first_batch * p.batch_size), end};
}

}  // namespace

uint64_t ReadPlanner::CountRecords(uint64_t first_batch, std::shared_ptr<const EpochPositions> rest,
                                   GivenOrder order) const {
  const auto [begin, end] = PassSpan(CutOf(std::move(rest), order), first_batch);
  return end - begin;
}

std::vector<uint64_t> ReadPlanner::Records(uint64_t epoch, uint64_t first_batch,
                                           std::shared_ptr<const EpochPositions> rest,
                                           GivenOrder order) const {
  const Partition p = CutOf(std::move(rest), order);
  if (s_.mode == ShuffleMode::kGiven && !order) return {};
  const auto sampler = order ? std::make_unique<const EpochSampler>(std::move(order))
                             : std::make_unique<const EpochSampler>(s_.layout.sizes, s_.mode,
                                                                    s_.seed, epoch, s_.window);
  const auto [begin, end] = PassSpan(p, first_batch);
  std::vector<uint64_t> records(end - begin);
  for (uint64_t i = begin; i < end; ++i) records[i - begin] = sampler->RecordAt(p.Position(i));
  return records;
}

void ReadPlanner::Prepare(const std::vector<BatchSpan>& spans) {
  warm_.clear();
  for (const BatchSpan& s : spans) ScheduleBlocks(s.k);
  PrepareWindows(spans);
  ReadAhead(spans);
  if (remote_ && s_.layout.compressed) FetchBlocksAhead(spans);
}

// Remote storage: starts fetching `blocks` in the background, neighbours in
// a shard with one ranged GET of at most kRemoteMergeBytes (a request costs
// tens of milliseconds however large it is, and radosgw or S3 serve one large
// GET far faster than many small ones). Sorts and clears `blocks`.
void ReadPlanner::FetchBlocks(std::vector<BlockRef>* blocks) const {
  constexpr uint64_t kRemoteMergeBytes = 8 << 20;
  std::sort(blocks->begin(), blocks->end(), [](const BlockRef& a, const BlockRef& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.block < b.block;
  });
  for (size_t i = 0; i < blocks->size();) {
    const BlockRef first = (*blocks)[i];
    const ShardReader& r = s_.dataset->shard(first.shard);
    uint32_t last = first.block;
    size_t j = i + 1;
    for (; j < blocks->size() && (*blocks)[j].shard == first.shard; ++j) {
      const uint32_t b = (*blocks)[j].block;
      if (b == last) continue;  // the same block twice
      if (b != last + 1 ||
          r.block(b).offset + r.block(b).stored_size - r.block(first.block).offset >
              kRemoteMergeBytes) {
        break;
      }
      last = b;
    }
    r.PrefetchBlocks(first.block, last);
    i = j;
  }
  blocks->clear();
}

// Remote storage, compressed blocks: starts the fetch of the blocks that the
// next batches (a full shuffle) or segments (in order, block-local) need and
// are not cached, ahead of their scheduling, in the background.
void ReadPlanner::FetchBlocksAhead(const std::vector<BatchSpan>& spans) {
  std::vector<BlockRef> blocks;
  auto fetch = [&](const BlockRef& b) {
    if (!s_.cache->Contains(BlockCache::MakeKey(b.shard, b.block))) blocks.push_back(b);
  };
  if (random_order()) {
    const uint64_t last = std::min<uint64_t>(spans.back().k + kReadAheadBatches, part_.batches - 1);
    if (s_.cache->blocks() == s_.layout.blocks.size()) {  // every block in the cache: none to fetch
      fetched_ahead_ = std::max(fetched_ahead_, last + 1);
      return;
    }
    for (uint64_t k = std::max(spans.front().k, fetched_ahead_); k <= last; ++k) {
      const uint64_t base = k * part_.batch_size, n = part_.BatchLength(k);
      for (uint64_t i = 0; i < n; ++i) {
        const SampleLocation l = Locate(base + i);
        fetch(BlockRef{l.shard, s_.dataset->shard(l.shard).record(l.local).block});
      }
    }
    fetched_ahead_ = std::max(fetched_ahead_, last + 1);
    return FetchBlocks(&blocks);
  }
  uint64_t i = scan_next_;
  for (int seg = 0; seg < kRemoteAheadSegments && i < part_.per_rank; ++seg) {
    uint64_t end = 0;
    sampler_->Segment(part_.Position(i), &end, &segment_);
    for (uint32_t g : segment_) fetch(s_.layout.blocks[g]);
    i += part_.Steps(i, end);
  }
  FetchBlocks(&blocks);
}

// Block-local: materialises the windows the spans read (reusing those
// already live) and releases the others.
void ReadPlanner::PrepareWindows(const std::vector<BatchSpan>& spans) {
  if (s_.mode != ShuffleMode::kBlockLocal) return;
  spare_live_.swap(live_);
  live_.clear();
  for (const BatchSpan& span : spans) {
    for (uint64_t i = 0; i < static_cast<uint64_t>(span.size);) {
      const uint64_t pos = part_.Position(span.base + i);
      const size_t w = sampler_->WindowOf(pos);
      i += std::min<uint64_t>(part_.Steps(span.base + i, sampler_->window_end(w)), span.size - i);
      auto same = [&](const LiveWindow& lw) { return lw.w == w; };
      if (std::find_if(live_.begin(), live_.end(), same) != live_.end()) continue;
      auto it = std::find_if(spare_live_.begin(), spare_live_.end(), same);
      if (it != spare_live_.end()) {
        live_.push_back(std::move(*it));
        spare_live_.erase(it);
        continue;
      }
      LiveWindow lw;
      lw.w = w;
      lw.begin = sampler_->window_begin(w);
      lw.end = sampler_->window_end(w);
      sampler_->WindowRecords(w, &lw.records);
      live_.push_back(std::move(lw));
    }
  }
  spare_live_.clear();
}

// Appends to warm_ the blocks that batch k and the ones after it will need
// and that are not cached yet, in order of first need, so they can be
// decompressed in parallel (one worker per block) before the samples are
// copied. Walks the order a segment (block or window) at a time; in
// full-shuffle mode any sample may need any block, and blocks are
// decompressed on first use.
void ReadPlanner::ScheduleBlocks(uint64_t k) {
  if (!s_.layout.compressed || random_order()) return;
  const Partition& part = part_;
  // Scan at least this batch, and further until `want` blocks beyond it are
  // scheduled (bounded by what the cache can hold besides the blocks read).
  const uint64_t batch_end = std::min(part.per_rank, (k + 1) * part.batch_size);
  const size_t want = std::min<uint64_t>(s_.max_warm, static_cast<uint64_t>(s_.workers));
  while (!ahead_.empty() && ahead_.front() < batch_end) ahead_.pop_front();
  // Refill only when the look-ahead has run dry, then with a block per
  // worker, so that decompression always has every worker busy.
  const bool refill = ahead_.empty();
  while (scan_next_ < part.per_rank) {
    if (scan_next_ >= batch_end &&
        (!refill || ahead_.size() >= want || warm_.size() >= s_.max_warm)) {
      break;
    }
    const uint64_t pos = part.Position(scan_next_);
    uint64_t end = 0;
    sampler_->Segment(pos, &end, &segment_);
    for (uint32_t g : segment_) {
      const BlockRef b = s_.layout.blocks[g];
      const uint64_t key = BlockCache::MakeKey(b.shard, b.block);
      if (!scheduled_.insert(key).second) continue;
      if (scan_next_ >= batch_end) ahead_.push_back(scan_next_);
      if (!s_.cache->Contains(key)) {
        warm_.push_back(b);
        // Start its read now, in the background, beside the others ahead:
        // storage works on several blocks while workers decompress.
        s_.dataset->shard(b.shard).PrefetchBlock(b.block);
      }
    }
    scan_next_ += part.Steps(scan_next_, end);
  }
}

// Stored (uncompressed) records: starts the reads of what this fill and the
// next few batches need in the background, so that cold storage serves many
// requests at once instead of one per worker at a time: records worth a read
// each through the read queue (or hinted one by one), whole blocks otherwise.
// Cheap when the pages are cached. Compressed blocks are read ahead as they
// are scheduled (ScheduleBlocks).
void ReadPlanner::ReadAhead(const std::vector<BatchSpan>& spans) {
  if (s_.layout.compressed || spans.empty()) return;
  // Remote storage read in order or block-local (and not strided over
  // ranks): every record of a block is read, so a block is fetched with one
  // request and its records are copied out of it.
  if (remote_ && !random_order() && (!part_.strided || part_.world_size == 1)) {
    return HintBlocks(spans);
  }
  if (s_.queue != nullptr && s_.read_ahead_records) return QueueRecords(spans);
  if (uncached_) return;  // no cache to read ahead into
  if (!random_order()) return HintBlocks(spans);
  // A hint per record costs a system call: worth it for records that take
  // far longer to decode or copy (JPEGs, large raw records), not for 28x28s.
  if (!s_.read_ahead_records) return;
  const uint64_t last = std::min<uint64_t>(spans.back().k + kReadAheadBatches, part_.batches - 1);
  for (uint64_t k = std::max(spans.front().k, read_ahead_next_); k <= last; ++k) HintRecords(k);
  read_ahead_next_ = std::max(read_ahead_next_, last + 1);
}

// Records worth a read each (JPEGs, large raw records), queued in the order
// the workers fetch them, for these batches and the next ones; the queue
// keeps read_depth reads in flight within its byte budget.
void ReadPlanner::QueueRecords(const std::vector<BatchSpan>& spans) {
  const uint64_t last = std::min<uint64_t>(spans.back().k + kReadAheadBatches, part_.batches - 1);
  for (uint64_t k = std::max(spans.front().k, read_ahead_next_); k <= last; ++k) {
    if (WorkersReadBatch(k)) {  // fast storage: the workers read this batch themselves
      if (!uncached_) HintRecords(k);
      continue;
    }
    const uint64_t base = k * part_.batch_size, n = part_.BatchLength(k);
    for (uint64_t i = 0; i < n; ++i) {
      const SampleLocation l = Locate(base + i);
      s_.queue->Submit(l.shard, l.local);
    }
  }
  read_ahead_next_ = std::max(read_ahead_next_, last + 1);
}

// Block-local or in order: the stored blocks of the segments these batches
// and the next few read.
void ReadPlanner::HintBlocks(const std::vector<BatchSpan>& spans) {
  const Partition& part = part_;
  uint64_t i = std::max(spans.front().base, read_ahead_pos_);
  const uint64_t end_i =
      std::min<uint64_t>(part.per_rank, (spans.back().k + 1 + kReadAheadBatches) * part.batch_size);
  while (i < end_i) {
    const uint64_t pos = part.Position(i);
    uint64_t end = 0;
    sampler_->Segment(pos, &end, &segment_);
    for (uint32_t g : segment_) {
      const BlockRef b = s_.layout.blocks[g];
      if (remote_) {
        remote_blocks_.push_back(b);
      } else {
        s_.dataset->shard(b.shard).PrefetchBlock(b.block);
      }
    }
    i += part.Steps(i, end);
  }
  if (remote_) FetchBlocks(&remote_blocks_);
  read_ahead_pos_ = std::max(read_ahead_pos_, i);
}

// A read-ahead hint for each record of batch k.
void ReadPlanner::HintRecords(uint64_t k) {
  const uint64_t base = k * part_.batch_size, n = part_.BatchLength(k);
  for (uint64_t i = 0; i < n; ++i) {
    const SampleLocation l = Locate(base + i);
    s_.dataset->shard(l.shard).PrefetchRecord(l.local);
  }
}

// Whether batch k is read by its workers instead of through the queue: the
// queue's recent reads were faster than its hand-off costs (decided every
// kProbeEvery batches from the reads since, as the queue's clock timed them;
// the probe batch itself always goes through the queue).
bool ReadPlanner::WorkersReadBatch(uint64_t k) {
  if (k % kProbeEvery != 0) return queue_fast_;
  const ReadQueueStats st = s_.queue->stats();
  const uint64_t reads = st.reads - probe_reads_;
  if (reads >= kMinProbeReads) {
    queue_fast_ = (st.read_seconds - probe_seconds_) / double(reads) < kFastReadSeconds;
    probe_reads_ = st.reads;
    probe_seconds_ = st.read_seconds;
  }
  return false;
}

}  // namespace shardkit
