// The epoch order and its partition across ranks: the keyed permutation,
// block-local windows, equal, disjoint and covering per-rank shares.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
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
            // Dropping keeps whole batches only; padding keeps every sample of the rank.
            EXPECT_EQ(total, drop_last ? p.batches * batch : p.per_rank);
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

// Elastic resume at the partition level: an epoch read for k batches on W
// ranks, the rest cut again for W' ranks and read for k' batches, the rest of
// that cut for W'' ranks and read to the end: every position is read exactly
// once (padding aside), in every cut each rank has the same number of
// batches, and with drop_last nothing is read twice.
TEST(PartitionTest, RemainingIsReadExactlyOnceAcrossChangingCuts) {
  struct Cut {
    int world;
    uint64_t batch;
  };
  const std::vector<std::vector<Cut>> chains = {{{4, 5}, {3, 7}, {1, 16}},
                                                {{2, 8}, {5, 3}, {3, 4}},
                                                {{3, 4}, {1, 16}, {4, 1}},
                                                {{1, 1}, {8, 2}, {2, 9}},
                                                {{5, 3}, {5, 3}, {2, 3}}};
  for (uint64_t n : {1ull, 9ull, 61ull, 200ull, 1001ull}) {
    for (bool strided : {true, false}) {
      for (bool drop_last : {false, true}) {
        for (const auto& chain : chains) {
          for (uint64_t frac : {0ull, 1ull, 2ull}) {
            std::vector<int> reads(n, 0);
            std::shared_ptr<const EpochPositions> rest;
            bool stopped = false;
            for (size_t c = 0; c < chain.size() && !stopped; ++c) {
              std::vector<Partition> ranks;
              for (int r = 0; r < chain[c].world; ++r) {
                ranks.push_back(
                    Partition::Cut(n, rest, r, chain[c].world, chain[c].batch, drop_last, strided));
                ASSERT_EQ(ranks[r].batches, ranks[0].batches);
              }
              const Partition& p0 = ranks[0];
              // The last cut reads to the end; the others stop part-way.
              const uint64_t k =
                  c + 1 == chain.size() ? p0.batches : std::min(p0.batches, p0.batches * frac / 3);
              for (const Partition& p : ranks) {
                for (uint64_t b = 0; b < k; ++b) {
                  for (uint64_t i = 0; i < p.BatchRealLength(b); ++i) {
                    const uint64_t pos = p.Position(b * p.batch_size + i);
                    ASSERT_LT(pos, n);
                    ++reads[pos];
                  }
                }
              }
              EpochPositions left = p0.Remaining(k);
              // Every rank computes the same rest.
              for (const Partition& p : ranks) ASSERT_EQ(p.Remaining(k).ranges(), left.ranges());
              if (left.size() == 0) stopped = true;
              rest = std::make_shared<const EpochPositions>(std::move(left));
            }
            uint64_t missed = 0;
            for (uint64_t pos = 0; pos < n; ++pos) {
              ASSERT_LE(reads[pos], 1) << "n=" << n << " position " << pos << " read twice";
              missed += reads[pos] == 0;
            }
            const Cut& last = chain.back();
            if (!drop_last) {
              EXPECT_EQ(missed, 0u) << "n=" << n << " strided=" << strided;
            } else if (!stopped) {
              // Only the last cut's dropped tail (less than a batch per rank,
              // plus less than one per rank) and the earlier cuts' tails.
              EXPECT_EQ(missed, rest->size());
              EXPECT_LT(missed, static_cast<uint64_t>(last.world) * last.batch + last.world);
            }
          }
        }
      }
    }
  }
}

// Block scheduling walks a rank's samples with Steps: every sample of a step
// lies below the segment end asked for and in one run of consecutive
// positions (one range of a rest, no padding wrap), and each step is >= 1.
TEST(PartitionTest, StepsStayInOneRunBelowTheEnd) {
  auto rest = std::make_shared<const EpochPositions>(
      EpochPositions::Make({{3, 17}, {20, 21}, {40, 90}, {91, 120}}, 130).value());
  for (bool strided : {true, false}) {
    for (int world : {1, 2, 3}) {
      for (auto r : {std::shared_ptr<const EpochPositions>(), rest}) {
        for (int rank = 0; rank < world; ++rank) {
          Partition p = Partition::Cut(130, r, rank, world, 4, false, strided);
          for (uint64_t seg : {1ull, 7ull, 25ull}) {
            for (uint64_t i = 0; i < p.per_rank;) {
              const uint64_t pos = p.Position(i), end = (pos / seg + 1) * seg;
              const uint64_t k = p.Steps(i, end);
              ASSERT_GE(k, 1u);
              ASSERT_LE(i + k, p.per_rank);
              for (uint64_t j = 1; j < k; ++j) {
                const uint64_t q = p.Position(i + j);
                ASSERT_LT(q, end);
                ASSERT_EQ(q, pos + j * (strided ? world : 1)) << "one run of positions";
              }
              i += k;
            }
          }
        }
      }
    }
  }
}

TEST(EpochPositionsTest, MakeChecksRangesAndWithoutMerges) {
  EXPECT_FALSE(EpochPositions::Make({{3, 3}}, 10).ok());
  EXPECT_FALSE(EpochPositions::Make({{4, 6}, {5, 7}}, 10).ok());
  EXPECT_FALSE(EpochPositions::Make({{4, 11}}, 10).ok());
  EXPECT_FALSE(EpochPositions::Make({{6, 8}, {1, 2}}, 10).ok());
  auto e = EpochPositions::Make({{1, 4}, {6, 9}}, 10);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 6u);
  EXPECT_EQ(e->At(0), 1u);
  EXPECT_EQ(e->At(3), 6u);
  EXPECT_EQ(e->RunFrom(1), 2u);
  // Dropping indices 2..3 joins [1, 3) and [7, 9); dropping 0 and 5 leaves the middle.
  EXPECT_EQ(e->Without({{2, 4}}).ranges(), (std::vector<EpochPositions::Range>{{1, 3}, {7, 9}}));
  EXPECT_EQ(e->Without({{0, 1}, {5, 6}}).ranges(),
            (std::vector<EpochPositions::Range>{{2, 4}, {6, 8}}));
  EXPECT_EQ(e->Without({{0, 6}}).size(), 0u);
  EXPECT_EQ(EpochPositions::Whole(5).Without({{1, 2}}).ranges(),
            (std::vector<EpochPositions::Range>{{0, 1}, {2, 5}}));
}

}  // namespace
}  // namespace shardkit
