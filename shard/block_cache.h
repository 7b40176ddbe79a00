// BlockCache: decompressed blocks of a dataset shared by its readers (the
// loader's workers, a RecordReader's callers), bounded in bytes, oldest
// evicted first: the loader schedules blocks in the order it reads them, so
// insertion order is use order (and workers' hits, which bypass the cache
// through a per-thread memo, need not refresh it). A block is decompressed by
// the first reader that needs it; others needing it meanwhile wait for that
// one instead of decompressing it again. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/recycler.h"
#include "base/status.h"
#include "shard/dataset.h"

namespace shardkit {

class BlockCache {
 public:
  // Buffers of dropped blocks, reused so that decompression writes into warm,
  // already-faulted memory instead of a fresh allocation every time.
  using BufferPool = Recycler<std::vector<char>>;
  static constexpr size_t kIdleBuffers = 64;
  struct Block {
    explicit Block(BufferPool* p) : pool(p) {}
    ~Block() {
      if (raw.capacity() > 0) pool->Give(std::move(raw));
    }
    std::once_flag once;
    std::atomic<bool> ready{false};    // read and decompressed, without error
    std::atomic<bool> evicted{false};  // dropped by the cache: holders should let go
    Status status;
    std::vector<char> raw;
    BufferPool* pool;
    std::string_view view() const { return std::string_view(raw.data(), raw.size()); }
  };
  using Key = uint64_t;  // shard << 32 | block
  static Key MakeKey(uint32_t shard, uint32_t block) { return (uint64_t{shard} << 32) | block; }

  BlockCache(const Dataset* dataset, uint64_t capacity_bytes)
      : dataset_(dataset), capacity_(capacity_bytes) {}

  // Returns the block, decompressing it with `scratch` (the caller's) if it is
  // not cached; *decompressed tells whether this call did the work. The
  // returned block stays valid while the pointer is held, even if evicted.
  std::shared_ptr<Block> Get(uint32_t shard, uint32_t block, ReadScratch* scratch,
                             bool* decompressed);

  // The block if it is cached and ready (read and decompressed without
  // error), without reading or waiting; null otherwise.
  std::shared_ptr<Block> Peek(uint32_t shard, uint32_t block) const;

  bool Contains(Key key) const;
  uint64_t bytes() const;
  // Blocks held or being read (each Contains); all of a dataset's: every
  // Contains is true.
  size_t blocks() const;

 private:
  const Dataset* dataset_;
  const uint64_t capacity_;
  BufferPool pool_{kIdleBuffers};  // outlives every Block: declared before the map
  mutable std::mutex mu_;
  struct Entry {
    std::shared_ptr<Block> block;
    std::list<Key>::iterator lru;
    uint64_t bytes;
  };
  std::unordered_map<Key, Entry> map_;
  std::list<Key> lru_;  // front: newest
  uint64_t bytes_ = 0;
};

}  // namespace shardkit
