#include "base/worker_team.h"

#include <algorithm>

namespace shardkit {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long the caller spins for the helpers' last items before sleeping.
constexpr int kSpins = 4000;

}  // namespace

WorkerTeam::WorkerTeam(int workers) {
  for (int w = 1; w < std::max(1, workers); ++w)
    helpers_.emplace_back([this, w] { HelperLoop(w); });
}

WorkerTeam::~WorkerTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void WorkerTeam::Work(int worker, const RunInfo& run) {
  uint64_t t = ticket_.load();
  for (;;) {
    const uint32_t index = static_cast<uint32_t>(t);
    if (static_cast<uint32_t>(t >> 32) != run.generation || index >= static_cast<uint32_t>(run.n))
      return;
    if (!ticket_.compare_exchange_weak(t, t + 1)) continue;  // t reloaded
    (*run.task)(worker, static_cast<int>(index));
    if (worker != 0) helped_.fetch_add(1, std::memory_order_relaxed);
    t = ticket_.load();
  }
}

void WorkerTeam::Run(int n, const Task& task, int max_workers) {
  if (n <= 0) return;
  const int allowed = std::clamp(std::min(max_workers, n), 1, size());
  if (allowed == 1) {
    for (int i = 0; i < n; ++i) task(0, i);
    return;
  }
  RunInfo run;
  {
    std::lock_guard<std::mutex> lock(mu_);
    run.generation = current_.generation + 1;
    run.n = n;
    run.allowed = allowed;
    run.task = &task;
    current_ = run;
    ticket_.store(uint64_t{run.generation} << 32);
  }
  work_cv_.notify_all();
  Work(0, run);
  // Every item is claimed. A helper counted in active_ may still run one; a
  // helper not yet counted finds none left (it counts itself before claiming).
  for (int i = 0; i < kSpins; ++i) {
    if (active_.load() == 0) return;
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return active_.load() == 0; });
}

void WorkerTeam::HelperLoop(int worker) {
  uint32_t seen = 0;
  for (;;) {
    RunInfo run;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || current_.generation != seen; });
      if (stop_) return;
      run = current_;
      seen = run.generation;
    }
    if (worker >= run.allowed) continue;  // not needed in this run
    active_.fetch_add(1);
    Work(worker, run);
    if (active_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // orders the notify after the caller's check
      done_cv_.notify_one();
    }
  }
}

}  // namespace shardkit
