#include "loader/corrupt_policy.h"

namespace shardkit {

const char* CorruptPolicyName(CorruptPolicy policy) { return NameOf(kCorruptPolicyNames, policy); }

bool CorruptPolicyFromName(std::string_view name, CorruptPolicy* policy) {
  return ValueOf(kCorruptPolicyNames, name, policy);
}

Status CorruptSamples::Replace(uint64_t i, const Status& failure, uint64_t attempt,
                               uint64_t* replacement) {
  if (failure.ok()) return Status::InvalidArgument("CorruptSamples::Replace: no failure");
  if (policy_ == CorruptPolicy::kFail || !failure.IsCorruption() || rank_samples_ == 0)
    return failure;
  const uint64_t n = skipped_.fetch_add(1, std::memory_order_relaxed) + 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (messages_.size() < kMaxMessages) messages_.push_back(failure.message());
  }
  if (n > budget_) {
    return Status::Corruption(
        "more than " + std::to_string(budget_) +
        " corrupt samples skipped (the skip budget); last: " + failure.message());
  }
  *replacement = (i + (attempt + 1) * kStride) % rank_samples_;
  return Status::OK();
}

std::vector<std::string> CorruptSamples::messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return messages_;
}

}  // namespace shardkit
