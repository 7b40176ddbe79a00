// Summing an epoch's figures over ranks, and its JSON report.
#include "train/epoch_metrics.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

namespace shardkit {

EpochSums EpochSumsOverRanks(CollectiveGroup* group, torch::Device device, const EpochSums& mine) {
  // The fields in one order, out and back: the only place they are positional.
  const std::vector<double> sum =
      SumOverRanks(group, device,
                   {mine.loss_sum, mine.samples, mine.correct, mine.records, mine.wait_s,
                    mine.step_s, mine.comm_s, mine.corrupt_skipped, mine.start_s,
                    mine.loader_busy_s, mine.fills_alone, mine.fills_shared});
  EpochSums s;
  s.loss_sum = sum[0];
  s.samples = sum[1];
  s.correct = sum[2];
  s.records = sum[3];
  s.wait_s = sum[4];
  s.step_s = sum[5];
  s.comm_s = sum[6];
  s.corrupt_skipped = sum[7];
  s.start_s = sum[8];
  s.loader_busy_s = sum[9];
  s.fills_alone = sum[10];
  s.fills_shared = sum[11];
  return s;
}

std::string EpochReportJson(const EpochReport& r) {
  const EpochSums& s = r.sums;
  const double busy = std::max(s.wait_s + s.step_s, 1e-9);
  nlohmann::json j;
  j["epoch"] = r.epoch;
  j["seconds"] = r.seconds;
  j["images_per_sec"] = s.samples / std::max(r.seconds, 1e-9);
  j["records"] = static_cast<uint64_t>(s.records);  // read this epoch (this run), padding aside
  j["loss"] = s.samples > 0 ? s.loss_sum / s.samples : 0;
  j["train_top1"] = s.samples > 0 ? s.correct / s.samples : 0;
  if (r.top1 >= 0) {
    j["top1"] = r.top1;
    j["top5"] = r.top5;
  }
  j["data_wait_fraction"] = s.wait_s / busy;
  j["comm_exposed_seconds"] = s.comm_s / r.world_size;
  j["comm_exposed_fraction"] = s.comm_s / busy;
  j["epoch_start_seconds"] = s.start_s / r.world_size;
  j["lr"] = r.lr;
  j["world_size"] = r.world_size;
  j["nodes"] = r.nodes;
  j["batch_size"] = r.batch_size;
  j["workers"] = r.workers;
  j["steps"] = r.steps;
  j["arch"] = r.arch;
  j["device"] = r.device;
  j["synthetic"] = r.synthetic;
  if (r.size > 0) j["size"] = r.size;
  j["amp"] = r.amp;
  j["backend"] = r.backend;
  j["corrupt_skipped"] = static_cast<uint64_t>(s.corrupt_skipped);
  if (r.workers > 0 && !r.synthetic) {
    const double capacity = double(r.workers) * r.world_size * std::max(r.seconds, 1e-9);
    j["loader_busy_fraction"] = s.loader_busy_s / capacity;
    j["loader_fills_alone"] = static_cast<uint64_t>(s.fills_alone);
    j["loader_fills_shared"] = static_cast<uint64_t>(s.fills_shared);
  }
  return j.dump();
}

}  // namespace shardkit
