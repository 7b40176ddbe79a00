// PlanResume: the checks and the cut of a resume (loader/resume_plan.h).
#include "loader/resume_plan.h"

#include <string>

#include "loader/options.h"

namespace shardkit {

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
  if (!saved.positions.empty()) {
    Result<EpochPositions> p = EpochPositions::Make(saved.positions, current.records);
    if (!p.ok()) return bad(p.status().message());
    at.rest = std::make_shared<const EpochPositions>(std::move(*p));
  }
  // The cut the state counts batches in, and where in it the saved run was.
  const bool strided = current.shuffle != ShuffleModeName(ShuffleMode::kBlockLocal);
  const bool drop_last = saved.shuffle.empty() ? current.drop_last : saved.drop_last;  // version 1
  const Partition was =
      Partition::Cut(current.records, at.rest, 0, static_cast<int>(saved.world_size),
                     saved.batch_size, drop_last, strided);
  if (saved.batch > was.batches) {
    return bad("batch " + std::to_string(saved.batch) + " is past the epoch's " +
               std::to_string(was.batches) + " batches");
  }
  at.epoch = saved.epoch;
  at.batch = saved.batch;
  if (at.batch == was.batches) {  // read to its end (a stop on its last step): the next epoch
    at.rest.reset();
    ++at.epoch;
    at.batch = 0;
  } else if (saved.world_size != current.world_size || saved.batch_size != current.batch_size ||
             drop_last != current.drop_last) {
    // Elastic: what the saved run had not read of the epoch, cut for this loader.
    if (at.batch > 0 || at.rest)
      at.rest = std::make_shared<const EpochPositions>(was.Remaining(at.batch));
    at.batch = 0;
    if (at.rest &&
        Partition::Cut(current.records, at.rest, rank, static_cast<int>(current.world_size),
                       current.batch_size, current.drop_last, strided)
                .batches == 0) {
      at.rest.reset();  // too little left for a batch (drop_last): the next epoch
      ++at.epoch;
    }
  }
  return at;
}

}  // namespace shardkit
