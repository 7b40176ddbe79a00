// ReadQueue: keeps many record reads in flight ahead of the decoders, on a
// pool of I/O threads, whatever the number of decode workers. On network
// storage (GPFS, Lustre, NFS, EBS) a read costs milliseconds of latency, not
// bandwidth: a worker that reads what it decodes waits that long per sample;
// `depth` reads in flight serve depth / latency reads a second instead.
//
// The producer submits the records the next batches need, in the order the
// workers will fetch them; I/O threads read them (pread of exactly the
// record's bytes, buffered or O_DIRECT as the file is opened, checksum
// verified) in that order, while the bytes held (read or being read, not yet
// taken) stay under `max_bytes`. A worker takes a record's bytes; a record it
// waits for that has not started is read next, past the budget, so a worker
// never waits on the budget. Cancel() (a new epoch) drops what is queued and
// what was read, and waits for the reads in flight; the destructor too.
//
// Threading: Submit and Cancel from the producer thread (no Take running
// during Cancel); Take from any worker; stats() from anywhere.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "shard/dataset.h"

namespace shardkit {

struct ReadQueueStats {
  uint64_t reads = 0;        // completed by the I/O threads
  double read_seconds = 0;   // summed over reads: their latency (by the queue's clock)
  double in_flight_sum = 0;  // reads in flight, summed at each read's start
  uint64_t peak_in_flight = 0;
  uint64_t peak_bytes = 0;  // held: read or being read, not yet taken
  uint64_t waits = 0;       // takes that had to wait for their read
  double mean_in_flight() const { return reads > 0 ? in_flight_sum / double(reads) : 0; }
  double mean_latency_s() const { return reads > 0 ? read_seconds / double(reads) : 0; }
};

class ReadQueue {
 public:
  // `depth` I/O threads (reads in flight at most), `max_bytes` held at most
  // (besides the reads workers wait for). Records queued one after another
  // that are neighbours on storage are read with one request of at most
  // `max_merge_bytes` (0: a request each): object storage answers a request
  // in tens of milliseconds, whatever its size. Reads are timed by `clock`
  // (which must outlive the queue): their latency decides whether the read
  // planner queues reads at all (ReadPlanner::kFastReadSeconds).
  ReadQueue(const Dataset* ds, int depth, uint64_t max_bytes, uint64_t max_merge_bytes = 0,
            const Clock& clock = SteadyClock());
  ~ReadQueue();
  ReadQueue(const ReadQueue&) = delete;
  ReadQueue& operator=(const ReadQueue&) = delete;

  static uint64_t Key(uint32_t shard, uint32_t local) { return (uint64_t{shard} << 32) | local; }

  // Queues the read of a stored record (a record already queued or held is
  // not queued twice).
  void Submit(uint32_t shard, uint32_t local);
  // The record's bytes, if it was submitted (waiting for its read): true with
  // *bytes filled (or *status the read's error, naming shard and record);
  // false if it was never submitted or was already taken: read it yourself.
  bool Take(uint32_t shard, uint32_t local, std::vector<char>* bytes, Status* status);
  // Drops every queued and read record; waits for the reads in flight.
  void Cancel();

  ReadQueueStats stats() const;
  void ResetStats();
  int depth() const { return static_cast<int>(threads_.size()); }
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  enum class State { kQueued, kReading, kDone };
  struct Request {
    State state = State::kQueued;
    bool urgent = false;  // a worker waits for it
    uint64_t length = 0;
    std::vector<char> bytes;
    Status status;
  };
  void Run();
  void Neighbours(uint64_t first, std::deque<uint64_t>::iterator q, std::vector<uint64_t>* run);
  void ReadRun(const std::vector<uint64_t>& run, ReadScratch* scratch, std::vector<char>* span,
               std::vector<Status>* statuses, std::vector<std::vector<char>>* bytes) const;
  static constexpr size_t kMaxMergedRecords = 256;

  const Dataset* ds_;
  const uint64_t max_bytes_, max_merge_bytes_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<uint64_t> queue_;  // keys, in submission order
  std::unordered_map<uint64_t, Request> requests_;
  uint64_t held_bytes_ = 0, in_flight_ = 0;
  uint64_t urgent_ = 0;  // queued requests a worker waits for
  // requests_.size(), readable without the lock: a Take when nothing was
  // submitted (batches the workers read themselves) costs no lock.
  std::atomic<size_t> outstanding_{0};
  uint64_t generation_ = 0;
  bool stop_ = false;
  ReadQueueStats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace shardkit
