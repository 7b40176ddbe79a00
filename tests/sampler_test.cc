// The epoch order and its partition across ranks: the keyed permutation,
// block-local windows, equal, disjoint and covering per-rank shares.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "loader/sampler.h"

namespace shardkit {
namespace {

TEST(PermutationTest, IsABijectionForManySizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 10ull, 255ull, 256ull, 1000ull, 4097ull}) {
    KeyedPermutation p(n, 42, 7);
    std::vector<bool> hit(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t v = p(i);
      ASSERT_LT(v, n);
      EXPECT_FALSE(hit[v]) << "n=" << n;
      hit[v] = true;
    }
  }
}

TEST(SamplerTest, BlockLocalIsAPermutationThatKeepsWindowsTogether) {
  std::vector<uint32_t> blocks = {10, 7, 10, 3, 10, 10, 1, 9};
  EpochSampler s(blocks, ShuffleMode::kBlockLocal, 5, 1, 2);
  std::set<uint64_t> all;
  for (uint64_t p = 0; p < s.size(); ++p) all.insert(s.RecordAt(p));
  EXPECT_EQ(all.size(), s.size());
  EXPECT_EQ(*all.rbegin(), s.size() - 1);
  EpochSampler e2(blocks, ShuffleMode::kBlockLocal, 5, 2, 2);
  bool differs = false;
  for (uint64_t p = 0; p < s.size(); ++p) differs |= s.RecordAt(p) != e2.RecordAt(p);
  EXPECT_TRUE(differs) << "epochs must shuffle differently";
}

TEST(PartitionTest, EqualBatchesDisjointAndCovering) {
  for (uint64_t n : {1ull, 7ull, 10ull, 64ull, 101ull, 1000ull}) {
    for (int world : {1, 2, 3, 4, 8}) {
      for (uint64_t batch : {1ull, 3ull, 8ull, 32ull}) {
        for (bool drop_last : {false, true}) {
          std::vector<Partition> parts;
          bool any_error = false;
          for (int r = 0; r < world; ++r) {
            auto p =
                Partition::Make(n, r, world, batch, drop_last, /*strided=*/(n + world) % 2 == 0);
            if (!p.ok()) {
              any_error = true;
              break;
            }
            parts.push_back(*p);
          }
          if (any_error) {
            // Only when some rank would get no batch at all.
            EXPECT_TRUE((drop_last ? n / world : (n + world - 1) / world) <
                        (drop_last ? batch : 1));
            continue;
          }
          std::multiset<uint64_t> positions;
          for (const Partition& p : parts) {
            EXPECT_EQ(p.batches, parts[0].batches) << "every rank the same number of batches";
            uint64_t total = 0;
            for (uint64_t b = 0; b < p.batches; ++b) {
              EXPECT_EQ(p.BatchLength(b), parts[0].BatchLength(b));
              if (drop_last) {
                EXPECT_EQ(p.BatchLength(b), batch);
              }
              for (uint64_t i = 0; i < p.BatchLength(b); ++i)
                positions.insert(p.Position(b * batch + i));
              total += p.BatchLength(b);
            }
          }
          std::set<uint64_t> distinct(positions.begin(), positions.end());
          if (drop_last) {
            EXPECT_EQ(distinct.size(), positions.size()) << "disjoint when dropping";
          } else {
            EXPECT_EQ(distinct.size(), n) << "covering when padding: n=" << n << " world=" << world;
            EXPECT_LT(positions.size() - n, static_cast<uint64_t>(world))
                << "padding is less than one per rank";
            uint64_t real = 0;
            for (const Partition& p : parts) {
              for (uint64_t b = 0; b < p.batches; ++b) real += p.BatchRealLength(b);
            }
            EXPECT_EQ(real, n) << "non-padding samples count each record once";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace shardkit
