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
  skipped_.fetch_add(1, std::memory_order_relaxed);
  uint64_t units = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seen_.insert(failure.message()).second && messages_.size() < kMaxMessages)
      messages_.push_back(failure.message());
    units = seen_.size();
  }
  if (units > budget_) {
    return Status::Corruption("more than " + std::to_string(budget_) +
                              " corrupt records or blocks skipped (the skip budget counts a "
                              "corrupt compressed block once, whatever it held); last: " +
                              failure.message());
  }
  *replacement = (i + (attempt + 1) * kStride) % rank_samples_;
  return Status::OK();
}

uint64_t CorruptSamples::units() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seen_.size();
}

std::vector<std::string> CorruptSamples::messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return messages_;
}

}  // namespace shardkit
