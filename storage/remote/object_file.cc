// Objects opened for ranged reads (ObjectFile): the size and ETag taken at
// open, reads served from the read-ahead or fetched with retries.
#include "storage/remote/object_file.h"

#include <cstring>

namespace shardkit {

std::string ObjectFile::identity() const {
  const std::string version = !info_.etag.empty() ? info_.etag : info_.last_modified;
  if (version.empty()) return "";  // a replaced object could not be told from this one
  return store_->Location(t_) + "\n" + version;
}

Status ObjectFile::Read(uint64_t offset, size_t n, void* dst) const {
  if (offset > info_.size || n > info_.size - offset) {
    return Status::Corruption(t_.shown + ": read of " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + " is past its end (" +
                              std::to_string(info_.size) + " bytes)");
  }
  if (n == 0) return Status::OK();
  if (aborted_->load()) return Status::Aborted(t_.shown + ": read cancelled");
  if (ReadFromAhead(offset, n, static_cast<char*>(dst))) return Status::OK();
  return store_->GetRange(t_, info_, offset, n, static_cast<char*>(dst), aborted_.get());
}

bool ObjectFile::ReadFromAhead(uint64_t offset, size_t n, char* dst) const {
  ReadAhead* a = store_->ahead();
  std::unique_lock<std::mutex> lock(a->mu);
  auto it = a->Find(id_, offset, n);
  if (it == a->entries.end()) return false;
  const ReadAhead::Key key = it->first;
  std::shared_ptr<ReadAhead::Entry> e = it->second;
  a->cv.wait(lock, [&] { return e->state != ReadAhead::Entry::kReading || aborted_->load(); });
  if (e->state != ReadAhead::Entry::kReady) return false;  // read it directly (with retries)
  std::memcpy(dst, e->bytes.data() + (offset - key.second), n);
  e->used += n;
  if (e->used >= e->bytes.size()) {
    a->Erase(key);
  } else {
    a->Touch(e);
  }
  return true;
}

void ObjectFile::WillNeed(uint64_t offset, size_t n) const {
  const ObjectStoreOptions& o = store_->options();
  if (n == 0 || offset > info_.size || n > info_.size - offset || n > o.read_ahead_bytes / 4 ||
      aborted_->load()) {
    return;
  }
  ReadAhead* a = store_->ahead();
  const ReadAhead::Key key{id_, offset};
  // Whether the range is worth starting now (under a->mu).
  auto wanted = [&] {
    if (auto it = a->Find(id_, offset, n); it != a->entries.end()) {
      a->Touch(it->second);
      return false;
    }
    // A shorter range at the same offset is left as it is.
    return a->reading < o.read_ahead_requests && a->MakeRoom(n, o.read_ahead_bytes) &&
           a->entries.count(key) == 0;
  };
  {
    std::lock_guard<std::mutex> lock(a->mu);
    if (!wanted()) return;
  }
  // Signed outside the lock: getting credentials may wait for a refresh.
  auto e = std::make_shared<ReadAhead::Entry>();
  e->bytes.resize(n);
  SentAs sent;
  auto request = store_->RangeRequest(t_, info_, offset, n, e->bytes.data(), &sent);
  if (!request.ok()) return;  // the read itself will say why
  {
    std::lock_guard<std::mutex> lock(a->mu);
    if (!wanted()) return;
    e->lru = a->lru.insert(a->lru.end(), key);
    a->entries.emplace(key, e);
    a->held += n;
    a->reading++;
  }
  auto call = std::make_shared<HttpCall>();
  call->request = std::move(*request);
  ObjectStore* store = store_;
  // The file may be closed before the transfer ends: the callback keeps
  // its own copy of what it checks the reply against.
  auto target = std::make_shared<std::pair<Target, ObjectInfo>>(t_, info_);
  store_->client().Start(
      call,
      [store, a, e, key, target, aborted = aborted_](HttpCall& c) {
        (void)aborted;  // held: the transfer thread looks at it until this runs
        store->Count(c.response);
        size_t got = 0;
        const Attempt v =
            CheckRange(target->first.shown, target->second, key.second, e->bytes.size(), c.response,
                       store->Context(target->first), &got);
        std::lock_guard<std::mutex> lock(a->mu);
        a->reading--;
        e->state =
            v.verdict == Attempt::kDone ? ReadAhead::Entry::kReady : ReadAhead::Entry::kFailed;
        auto it = a->entries.find(key);
        if (e->state == ReadAhead::Entry::kFailed && it != a->entries.end() && it->second == e) {
          a->Erase(key);
        }
        a->cv.notify_all();
      },
      aborted_.get());
}

}  // namespace shardkit
