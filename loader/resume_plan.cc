// PlanResume: the checks and the cut of a resume (loader/resume_plan.h).
#include "loader/resume_plan.h"

#include <string>

#include "loader/options.h"

namespace shardkit {

namespace {

// A given order's state (shuffle "given") mid-epoch holds its order, and an
// order names records of this dataset only.
Status CheckSavedOrder(const LoaderState& saved, const LoaderState& current) {
  const bool mid_epoch = saved.batch > 0 || !saved.positions.empty();
  if (mid_epoch && saved.shuffle == ShuffleModeName(ShuffleMode::kGiven) && saved.order.empty()) {
    return Status::InvalidArgument("loader state: mid-way through epoch " +
                                   std::to_string(saved.epoch) +
                                   " of a given order, but it holds no 'order' to continue");
  }
  for (size_t i = 0; i < saved.order.size(); ++i) {
    if (saved.order[i] >= current.records) {
      return Status::InvalidArgument("loader state: its order names record " +
                                     std::to_string(saved.order[i]) + " (at position " +
                                     std::to_string(i) + "), and the dataset has " +
                                     std::to_string(current.records) + " records");
    }
  }
  return Status::OK();
}

}  // namespace

Result<ResumePoint> PlanResume(const LoaderState& saved, const LoaderState& current, int rank) {
  SK_RETURN_IF_ERROR(CheckResumable(saved, current));
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("loader state: " + what);
  };
  if (saved.world_size > uint64_t{kMaxWorldSize} || saved.batch_size > uint64_t{kMaxBatchSize}) {
    return bad("world size " + std::to_string(saved.world_size) + " or batch size " +
               std::to_string(saved.batch_size) + " out of range");
  }
  ResumePoint at;
  SK_RETURN_IF_ERROR(CheckSavedOrder(saved, current));
  if (!saved.order.empty()) at.order = std::make_shared<const std::vector<uint64_t>>(saved.order);
  // The positions the state counts through: its order's, or the dataset's.
  const uint64_t n = at.order ? at.order->size() : current.records;
  if (!saved.positions.empty()) {
    Result<EpochPositions> p = EpochPositions::Make(saved.positions, n);
    if (!p.ok()) return bad(p.status().message());
    at.rest = std::make_shared<const EpochPositions>(std::move(*p));
  }
  // The cut the state counts batches in, and where in it the saved run was.
  const bool strided = current.shuffle != ShuffleModeName(ShuffleMode::kBlockLocal);
  const bool drop_last = saved.shuffle.empty() ? current.drop_last : saved.drop_last;  // version 1
  const Partition was = Partition::Cut(n, at.rest, 0, static_cast<int>(saved.world_size),
                                       saved.batch_size, drop_last, strided);
  if (saved.batch > was.batches) {
    return bad("batch " + std::to_string(saved.batch) + " is past the epoch's " +
               std::to_string(was.batches) + " batches");
  }
  at.epoch = saved.epoch;
  at.batch = saved.batch;
  if (at.batch == was.batches) {  // read to its end (a stop on its last step): the next epoch
    at.rest.reset();
    at.order.reset();
    ++at.epoch;
    at.batch = 0;
  } else if (saved.world_size != current.world_size || saved.batch_size != current.batch_size ||
             drop_last != current.drop_last) {
    // Elastic: what the saved run had not read of the epoch, cut for this loader.
    if (at.batch > 0 || at.rest)
      at.rest = std::make_shared<const EpochPositions>(was.Remaining(at.batch));
    at.batch = 0;
    if (at.rest && Partition::Cut(n, at.rest, rank, static_cast<int>(current.world_size),
                                  current.batch_size, current.drop_last, strided)
                           .batches == 0) {
      at.rest.reset();  // too little left for a batch (drop_last): the next epoch
      at.order.reset();
      ++at.epoch;
    }
  }
  return at;
}

}  // namespace shardkit
