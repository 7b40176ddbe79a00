// PrefetchRing and BufferPool: batches handed over in order, leases that keep
// their memory untouched while the ring refills, buffers recycled, errors
// handed to the consumer, and Stop() ending every wait.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "loader/prefetch_ring.h"

namespace shardkit {
namespace {

Batch Shape() {
  Batch b;
  b.channels = 1;
  b.height = 2;
  b.width = 3;
  return b;
}

// Producer: fills batches [0, n) with bytes equal to the batch number.
void Produce(PrefetchRing* ring, uint64_t n, uint64_t want = 1, int fail_at = -1) {
  std::vector<PrefetchRing::Slot*> claimed;
  for (uint64_t k = 0; k < n;) {
    if (!ring->Claim(k, std::min(want, n - k), n, &claimed)) return;
    for (PrefetchRing::Slot* s : claimed) {
      s->status =
          static_cast<int>(s->index) == fail_at ? Status::Corruption("batch broke") : Status::OK();
      s->batch.index = s->index;
      s->batch.size = 4;
      std::memset(s->batch.data, static_cast<int>(s->index & 0xFF), 4 * s->batch.sample_bytes());
      for (int i = 0; i < 4; ++i) s->batch.labels[i] = static_cast<int32_t>(s->index);
      if (!ring->Publish(s)) return;
    }
    k += claimed.size();
  }
}

bool AllBytes(const Batch& b, uint8_t v) {
  for (size_t i = 0; i < b.sample_bytes() * b.size; ++i) {
    if (b.data[i] != v) return false;
  }
  return true;
}

TEST(PrefetchRingTest, BatchesArriveInOrderForAnyClaimWidth) {
  for (uint64_t want : {1, 2, 3}) {
    PrefetchRing ring(3, 4, Shape(), nullptr);
    std::thread producer([&] { Produce(&ring, 50, want); });
    for (uint64_t k = 0; k < 50; ++k) {
      std::shared_ptr<const Batch> b;
      ASSERT_TRUE(ring.Take(k, &b, nullptr).ok());
      ASSERT_EQ(b->index, k);
      EXPECT_TRUE(AllBytes(*b, static_cast<uint8_t>(k)));
      EXPECT_EQ(b->labels[3], static_cast<int32_t>(k));
    }
    producer.join();
  }
}

// A claim takes the free slots after the ones it waits for, up to `most`
// (an epoch's first fill takes one batch of an all-free ring).
TEST(PrefetchRingTest, AClaimTakesTheFreeSlotsUpToMost) {
  PrefetchRing ring(4, 4, Shape(), nullptr);
  std::vector<PrefetchRing::Slot*> claimed;
  ASSERT_TRUE(ring.Claim(0, 1, 10, &claimed, /*most=*/1));
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0]->index, 0u);
  ASSERT_TRUE(ring.Claim(1, 1, 10, &claimed));
  ASSERT_EQ(claimed.size(), 3u) << "the rest of the ring";
  EXPECT_EQ(claimed[2]->index, 3u);
}

TEST(PrefetchRingTest, HeldLeasesKeepTheirBytesWhileTheRingRefills) {
  PrefetchRing ring(2, 4, Shape(), nullptr);
  std::thread producer([&] { Produce(&ring, 40); });
  std::vector<std::shared_ptr<const Batch>> held;
  for (uint64_t k = 0; k < 40; ++k) {
    std::shared_ptr<const Batch> b;
    ASSERT_TRUE(ring.Take(k, &b, nullptr).ok());
    if (k % 5 == 0) held.push_back(b);  // outlives many turns of a 2-slot ring
  }
  producer.join();
  ASSERT_EQ(held.size(), 8u);
  for (const auto& b : held) EXPECT_TRUE(AllBytes(*b, static_cast<uint8_t>(b->index))) << b->index;
  // Each held batch needed a buffer of its own; the rest were recycled.
  EXPECT_LE(ring.allocations(), 2u + 1u + held.size());
}

TEST(PrefetchRingTest, ReleasingEachBatchRecyclesAFixedSetOfBuffers) {
  PrefetchRing ring(4, 4, Shape(), nullptr);
  std::thread producer([&] { Produce(&ring, 200, 2); });
  for (uint64_t k = 0; k < 200; ++k) {
    std::shared_ptr<const Batch> b;
    ASSERT_TRUE(ring.Take(k, &b, nullptr).ok());
  }
  producer.join();
  EXPECT_LE(ring.allocations(), 4u + 2u);  // the slots, plus those leased while refilled
}

TEST(PrefetchRingTest, LeasesOutliveTheRing) {
  std::shared_ptr<const Batch> b;
  {
    PrefetchRing ring(2, 4, Shape(), nullptr);
    std::thread producer([&] { Produce(&ring, 1); });
    ASSERT_TRUE(ring.Take(0, &b, nullptr).ok());
    producer.join();
  }
  EXPECT_TRUE(AllBytes(*b, 0));  // ASan would report a use after free here
}

TEST(PrefetchRingTest, TheConsumersAllocatorProvidesTheMemory) {
  std::atomic<int> live{0};
  SlotAllocator counting = [&](size_t bytes) {
    ++live;
    auto p = DefaultSlotAllocator(bytes);
    return std::shared_ptr<uint8_t>(p.get(), [&live, p](uint8_t*) { --live; });
  };
  {
    PrefetchRing ring(3, 4, Shape(), counting);
    EXPECT_GE(ring.slot_bytes(), 4u * 6 + 4 * 4 + 4 * 8);
    std::thread producer([&] { Produce(&ring, 10); });
    for (uint64_t k = 0; k < 10; ++k) {
      std::shared_ptr<const Batch> b;
      ASSERT_TRUE(ring.Take(k, &b, nullptr).ok());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 64, 0u);
    }
    producer.join();
    EXPECT_GT(live.load(), 0);
  }
  EXPECT_EQ(live.load(), 0);  // every buffer went back through its deleter
}

TEST(PrefetchRingTest, ABatchErrorReachesTheConsumerAtThatBatch) {
  PrefetchRing ring(3, 4, Shape(), nullptr);
  std::thread producer([&] { Produce(&ring, 10, 1, /*fail_at=*/4); });
  for (uint64_t k = 0; k < 4; ++k) {
    std::shared_ptr<const Batch> b;
    ASSERT_TRUE(ring.Take(k, &b, nullptr).ok());
  }
  std::shared_ptr<const Batch> b;
  Status s = ring.Take(4, &b, nullptr);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_EQ(b, nullptr);
  ring.Stop();
  producer.join();
}

TEST(PrefetchRingTest, StopEndsTheProducersAndTheConsumersWaits) {
  PrefetchRing ring(2, 4, Shape(), nullptr);
  // The producer fills both slots and waits for a free one; the consumer
  // waits for a batch nobody will produce. Stop comes once the ring is full:
  // each wait ends whether it began before Stop or meets it (the ring reads
  // its stop flag under the lock its waits take).
  std::promise<void> full;
  std::thread producer([&] {
    Produce(&ring, 2);
    full.set_value();
    std::vector<PrefetchRing::Slot*> claimed;
    EXPECT_FALSE(ring.Claim(2, 1, 100, &claimed));
    EXPECT_TRUE(claimed.empty());
  });
  std::thread consumer([&] {
    std::shared_ptr<const Batch> b;
    EXPECT_TRUE(ring.Take(1000, &b, nullptr).IsAborted());
  });
  full.get_future().wait();
  ring.Stop();
  producer.join();
  consumer.join();
  ring.Reset();
  std::thread again([&] { Produce(&ring, 1); });
  std::shared_ptr<const Batch> b;
  EXPECT_TRUE(ring.Take(0, &b, nullptr).ok());
  again.join();
}

}  // namespace
}  // namespace shardkit
