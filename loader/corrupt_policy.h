// CorruptSamples: what the loader does about a sample that failed to load.
// Under kFail the failure ends the batch (and the epoch); under kSkip a
// corrupt sample is replaced by another of the rank's samples and counted,
// until more than `skip_budget` corrupt units were found.
//
// How the budget counts: a unit is one damage, known by its message. A
// corrupt record (a stored record's checksum, an image that does not decode)
// is one unit; a compressed block that fails its checksum or decompression is
// one unit however many records it held (they all fail with the block's
// message): one flipped byte in a zstd block costs one unit of the budget,
// not its ~800 records. Each unit's message is kept once (the first few).
// Errors that are not corruption (I/O) always fail: a replacement would hide
// a failing disk.
//
// What is counted, under names that say which: the distinct records that
// failed (a record failing again, as another sample's replacement or in a
// later epoch, counts once), the samples delivered with a replacement's
// record in their place (one per sample, however many replacements it
// took), and the units. A replacement that lands on a corrupt record again
// is tried anew and counts for neither sample.
//
// Threading: Replace and Replaced from the producer thread; the counts and
// messages() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "base/names.h"
#include "base/status.h"
#include "loader/options.h"

namespace shardkit {

class CorruptSamples {
 public:
  static constexpr size_t kMaxMessages = 10;
  // Replacements tried for one sample before its batch fails.
  static constexpr uint64_t kMaxAttempts = 16;

  // rank_samples: the rank's samples per epoch, where replacements come from.
  CorruptSamples(CorruptPolicy policy, uint64_t skip_budget, uint64_t rank_samples)
      : policy_(policy), budget_(skip_budget), rank_samples_(rank_samples) {}
  // The rank's samples of the epoch about to be read, where its
  // replacements come from (an epoch of a given order has its own count).
  // Called while no Replace runs (between epochs, the producer stopped).
  void set_rank_samples(uint64_t rank_samples) { rank_samples_ = rank_samples; }

  // Sample `i` of the rank's epoch failed with `failure` on its `attempt`-th
  // replacement (0: the sample itself), loading the dataset's record
  // `record`. Returns OK with *replacement, the rank's sample to load in its
  // place, or the status that fails its batch. Replacements are
  // deterministic: sample i's k-th is the same every time.
  Status Replace(uint64_t i, uint64_t record, const Status& failure, uint64_t attempt,
                 uint64_t* replacement);
  // A sample that failed was delivered with a replacement's record.
  void Replaced() { samples_replaced_.fetch_add(1, std::memory_order_relaxed); }

  // Distinct records found corrupt; samples delivered with another record in
  // their place; distinct damages (units) the corrupt records came from.
  uint64_t corrupt_records() const;
  uint64_t samples_replaced() const { return samples_replaced_.load(std::memory_order_relaxed); }
  uint64_t units() const;
  std::vector<std::string> messages() const;  // one per unit, the first kMaxMessages

 private:
  const CorruptPolicy policy_;
  const uint64_t budget_;
  uint64_t rank_samples_;
  std::atomic<uint64_t> samples_replaced_{0};
  mutable std::mutex mu_;
  std::vector<std::string> messages_;
  std::unordered_set<std::string> seen_;  // the units' messages (at most budget + 1)
  std::unordered_set<uint64_t> records_;  // the corrupt records' indices in the dataset
};

}  // namespace shardkit
