#include "loader/corrupt_policy.h"

#include "base/random.h"

namespace shardkit {

const char* CorruptPolicyName(CorruptPolicy policy) { return NameOf(kCorruptPolicyNames, policy); }

bool CorruptPolicyFromName(std::string_view name, CorruptPolicy* policy) {
  return ValueOf(kCorruptPolicyNames, name, policy);
}

Status CorruptSamples::Replace(uint64_t i, uint64_t record, const Status& failure, uint64_t attempt,
                               uint64_t* replacement) {
  if (failure.ok()) return Status::InvalidArgument("CorruptSamples::Replace: no failure");
  if (policy_ == CorruptPolicy::kFail || !failure.IsCorruption() || rank_samples_ < 2)
    return failure;  // (one sample: nothing else to load in its place)
  if (attempt >= kMaxAttempts) {
    // Replacements failing within damage already counted would not grow the
    // budget: the attempts for one sample are bounded instead.
    return Status::Corruption("no readable replacement for sample " + std::to_string(i) +
                              " of the rank's epoch in " + std::to_string(kMaxAttempts) +
                              " tries; last: " + failure.message());
  }
  uint64_t units = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    records_.insert(record);
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
  // A keyed draw among the rank's other samples: never i itself, whatever
  // the rank's sample count.
  *replacement = (i + 1 + Mix64(Mix64(i) ^ (attempt + 1)) % (rank_samples_ - 1)) % rank_samples_;
  return Status::OK();
}

uint64_t CorruptSamples::corrupt_records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
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
