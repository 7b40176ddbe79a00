// PlanResume: the elastic-resume algorithm over LoaderState (loader_state.h):
// where a loader continues from a saved state, and with which positions of
// the saved epoch. Loader::Restore checks and plans with it, then starts
// there; the Loader facade itself decides nothing about resuming.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "loader/loader_state.h"
#include "loader/sampler.h"

namespace shardkit {

// Where to start: StartEpoch(epoch, batch) over `rest`, the positions of
// `epoch` left to read (null: the whole epoch). rest is set only after a
// resume mid-epoch on another world size, batch size or drop_last (or of a
// state saved after one), and then only for `epoch`.
struct ResumePoint {
  uint64_t epoch = 0;
  uint64_t batch = 0;
  std::shared_ptr<const EpochPositions> rest;
  // The order the state saved for `epoch` (shuffle "given", mid-epoch):
  // what `batch` and `rest` count through. Null otherwise (a given-order
  // loader then needs the epoch's order from its sampler).
  GivenOrder order;
};

// For rank `rank` of a loader whose own state is `current` (state(): its
// world and batch size, drop_last, shuffle mode, record count): checks
// `saved` (CheckResumable, then its sizes and its position against the cut
// it was saved in: InvalidArgument, "loader state: ...") and plans:
//  - a state read to its epoch's end (batch == the saved cut's batches):
//    the next epoch, from batch 0;
//  - the same world size, batch size and drop_last: the saved epoch and
//    batch (over the saved rest, if it had one);
//  - another cut mid-epoch (elastic): what the saved run had not read of
//    the epoch (Partition::Remaining), cut again for this loader from its
//    batch 0; if too little is left for one batch (drop_last), the next
//    epoch instead.
// A state written before drop_last was recorded (version 1) is taken to
// have `current`'s. A mid-epoch state of a given order (shuffle "given")
// must hold that order, every record of it in the dataset; the cut counts
// through its positions instead of the dataset's.
Result<ResumePoint> PlanResume(const LoaderState& saved, const LoaderState& current, int rank);

}  // namespace shardkit
