// The read-ahead of object storage: ranges that RandomAccessFile::WillNeed
// started fetching, for every file of a store, held until read or evicted
// (least recently touched first) within a byte budget. Internal to
// storage/remote/ (object_file.cc fills and reads it).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace shardkit {

// Reads started ahead by WillNeed for every file of a store, held until
// read or evicted (least recently touched first) within a byte budget. One
// per process: a forked child starts with none (its parent's transfers do
// not run in it).
struct ReadAhead {
  struct Entry {
    enum State { kReading, kReady, kFailed } state = kReading;
    std::vector<char> bytes;
    uint64_t used = 0;  // bytes read out of it: all of them, and it goes
    std::list<std::pair<uint64_t, uint64_t>>::iterator lru;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (file, offset)
  explicit ReadAhead(pid_t p) : pid(p) {}
  // The entry holding [offset, offset + n) of `file`, or entries.end().
  std::map<Key, std::shared_ptr<Entry>>::iterator Find(uint64_t file, uint64_t offset, uint64_t n) {
    auto it = entries.upper_bound({file, offset});
    if (it == entries.begin()) return entries.end();
    --it;
    if (it->first.first != file || offset + n > it->first.second + it->second->bytes.size()) {
      return entries.end();
    }
    return it;
  }
  void Touch(const std::shared_ptr<Entry>& e) { lru.splice(lru.end(), lru, e->lru); }
  void Erase(const Key& key) {
    auto it = entries.find(key);
    if (it == entries.end()) return;
    held -= it->second->bytes.size();
    lru.erase(it->second->lru);
    entries.erase(it);
  }
  // Evicts ready entries, oldest first, until n more bytes fit.
  bool MakeRoom(uint64_t n, uint64_t budget) {
    for (auto it = lru.begin(); held + n > budget && it != lru.end();) {
      const Key key = *it++;
      if (entries.at(key)->state != Entry::kReading) Erase(key);
    }
    return held + n <= budget;
  }

  const pid_t pid;
  std::mutex mu;
  std::condition_variable cv;
  std::map<Key, std::shared_ptr<Entry>> entries;
  std::list<Key> lru;
  uint64_t held = 0;
  int reading = 0;
};

}  // namespace shardkit
