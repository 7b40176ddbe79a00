// The layout of a bigMNIST output: which sample each output position holds,
// how the output splits into parts on its shard boundaries (--part I/N), and
// the digest by which parts made with the same settings recognise each other.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/random.h"
#include "base/status.h"
#include "ingest/bigmnist_distort.h"

namespace shardkit {

// What is synthesised: n source images x versions x copies. With
// distinct_copies every copy draws its own transform; otherwise all copies
// of a (source, version) are the same image.
struct Plan {
  uint64_t n = 0, versions = 6, copies = 200, seed = 0;
  int h = 28, w = 28;
  AugmentParams params;
  bool distinct_copies = false;

  uint64_t total() const { return n * versions * copies; }
  size_t item() const { return static_cast<size_t>(h) * w; }
  // The key a (source, version, copy) draws its transform with.
  SampleKey Key(uint64_t index, uint64_t version, uint64_t copy) const {
    return {seed, index, version, distinct_copies ? copy : 0};
  }
};

// Output position -> (source index, version, copy), a seeded bijection: the
// copies of one sample land far apart, in every shard. Depends only on the
// plan's counts and seed, so any process computes any position alike.
class Order {
 public:
  explicit Order(const Plan& plan);
  void At(uint64_t pos, uint64_t* index, uint64_t* version, uint64_t* copy) const;

 private:
  KeyedPermutation perm_;
  uint64_t versions_, per_copy_;
};

}  // namespace shardkit
