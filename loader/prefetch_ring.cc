#include "loader/prefetch_ring.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>

#include "base/clock.h"

namespace shardkit {
namespace {

constexpr size_t kAlign = 64;

size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Where pixels, labels and ids sit in a slot's buffer.
struct BufferLayout {
  size_t labels_offset, ids_offset, total;
  BufferLayout(size_t sample_bytes, int batch_size) {
    const size_t n = static_cast<size_t>(batch_size);
    labels_offset = RoundUp(sample_bytes * n, kAlign);
    ids_offset = RoundUp(labels_offset + sizeof(int32_t) * n, kAlign);
    total = ids_offset + sizeof(uint64_t) * n;
  }
};

}  // namespace

std::shared_ptr<uint8_t> DefaultSlotAllocator(size_t bytes) {
  void* p = std::aligned_alloc(kAlign, RoundUp(std::max<size_t>(bytes, 1), kAlign));
  if (p == nullptr) throw std::bad_alloc();
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

BufferPool::BufferPool(size_t bytes, size_t keep, SlotAllocator allocate)
    : bytes_(bytes),
      allocate_(allocate ? std::move(allocate) : SlotAllocator(DefaultSlotAllocator)),
      idle_(std::make_shared<Recycler<std::shared_ptr<uint8_t>>>(keep)) {}

std::shared_ptr<uint8_t> BufferPool::Acquire() {
  std::shared_ptr<uint8_t> inner;
  if (!idle_->Take(&inner)) {
    inner = allocate_(bytes_);
    if (!inner) throw std::bad_alloc();
    allocations_.fetch_add(1, std::memory_order_relaxed);
  }
  // The outer pointer's deleter hands the allocation back to the pool (kept
  // alive by the deleter itself, so a lease may outlive the loader); beyond
  // `keep` idle ones, the allocation is freed with the deleter.
  uint8_t* raw = inner.get();
  return std::shared_ptr<uint8_t>(
      raw, [idle = idle_, inner](uint8_t*) mutable { idle->Give(std::move(inner)); });
}

uint64_t BufferPool::allocations() const { return allocations_.load(std::memory_order_relaxed); }

PrefetchRing::PrefetchRing(int slots, int batch_size, const Batch& shape, SlotAllocator allocate)
    : pool_(std::make_unique<BufferPool>(BufferLayout(shape.sample_bytes(), batch_size).total,
                                         static_cast<size_t>(slots) + 2, std::move(allocate))),
      batch_size_(batch_size),
      slots_(static_cast<size_t>(slots)),
      state_(static_cast<size_t>(slots), State::kFree) {
  for (Slot& s : slots_) {
    s.batch = shape;
    s.batch.data = nullptr;
    s.batch.labels = nullptr;
    s.batch.sample_ids = nullptr;
  }
}

bool PrefetchRing::Claim(uint64_t first, uint64_t want, uint64_t end, std::vector<Slot*>* claimed,
                         uint64_t most) {
  claimed->clear();
  const size_t n = slots_.size();
  std::unique_lock<std::mutex> lock(mu_);
  auto free_run = [&] {
    uint64_t k = 0;
    while (k < want && state_[(first + k) % n] == State::kFree) ++k;
    return k;
  };
  producer_cv_.wait(lock, [&] { return stop_ || free_run() >= want; });
  if (stop_) return false;
  const uint64_t cap = std::min<uint64_t>(n, std::max(most, want));
  for (uint64_t k = first; k < end && claimed->size() < cap; ++k) {
    const size_t i = k % n;
    if (state_[i] != State::kFree) break;
    state_[i] = State::kFilling;
    Slot& s = slots_[i];
    s.index = k;
    claimed->push_back(&s);
  }
  lock.unlock();
  // Outside the lock (an allocation may be slow): a slot whose buffer went
  // out with a lease gets another from the pool. The pool's mutex orders
  // this after the release of whichever lease last used the buffer.
  const BufferLayout layout(slots_[0].batch.sample_bytes(), batch_size_);
  for (Slot* s : *claimed) {
    if (s->memory) continue;
    s->memory = pool_->Acquire();
    uint8_t* base = s->memory.get();
    s->batch.data = base;
    s->batch.labels = reinterpret_cast<int32_t*>(base + layout.labels_offset);
    s->batch.sample_ids = reinterpret_cast<uint64_t*>(base + layout.ids_offset);
  }
  return true;
}

bool PrefetchRing::Publish(Slot* slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    state_[static_cast<size_t>(slot - slots_.data())] = State::kReady;
  }
  consumer_cv_.notify_all();
  return true;
}

Status PrefetchRing::Take(uint64_t index, std::shared_ptr<const Batch>* lease, uint64_t* waited_ns,
                          uint64_t timeout_ns, bool* ready) {
  lease->reset();
  if (ready != nullptr) *ready = true;
  const size_t i = index % slots_.size();
  Slot& s = slots_[i];
  const uint64_t t0 = MonotonicNs();
  std::unique_lock<std::mutex> lock(mu_);
  auto available = [&] { return stop_ || (state_[i] == State::kReady && s.index == index); };
  if (timeout_ns == kForever) {
    consumer_cv_.wait(lock, available);
  } else if (!consumer_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), available)) {
    if (waited_ns != nullptr) *waited_ns = MonotonicNs() - t0;
    if (ready != nullptr) *ready = false;
    return Status::OK();
  }
  if (waited_ns != nullptr) *waited_ns = MonotonicNs() - t0;
  if (stop_) return Status::Aborted("loader stopped");
  state_[i] = State::kFree;
  Status status = s.status;
  if (status.ok()) {
    // The buffer goes out with the lease (the slot gets another when it is
    // refilled) and back to the pool when the lease's last copy is dropped.
    struct Holder {
      Batch batch;
      std::shared_ptr<uint8_t> memory;
    };
    auto holder = std::make_shared<Holder>(Holder{s.batch, std::move(s.memory)});
    *lease = std::shared_ptr<const Batch>(holder, &holder->batch);
  }
  lock.unlock();
  producer_cv_.notify_all();
  return status;
}

void PrefetchRing::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    stop_flag_ = true;
  }
  producer_cv_.notify_all();
  consumer_cv_.notify_all();
}

void PrefetchRing::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = false;
  stop_flag_ = false;
  for (State& st : state_) st = State::kFree;
}

void PrefetchRing::Reshape(const Batch& shape, SlotAllocator allocate) {
  std::lock_guard<std::mutex> lock(mu_);
  pool_ = std::make_unique<BufferPool>(BufferLayout(shape.sample_bytes(), batch_size_).total,
                                       slots_.size() + 2, std::move(allocate));
  for (Slot& s : slots_) {
    s.memory.reset();  // the old shape's buffer: back to the old pool
    s.batch = shape;
    s.batch.data = nullptr;
    s.batch.labels = nullptr;
    s.batch.sample_ids = nullptr;
  }
}

}  // namespace shardkit
