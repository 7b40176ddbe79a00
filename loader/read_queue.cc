#include "loader/read_queue.h"

#include <algorithm>

namespace shardkit {

ReadQueue::ReadQueue(const Dataset* ds, int depth, uint64_t max_bytes, uint64_t max_merge_bytes,
                     const Clock& clock)
    : ds_(ds), max_bytes_(max_bytes), max_merge_bytes_(max_merge_bytes), clock_(clock) {
  for (int i = 0; i < std::max(1, depth); ++i) threads_.emplace_back([this] { Run(); });
}

ReadQueue::~ReadQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReadQueue::Submit(uint32_t shard, uint32_t local) {
  const ShardReader& r = ds_->shard(shard);
  format::RecordEntry e;
  if (!r.entry(local, &e)) return;  // a damaged index chunk: the fetch reports it
  if (r.block(e.block).codec != static_cast<uint32_t>(format::Codec::kStored)) return;
  const uint64_t key = Key(shard, local);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || !requests_.emplace(key, Request{}).second) return;
    outstanding_.store(requests_.size(), std::memory_order_relaxed);
    requests_[key].length = e.length;
    queue_.push_back(key);
  }
  work_cv_.notify_one();
}

// Under mu_: the queued requests right after q (in the order the workers
// want them) whose records continue q's on storage, within max_merge_bytes_:
// read with q in one request. They stay in queue_ (no longer kQueued, so
// pick() passes over them).
void ReadQueue::Neighbours(uint64_t first, std::deque<uint64_t>::iterator q,
                           std::vector<uint64_t>* run) {
  run->assign(1, first);
  if (max_merge_bytes_ == 0) return;
  const uint32_t shard = static_cast<uint32_t>(first >> 32);
  const ShardReader& r = ds_->shard(shard);
  uint64_t offset = 0, end = 0;
  uint32_t length = 0;
  if (!r.StoredExtent(static_cast<uint32_t>(first), &offset, &length)) return;
  end = offset + length;
  for (auto it = std::next(q); it != queue_.end() && run->size() < kMaxMergedRecords; ++it) {
    auto req = requests_.find(*it);
    if (req == requests_.end() || req->second.state != State::kQueued) continue;  // taken
    uint64_t o = 0;
    if (static_cast<uint32_t>(*it >> 32) != shard ||
        !r.StoredExtent(static_cast<uint32_t>(*it), &o, &length) || o != end ||
        end + length - offset > max_merge_bytes_) {
      break;
    }
    end += length;
    run->push_back(*it);
  }
}

void ReadQueue::Run() {
  ReadScratch scratch;
  std::vector<uint64_t> run;
  std::vector<char> span;
  std::vector<Status> statuses;
  std::vector<std::vector<char>> bytes;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // The next read: one a worker waits for, else the oldest queued one
    // that fits the budget (or any, when nothing is held).
    auto pick = [&]() -> std::deque<uint64_t>::iterator {
      while (!queue_.empty()) {
        auto it = requests_.find(queue_.front());
        if (it != requests_.end() && it->second.state == State::kQueued) break;
        queue_.pop_front();  // taken, or read already for a waiting worker
      }
      for (auto q = queue_.begin(); urgent_ > 0 && q != queue_.end(); ++q) {
        auto it = requests_.find(*q);
        if (it != requests_.end() && it->second.state == State::kQueued && it->second.urgent)
          return q;
      }
      if (queue_.empty()) return queue_.end();
      const Request& front = requests_.at(queue_.front());
      return held_bytes_ == 0 || held_bytes_ + front.length <= max_bytes_ ? queue_.begin()
                                                                          : queue_.end();
    };
    std::deque<uint64_t>::iterator q;
    work_cv_.wait(lock, [&] { return stop_ || (q = pick()) != queue_.end(); });
    if (stop_) return;
    Neighbours(*q, q, &run);
    queue_.erase(q);
    uint64_t length = 0;
    for (uint64_t key : run) {
      Request& req = requests_.at(key);
      if (req.urgent) --urgent_;
      req.state = State::kReading;
      length += req.length;
    }
    held_bytes_ += length;
    ++in_flight_;
    stats_.in_flight_sum += double(in_flight_);
    stats_.peak_in_flight = std::max(stats_.peak_in_flight, in_flight_);
    stats_.peak_bytes = std::max(stats_.peak_bytes, held_bytes_);
    const uint64_t generation = generation_;
    lock.unlock();

    const uint64_t t0 = clock_.NowNs();
    ReadRun(run, &scratch, &span, &statuses, &bytes);
    const double seconds = double(clock_.NowNs() - t0) * 1e-9;

    lock.lock();
    --in_flight_;
    if (generation != generation_ || stop_) {  // cancelled while reading: dropped
      held_bytes_ -= length;
      done_cv_.notify_all();
      continue;
    }
    for (size_t i = 0; i < run.size(); ++i) {
      Request& done = requests_.at(run[i]);
      done.state = State::kDone;
      done.status = std::move(statuses[i]);
      done.bytes = std::move(bytes[i]);
    }
    stats_.reads += run.size();
    stats_.read_seconds += seconds * double(run.size());
    done_cv_.notify_all();
  }
}

// Reads the records of `run` (one, or neighbours on storage in one request),
// each checked against its checksum.
void ReadQueue::ReadRun(const std::vector<uint64_t>& run, ReadScratch* scratch,
                        std::vector<char>* span, std::vector<Status>* statuses,
                        std::vector<std::vector<char>>* bytes) const {
  statuses->assign(run.size(), Status::OK());
  bytes->resize(run.size());
  const uint32_t shard = static_cast<uint32_t>(run[0] >> 32);
  const ShardReader& r = ds_->shard(shard);
  if (run.size() == 1) {
    std::string_view payload;
    (*statuses)[0] = r.ReadRecord(static_cast<uint32_t>(run[0]), scratch, &payload);
    (*bytes)[0] = std::move(scratch->raw);
    scratch->raw = std::vector<char>();
    return;
  }
  uint64_t first = 0, last = 0;
  uint32_t length = 0;
  r.StoredExtent(static_cast<uint32_t>(run.front()), &first, &length);
  r.StoredExtent(static_cast<uint32_t>(run.back()), &last, &length);
  span->resize(last + length - first);
  const Status read = r.ReadRaw(first, span->size(), span->data());
  for (size_t i = 0; i < run.size(); ++i) {
    const uint32_t local = static_cast<uint32_t>(run[i]);
    if (!read.ok()) {
      (*statuses)[i] = read.WithContext(r.Where(local));
      continue;
    }
    uint64_t offset = 0;
    r.StoredExtent(local, &offset, &length);
    (*bytes)[i].assign(span->data() + (offset - first), span->data() + (offset - first) + length);
    (*statuses)[i] = r.CheckStored(local, std::string_view((*bytes)[i].data(), length));
    if (!(*statuses)[i].ok())
      (*statuses)[i] = r.RereadStored(local, (*statuses)[i], (*bytes)[i].data());
  }
}

bool ReadQueue::Take(uint32_t shard, uint32_t local, std::vector<char>* bytes, Status* status) {
  const uint64_t key = Key(shard, local);
  // Submissions happen before the batch's workers start (the producer submits,
  // then runs the team), so a zero here is not stale for this batch.
  if (outstanding_.load(std::memory_order_relaxed) == 0) return false;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = requests_.find(key);
  if (it == requests_.end()) return false;
  if (it->second.state != State::kDone) {
    stats_.waits++;
    if (it->second.state == State::kQueued && !it->second.urgent) {
      it->second.urgent = true;
      ++urgent_;
      work_cv_.notify_one();
    }
    done_cv_.wait(lock, [&] {
      it = requests_.find(key);
      return stop_ || it == requests_.end() || it->second.state == State::kDone;
    });
    if (it == requests_.end() || it->second.state != State::kDone) return false;
  }
  *bytes = std::move(it->second.bytes);
  *status = std::move(it->second.status);
  const bool was_full = held_bytes_ > max_bytes_ / 2;
  held_bytes_ -= it->second.length;
  requests_.erase(it);
  outstanding_.store(requests_.size(), std::memory_order_relaxed);
  lock.unlock();
  if (was_full) work_cv_.notify_one();  // budget freed for the next queued read
  return true;
}

void ReadQueue::Cancel() {
  std::unique_lock<std::mutex> lock(mu_);
  ++generation_;
  queue_.clear();
  urgent_ = 0;
  for (const auto& [key, req] : requests_) {
    if (req.state == State::kDone) held_bytes_ -= req.length;  // reading ones: by their thread
  }
  requests_.clear();
  outstanding_.store(0, std::memory_order_relaxed);
  done_cv_.wait(lock, [&] { return in_flight_ == 0; });
}

ReadQueueStats ReadQueue::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ReadQueue::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = ReadQueueStats();
}

}  // namespace shardkit
