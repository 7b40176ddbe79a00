#include "loader/record_fetcher.h"

#include "base/clock.h"

namespace shardkit {

RecordFetcher::RecordFetcher(const Dataset* dataset, BlockCache* cache, ReadQueue* queue,
                             int workers)
    : ds_(dataset), cache_(cache), queue_(queue) {
  for (int w = 0; w < workers; ++w) cursors_.push_back(std::make_unique<Cursor>());
}

FetchStats RecordFetcher::stats() const {
  FetchStats s;
  for (const auto& c : cursors_) {
    s.read_s += c->read_ns.load() * 1e-9;
    s.decompress_s += c->decompress_ns.load() * 1e-9;
    s.bytes += c->bytes.load();
  }
  return s;
}

void RecordFetcher::ResetStats() {
  for (auto& c : cursors_) c->read_ns = c->decompress_ns = c->bytes = 0;
}

Status RecordFetcher::FetchSlow(Cursor& c, const SampleLocation& l, std::string_view* payload) {
  const ShardReader& r = ds_->shard(l.shard);
  format::RecordEntry e;
  if (!r.entry(l.local, &e)) return r.CheckRecord(l.local);
  if (r.block(e.block).codec == static_cast<uint32_t>(format::Codec::kStored)) {
    Cursor::StoredBuffer& buf = c.stored[c.next_stored++ % kLivePayloads];
    const uint64_t t0 = MonotonicNs();
    Status s;
    if (queue_ == nullptr || !queue_->Take(l.shard, l.local, &buf.queued, &s)) {
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

std::shared_ptr<BlockCache::Block> RecordFetcher::GetBlock(Cursor& c, uint32_t shard,
                                                           uint32_t block) {
  bool decompressed = false;
  const uint64_t t0 = MonotonicNs();
  auto b = cache_->Get(shard, block, &c.scratch, &decompressed);
  if (decompressed) {
    c.decompress_ns.fetch_add(MonotonicNs() - t0, std::memory_order_relaxed);
    c.bytes.fetch_add(ds_->shard(shard).block(block).stored_size, std::memory_order_relaxed);
  }
  return b;
}

void RecordFetcher::Warm(BlockRef b, Cursor& c) { GetBlock(c, b.shard, b.block); }

Status RecordFetcher::FillMemo(Cursor& c, uint32_t shard, uint32_t block, uint64_t key,
                               Cursor::Memo* m) {
  // The block this slot held may still be under a live payload: retired then,
  // not freed (a block last sliced longer ago goes back at once).
  if (m->block && c.fetches - m->last_use < static_cast<uint64_t>(kLivePayloads))
    c.retired[c.next_retired++ % kLivePayloads] = std::move(m->block);
  m->block.reset();
  m->block = GetBlock(c, shard, block);
  m->key = key;
  if (m->block->status.ok()) return Status::OK();
  Status s = m->block->status;
  m->block.reset();
  m->key = ~uint64_t{0};
  return s;
}

// Cursors let go of blocks the cache has dropped, so that their buffers go
// back to the pool at once: decompression then cycles through about the
// cache's worth of buffers (warm in the CPU caches) instead of the cache
// plus every block a memo still remembers.
void RecordFetcher::ReleaseEvicted() {
  for (auto& c : cursors_) {
    for (auto& b : c->retired) b.reset();  // no payload lives across a fill
    for (Cursor::Memo& m : c->memo) {
      if (m.block && m.block->evicted.load(std::memory_order_relaxed)) {
        m.block.reset();
        m.key = ~uint64_t{0};
      }
    }
  }
}

}  // namespace shardkit
