// An epoch's figures: summed across ranks field by field, and divided in the
// report as its JSON keys say.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "train/dist.h"
#include "train/epoch_metrics.h"

namespace shardkit {
namespace {

// Two ranks that stepped through the same figures: every all-reduce returns
// twice what it was given.
class TwinRanksGroup : public CollectiveGroup {
 public:
  TwinRanksGroup() : CollectiveGroup(0, 2) {}
  const std::string getBackendName() const override { return "twins"; }
  c10::intrusive_ptr<CollectiveWork> allreduce(std::vector<at::Tensor>& t,
                                               const c10d::AllreduceOptions&) override {
    for (auto& x : t) x.mul_(2);
    struct Done : CollectiveWork {
      bool wait(std::chrono::milliseconds) override { return true; }
      bool isCompleted() override { return true; }
    };
    return c10::make_intrusive<Done>();
  }
};

// An epoch's sums cross the ranks field by field (none lands in another's
// place), and the report divides them as its JSON keys say.
TEST(EpochMetricsTest, SumsCrossRanksByNameAndTheReportDividesThem) {
  EpochSums mine;
  mine.loss_sum = 1, mine.samples = 2, mine.correct = 3, mine.records = 4;
  mine.wait_s = 5, mine.step_s = 6, mine.comm_s = 7, mine.corrupt_skipped = 8, mine.start_s = 9;
  mine.loader_busy_s = 10, mine.fills_alone = 11, mine.fills_shared = 12;
  TwinRanksGroup twins;
  const EpochSums both = EpochSumsOverRanks(&twins, torch::kCPU, mine);
  EXPECT_EQ(both.loss_sum, 2);
  EXPECT_EQ(both.samples, 4);
  EXPECT_EQ(both.correct, 6);
  EXPECT_EQ(both.records, 8);
  EXPECT_EQ(both.wait_s, 10);
  EXPECT_EQ(both.step_s, 12);
  EXPECT_EQ(both.comm_s, 14);
  EXPECT_EQ(both.corrupt_skipped, 16);
  EXPECT_EQ(both.start_s, 18);
  EXPECT_EQ(both.loader_busy_s, 20);
  EXPECT_EQ(both.fills_alone, 22);
  EXPECT_EQ(both.fills_shared, 24);
  EXPECT_EQ(EpochSumsOverRanks(nullptr, torch::kCPU, mine).comm_s, 7)
      << "no group: this rank's own";

  EpochReport r;
  r.epoch = 3;
  r.seconds = 4;
  r.sums.loss_sum = 30, r.sums.samples = 20, r.sums.correct = 5, r.sums.records = 18;
  r.sums.wait_s = 1, r.sums.step_s = 3, r.sums.comm_s = 2, r.sums.corrupt_skipped = 2;
  r.sums.start_s = 0.5;
  r.sums.loader_busy_s = 12, r.sums.fills_alone = 3, r.sums.fills_shared = 5;
  r.workers = 3;
  r.world_size = 2;
  r.nodes = 2;
  r.lr = 0.1;
  r.amp = "off";
  auto j = nlohmann::json::parse(EpochReportJson(r));
  EXPECT_EQ(j["epoch"], 3);
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["train_top1"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["images_per_sec"].get<double>(), 5);
  EXPECT_EQ(j["records"], 18);
  EXPECT_DOUBLE_EQ(j["data_wait_fraction"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["comm_exposed_seconds"].get<double>(), 1) << "per rank";
  EXPECT_DOUBLE_EQ(j["comm_exposed_fraction"].get<double>(), 0.5);
  EXPECT_EQ(j["corrupt_skipped"], 2);
  EXPECT_DOUBLE_EQ(j["epoch_start_seconds"].get<double>(), 0.25) << "per rank";
  EXPECT_DOUBLE_EQ(j["loader_busy_fraction"].get<double>(), 0.5) << "12 of 3 x 2 x 4 s";
  EXPECT_EQ(j["loader_fills_alone"], 3);
  EXPECT_EQ(j["loader_fills_shared"], 5);
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_FALSE(j.contains("top1")) << "no validation set, no top-1";
  r.top1 = 0.5;
  r.top5 = 0.75;
  r.sums = EpochSums();
  j = nlohmann::json::parse(EpochReportJson(r));
  EXPECT_EQ(j["top1"], 0.5);
  EXPECT_EQ(j["top5"], 0.75);
  EXPECT_EQ(j["loss"], 0) << "an epoch of no samples divides by nothing";
  EXPECT_EQ(j["data_wait_fraction"], 0);
  r.synthetic = true;
  EXPECT_FALSE(nlohmann::json::parse(EpochReportJson(r)).contains("loader_busy_fraction"))
      << "no loader on synthetic data";
}

}  // namespace
}  // namespace shardkit
