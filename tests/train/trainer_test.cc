// The trainer in process (Train): everything reaches the caller through
// TrainEvents and the library prints nothing; a resolution schedule sets each
// epoch's side and resumes mid-schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loader/resolution_schedule.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"
#include "tests/train/train_test_util.h"
#include "train/epoch_metrics.h"
#include "train/trainer.h"

namespace shardkit {
namespace {

using testing::LoadExport;
using testing::MaxDiff;
using testing::RunCommand;
using testing::TempDir;
using testing::TinyTrainOptions;
using testing::TrainCmd;
using testing::WriteToyDataset;

// The trainer tells its caller everything through TrainEvents (rank 0) and
// prints nothing itself: progress every print_every batches, notes, the
// warning of a --resume with nothing to resume, and each epoch's report,
// which is also the --metrics line.
TEST(TrainTest, EventsReachTheCallerAndTheLibraryPrintsNothing) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  TrainOptions o = TinyTrainOptions(dir / "data");
  o.epochs = 2;
  o.print_every = 4;
  o.metrics_path = dir / "metrics.jsonl";
  o.checkpoint_dir = dir / "ckpt";
  o.resume = true;
  std::vector<std::string> notes, warnings;
  std::vector<StepProgress> progress;
  std::vector<EpochReport> epochs;
  TrainEvents events;
  events.note = [&](const std::string& line) { notes.push_back(line); };
  events.warning = [&](const std::string& line) { warnings.push_back(line); };
  events.progress = [&](const StepProgress& p) { progress.push_back(p); };
  events.epoch_end = [&](const EpochReport& r) { epochs.push_back(r); };
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const Status s = Train(o, DistEnv{}, events);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("resume: no checkpoint in"), std::string::npos) << warnings[0];
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes[0].rfind("training tiny (", 0), 0u) << notes[0];
  // 8 batches an epoch: progress after batches 4 and 8 of each.
  ASSERT_EQ(progress.size(), 4u);
  for (size_t i = 0; i < progress.size(); ++i) {
    const StepProgress& p = progress[i];
    EXPECT_EQ(p.epoch, i / 2 + 1);
    EXPECT_EQ(p.epochs, 2);
    EXPECT_EQ(p.batch, int64_t(4 * (i % 2 + 1)));
    EXPECT_EQ(p.batches_per_epoch, 8);
    EXPECT_TRUE(std::isfinite(p.loss) && p.loss > 0) << p.loss;
    EXPECT_GT(p.lr, 0);
    EXPECT_GE(p.data_wait_fraction, 0);
    EXPECT_LE(p.data_wait_fraction, 1);
    if (p.batch == 8) {
      EXPECT_EQ(p.eta_seconds, 0) << "the epoch's last batch";
    }
  }
  ASSERT_EQ(epochs.size(), 2u);
  const std::string metrics = testing::ReadFile(dir / "metrics.jsonl");
  for (size_t i = 0; i < epochs.size(); ++i) {
    EXPECT_EQ(epochs[i].epoch, i + 1);
    EXPECT_EQ(epochs[i].steps, int64_t(8 * (i + 1)));
    EXPECT_EQ(epochs[i].sums.samples, 64);
    EXPECT_EQ(epochs[i].sums.records, 64);
    // The loader's figures: each batch came from a fill (one batch or more;
    // these raw records' copies are not timed stages).
    EXPECT_GE(epochs[i].sums.loader_busy_s, 0);
    EXPECT_GE(epochs[i].sums.fills_alone + epochs[i].sums.fills_shared, 1);
    EXPECT_LE(epochs[i].sums.fills_alone + epochs[i].sums.fills_shared, 8);
    EXPECT_NE(metrics.find(EpochReportJson(epochs[i]) + "\n"), std::string::npos)
        << "--metrics holds the reported line";
  }
}

// n JPEG records (80x72, RGB) of two classes.
void WriteJpegToyDataset(const std::string& dir, int n) {
  DatasetWriterOptions o;
  o.shard.compression = CompressionMode::kStore;
  o.shard.kind = format::RecordKind::kJpeg;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < n; ++i) {
    std::string j =
        testing::MakeJpeg(testing::SyntheticImage(80, 72, 3, i), testing::JpegFlavor::kRgb);
    ASSERT_TRUE((*w)->Add(j, i % 2, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kJpeg;
  m.classes = {"a", "b"};
  ASSERT_TRUE((*w)->Finish(m).ok());
}

// --resolution-schedule 32:96:0:2: epochs at 32, 64 (48 rounds half to
// even: 64) and 96 px, validated at the last side (or --val-size); a run
// stopped mid-way through the 64 px epoch resumes it at 64 px and ends
// with the uninterrupted run's weights.
TEST(TrainTest, ResolutionScheduleSetsEachEpochsSideAndResumesMidSchedule) {
  TempDir dir;
  WriteJpegToyDataset(dir / "data", 32);
  TrainOptions o = TinyTrainOptions(dir / "data");
  o.val = dir / "data";
  o.epochs = 3;
  auto schedule = ParseResolutionSchedule("32:96:0:2");
  ASSERT_TRUE(schedule.ok());
  o.resolution = *schedule;
  o.export_path = dir / "full.pt";
  std::vector<EpochReport> epochs;
  TrainEvents events;
  events.epoch_end = [&](const EpochReport& r) { epochs.push_back(r); };
  events.note = [](const std::string&) {};
  Status s = Train(o, DistEnv{}, events);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_EQ(epochs[0].size, 32);
  EXPECT_EQ(epochs[1].size, 64);
  EXPECT_EQ(epochs[2].size, 96);
  EXPECT_GE(epochs[2].top1, 0);  // evaluated (at 96 px)
  EXPECT_NE(EpochReportJson(epochs[1]).find("\"size\":64"), std::string::npos);

  // Stopped at step 6 (4 steps an epoch: mid-way through the 64 px epoch).
  TrainOptions part = o;
  part.export_path.clear();
  part.max_steps = 6;
  part.checkpoint_dir = dir / "ck";
  epochs.clear();
  ASSERT_TRUE(Train(part, DistEnv{}, events).ok());
  TrainOptions rest = o;
  rest.resume = true;
  rest.checkpoint_dir = dir / "ck";
  rest.export_path = dir / "resumed.pt";
  epochs.clear();
  events.warning = [](const std::string&) {};
  s = Train(rest, DistEnv{}, events);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_EQ(epochs[0].size, 64);
  EXPECT_EQ(epochs[1].size, 96);
  EXPECT_LT(MaxDiff(LoadExport(dir / "full.pt"), LoadExport(dir / "resumed.pt")), 1e-6);

  // The flag: raw records have no side to schedule; bad text says what is wrong.
  WriteToyDataset(dir / "raw", 16);
  auto raw = RunCommand(TrainCmd(dir / "raw", "--resolution-schedule 32:64:0:1"));
  EXPECT_EQ(raw.exit_code, 2) << raw.out;
  EXPECT_NE(raw.out.find("raw records"), std::string::npos) << raw.out;
  auto bad = RunCommand(TrainCmd(dir / "data", "--resolution-schedule 64:32:0:1"));
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("MIN is larger than MAX"), std::string::npos) << bad.out;
  auto val = RunCommand(TrainCmd(dir / "data", "--val " + dir / "data" +
                                                   " --resolution-schedule 32:64:0:1 --val-size 48"
                                                   " --epochs 2 --batch-size 8"));
  EXPECT_EQ(val.exit_code, 0) << val.out;
  EXPECT_NE(val.out.find("\"size\":64"), std::string::npos) << val.out;
}

}  // namespace
}  // namespace shardkit
