// RecordReader: records by number through a bounded block cache, per
// process, or one arena of every block shared by a process and its forks.
#include "shard/record_reader.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

namespace shardkit {

struct RecordReader::State {
  State(const Dataset* ds, uint64_t bytes) : pid(::getpid()), cache(ds, bytes) {}
  const pid_t pid;
  BlockCache cache;
  std::atomic<uint64_t> decompressed{0};
};

// Where the dataset's decompressed bytes fit the bound: every compressed
// block has a slot in one shared anonymous mapping, made before any fork, so
// a process and its forked children (a DataLoader's workers, epoch after
// epoch) fill each slot once between them. A slot's state word (in the
// mapping) goes kEmpty -> Filling(pid) (the one thread whose exchange won,
// and its process) -> kReady, or back to kEmpty if the read failed. A thread
// that finds a slot being filled by its own process waits for it; one that
// finds another process filling it reads the block into its own cache
// instead, so a process that dies mid-fill never blocks the others (and a
// slot it left is taken over by the next reader that finds it gone).
struct RecordReader::Arena {
  enum : uint32_t { kEmpty = 0, kReady = 1 };
  static uint32_t Filling(pid_t pid) { return static_cast<uint32_t>(pid) << 1; }
  char* base = nullptr;
  size_t length = 0;
  std::atomic<uint32_t>* state = nullptr;  // per block, in the mapping
  std::vector<uint64_t> first;             // per shard: its block 0's number
  std::vector<uint64_t> offset;            // per block: its slot's first byte
  ~Arena() {
    if (base != nullptr) ::munmap(base, length);
  }
};

// The arena for `ds`, or null: no compressed block, more decompressed bytes
// than `bound`, or no memory for the mapping.
std::unique_ptr<RecordReader::Arena> RecordReader::MakeArena(const Dataset& ds, uint64_t bound) {
  auto a = std::make_unique<Arena>();
  uint64_t bytes = 0, blocks = 0;
  bool compressed = false;
  for (size_t s = 0; s < ds.num_shards(); ++s) {
    const ShardReader& r = ds.shard(s);
    a->first.push_back(blocks);
    for (uint32_t b = 0; b < r.num_blocks(); ++b, ++blocks) {
      a->offset.push_back(bytes);
      const bool stored = r.block(b).codec == static_cast<uint32_t>(format::Codec::kStored);
      compressed |= !stored;
      bytes += stored ? 0 : (r.block(b).raw_size + 63) / 64 * 64;
    }
  }
  if (!compressed || bytes > bound) return nullptr;
  const size_t states = (blocks * sizeof(std::atomic<uint32_t>) + 63) / 64 * 64;
  a->length = states + bytes;
  void* p = ::mmap(nullptr, a->length, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  a->base = static_cast<char*>(p);
  a->state = reinterpret_cast<std::atomic<uint32_t>*>(a->base);  // zeros: kEmpty
  for (uint64_t& o : a->offset) o += states;
  return a;
}

RecordReader::RecordReader(const Dataset* dataset, uint64_t cache_bytes)
    : ds_(dataset),
      cache_bytes_(cache_bytes),
      arena_(MakeArena(*dataset, cache_bytes)),
      state_(new State(dataset, arena_ ? 0 : cache_bytes)) {}

RecordReader::~RecordReader() {
  State* s = state_.load();
  if (s->pid == ::getpid()) delete s;  // a parent's, in a forked child, is left as it is
}

RecordReader::State* RecordReader::Live() const {
  State* s = state_.load(std::memory_order_acquire);
  if (s->pid == ::getpid()) return s;
  static std::mutex swap_mu;
  std::lock_guard<std::mutex> lock(swap_mu);
  s = state_.load();
  if (s->pid != ::getpid()) {
    s = new State(ds_, arena_ ? 0 : cache_bytes_);
    state_.store(s, std::memory_order_release);
  }
  return s;
}

uint64_t RecordReader::blocks_decompressed() const { return Live()->decompressed.load(); }

// Entries lie inside their blocks (checked with their index chunk), and a
// block in the arena or ready in the cache passed its checksum and
// decompressed to its declared size: its records are sliced as they are.
bool RecordReader::ReadCached(uint64_t global, Record* out) const {
  if (global >= ds_->num_records()) return false;
  const auto [shard, local] = ds_->Locate(global);
  const ShardReader& r = ds_->shard(shard);
  format::RecordEntry e;
  if (!r.entry(local, &e) ||
      r.block(e.block).codec == static_cast<uint32_t>(format::Codec::kStored))
    return false;
  out->block.reset();
  if (arena_) {
    const uint64_t b = arena_->first[shard] + e.block;
    if (arena_->state[b].load(std::memory_order_acquire) == Arena::kReady) {
      out->payload = std::string_view(arena_->base + arena_->offset[b] + e.offset, e.length);
      return true;
    }
  }
  std::shared_ptr<BlockCache::Block> block = Live()->cache.Peek(shard, e.block);
  if (block == nullptr) return false;
  out->payload = block->view().substr(e.offset, e.length);
  out->block = std::move(block);
  return true;
}

Status RecordReader::Read(uint64_t global, Record* out) const {
  if (global >= ds_->num_records()) {
    return Status::InvalidArgument(ds_->dir() + ": no record " + std::to_string(global) + " (" +
                                   std::to_string(ds_->num_records()) + " records)");
  }
  if (ReadCached(global, out)) return Status::OK();
  const auto [shard, local] = ds_->Locate(global);
  const ShardReader& r = ds_->shard(shard);
  format::RecordEntry e;
  if (!r.entry(local, &e)) return r.CheckRecord(local);  // a damaged index chunk
  if (r.block(e.block).codec == static_cast<uint32_t>(format::Codec::kStored)) {
    out->bytes.resize(e.length);  // one read of the record's bytes
    uint64_t offset = 0;
    uint32_t length = 0;
    r.StoredExtent(local, &offset, &length);
    const Status read = r.ReadRaw(offset, length, out->bytes.data());
    if (!read.ok()) return read.WithContext(r.Where(local));  // named only when it failed
    out->payload = std::string_view(out->bytes.data(), length);
    const Status check = r.CheckStored(local, out->payload);
    return check.ok() ? check : r.RereadStored(local, check, out->bytes.data());
  }
  State* s = Live();
  thread_local ReadScratch scratch;  // a zstd context per thread, for misses
  if (arena_) {
    const uint64_t b = arena_->first[shard] + e.block;
    const uint32_t mine = Arena::Filling(s->pid);
    uint32_t seen = arena_->state[b].load(std::memory_order_acquire);
    // A slot left being filled by a process that is gone (a worker killed
    // mid-read) is taken over, as an empty one is.
    const bool orphan = seen != Arena::kEmpty && seen != Arena::kReady && seen != mine &&
                        ::kill(static_cast<pid_t>(seen >> 1), 0) != 0 && errno == ESRCH;
    if ((seen == Arena::kEmpty || orphan) && arena_->state[b].compare_exchange_strong(seen, mine)) {
      Status st = r.ReadBlockInto(e.block, &scratch, &scratch.raw);
      if (st.ok()) {
        std::memcpy(arena_->base + arena_->offset[b], scratch.raw.data(), scratch.raw.size());
      }
      arena_->state[b].store(st.ok() ? Arena::kReady : Arena::kEmpty, std::memory_order_release);
      SK_RETURN_IF_ERROR(st);
      s->decompressed.fetch_add(1, std::memory_order_relaxed);
      out->payload = std::string_view(arena_->base + arena_->offset[b] + e.offset, e.length);
      return Status::OK();
    }
    while (seen == mine) {  // another thread of this process fills it: a read's time
      std::this_thread::yield();
      seen = arena_->state[b].load(std::memory_order_acquire);
    }
    // Ready by now, failed (this thread then reads it itself, below), or
    // being filled by another process: the cache below (a bound of 0 keeps
    // the one block).
    if (ReadCached(global, out)) return Status::OK();
  }
  bool decompressed = false;
  std::shared_ptr<BlockCache::Block> block = s->cache.Get(shard, e.block, &scratch, &decompressed);
  if (decompressed) s->decompressed.fetch_add(1, std::memory_order_relaxed);
  SK_RETURN_IF_ERROR(block->status);
  out->payload = block->view().substr(e.offset, e.length);
  out->block = std::move(block);
  return Status::OK();
}

}  // namespace shardkit
