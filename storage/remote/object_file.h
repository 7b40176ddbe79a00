// An object of an ObjectStore opened for ranged reads: its size and ETag
// taken once, at open. Internal to storage/remote/ (object_env.cc opens it).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "storage/remote/object_env.h"

namespace shardkit {

class ObjectFile final : public RandomAccessFile {
 public:
  ObjectFile(ObjectStore* store, Target t, ObjectInfo info)
      : store_(store), t_(std::move(t)), info_(std::move(info)), id_(store->NextFileId()) {}
  ~ObjectFile() override {
    aborted_->store(true);  // read-aheads still in flight: dropped
    store_->client().Wake();
    ReadAhead* a = store_->ahead();
    std::lock_guard<std::mutex> lock(a->mu);
    auto it = a->entries.lower_bound({id_, 0});
    while (it != a->entries.end() && it->first.first == id_) {
      const auto key = (it++)->first;
      a->Erase(key);
    }
  }
  const std::string& path() const override { return t_.shown; }
  uint64_t size() const override { return info_.size; }
  std::string version() const override { return info_.etag; }
  std::string identity() const override;
  std::optional<uint32_t> stored_crc32c() const override { return info_.stored_crc32c; }
  Status Read(uint64_t offset, size_t n, void* dst) const override;
  void WillNeed(uint64_t offset, size_t n) const override;
  void Abort() const override {
    aborted_->store(true);
    store_->client().Wake();
    ReadAhead* a = store_->ahead();
    { std::lock_guard<std::mutex> lock(a->mu); }
    a->cv.notify_all();
    store_->WakeBackoffs();
  }

 private:
  // Reads from a read-ahead entry, if one holds the range: true if done.
  bool ReadFromAhead(uint64_t offset, size_t n, char* dst) const;

  ObjectStore* const store_;
  const Target t_;
  const ObjectInfo info_;
  const uint64_t id_;
  // Shared with read-aheads in flight, which may end after the file closes.
  const std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace shardkit
