// Recycler<Buffer>: idle buffers kept for reuse, at most `keep` of them, so
// that memory the loader fills again and again (batch buffers, decompressed
// blocks) stays allocated and warm instead of going back to the allocator.
// Take() gives an idle buffer if there is one; Give() keeps a buffer or, with
// `keep` already idle, drops it. The mutex also orders a buffer's last reads
// by its previous user before any write by the next. Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace shardkit {

template <typename Buffer>
class Recycler {
 public:
  explicit Recycler(size_t keep) : keep_(keep) {}
  Recycler(const Recycler&) = delete;
  Recycler& operator=(const Recycler&) = delete;

  bool Take(Buffer* out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.empty()) return false;
    *out = std::move(idle_.back());
    idle_.pop_back();
    return true;
  }
  void Give(Buffer buffer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < keep_) idle_.push_back(std::move(buffer));
    // else: dropped here, after the lock (its destructor frees it)
  }
  size_t idle() const {
    std::lock_guard<std::mutex> lock(mu_);
    return idle_.size();
  }

 private:
  mutable std::mutex mu_;
  const size_t keep_;
  std::vector<Buffer> idle_;
};

}  // namespace shardkit
