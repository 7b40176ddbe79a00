// CorruptSamples: what the loader does about a sample that failed to load.
// Under kFail the failure ends the batch (and the epoch); under kSkip a
// corrupt record is replaced by another of the rank's samples, counted, and
// its message kept (the first few), until more than `skip_budget` were
// skipped. Errors that are not corruption (I/O) always fail: a replacement
// would hide a failing disk.
//
// Threading: Replace from the producer thread; skipped() and messages() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/names.h"
#include "base/status.h"

namespace shardkit {

enum class CorruptPolicy {
  kFail,  // the batch's error is returned by Next(), naming shard and record
  kSkip,  // replace the sample by another of the rank's samples, count it, and
          // fail once more than `skip_budget` samples were skipped
};

// The names the tools and the Python binding use: "fail", "skip".
inline constexpr EnumName<CorruptPolicy> kCorruptPolicyNames[] = {{CorruptPolicy::kFail, "fail"},
                                                                  {CorruptPolicy::kSkip, "skip"}};
const char* CorruptPolicyName(CorruptPolicy policy);
bool CorruptPolicyFromName(std::string_view name, CorruptPolicy* policy);

class CorruptSamples {
 public:
  static constexpr size_t kMaxMessages = 10;

  // rank_samples: the rank's samples per epoch, where replacements come from.
  CorruptSamples(CorruptPolicy policy, uint64_t skip_budget, uint64_t rank_samples)
      : policy_(policy), budget_(skip_budget), rank_samples_(rank_samples) {}

  // Sample `i` of the rank's epoch failed with `failure` on its `attempt`-th
  // replacement (0: the sample itself). Returns OK with *replacement, the
  // rank's sample to load in its place, or the status that fails its batch.
  // Replacements are deterministic: sample i's k-th is the same every time.
  Status Replace(uint64_t i, const Status& failure, uint64_t attempt, uint64_t* replacement);

  uint64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }
  std::vector<std::string> messages() const;

 private:
  // A prime: replacements for skipped samples spread over the rank's samples.
  static constexpr uint64_t kStride = 7919;
  const CorruptPolicy policy_;
  const uint64_t budget_, rank_samples_;
  std::atomic<uint64_t> skipped_{0};
  mutable std::mutex mu_;
  std::vector<std::string> messages_;
};

}  // namespace shardkit
