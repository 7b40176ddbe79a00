// WorkerTeam: a calling thread and helper threads that share its loops. Run(n,
// task) runs task(worker, i) for every i in [0, n): the caller works the items
// itself, as worker 0, and wakes the helpers (workers 1..size-1), which take
// items too while any are left; Run returns when every item has run.
//
// Why not an OpenMP parallel loop: a fork-join region ends only when every
// thread of its team has arrived, so each region waits for its slowest thread
// to be scheduled at all. On a busy machine, or one with as few cores as
// threads, that wait (a scheduler time slice, milliseconds) exceeds the work
// of a batch of small records, and more workers were slower than one. Here a
// helper that wakes late finds nothing left and sleeps again: the caller never
// waits for a thread that has not taken an item, only for items in progress
// (briefly spinning first: an item is short). Between runs the helpers sleep
// on a condition variable, taking no core from the threads that have work.
//
// Threading: Run from one thread at a time (the owner); task must not throw.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shardkit {

class WorkerTeam {
 public:
  using Task = std::function<void(int worker, int item)>;

  // `workers` threads in all: the caller and workers - 1 helpers.
  explicit WorkerTeam(int workers);
  ~WorkerTeam();
  WorkerTeam(const WorkerTeam&) = delete;
  WorkerTeam& operator=(const WorkerTeam&) = delete;

  int size() const { return static_cast<int>(helpers_.size()) + 1; }

  // Runs task(w, i) for i in [0, n), each once, items claimed in order;
  // `max_workers` (at most size()) bounds the threads that take part: 1 runs
  // every item on the caller. Returns when all have run.
  void Run(int n, const Task& task, int max_workers);
  void Run(int n, const Task& task) { Run(n, task, size()); }

  // Items run by helpers since the team started (how much they took part).
  uint64_t helped() const { return helped_.load(std::memory_order_relaxed); }

 private:
  // One run as a helper sees it (copied under mu_ when it wakes).
  struct RunInfo {
    uint32_t generation = 0;
    int n = 0, allowed = 0;
    const Task* task = nullptr;
  };
  // Claims and runs items of `run` until none is left in it.
  void Work(int worker, const RunInfo& run);
  void HelperLoop(int worker);

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  RunInfo current_;  // under mu_
  bool stop_ = false;
  // (generation << 32) | next item: a claim (compare-and-swap) succeeds only
  // within its own run, so a helper that wakes late never takes an item of
  // the next one.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> active_{0};  // helpers that may be claiming or running an item
  std::atomic<uint64_t> helped_{0};
  std::vector<std::thread> helpers_;
};

}  // namespace shardkit
