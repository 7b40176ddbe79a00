// Output order of bigMNIST.
#include "ingest/bigmnist_plan.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace shardkit {

Order::Order(const Plan& plan)
    : perm_(plan.total(), plan.seed, 0xC0B1E5),
      versions_(plan.versions),
      per_copy_(plan.n * plan.versions) {}

void Order::At(uint64_t pos, uint64_t* index, uint64_t* version, uint64_t* copy) const {
  const uint64_t q = perm_(pos);
  *copy = q / per_copy_;
  const uint64_t r = q % per_copy_;
  *index = r / versions_;
  *version = r % versions_;
}

}  // namespace shardkit
