#include "loader/record_source.h"

#include <algorithm>

#include "base/system.h"

namespace shardkit {

// Full shuffle: batches beyond the ones being filled whose records are read
// ahead into the page cache.
constexpr uint64_t kReadAheadBatches = 2;
// Through the read queue: batches beyond the ones being filled whose records
// are queued (the queue's byte budget bounds what is read of them).
constexpr uint64_t kQueueAheadBatches = 2;
// Reads faster than this (page cache, local NVMe) gain nothing from the queue
// and cost its hand-off: then batches are read by their workers (with
// read-ahead hints), and one batch in kProbeEvery goes through the queue
// again to notice when storage turns slow.
constexpr double kFastReadSeconds = 250e-6;
constexpr uint64_t kProbeEvery = 8;

Result<std::unique_ptr<RecordSource>> RecordSource::Open(const std::string& dir,
                                                         const RecordSourceOptions& o) {
  std::unique_ptr<RecordSource> src(new RecordSource());
  RecordSource& d = *src;
  SK_ASSIGN_OR_RETURN(d.ds_, Dataset::Open(dir));  // mapped below once the access pattern is known
  const Manifest& m = d.ds_->manifest();
  uint64_t max_block = 1;
  for (size_t s = 0; s < d.ds_->num_shards(); ++s) {
    const ShardReader& r = d.ds_->shard(s);
    for (uint32_t b = 0; b < r.num_blocks(); ++b) {
      d.block_sizes_.push_back(r.block(b).num_records);
      d.global_blocks_.emplace_back(static_cast<uint32_t>(s), b);
      d.compressed_ |= r.block(b).codec != static_cast<uint32_t>(format::Codec::kStored);
      max_block = std::max<uint64_t>(max_block, r.block(b).raw_size);
    }
  }
  // The cache holds the window being read, the look-ahead and some slack.
  const uint64_t cache_blocks = std::max<uint64_t>(1, o.block_cache_bytes / max_block);
  d.window_ = static_cast<uint32_t>(
      std::clamp<uint64_t>(cache_blocks / 3, 1, std::max<uint32_t>(1, o.block_window)));
  d.max_warm_ = std::max<uint64_t>(o.workers, cache_blocks / 3);
  d.workers_ = o.workers;
  d.seed_ = o.seed;
  // What the page cache could hold: decides the shuffle (auto) and O_DIRECT.
  const uint64_t memory_available = AvailableMemoryBytes();
  d.mode_ = o.shuffle;
  if (d.mode_ == ShuffleMode::kAuto) {
    const bool over_cache = d.compressed_ && m.raw_bytes() > o.block_cache_bytes;
    const bool over_memory = m.bytes() > memory_available;
    d.mode_ = over_cache || over_memory ? ShuffleMode::kBlockLocal : ShuffleMode::kFull;
  }
  // Random record reads must not pull in the read-ahead window around each
  // record (113x the bytes delivered, cold, with an 8 MB window); block-local
  // and in-order reading is sequential within a shard and wants read-ahead.
  if (o.mmap && d.mode_ != ShuffleMode::kFull) SK_RETURN_IF_ERROR(d.ds_->Map());
  if (d.mode_ == ShuffleMode::kFull &&
      (o.direct_reads == DirectReads::kAlways ||
       (o.direct_reads == DirectReads::kAuto && m.bytes() > memory_available))) {
    // Where a filesystem has no O_DIRECT, its reads stay buffered.
    d.direct_ = d.ds_->EnableDirectReads();
  }
  d.ds_->Advise(d.mode_ == ShuffleMode::kFull ? RandomAccessFile::Access::kRandom
                                              : RandomAccessFile::Access::kSequential);
  SK_ASSIGN_OR_RETURN(d.part_, Partition::Make(d.ds_->num_records(), o.rank, o.world_size,
                                               o.batch_size, o.drop_last,
                                               /*strided=*/d.mode_ != ShuffleMode::kBlockLocal));
  d.cache_ = std::make_unique<BlockCache>(d.ds_.get(), o.block_cache_bytes);
  for (int w = 0; w < o.workers; ++w) d.cursors_.push_back(std::make_unique<Cursor>());
  // Records worth a read each (the bytes of a JPEG to decode, or of a large
  // raw record to copy) are read ahead one by one; small raw records, whose
  // copy costs less than a hint's system call, are not.
  const RecordFormat& f = m.record;
  d.read_ahead_records_ =
      f.kind == format::RecordKind::kJpeg ||
      (f.kind == format::RecordKind::kRawU8 && f.raw_record_size() >= kReadAheadMinRecordBytes);
  if (d.read_ahead_records_ && !d.compressed_ && o.read_depth > 0)
    d.queue_ = std::make_unique<ReadQueue>(d.ds_.get(), o.read_depth, o.read_ahead_bytes);
  return src;
}

RecordSourceStats RecordSource::stats() const {
  RecordSourceStats s;
  for (const auto& c : cursors_) {
    s.read_s += c->read_ns.load() * 1e-9;
    s.decompress_s += c->decompress_ns.load() * 1e-9;
    s.bytes += c->bytes.load();
  }
  if (queue_) {
    s.queued = true;
    s.queue = queue_->stats();
  }
  return s;
}

void RecordSource::ResetStats() {
  for (auto& c : cursors_) c->read_ns = c->decompress_ns = c->bytes = 0;
  if (queue_) queue_->ResetStats();
}

Status RecordSource::FetchSlow(Cursor& c, const SampleLocation& l, std::string_view* payload) {
  const ShardReader& r = ds_->shard(l.shard);
  const format::RecordEntry& e = r.record(l.local);
  if (r.block(e.block).codec == static_cast<uint32_t>(format::Codec::kStored)) {
    Cursor::StoredBuffer& buf = c.stored[c.next_stored++ % kLivePayloads];
    const uint64_t t0 = MonotonicNs();
    Status s;
    if (!queue_ || !queue_->Take(l.shard, l.local, &buf.queued, &s)) {
      s = r.ReadRecord(l.local, &buf.scratch, payload);
    } else if (s.ok()) {  // read ahead by the queue (or waited for)
      *payload = std::string_view(buf.queued.data(), buf.queued.size());
    }
    c.read_ns.fetch_add(MonotonicNs() - t0, std::memory_order_relaxed);
    c.bytes.fetch_add(e.length, std::memory_order_relaxed);
    return s;
  }
  const uint64_t key = BlockCache::MakeKey(l.shard, e.block);
  Cursor::Memo& m = c.memo[MemoSlot(key)];
  SK_RETURN_IF_ERROR(FillMemo(c, l.shard, e.block, key, &m));
  *payload = m.block->view().substr(e.offset, e.length);
  m.last_use = c.fetches;
  return Status::OK();
}

void RecordSource::StartEpoch(uint64_t epoch, uint64_t start_batch) {
  sampler_ = std::make_unique<EpochSampler>(block_sizes_, mode_, seed_, epoch, window_);
  scan_next_ = start_batch * part_.batch_size;
  read_ahead_next_ = start_batch;
  read_ahead_pos_ = start_batch * part_.batch_size;
  scheduled_.clear();
  ahead_.clear();
  live_.clear();
  if (queue_) queue_->Cancel();  // the old epoch's reads: dropped, the ones in flight waited for
}

// The record at epoch position `position`: from the live windows in
// block-local mode, else from the sampler.
void RecordSource::Prepare(const std::vector<BatchSpan>& spans) {
  warm_.clear();
  for (const BatchSpan& s : spans) ScheduleBlocks(s.k);
  PrepareWindows(spans);
  ReadAhead(spans);
  ReleaseEvicted();
}

void RecordSource::WarmBlock(size_t j, Cursor& c) {
  bool decompressed = false;
  const uint64_t t0 = MonotonicNs();
  auto b = cache_->Get(warm_[j].first, warm_[j].second, &c.scratch, &decompressed);
  if (decompressed) {
    c.decompress_ns.fetch_add(MonotonicNs() - t0, std::memory_order_relaxed);
    c.bytes.fetch_add(ds_->shard(warm_[j].first).block(warm_[j].second).stored_size,
                      std::memory_order_relaxed);
  }
}

Status RecordSource::FillMemo(Cursor& c, uint32_t shard, uint32_t block, uint64_t key,
                              Cursor::Memo* m) {
  // The block this slot held may still be under a live payload: retired then,
  // not freed (a block last sliced longer ago goes back at once).
  if (m->block && c.fetches - m->last_use < static_cast<uint64_t>(kLivePayloads))
    c.retired[c.next_retired++ % kLivePayloads] = std::move(m->block);
  m->block.reset();
  bool decompressed = false;
  const uint64_t t0 = MonotonicNs();
  m->block = cache_->Get(shard, block, &c.scratch, &decompressed);
  m->key = key;
  if (decompressed) {
    c.decompress_ns.fetch_add(MonotonicNs() - t0, std::memory_order_relaxed);
    c.bytes.fetch_add(ds_->shard(shard).block(block).stored_size, std::memory_order_relaxed);
  }
  if (m->block->status.ok()) return Status::OK();
  Status s = m->block->status;
  m->block.reset();
  m->key = ~uint64_t{0};
  return s;
}

// Block-local: materialises the windows the spans read (reusing those
// already live) and releases the others.
void RecordSource::PrepareWindows(const std::vector<BatchSpan>& spans) {
  if (mode_ != ShuffleMode::kBlockLocal) return;
  spare_live_.swap(live_);
  live_.clear();
  for (const BatchSpan& span : spans) {
    for (uint64_t i = 0; i < static_cast<uint64_t>(span.size);) {
      const uint64_t pos = part_.Position(span.base + i);
      const size_t w = sampler_->WindowOf(pos);
      i += std::min(sampler_->window_end(w) - pos, span.size - i);
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
void RecordSource::ScheduleBlocks(uint64_t k) {
  if (!compressed_ || mode_ == ShuffleMode::kFull) return;
  // Scan at least this batch, and further until `want` blocks beyond it are
  // scheduled (bounded by what the cache can hold besides the blocks read).
  const uint64_t batch_end = std::min(part_.per_rank, (k + 1) * part_.batch_size);
  const size_t want = std::min<uint64_t>(max_warm_, static_cast<uint64_t>(workers_));
  while (!ahead_.empty() && ahead_.front() < batch_end) ahead_.pop_front();
  // Refill only when the look-ahead has run dry, then with a block per
  // worker, so that decompression always has every worker busy.
  const bool refill = ahead_.empty();
  while (scan_next_ < part_.per_rank) {
    if (scan_next_ >= batch_end && (!refill || ahead_.size() >= want || warm_.size() >= max_warm_))
      break;
    const uint64_t pos = part_.Position(scan_next_);
    uint64_t end = 0;
    sampler_->Segment(pos, &end, &segment_);
    for (uint32_t g : segment_) {
      const auto [shard, block] = global_blocks_[g];
      const uint64_t key = BlockCache::MakeKey(shard, block);
      if (!scheduled_.insert(key).second) continue;
      if (scan_next_ >= batch_end) ahead_.push_back(scan_next_);
      if (!cache_->Contains(key)) {
        warm_.emplace_back(shard, block);
        // Start its read now, in the background, beside the others ahead:
        // storage works on several blocks while workers decompress.
        ds_->shard(shard).PrefetchBlock(block);
      }
    }
    scan_next_ += std::min(end - pos, part_.per_rank - scan_next_);
  }
}

// Cursors let go of blocks the cache has dropped, so that their buffers go
// back to the pool at once: decompression then cycles through about the
// cache's worth of buffers (warm in the CPU caches) instead of the cache
// plus every block a memo still remembers.
void RecordSource::ReleaseEvicted() {
  for (auto& c : cursors_) {
    for (auto& b : c->retired) b.reset();  // no payload lives across a Prepare
    for (Cursor::Memo& m : c->memo) {
      if (m.block && m.block->evicted.load(std::memory_order_relaxed)) {
        m.block.reset();
        m.key = ~uint64_t{0};
      }
    }
  }
}

// Stored (uncompressed) records: starts the reads of what this fill and the
// next few batches need in the background (POSIX_FADV_WILLNEED), so that
// cold storage serves many requests at once instead of one per worker at a
// time: each record in a full shuffle, whole blocks otherwise. Cheap when the
// pages are cached.
// Whether batch k skips the queue: its recent reads were faster than the
// hand-off costs (decided every kProbeEvery batches, from the reads since).
bool RecordSource::QueueIsSlower(uint64_t k) {
  if (k % kProbeEvery == 0) {
    const ReadQueueStats st = queue_->stats();
    const uint64_t reads = st.reads - probe_reads_;
    if (reads >= 16) {
      queue_fast_ = (st.read_seconds - probe_seconds_) / double(reads) < kFastReadSeconds;
      probe_reads_ = st.reads;
      probe_seconds_ = st.read_seconds;
    }
    return false;  // the probe batch always goes through the queue
  }
  return queue_fast_;
}

void RecordSource::ReadAhead(const std::vector<BatchSpan>& spans) {
  if (compressed_ || spans.empty()) return;  // compressed: ScheduleBlocks reads ahead
  if (queue_ && read_ahead_records_) {
    // Records worth a read each (JPEGs, large raw records): queued in the
    // order the workers fetch them, for these batches and the next ones;
    // the queue keeps read_depth reads in flight within its byte budget.
    const uint64_t last =
        std::min<uint64_t>(spans.back().k + kQueueAheadBatches, part_.batches - 1);
    for (uint64_t k = std::max(spans.front().k, read_ahead_next_); k <= last; ++k) {
      if (QueueIsSlower(k)) {  // fast storage: this batch's workers read it themselves
        const uint64_t base = k * part_.batch_size, n = part_.BatchLength(k);
        for (uint64_t i = 0; i < n && !direct_; ++i) {
          const auto [shard, local] = ds_->Locate(RecordAt(part_.Position(base + i)));
          ds_->shard(shard).PrefetchRecord(local);
        }
        continue;
      }
      const uint64_t base = k * part_.batch_size, n = part_.BatchLength(k);
      for (uint64_t i = 0; i < n; ++i) {
        const auto [shard, local] = ds_->Locate(RecordAt(part_.Position(base + i)));
        queue_->Submit(shard, local);
      }
    }
    read_ahead_next_ = std::max(read_ahead_next_, last + 1);
    return;
  }
  if (direct_) return;  // no page cache to read ahead into
  if (mode_ != ShuffleMode::kFull) {
    // Block-local or in order: the stored blocks of the segments these
    // batches and the next few read (positions are contiguous here).
    uint64_t i = std::max(spans.front().base, read_ahead_pos_);
    const uint64_t end_i = std::min<uint64_t>(
        part_.per_rank, (spans.back().k + 1 + kReadAheadBatches) * part_.batch_size);
    while (i < end_i) {
      const uint64_t pos = part_.Position(i);
      uint64_t end = 0;
      sampler_->Segment(pos, &end, &segment_);
      for (uint32_t g : segment_)
        ds_->shard(global_blocks_[g].first).PrefetchBlock(global_blocks_[g].second);
      i += std::max<uint64_t>(1, std::min(end - pos, part_.per_rank - i));
    }
    read_ahead_pos_ = std::max(read_ahead_pos_, i);
    return;
  }
  // A hint per record costs a system call: worth it for records that take
  // far longer to decode or copy (JPEGs, large raw records), not for 28x28s.
  if (!read_ahead_records_) return;
  const uint64_t last = std::min<uint64_t>(spans.back().k + kReadAheadBatches, part_.batches - 1);
  for (uint64_t k = std::max(spans.front().k, read_ahead_next_); k <= last; ++k) {
    const uint64_t base = k * part_.batch_size, n = part_.BatchLength(k);
    for (uint64_t i = 0; i < n; ++i) {
      const auto [shard, local] = ds_->Locate(RecordAt(part_.Position(base + i)));
      ds_->shard(shard).PrefetchRecord(local);
    }
  }
  read_ahead_next_ = std::max(read_ahead_next_, last + 1);
}

}  // namespace shardkit
