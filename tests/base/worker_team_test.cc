// WorkerTeam: every item runs exactly once per run, on the caller alone when
// asked, with helpers taking items concurrently when they wake, and a late
// helper never runs an item of a later run. This suite also runs under TSan.
#include "base/worker_team.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace shardkit {
namespace {

TEST(WorkerTeamTest, EveryItemRunsOncePerRunWhateverTheTeamSize) {
  for (int workers : {1, 2, 3, 8}) {
    WorkerTeam team(workers);
    EXPECT_EQ(team.size(), workers);
    for (int run = 0; run < 300; ++run) {
      const int n = (run * 37) % 97;  // 0 items included
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::vector<std::atomic<int>> by(static_cast<size_t>(n));
      team.Run(n, [&](int w, int i) {
        ASSERT_GE(w, 0);
        ASSERT_LT(w, workers);
        hits[static_cast<size_t>(i)].fetch_add(1);
        by[static_cast<size_t>(i)].store(w);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
  }
}

TEST(WorkerTeamTest, OneWorkerAllowedRunsEverythingOnTheCaller) {
  WorkerTeam team(4);
  const std::thread::id me = std::this_thread::get_id();
  int ran = 0;
  team.Run(
      50,
      [&](int w, int) {
        EXPECT_EQ(w, 0);
        EXPECT_EQ(std::this_thread::get_id(), me);
        ++ran;  // one thread: no atomics needed
      },
      1);
  EXPECT_EQ(ran, 50);
}

// Helpers do take part: item 0 waits until another item has started on
// another thread. A team that ran its items one at a time would never get
// there (the bound is generous; the state is waited for, not slept for).
TEST(WorkerTeamTest, HelpersRunItemsAtTheSameTimeAsTheCaller) {
  WorkerTeam team(2);
  std::atomic<int> started{0};
  std::atomic<bool> overlapped{false};
  team.Run(2, [&](int, int) {
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (started.load() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    if (started.load() == 2) overlapped = true;
  });
  EXPECT_TRUE(overlapped.load());
  EXPECT_GE(team.helped(), 1u);
}

// A run returns only when the items helpers took are done, so what they
// wrote is visible to the caller; and the next run starts afresh.
TEST(WorkerTeamTest, ARunReturnsAfterTheHelpersItemsAreDone) {
  WorkerTeam team(4);
  for (int run = 0; run < 200; ++run) {
    std::vector<int> out(64, -1);
    team.Run(64, [&](int, int i) {
      if (i % 7 == 0) std::this_thread::yield();
      out[static_cast<size_t>(i)] = i * run;
    });
    for (int i = 0; i < 64; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], i * run);
  }
}

TEST(WorkerTeamTest, DestroyedIdleOrRightAfterARunWithoutAHang) {
  for (int round = 0; round < 50; ++round) {
    WorkerTeam idle(3);
    WorkerTeam used(3);
    std::atomic<int> n{0};
    used.Run(10, [&](int, int) { n.fetch_add(1); });
    EXPECT_EQ(n.load(), 10);
  }
}

}  // namespace
}  // namespace shardkit
