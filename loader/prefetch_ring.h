// PrefetchRing: the hand-off between the loader's producer thread, which fills
// batches ahead, and its one consumer. Batch k is filled in slot k % slots;
// the consumer takes batches in order and gets each as a lease.
//
// Memory: each slot's batch (pixels, labels, sample ids) lives in one buffer
// from a BufferPool, whose memory comes from a SlotAllocator the consumer may
// provide (pinned host memory for a CUDA copy, say). A lease takes its
// buffer with it: the ring never writes into a buffer a lease holds. The slot
// gets another buffer from the pool when it is refilled, and the leased one
// returns to the pool (under the pool's mutex, which orders the consumer's
// last reads before any reuse) when the lease's last copy is dropped.
// So holding any number of batches never stalls the producer; in the usual
// loop (release batch k before asking for k + 1) the pool cycles through
// slots + 1 buffers and allocates nothing after the first epoch's start.
//
// Threading: one producer (Claim, Publish) and one consumer (Take); Stop and
// Reset from the consumer's thread, Reset only while no producer runs.
// Leases may be released from any thread, after the ring is gone too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "base/recycler.h"
#include "base/status.h"
#include "image/image.h"
#include "loader/batch.h"

namespace shardkit {

// Fixed-size batch buffers, recycled: Acquire() returns a buffer whose last
// reference, when dropped, gives it back (or frees it if `keep` are idle).
class BufferPool {
 public:
  BufferPool(size_t bytes, size_t keep, SlotAllocator allocate);
  std::shared_ptr<uint8_t> Acquire();
  size_t bytes() const { return bytes_; }
  uint64_t allocations() const;  // buffers obtained from the allocator so far

 private:
  size_t bytes_;
  SlotAllocator allocate_;
  std::atomic<uint64_t> allocations_{0};
  // Shared with the deleters of outstanding buffers (a lease may outlive the pool).
  std::shared_ptr<Recycler<std::shared_ptr<uint8_t>>> idle_;
};

class PrefetchRing {
 public:
  struct Slot {
    uint64_t index = 0;                 // the batch it holds or is filling
    Status status;                      // the batch's error, if any
    std::vector<Status> sample_status;  // per sample, while filling
    Batch batch;                        // points into `memory`
    std::shared_ptr<uint8_t> memory;
  };

  // `shape` is copied into every slot's Batch (channels, height, width, layout).
  PrefetchRing(int slots, int batch_size, const Batch& shape, SlotAllocator allocate);
  size_t size() const { return slots_.size(); }
  // Bytes of one slot's buffer: pixels, labels and ids of a full batch.
  size_t slot_bytes() const { return pool_->bytes(); }
  uint64_t allocations() const { return pool_->allocations(); }

  // Producer. Waits until the slots of batches [first, first + want) are free,
  // then claims them and the free slots after them, up to batch `end`, one
  // turn of the ring and `most` batches (never fewer than `want`); each
  // claimed slot has a buffer no lease holds. Returns false (claiming
  // nothing) once Stop() is called.
  bool Claim(uint64_t first, uint64_t want, uint64_t end, std::vector<Slot*>* claimed,
             uint64_t most = UINT64_MAX);
  // Makes a filled slot's batch (or its error) available to Take. False if stopped.
  bool Publish(Slot* slot);

  // Consumer. Waits for batch `index` and leases it, or returns its error.
  // *waited_ns: how long it waited. With `timeout_ns`, waits at most that
  // long: *ready false (and OK, no lease) if the batch did not come in time.
  Status Take(uint64_t index, std::shared_ptr<const Batch>* lease, uint64_t* waited_ns,
              uint64_t timeout_ns = kForever, bool* ready = nullptr);
  static constexpr uint64_t kForever = ~uint64_t{0};

  // Wakes and ends the producer's and consumer's waits (Claim returns false).
  void Stop();
  bool stopped() const { return stop_flag_.load(std::memory_order_relaxed); }
  // The flag behind stopped(), for workers that poll it.
  const std::atomic<bool>& stop_flag() const { return stop_flag_; }
  // With no producer running: every slot free, ready for a new epoch.
  void Reset();
  // With no producer running: slots of another batch shape (an output size
  // that changes between epochs), their buffers from a new pool. Leases of
  // the old shape stay valid (they keep the old pool's buffers).
  void Reshape(const Batch& shape, SlotAllocator allocate);

 private:
  enum class State { kFree, kFilling, kReady };
  std::unique_ptr<BufferPool> pool_;
  int batch_size_;
  std::vector<Slot> slots_;
  std::vector<State> state_;
  std::mutex mu_;
  std::condition_variable producer_cv_, consumer_cv_;
  bool stop_ = false;
  std::atomic<bool> stop_flag_{false};  // stop_, readable without the lock by workers
};

}  // namespace shardkit
