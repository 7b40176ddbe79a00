// LoaderState: where a loader is in its epochs, and everything that decides
// which batches it yields from there. A loader saves it (Loader::state()) and
// validates one on restore (Loader::Restore): Python's state_dict and
// shardkit-train's checkpoints both hold this, as JSON, and both get the same
// answer to "does this continue exactly?".
//
// Policy (one, for every user): a state is refused for a different dataset
// (record count, or the shards' checksums: DatasetFingerprint) or seed. Mid-epoch (batch > 0) it is
// also refused when the epoch's order or augmentation would differ: the shuffle in effect, its
// block window or the transform; an epoch boundary (batch 0) may change
// those, as nothing read is repeated or skipped. The world size, batch size
// and drop_last may change anywhere (elastic resume): the epoch's order does
// not depend on them, the positions read so far are known from the saved cut
// (Partition::Remaining), and the rest of the epoch is cut again for the new
// loader, each remaining record once, every record augmented as before.
// The rank is not part of it: one saved state serves every rank. An epoch
// whose order was given (ShuffleMode::kGiven: the user's sampler) is saved
// mid-way with that order (`order`), since nothing else can reproduce it (a
// sampler drawing from a random generator yields another order each time it
// is iterated): the rest of the epoch is read from the saved order, and
// only the next epoch's comes from the sampler again. Where a loader
// continues from a state is PlanResume's (loader/resume_plan.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "shard/manifest.h"

namespace shardkit {

struct LoaderState {
  static constexpr int kVersion = 6;
  uint64_t epoch = 0;  // the epoch the next batch belongs to
  uint64_t batch = 0;  // the next batch of that epoch (0: its start)
  uint64_t seed = 0;
  uint64_t world_size = 1;
  uint64_t batch_size = 1;  // per rank
  // Deciding the cut and order, recorded by the loader; zero or empty in
  // states written before they were (version 1): not compared then.
  uint64_t records = 0;  // the dataset's
  bool drop_last = false;
  std::string shuffle;        // the mode in effect: "full", "block" or "none"
  uint64_t block_window = 0;  // block-local: blocks per window (0 otherwise)
  std::string transform;      // TransformSignature: the crops' parameters
  // The positions of the epoch that `batch` counts through (version 3):
  // empty for the whole epoch; after a resume on another world or batch
  // size, the positions that were left, cut for world_size x batch_size.
  std::vector<std::pair<uint64_t, uint64_t>> positions;
  // DatasetFingerprint of the dataset (version 4; empty before: not compared).
  std::string dataset;
  // The square output size Loader::SetSize set (version 6; 0: the size the
  // loader was opened with), and val's Resize short side (0: derived):
  // Restore sets it back before comparing transforms.
  int size = 0, resize = 0;
  // Mid-way through an epoch whose order was given (shuffle "given",
  // version 5): that order, the global record numbers the epoch reads, all
  // of them (positions and batch count through it). Empty otherwise.
  std::vector<uint64_t> order;
};

// The dataset's identity for resuming: a digest of its shards' record counts
// and checksums in order, so a copy of it (staged, pushed, cached) has the
// same one, and another dataset of as many records (repacked with another
// seed, another source) another.
std::string DatasetFingerprint(const Manifest& manifest);

// JSON with every field and "version". FromJson accepts versions 1 to 6 and
// names what is missing or malformed ("loader state: 'seed' is missing").
std::string LoaderStateToJson(const LoaderState& state);
Result<LoaderState> LoaderStateFromJson(std::string_view json);

// OK if a loader at `current` (its own state, position aside) may continue
// from `saved` as the policy above says; otherwise InvalidArgument with one
// line naming what differs and what to do. Loader::Restore then checks the
// saved position against the saved cut.
Status CheckResumable(const LoaderState& saved, const LoaderState& current);

}  // namespace shardkit
