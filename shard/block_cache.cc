// BlockCache: a FIFO map of decompressed blocks with one-time loading.
#include "shard/block_cache.h"

namespace shardkit {

std::shared_ptr<BlockCache::Block> BlockCache::Get(uint32_t shard, uint32_t block,
                                                   ReadScratch* scratch, bool* decompressed) {
  const Key key = MakeKey(shard, block);
  std::shared_ptr<Block> b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      b = it->second.block;
    } else {
      b = std::make_shared<Block>(&pool_);
      lru_.push_front(key);
      const uint64_t size = dataset_->shard(shard).block(block).raw_size;
      map_.emplace(key, Entry{b, lru_.begin(), size});
      bytes_ += size;
      // Evict the oldest blocks beyond capacity (never the new one).
      while (bytes_ > capacity_ && lru_.size() > 1) {
        auto victim = map_.find(lru_.back());
        victim->second.block->evicted.store(true, std::memory_order_relaxed);
        bytes_ -= victim->second.bytes;
        map_.erase(victim);
        lru_.pop_back();
      }
    }
  }
  *decompressed = false;
  std::call_once(b->once, [&] {
    pool_.Take(&b->raw);
    b->status = dataset_->shard(shard).ReadBlockInto(block, scratch, &b->raw);
    b->ready.store(b->status.ok(), std::memory_order_release);
    *decompressed = true;
  });
  if (!b->status.ok()) {
    // Do not keep a failed block: a later read may succeed (transient I/O error).
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end() && it->second.block == b) {
      bytes_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      map_.erase(it);
    }
  }
  return b;
}

std::shared_ptr<BlockCache::Block> BlockCache::Peek(uint32_t shard, uint32_t block) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(MakeKey(shard, block));
  if (it == map_.end() || !it->second.block->ready.load(std::memory_order_acquire)) return nullptr;
  return it->second.block;
}

bool BlockCache::Contains(Key key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(key) != 0;
}

size_t BlockCache::blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

uint64_t BlockCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace shardkit
