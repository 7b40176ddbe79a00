// shardkit-train: models match torchvision, N ranks equal one rank with the
// whole batch, resume equals uninterrupted, checkpoints survive interrupted
// writes and signals, a failing rank stops the others, Python loads exports.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "base/random.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"
#include "tools/train/dist_env.h"
#include "train/checkpoint.h"
#include "train/device_feeder.h"
#include "train/dist.h"
#include "train/epoch_metrics.h"
#include "train/loss_scale.h"
#include "train/lr_schedule.h"
#include "train/models/models.h"
#include "train/sgd.h"
#include "train/trainer.h"

namespace shardkit {
namespace {

using testing::RunCommand;
using testing::Spawn;
using testing::TempDir;
using testing::WaitExit;
using testing::WaitForText;

const std::string kTrain = SHARDKIT_TRAIN_TOOL;
const char* kPython = "/usr/bin/python3";

bool PythonHasTorchvision() {
  return RunCommand(std::string(kPython) + " -c 'import torch, torchvision'").exit_code == 0;
}

// A raw dataset of n 8x8x1 images whose mean brightness encodes the label.
void WriteToyDataset(const std::string& dir, int n, int classes = 4,
                     const std::string& class_prefix = "c") {
  DatasetWriterOptions o;
  o.shard.kind = format::RecordKind::kRawU8;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok());
  KeyedRng rng(7);
  for (int i = 0; i < n; ++i) {
    const int label = classes > 0 ? i % classes : -1;
    std::string px(64, '\0');
    for (auto& c : px)
      c = static_cast<char>(std::min<int>(255, label * 60 + static_cast<int>(rng.Below(40))));
    if (classes == 0) {  // unlabelled
      ASSERT_TRUE((*w)->Add(px, -1, std::to_string(i)).ok());
      continue;
    }
    ASSERT_TRUE((*w)->Add(px, label, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {8, 8, 1};
  for (int c = 0; c < classes; ++c) m.classes.push_back(class_prefix + std::to_string(c));
  ASSERT_TRUE((*w)->Finish(m).ok());
}

std::map<std::string, torch::Tensor> LoadExport(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::map<std::string, torch::Tensor> m;
  for (const auto& e : torch::pickle_load(bytes).toGenericDict())
    m[e.key().toStringRef()] = e.value().toTensor();
  return m;
}

double MaxDiff(const std::map<std::string, torch::Tensor>& a,
               const std::map<std::string, torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    EXPECT_NE(it, b.end()) << k;
    if (it == b.end()) continue;
    d = std::max(
        d, (v.to(torch::kFloat64) - it->second.to(torch::kFloat64)).abs().max().item<double>());
  }
  return d;
}

// The `tiny` model with one input channel, for checkpoint unit tests.
torch::nn::AnyModule TinyModel(int num_classes = 3) {
  ModelSpec spec;
  spec.arch = "tiny";
  spec.num_classes = num_classes;
  spec.in_channels = 1;
  return MakeModel(spec).value();
}

// Plain SGD over a model's named parameters.
Sgd SgdOver(torch::nn::AnyModule& m) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& p : AsModule(m).named_parameters()) named.emplace_back(p.key(), p.value());
  return Sgd(named, Sgd::Options{});
}

// Reads the position of a checkpoint of the `tiny` model on WriteToyDataset's data.
bool ReadToyCheckpoint(const std::string& path, TrainPosition* pos) {
  auto m = TinyModel(4);
  return LoadCheckpoint(path, AsModule(m), nullptr, pos).ok();
}

std::string TrainCmd(const std::string& data, const std::string& extra) {
  return kTrain + " --data " + data +
         " --arch tiny --workers 1 --threads 1 --quiet --lr 0.5 --weight-decay 0 " + extra;
}

TEST(ModelTest, ParameterCountsMatchTorchvision) {
  const std::pair<const char*, int64_t> want[] = {
      {"resnet18", 11689512}, {"resnet34", 21797672}, {"resnet50", 25557032}};
  for (const auto& [arch, count] : want) {
    ModelSpec s;
    s.arch = arch;
    auto m = MakeModel(s).value();
    EXPECT_EQ(ParameterCount(AsModule(m)), count) << arch;
  }
}

// The name table: every name builds a model that runs; an unknown name is an
// InvalidArgument naming it and every known name (no exception).
TEST(ModelTest, EveryNameInTheTableBuildsAndAnUnknownNameIsAStatus) {
  for (const auto& entry : kModelArchNames) {
    ModelSpec s;
    s.arch = entry.name;
    s.num_classes = 3;
    s.in_channels = 1;
    s.small_input_stem = true;
    auto m = MakeModel(s);
    ASSERT_TRUE(m.ok()) << entry.name << ": " << m.status().ToString();
    EXPECT_GT(ParameterCount(AsModule(*m)), 0) << entry.name;
    torch::NoGradGuard no_grad;
    AsModule(*m).eval();
    EXPECT_EQ(m->forward(torch::zeros({2, 1, 32, 32})).sizes(), (std::vector<int64_t>{2, 3}))
        << entry.name;
  }
  ModelSpec s;
  s.arch = "resnet99";
  auto m = MakeModel(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kInvalidArgument);
  const std::string msg = m.status().ToString();
  EXPECT_NE(msg.find("'resnet99'"), std::string::npos) << msg;
  for (const auto& entry : kModelArchNames)
    EXPECT_NE(msg.find(std::string("'") + entry.name + "'"), std::string::npos) << msg;
}

TEST(ModelTest, StateDictNamesMatchTorchvision) {
  ModelSpec s;
  s.arch = "resnet50";
  auto m = MakeModel(s).value();
  auto sd = StateDict(AsModule(m));
  for (const char* name :
       {"conv1.weight", "bn1.running_mean", "bn1.num_batches_tracked", "layer1.0.conv3.weight",
        "layer1.0.downsample.0.weight", "layer1.0.downsample.1.running_var", "layer4.2.bn3.bias",
        "fc.weight", "fc.bias"}) {
    EXPECT_TRUE(sd.count(name)) << name;
  }
  EXPECT_EQ(sd.size(), 320u);  // len(torchvision.models.resnet50().state_dict())
  if (!PythonHasTorchvision())
    GTEST_SKIP() << "python3-torchvision not installed: skipping the key-by-key comparison";
  for (const char* arch : {"resnet18", "resnet34", "resnet50"}) {
    ModelSpec spec;
    spec.arch = arch;
    auto model = MakeModel(spec).value();
    auto ours = StateDict(AsModule(model));
    auto r = RunCommand(
        std::string(kPython) + " -c \"import torchvision; m=torchvision.models." + arch +
        "(); print('\\n'.join(f'{k} {tuple(v.shape)}' for k, v in m.state_dict().items()))\"");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    std::set<std::string> theirs, mine;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) theirs.insert(line);
    for (const auto& [k, v] : ours) {
      std::string shape = "(";
      for (int64_t d = 0; d < v.dim(); ++d)
        shape += std::to_string(v.size(d)) + (v.dim() == 1 ? "," : (d + 1 < v.dim() ? ", " : ""));
      mine.insert(k + " " + shape + ")");
    }
    EXPECT_EQ(mine, theirs) << arch;
  }
}

TEST(TrainTest, TwoRanksEqualOneRankWithTheWholeBatch) {
  TempDir dir;
  WriteToyDataset(dir / "data", 256);
  auto one = RunCommand(
      TrainCmd(dir / "data", "--batch-size 16 --max-steps 6 --export " + dir / "one.pt"));
  ASSERT_EQ(one.exit_code, 0) << one.out;
  auto two = RunCommand(TrainCmd(
      dir / "data", "--batch-size 8 --max-steps 6 --nproc-per-node 2 --export " + dir / "two.pt"));
  ASSERT_EQ(two.exit_code, 0) << two.out;
  auto a = LoadExport(dir / "one.pt"), b = LoadExport(dir / "two.pt");
  auto init = LoadExport(dir / "one.pt");
  EXPECT_LT(MaxDiff(a, b), 1e-5) << "2 ranks x 8 must train exactly like 1 rank x 16";
}

TEST(TrainTest, ResumeEqualsUninterrupted) {
  TempDir dir;
  WriteToyDataset(dir / "data", 200);
  ASSERT_EQ(RunCommand(TrainCmd(dir / "data", "--batch-size 8 --epochs 2 --max-steps 40 --export " +
                                                  dir / "full.pt"))
                .exit_code,
            0);
  // Interrupted at step 17 (mid-epoch: 25 steps per epoch), then resumed.
  auto r1 = RunCommand(TrainCmd(
      dir / "data", "--batch-size 8 --epochs 2 --max-steps 17 --checkpoint-dir " + dir / "ck"));
  ASSERT_EQ(r1.exit_code, 0) << r1.out;
  ASSERT_TRUE(Env::Default()->FileExists(dir / "ck/last.pt"));
  auto r2 = RunCommand(
      TrainCmd(dir / "data", "--batch-size 8 --epochs 2 --max-steps 40 --resume --checkpoint-dir " +
                                 dir / "ck" + " --export " + dir / "resumed.pt"));
  ASSERT_EQ(r2.exit_code, 0) << r2.out;
  EXPECT_LT(MaxDiff(LoadExport(dir / "full.pt"), LoadExport(dir / "resumed.pt")), 1e-6);
}

TEST(CheckpointTest, InterruptedWriteLeavesThePreviousCheckpointUsable) {
  TempDir dir;
  auto m = TinyModel();
  Sgd opt = SgdOver(m);
  TrainPosition pos;
  pos.arch = "tiny";
  pos.data.epoch = 3;
  pos.data.batch = 7;
  const std::string path = dir / "last.pt";
  ASSERT_TRUE(SaveCheckpoint(path, AsModule(m), opt, pos).ok());
  // A writer killed mid-write leaves only a partial temporary file behind.
  testing::WriteFile(path + ".tmp", "PK\x03\x04 truncated checkpoint bytes");
  TrainPosition got;
  auto m2 = TinyModel();
  Status s = LoadCheckpoint(path, AsModule(m2), nullptr, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got.data.epoch, 3);
  EXPECT_EQ(got.data.batch, 7);
  EXPECT_EQ(MaxDiff(StateDict(AsModule(m)), StateDict(AsModule(m2))), 0.0);
  // The next save replaces the stale temporary and publishes atomically.
  pos.data.epoch = 4;
  ASSERT_TRUE(SaveCheckpoint(path, AsModule(m), opt, pos).ok());
  ASSERT_TRUE(LoadCheckpoint(path, AsModule(m2), nullptr, &got).ok());
  EXPECT_EQ(got.data.epoch, 4);
  EXPECT_FALSE(Env::Default()->FileExists(path + ".tmp"));
  // A corrupt checkpoint is an error that names the file, not a crash.
  testing::WriteFile(dir / "bad.pt", "garbage");
  s = LoadCheckpoint(dir / "bad.pt", AsModule(m2), nullptr, &got);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad.pt"), std::string::npos);
}

// SIGTERM (SLURM's), and SIGINT (Ctrl-C) alike.
TEST(TrainTest, SigtermCheckpointsAndResumeFinishes) {
  for (const int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    TempDir dir;
    WriteToyDataset(dir / "data", 4000);
    const std::string base = kTrain + " --data " + dir / "data" +
                             " --arch tiny --workers 1 --threads 1 --batch-size 4"
                             " --epochs 1 --print-every 1 --checkpoint-dir " +
                             dir / "ck";
    pid_t pid = Spawn(base, dir / "log1");
    ASSERT_TRUE(WaitForText(dir / "log1", "step 20/", 600)) << testing::ReadFile(dir / "log1");
    kill(pid, sig);
    EXPECT_EQ(WaitExit(pid, 600), 75) << testing::ReadFile(dir / "log1");
    EXPECT_NE(testing::ReadFile(dir / "log1").find("checkpoint written"), std::string::npos);
    ASSERT_TRUE(Env::Default()->FileExists(dir / "ck/last.pt"));
    TrainPosition pos;
    ASSERT_TRUE(ReadToyCheckpoint(dir / "ck/last.pt", &pos));
    EXPECT_EQ(pos.data.epoch, 0);
    EXPECT_GE(pos.data.batch, 20);
    auto r =
        RunCommand(base + " --resume --quiet --max-steps " + std::to_string(pos.global_step + 5));
    EXPECT_EQ(r.exit_code, 0) << r.out;
  }
}

// Rank `rank` of 2 on dir/data (batch 4, progress every step, checkpoints
// in dir/ck), rendezvousing through environment variables as torchrun's do.
std::string RankCmd(const TempDir& dir, int rank, const std::string& extra) {
  const std::string port = std::to_string(testing::TrainingPort());
  return "env RANK=" + std::to_string(rank) +
         " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + kTrain + " --data " +
         dir / "data" +
         " --arch tiny --workers 1 --threads 1 --batch-size 4 --print-every 1 --checkpoint-dir " +
         dir / "ck" + " " + extra;
}

// Ranks as a bare `srun` starts them: SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, the job's node list and id, no torchrun variables.
std::string SrunRankCmd(const TempDir& dir, int rank, const std::string& nodes) {
  // shardkit-train's port is 20000 + job % 12000.
  const std::string job = std::to_string(testing::TrainingPort() - 20000);
  return "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT SLURM_PROCID=" +
         std::to_string(rank) + " SLURM_NTASKS=2 SLURM_LOCALID=" + std::to_string(rank) +
         " SLURM_JOB_NODELIST=" + nodes + " SLURM_JOB_ID=" + job + " " + kTrain + " --data " +
         dir / "data" +
         " --arch tiny --workers 1 --threads 1 --batch-size 4 --epochs 1 --backend gloo";
}

TEST(TrainTest, RanksStartedByABareSrunTrainOverGlooAndAnUnknownHostFailsAtOnce) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  const int r0 = Spawn(SrunRankCmd(dir, 0, "localhost"), dir / "log0");
  const int r1 = Spawn(SrunRankCmd(dir, 1, "localhost"), dir / "log1");
  EXPECT_EQ(WaitExit(r0, 600), 0) << testing::ReadFile(dir / "log0");
  EXPECT_EQ(WaitExit(r1, 600), 0) << testing::ReadFile(dir / "log1");
  EXPECT_NE(testing::ReadFile(dir / "log0").find("DDP over gloo: 2 ranks (SLURM variables)"),
            std::string::npos)
      << testing::ReadFile(dir / "log0");
  // A node list whose first host does not resolve: a clear error before any wait.
  auto r = RunCommand(SrunRankCmd(dir, 1, "no-such-host-shardkit[1-2]"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("cannot resolve the rendezvous host 'no-such-host-shardkit1'"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("MASTER_ADDR"), std::string::npos) << r.out;
}

// The last JSON line of a metrics file.
nlohmann::json LastMetrics(const std::string& path) {
  std::string last;
  std::istringstream in(testing::ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) last = line;
  }
  return nlohmann::json::parse(last, nullptr, false);
}

// Elastic resume: a 2-rank run stopped by SIGTERM mid-epoch (as SLURM
// preempts) resumes on 1 rank and on 3 ranks, with other batch sizes and
// worker counts, and each finishes the epoch with exactly the records the
// 2-rank run had not read (the metrics count them, padding aside).
TEST(TrainTest, SigtermMidEpochOnTwoRanksResumesOnOneAndOnThreeRanks) {
  TempDir dir;
  // 300 steps per epoch at 2 x 4: the signal, sent at step 20, lands mid-epoch
  // even when this process is descheduled for a long while after seeing it.
  const int kRecords = 2400;
  WriteToyDataset(dir / "data", kRecords);
  auto cmd = [&](int rank) { return RankCmd(dir, rank, "--epochs 1 --timeout 300"); };
  const int r0 = Spawn(cmd(0), dir / "log0");
  const int r1 = Spawn(cmd(1), dir / "log1");
  ASSERT_TRUE(WaitForText(dir / "log0", "step 20/", 600)) << testing::ReadFile(dir / "log0");
  kill(r0, SIGTERM);
  kill(r1, SIGTERM);
  EXPECT_EQ(WaitExit(r0, 600), 75) << testing::ReadFile(dir / "log0");
  EXPECT_EQ(WaitExit(r1, 600), 75) << testing::ReadFile(dir / "log1");
  TrainPosition pos;
  ASSERT_TRUE(ReadToyCheckpoint(dir / "ck/last.pt", &pos));
  ASSERT_EQ(pos.data.epoch, 0u);
  ASSERT_GE(pos.data.batch, 20u);
  ASSERT_LT(pos.data.batch, 300u) << "stopped mid-epoch";
  ASSERT_EQ(pos.data.world_size, 2u);
  const uint64_t read = 2 * 4 * pos.data.batch;  // strided shares: the first 8k of the order
  EXPECT_EQ(pos.schedule_samples, static_cast<int64_t>(read));
  // The run was cut before the epoch's end: nothing read twice after it (the
  // loader tests check which records; here the trainer's count).
  ASSERT_EQ(RunCommand("cp -r " + dir / "ck" + " " + dir / "ck3").exit_code, 0);
  struct Resume {
    std::string ck, how;
    int world;
  };
  for (const Resume& r : {Resume{"ck", "--nproc-per-node 1 --batch-size 6 --workers 2", 1},
                          Resume{"ck3", "--nproc-per-node 3 --batch-size 5 --workers 1", 3}}) {
    SCOPED_TRACE(r.how);
    const std::string metrics = dir / (r.ck + ".jsonl");
    auto out = RunCommand(kTrain + " --data " + dir / "data" +
                          " --arch tiny --threads 1 --epochs 1 --print-every 1000 --resume " +
                          r.how + " --checkpoint-dir " + dir / r.ck + " --metrics " + metrics);
    ASSERT_EQ(out.exit_code, 0) << out.out;
    EXPECT_NE(out.out.find("the epoch's " + std::to_string(kRecords - read) +
                           " remaining records continue on " + std::to_string(r.world) + " rank"),
              std::string::npos)
        << out.out;
    const nlohmann::json m = LastMetrics(metrics);
    ASSERT_TRUE(m.is_object()) << testing::ReadFile(metrics);
    EXPECT_EQ(m["epoch"], 1);
    EXPECT_EQ(m["world_size"], r.world);
    // Exactly the rest of the epoch, in the full batches the trainer takes
    // (drop_last): per rank floor(rest / W') samples, in whole batches of B'.
    const uint64_t rest = kRecords - read, b1 = r.world == 1 ? 6 : 5;
    const uint64_t want = rest / r.world / b1 * b1 * r.world;
    EXPECT_EQ(m["records"], want) << "the rest of the epoch: " << rest;
    EXPECT_LT(rest - want, r.world * b1 + r.world);
    TrainPosition end;
    ASSERT_TRUE(ReadToyCheckpoint(dir / r.ck + "/last.pt", &end));
    EXPECT_EQ(end.data.epoch, 1u);
    EXPECT_TRUE(end.data.positions.empty());
    // The schedule counts samples: the saved ones, then this run's global batch per step.
    const int64_t global_batch = r.world * (r.world == 1 ? 6 : 5);
    EXPECT_EQ(end.schedule_samples,
              pos.schedule_samples + (end.global_step - pos.global_step) * global_batch);
  }
}

// A checkpoint written by the previous release (format 3, a mid-epoch
// position: 17 of 25 steps at batch 8 on WriteToyDataset(200)) still loads,
// and training resumed from it equals an uninterrupted run.
TEST(CheckpointTest, Format3StillLoadsAndResumesExactly) {
  TempDir dir;
  WriteToyDataset(dir / "data", 200);
  ASSERT_EQ(RunCommand("mkdir -p " + dir / "ck" + " && cp " + SHARDKIT_SOURCE_DIR +
                       "/tests/data/checkpoint-format3-tiny-toy200.pt " + dir / "ck/last.pt")
                .exit_code,
            0);
  TrainPosition pos;
  ASSERT_TRUE(ReadToyCheckpoint(dir / "ck/last.pt", &pos));
  EXPECT_EQ(pos.data.epoch, 0u);
  EXPECT_EQ(pos.data.batch, 17u);
  EXPECT_EQ(pos.global_step, 17);
  EXPECT_EQ(pos.schedule_samples, 17 * 8) << "format 3: steps x the saved global batch";
  ASSERT_EQ(RunCommand(TrainCmd(dir / "data", "--batch-size 8 --epochs 2 --max-steps 40 --export " +
                                                  dir / "full.pt"))
                .exit_code,
            0);
  auto r = RunCommand(
      TrainCmd(dir / "data", "--batch-size 8 --epochs 2 --max-steps 40 --resume --checkpoint-dir " +
                                 dir / "ck" + " --export " + dir / "resumed.pt"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"records\":" + std::to_string(200 - 17 * 8)), std::string::npos)
      << "the first epoch continues from the checkpoint's step 17: " << r.out;
  EXPECT_LT(MaxDiff(LoadExport(dir / "full.pt"), LoadExport(dir / "resumed.pt")), 1e-6);
}

TEST(TrainTest, OneRankFailingEndsTheOthersWithAnErrorAndResumeCompletes) {
  TempDir dir;
  WriteToyDataset(dir / "data", 800);  // 100 steps per epoch at 2 x 4
  auto cmd = [&](int rank) { return RankCmd(dir, rank, "--epochs 50 --timeout 120"); };
  const int r0 = Spawn(cmd(0), dir / "log0");
  const int r1 = Spawn(cmd(1), dir / "log1");
  // Past the first epoch's checkpoint, in the middle of the second epoch.
  ASSERT_TRUE(WaitForText(dir / "log0", "epoch 2/50  step 40/", 600))
      << testing::ReadFile(dir / "log0");
  kill(r1, SIGKILL);  // a crash: no checkpoint, no goodbye
  WaitExit(r1, 60);
  const int code = WaitExit(r0, 600);
  EXPECT_NE(code, 0) << "the surviving rank must fail, not hang or succeed";
  EXPECT_NE(code, -1) << "the surviving rank did not exit within 600 s";
  EXPECT_NE(testing::ReadFile(dir / "log0").find("error"), std::string::npos)
      << testing::ReadFile(dir / "log0");
  // Resume from the last checkpoint, an epoch's end (epoch 1's, or a later
  // one if this process was descheduled long enough after seeing the line),
  // and finish two more epochs.
  TrainPosition pos;
  ASSERT_TRUE(ReadToyCheckpoint(dir / "ck/last.pt", &pos));
  EXPECT_GE(pos.data.epoch, 1u);
  EXPECT_EQ(pos.data.batch, 0);
  auto r = RunCommand(kTrain + " --nproc-per-node 2 --data " + dir / "data" +
                      " --arch tiny --workers 1 --threads 1 --batch-size 4 --epochs " +
                      std::to_string(pos.data.epoch + 2) +
                      " --print-every 1000 --resume --checkpoint-dir " + dir / "ck");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"epoch\":" + std::to_string(pos.data.epoch + 2)), std::string::npos)
      << r.out;
}

// Loads an export of shardkit-train into our model of `spec` and into
// torchvision's (`constructor`, Python), runs both on x, and checks that
// torchvision takes the state dict strictly and gives our outputs.
void ExpectTorchvisionGivesOurOutputs(const TempDir& dir, const std::string& exported,
                                      const ModelSpec& spec, const std::string& constructor,
                                      const torch::Tensor& x) {
  auto m = MakeModel(spec).value();
  ASSERT_TRUE(LoadStateDict(AsModule(m), LoadExport(exported)).ok());
  AsModule(m).eval();
  torch::Tensor y = m.forward(x);
  ASSERT_EQ(y.size(1), spec.num_classes);
  c10::Dict<std::string, torch::Tensor> io;
  io.insert("x", x);
  io.insert("y", y.detach());
  auto bytes = torch::pickle_save(io);
  testing::WriteFile(dir / "io.pt", std::string(bytes.begin(), bytes.end()));
  const std::string py =
      "import torch, torchvision\n"
      "m = torchvision.models." +
      constructor +
      "\n"
      "m.load_state_dict(torch.load('" +
      exported +
      "'), strict=True)\n"
      "m.eval()\n"
      "io = torch.load('" +
      dir / "io.pt" +
      "')\n"
      "with torch.no_grad(): y = m(io['x'])\n"
      "d = (y - io['y']).abs().max().item()\n"
      "print('max diff', d)\n"
      "assert d < 1e-4, d\n";
  testing::WriteFile(dir / "check.py", py);
  auto check = RunCommand(std::string(kPython) + " " + dir / "check.py");
  EXPECT_EQ(check.exit_code, 0) << check.out;
}

TEST(TrainTest, ExportedWeightsLoadIntoTorchvisionAndGiveTheSameOutputs) {
  if (!PythonHasTorchvision()) GTEST_SKIP() << "python3-torch/python3-torchvision not installed";
  TempDir dir;
  // A tiny JPEG dataset (64x64, two classes) so the standard 7x7 stem is used.
  {
    DatasetWriterOptions o;
    o.shard.compression = CompressionMode::kStore;
    o.shard.kind = format::RecordKind::kJpeg;
    auto w = DatasetWriter::Create(dir / "jpeg", o);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 8; ++i) {
      std::string j =
          testing::MakeJpeg(testing::SyntheticImage(80, 72, 3, i), testing::JpegFlavor::kRgb);
      ASSERT_TRUE((*w)->Add(j, i % 2, std::to_string(i)).ok());
    }
    Manifest m;
    m.record.kind = format::RecordKind::kJpeg;
    m.classes = {"a", "b"};
    ASSERT_TRUE((*w)->Finish(m).ok());
  }
  auto r = RunCommand(kTrain + " --data " + dir / "jpeg" +
                      " --arch resnet18 --size 64 --batch-size 4 --workers 1"
                      " --max-steps 2 --quiet --export " +
                      dir / "resnet18.pt");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // Our output on a fixed input, and torchvision's.
  ModelSpec spec;
  spec.arch = "resnet18";
  spec.num_classes = 2;
  ExpectTorchvisionGivesOurOutputs(
      dir, dir / "resnet18.pt", spec, "resnet18(num_classes=2)",
      torch::sin(torch::arange(2 * 3 * 64 * 64, torch::kFloat32) * 0.001).view({2, 3, 64, 64}));
}

// The SVHN study's model: torchvision's resnet50() as it is (7x7 stem,
// max-pool, 1000 outputs) on 32x32 inputs that are not normalised (ToTensor
// only), batch 512 per rank in the study; here 4, for one step.
TEST(TrainTest, TheSvhnStudysResNet50IsTorchvisionsOn32PixelInputsWithItsThousandWayHead) {
  if (!PythonHasTorchvision()) GTEST_SKIP() << "python3-torch/python3-torchvision not installed";
  TempDir dir;
  {
    DatasetWriterOptions o;
    o.shard.kind = format::RecordKind::kRawU8;
    auto w = DatasetWriter::Create(dir / "svhn", o);
    ASSERT_TRUE(w.ok());
    KeyedRng rng(3);
    for (int i = 0; i < 16; ++i) {
      std::string px(32 * 32 * 3, '\0');
      for (auto& c : px) c = static_cast<char>(rng.Below(256));
      ASSERT_TRUE((*w)->Add(px, i % 10, std::to_string(i)).ok());
    }
    Manifest m;
    m.record.kind = format::RecordKind::kRawU8;
    m.record.shape = {32, 32, 3};
    for (int c = 0; c < 10; ++c) m.classes.push_back(std::to_string(c));
    ASSERT_TRUE((*w)->Finish(m).ok());
  }
  auto r = RunCommand(kTrain + " --data " + dir / "svhn" +
                      " --arch resnet50 --stem torchvision --num-classes 1000 --normalize none"
                      " --batch-size 4 --workers 1 --max-steps 1 --export " +
                      dir / "resnet50.pt");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("resnet50 (25557032 parameters, 1000 outputs, torchvision stem)"),
            std::string::npos)
      << r.out;
  ModelSpec spec;
  spec.arch = "resnet50";  // 1000 classes, torchvision's stem: ModelSpec's defaults
  ExpectTorchvisionGivesOurOutputs(
      dir, dir / "resnet50.pt", spec, "resnet50()",
      torch::cos(torch::arange(2 * 3 * 32 * 32, torch::kFloat32) * 0.01).view({2, 3, 32, 32}));
}

TEST(TrainTest, ClearErrors) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  auto r = RunCommand(kTrain + " --data " + dir / "nope --arch tiny");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("nope: no such file or directory"), std::string::npos) << r.out;
  r = RunCommand(kTrain + " --data " + dir / "data" + " --arch resnet99");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("'resnet99' is not one of"), std::string::npos) << r.out;
  r = RunCommand(kTrain + " --data " + dir / "data" + " --arch tiny --amp --device cpu");
  EXPECT_NE(r.out.find("--amp needs a CUDA device"), std::string::npos) << r.out;
  r = RunCommand("env RANK=3 WORLD_SIZE=2 " + kTrain + " --data " + dir / "data");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("not below world size"), std::string::npos) << r.out;
}

// Every output is checked before training starts: none may land on what
// the run reads (the dataset's files) or its other outputs (the checkpoint),
// and one that cannot be written is named now, not after the epochs.
TEST(TrainTest, OutputsAreCheckedBeforeTraining) {
  TempDir dir;
  WriteToyDataset(dir / "data", 32);
  Env::Default()->CreateDirs(dir / "adir").IgnoreError();
  testing::WriteFile(dir / "afile", "x");
  ASSERT_EQ(::link((dir / "data/shard-00000.sks").c_str(), (dir / "hard").c_str()), 0);
  Env::Default()->CreateDirs(dir / "cklink").IgnoreError();  // a last.pt that links into the data
  ASSERT_EQ(::symlink((dir / "data/shard-00000.sks").c_str(), (dir / "cklink/last.pt").c_str()), 0);
  const std::string base = TrainCmd(dir / "data", "--epochs 1 --batch-size 8 ");
  const struct {
    std::string flags, expect;
  } cases[] = {
      {"--export " + dir / "data/manifest.json",
       "--export: " + dir / "data/manifest.json" + ": is inside " + dir / "data"},
      {"--metrics " + dir / "data/shard-00000.sks", "is inside " + dir / "data"},
      {"--checkpoint-dir " + dir / "ck --export " + dir / "ck/last.pt",
       "ck/last.pt, which this command reads or writes"},
      {"--checkpoint-dir " + dir / "afile",
       "--checkpoint-dir: " + dir / "afile" + ": exists and is not a directory"},
      {"--checkpoint-dir " + dir / "data", "is " + dir / "data"},
      {"--checkpoint-dir " + dir / "data/ck/", "is inside " + dir / "data"},
      {"--checkpoint-dir " + dir / "data/x/..", "is inside " + dir / "data"},
      {"--metrics " + dir / "hard", "is the same file as " + dir / "data/shard-00000.sks"},
      {"--export " + dir / "adir", "adir: is a directory"},
      {"--export " + dir / "none/w.pt", "its directory " + dir / "none" + " does not exist"},
      {"--metrics " + dir / "m.jsonl --export " + dir / "m.jsonl", "m.jsonl, which this command"},
      {"--resume", "--resume needs --checkpoint-dir"},
      {"--checkpoint-dir " + dir / "cklink", "cklink/last.pt: is inside " + dir / "data"},
      {"--export " + dir / "w.pt --metrics " + dir / "w.pt.tmp", "temporary file"},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(base + c.flags);
    EXPECT_EQ(r.exit_code, 2) << c.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.flags << "\n" << r.out;
    EXPECT_EQ(r.out.find("epoch 1"), std::string::npos) << "trained first: " << r.out;
  }
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "data").exit_code, 0);
  // An export beside the checkpoint in a directory the run creates is fine.
  auto r = RunCommand(base + "--checkpoint-dir " + dir / "ck2 --export " + dir / "ck2/w.pt");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Env::Default()->FileExists(dir / "ck2/w.pt"));
  EXPECT_TRUE(Env::Default()->FileExists(dir / "ck2/last.pt"));
}

// A label outside the manifest's classes stops training naming its record.
TEST(TrainTest, LabelsOutsideTheClassesAreNamedRecords) {
  TempDir dir;
  {
    DatasetWriterOptions o;
    o.shard.kind = format::RecordKind::kRawU8;
    auto w = DatasetWriter::Create(dir / "data", o);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 16; ++i) {
      ASSERT_TRUE((*w)->Add(std::string(64, char(i)), i == 9 ? 4 : i % 3, std::to_string(i)).ok());
    }
    Manifest m;
    m.record.kind = format::RecordKind::kRawU8;
    m.record.shape = {8, 8, 1};
    m.classes = {"a", "b", "c", "d", "e"};
    ASSERT_TRUE((*w)->Finish(m).ok());
  }
  auto edited = ReadManifest(dir / "data");  // a manifest edited after packing
  ASSERT_TRUE(edited.ok());
  edited->classes.resize(3);
  ASSERT_TRUE(WriteManifest(dir / "data", *edited).ok());
  auto r = RunCommand(TrainCmd(dir / "data", "--epochs 1 --batch-size 4"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("record 9"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("label 4 outside the manifest's 3 classes"), std::string::npos) << r.out;
}

// Momentum that does not fit the model is refused by name (the checksum
// proves the bytes, not the shapes); so is a file holding no dict.
TEST(CheckpointTest, MomentumOfTheWrongShapeAndNonDictsAreRefusedByName) {
  TempDir dir;
  auto m = TinyModel(4);
  Sgd opt = SgdOver(m);
  auto& params = opt.momentum();
  for (auto& p : AsModule(m).named_parameters()) params[p.key()] = torch::zeros({3});
  TrainPosition pos;
  pos.arch = "tiny";
  pos.num_classes = 4;
  pos.in_channels = 1;
  ASSERT_TRUE(SaveCheckpoint(dir / "last.pt", AsModule(m), opt, pos).ok());
  auto m2 = TinyModel(4);
  Sgd opt2 = SgdOver(m2);
  TrainPosition got;
  Status s = LoadCheckpoint(dir / "last.pt", AsModule(m2), &opt2, &got);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir / "last.pt" + ": momentum '"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("has shape [3]"), std::string::npos) << s.ToString();
  const auto bytes = torch::pickle_save(torch::ones({2}));
  testing::WriteFile(dir / "tensor.pt", std::string(bytes.begin(), bytes.end()));
  s = LoadCheckpoint(dir / "tensor.pt", AsModule(m2), &opt2, &got);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a shardkit checkpoint (it holds a Tensor"), std::string::npos)
      << s.ToString();
}

TEST(CheckpointTest, FlippedTensorBytesAreRefusedByNameAndThePreviousOneIsKept) {
  TempDir dir;
  auto m = TinyModel();
  // A distinctive value, so the test can find the tensor's bytes in the file.
  const float marker = 1234.5678f;
  {
    torch::NoGradGuard no_grad;
    AsModule(m).parameters().front().view(-1)[0].fill_(marker);
  }
  Sgd opt = SgdOver(m);
  TrainPosition pos;
  pos.arch = "tiny";
  const std::string path = dir / "last.pt";
  ASSERT_TRUE(SaveCheckpoint(path, AsModule(m), opt, pos).ok());
  pos.data.epoch = 1;
  ASSERT_TRUE(SaveCheckpoint(path, AsModule(m), opt, pos).ok());
  ASSERT_TRUE(Env::Default()->FileExists(dir / "prev.pt"))
      << "the replaced checkpoint is kept as prev.pt";
  std::string bytes = testing::ReadFile(path);
  const std::string pattern(reinterpret_cast<const char*>(&marker), sizeof(marker));
  const size_t at = bytes.find(pattern);
  ASSERT_NE(at, std::string::npos);
  bytes[at] ^= 0x01;  // one bit of one weight
  testing::WriteFile(path, bytes);
  TrainPosition got;
  auto m2 = TinyModel();
  Status st = LoadCheckpoint(path, AsModule(m2), nullptr, &got);
  ASSERT_FALSE(st.ok()) << "a flipped tensor bit must not load silently";
  EXPECT_TRUE(st.IsCorruption()) << st.ToString();
  EXPECT_NE(st.message().find(path + ": checkpoint is damaged"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("prev.pt"), std::string::npos) << st.ToString();
  ASSERT_TRUE(LoadCheckpoint(dir / "prev.pt", AsModule(m2), nullptr, &got).ok());
  EXPECT_EQ(got.data.epoch, 0);
}

TEST(TrainTest, ResumeFromADamagedCheckpointIsRefusedByName) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  const std::string cmd = TrainCmd(dir / "data", "--batch-size 8 --checkpoint-dir " + dir / "ck");
  ASSERT_EQ(RunCommand(cmd + " --epochs 1").exit_code, 0);
  std::string bytes = testing::ReadFile(dir / "ck/last.pt");
  // Flip the first byte of the first stored tensor: in the zip that
  // torch.save writes, entry "archive/data/0" has its name, an extra field
  // ("FB", size, 'Z' padding to 64 bytes), then the tensor's bytes.
  size_t p = bytes.find("data/0");
  ASSERT_NE(p, std::string::npos);
  p += 6 + 4;
  while (p < bytes.size() && bytes[p] == 'Z') ++p;
  ASSERT_LT(p, bytes.size());
  bytes[p] ^= 0x10;
  testing::WriteFile(dir / "ck/last.pt", bytes);
  auto r = RunCommand(cmd + " --resume --epochs 2");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(dir / "ck/last.pt"), std::string::npos) << r.out;
}

TEST(TrainTest, ValidationSetThatDoesNotMatchIsRefusedBeforeTraining) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  WriteToyDataset(dir / "val3", 32, 3);
  WriteToyDataset(dir / "valnames", 32, 4, "k");
  WriteToyDataset(dir / "unlabelled", 32, 0);
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"--val " + dir / "val3", "has 3 classes, --data " + dir / "data" + " has 4"},
      {"--val " + dir / "valnames", "class 0 is 'k0', in --data it is 'c0'"},
      {"--val " + dir / "unlabelled", "lists no classes"},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(TrainCmd(dir / "data", "--batch-size 8 --epochs 1 " + c.args));
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\"epoch\""), std::string::npos) << "no training may start: " << r.out;
  }
  auto r = RunCommand(TrainCmd(dir / "unlabelled", "--batch-size 8 --epochs 1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("lists no classes"), std::string::npos) << r.out;
}

// A peer that accepts connections and never answers: not a c10d store.
// A TCP server that accepts connections and never answers; it prints
// "accepted N" after its Nth connection. `name` tells two apart in one dir.
int StartSilentServer(const std::string& dir, int* port, const std::string& name = "silent") {
  testing::WriteFile(
      dir + "/" + name + ".py",
      "import socket, sys\n"
      "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "s.bind(('127.0.0.1', 0)); s.listen(16)\n"
      "print('port', s.getsockname()[1], 'listening', flush=True)\n"
      "held = []\n"
      "while True:\n"
      "    c, _ = s.accept(); held.append(c)\n"
      "    print('accepted', len(held), flush=True)\n");
  const std::string log = dir + "/" + name + ".log";
  const int pid = Spawn(std::string(kPython) + " " + dir + "/" + name + ".py", log);
  // The whole line, number included, before it is read (however busy the machine).
  EXPECT_TRUE(WaitForText(log, " listening", 300)) << testing::ReadFile(log);
  *port = std::atoi(testing::ReadFile(log).substr(5).c_str());
  return pid;
}

TEST(TrainTest, RendezvousWithAPeerThatIsNotAStoreHonoursTimeoutAndSigterm) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  int port = 0;
  const int server = StartSilentServer(dir.path(), &port);
  ASSERT_GT(port, 0);
  const std::string env =
      "env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " ";
  // The watchdog's KILL would be exit 137: the message and exit 2 say that
  // --timeout ended the rendezvous (no bound on the seconds it took).
  auto r = RunCommand("timeout -s KILL 600 " + env +
                      TrainCmd(dir / "data", "--batch-size 8 --timeout 3"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("timed out after 3 s"), std::string::npos) << r.out;
  kill(server, SIGKILL);
  WaitExit(server, 10);
  // SIGTERM while waiting: the rank stops promptly (exit 75: requeue and
  // resume). Sent once the rank is inside the rendezvous (the server has its
  // connection), so after its handlers are installed, however busy the machine.
  int port2 = 0;
  const int server2 = StartSilentServer(dir.path(), &port2, "silent2");
  ASSERT_GT(port2, 0);
  const int pid =
      Spawn("env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port2) +
                " " + TrainCmd(dir / "data", "--batch-size 8 --timeout 600"),
            dir / "term.log");
  ASSERT_TRUE(WaitForText(dir / "silent2.log", "accepted 1", 300))
      << testing::ReadFile(dir / "term.log");
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid, 600), 75) << testing::ReadFile(dir / "term.log");
  EXPECT_NE(testing::ReadFile(dir / "term.log").find("stopped by a signal during the rendezvous"),
            std::string::npos)
      << testing::ReadFile(dir / "term.log");
  kill(server2, SIGKILL);
  WaitExit(server2, 10);
}

// The sockets process `pid` holds (a rank holds none before the rendezvous;
// inside it, one for the rendezvous and one for watching for a stop).
int SocketsHeld(int pid) {
  auto fds = Env::Default()->ListDir("/proc/" + std::to_string(pid) + "/fd");
  int n = 0;
  if (!fds.ok()) return 0;
  for (const std::string& fd : *fds) {
    char buf[64];
    const ssize_t len =
        ::readlink(("/proc/" + std::to_string(pid) + "/fd/" + fd).c_str(), buf, sizeof(buf) - 1);
    if (len > 7 && std::string(buf, 7) == "socket:") ++n;
  }
  return n;
}

// A rank stopped by a signal while its siblings wait in the rendezvous (here
// for a third rank that never comes) tells them through the store: they stop
// too (exit 75, naming it) instead of waiting out --timeout. Rank 1 stopped,
// then rank 0 (whose store goes with it: it waits for the others to read).
TEST(TrainTest, ARankStoppedDuringTheRendezvousStopsTheOthers) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  for (const int victim : {1, 0}) {
    SCOPED_TRACE("rank " + std::to_string(victim) + " stopped");
    const std::string env = "env WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                            std::to_string(testing::TrainingPort()) + " ";
    const std::string cmd = TrainCmd(dir / "data", "--batch-size 8 --timeout 600");
    const int r[2] = {Spawn(env + "RANK=0 " + cmd, dir / "log0"),
                      Spawn(env + "RANK=1 " + cmd, dir / "log1")};
    bool inside = false;
    for (int i = 0; i < 6000 && !inside; ++i) {  // up to 300 s on a busy machine
      inside = SocketsHeld(r[0]) >= 2 && SocketsHeld(r[1]) >= 2;
      if (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(inside) << testing::ReadFile(dir / "log1");
    const int other = 1 - victim;
    const std::string other_log = dir / ("log" + std::to_string(other));
    kill(r[victim], SIGTERM);
    EXPECT_EQ(WaitExit(r[victim], 300), 75);
    // Well inside --timeout 600: ended by the stopped rank's word, as it says.
    EXPECT_EQ(WaitExit(r[other], 300), 75) << testing::ReadFile(other_log);
    EXPECT_NE(testing::ReadFile(other_log).find("rank " + std::to_string(victim) +
                                                " was stopped by a signal during the rendezvous"),
              std::string::npos)
        << testing::ReadFile(other_log);
  }
}

TEST(TrainTest, CorruptRecordsFailNamingTheShardOrAreSkippedAndCounted) {
  TempDir dir;
  WriteToyDataset(dir / "data", 256);
  auto ds = Dataset::Open(dir / "data");
  ASSERT_TRUE(ds.ok());
  const uint64_t offset =
      (*ds)->shard(0).block(0).offset + (*ds)->shard(0).block(0).stored_size / 2;
  ds->reset();
  std::string bytes = testing::ReadFile(dir / "data/shard-00000.sks");
  bytes[offset] ^= 0x5A;
  testing::WriteFile(dir / "data/shard-00000.sks", bytes);
  auto r = RunCommand(TrainCmd(dir / "data", "--batch-size 8 --epochs 1"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("shard-00000.sks"), std::string::npos) << r.out;
  r = RunCommand(
      TrainCmd(dir / "data", "--batch-size 8 --epochs 1 --on-corrupt skip --skip-budget 100000"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t at = r.out.find("\"corrupt_skipped\":");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(std::atoi(r.out.c_str() + at + 18), 0) << r.out;
}

// The trainer asks the loader for NHWC when training channels-last: the batch
// is viewed as a channels-last NCHW tensor over the loader's memory (same data
// pointer, channels-last strides, no copy), and the feeder's normalised output
// equals that of the NCHW path, in the memory format asked for.
TEST(FeederTest, NhwcBatchesAreViewedAsChannelsLastWithoutACopy) {
  const int n = 2, c = 3, h = 4, w = 5;
  std::vector<uint8_t> nhwc(n * h * w * c), nchw(n * c * h * w);
  std::vector<int32_t> labels = {1, 0};
  for (int i = 0; i < n; ++i)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int ch = 0; ch < c; ++ch) {
          const uint8_t v = static_cast<uint8_t>((i * 97 + y * 31 + x * 7 + ch * 53) & 0xFF);
          nhwc[((i * h + y) * w + x) * c + ch] = v;
          nchw[((i * c + ch) * h + y) * w + x] = v;
        }
  Batch b;
  b.size = b.real_size = n;
  b.channels = c;
  b.height = h;
  b.width = w;
  b.labels = labels.data();
  b.layout = Layout::kNHWC;
  b.data = nhwc.data();
  torch::Tensor v = BatchView(b);
  EXPECT_EQ(v.data_ptr(), static_cast<void*>(nhwc.data()));
  EXPECT_EQ(v.sizes(), (std::vector<int64_t>{n, c, h, w}));
  EXPECT_EQ(v.strides(), (std::vector<int64_t>{h * w * c, 1, w * c, c}));
  EXPECT_TRUE(v.is_contiguous(torch::MemoryFormat::ChannelsLast));
  Batch planar = b;
  planar.layout = Layout::kNCHW;
  planar.data = nchw.data();
  EXPECT_TRUE(torch::equal(v, BatchView(planar)));
  EXPECT_EQ(BatchView(planar).data_ptr(), static_cast<void*>(nchw.data()));

  const std::vector<float> mean = {0.5f, 0.4f, 0.3f}, stdv = {0.2f, 0.25f, 0.3f};
  auto cl = MakeBatchFeeder(torch::kCPU, mean, stdv, /*channels_last=*/true);
  auto plain = MakeBatchFeeder(torch::kCPU, mean, stdv, /*channels_last=*/false);
  // The lease owns nothing here (the vectors do): an aliasing shared_ptr.
  cl->Stage(std::shared_ptr<const Batch>(std::shared_ptr<void>(), &b));
  plain->Stage(std::shared_ptr<const Batch>(std::shared_ptr<void>(), &planar));
  auto [x, y] = cl->Take();
  auto [x2, y2] = plain->Take();
  EXPECT_TRUE(x.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(x2.is_contiguous());
  EXPECT_TRUE(torch::allclose(x, x2));
  EXPECT_TRUE(torch::equal(y, y2));
  EXPECT_EQ(y.dtype(), torch::kInt64);
  EXPECT_NEAR(x[1][2][3][4].item<float>(),
              (nchw[((1 * c + 2) * h + 3) * w + 4] / 255.f - 0.3f) / 0.3f, 1e-5);
}

// fp16 loss scaling: every gradient is divided by the scale in place, and one
// flag says whether any of them overflowed (inf) or is NaN; finite gradients
// leave it zero. Checked on every device this build can reach.
TEST(LossScaleTest, UnscaleDividesEveryGradientAndFlagsAnyNonFiniteOne) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.push_back(torch::Device(torch::kCUDA, 0));
  for (const torch::Device& d : devices) {
    SCOPED_TRACE(d.str());
    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(d);
    std::vector<torch::Tensor> g = {torch::full({3, 2}, 8.0, opts), torch::arange(5, opts) * 4};
    torch::Tensor flag = UnscaleGradients(g, 4.0);
    EXPECT_EQ(flag.item<float>(), 0);
    EXPECT_TRUE(torch::equal(g[0].cpu(), torch::full({3, 2}, 2.0)));
    EXPECT_TRUE(torch::equal(g[1].cpu(), torch::arange(5, torch::kFloat32)));
    for (double bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<torch::Tensor> h = {torch::ones({4}, opts), torch::ones({2, 2}, opts)};
      h[1][1][0] = bad;
      EXPECT_NE(UnscaleGradients(h, 2.0).item<float>(), 0) << bad;
      EXPECT_EQ(h[0][3].item<float>(), 0.5f);
    }
    EXPECT_EQ(UnscaleGradients({}, 2.0).item<float>(), 0);
  }
}

// The scale's schedule: halved (and the step skipped) on every overflow,
// doubled after kGrowthInterval good steps in a row, an overflow restarting
// the count; UnscaleOrSkip decides from the gradients themselves.
TEST(LossScaleTest, ScaleHalvesOnOverflowAndDoublesAfterAnUnbrokenRunOfGoodSteps) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  const int64_t n = LossScaler::kGrowthInterval;
  for (int64_t i = 1; i < n; ++i) ASSERT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 65536.0) << "one step short of the interval";
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 65536.0);
  for (int64_t i = 1; i < n; ++i) ASSERT_TRUE(s.Update(false));
  EXPECT_FALSE(s.Update(true)) << "an overflow just before growth";
  EXPECT_EQ(s.scale(), 32768.0);
  for (int64_t i = 1; i < n; ++i) ASSERT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 32768.0) << "the count restarted at the overflow";
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 65536.0);

  LossScaler t(8.0);  // a checkpoint's scale
  std::vector<torch::Tensor> g = {torch::full({4}, 16.0)};
  EXPECT_TRUE(t.UnscaleOrSkip(g));
  EXPECT_TRUE(torch::equal(g[0], torch::full({4}, 2.0)));
  EXPECT_EQ(t.scale(), 8.0);
  g[0][2] = INFINITY;
  EXPECT_FALSE(t.UnscaleOrSkip(g));
  EXPECT_EQ(t.scale(), 4.0);
}

// Warmup rises linearly to the base rate at its last step and never passes
// it (fractional positions: a resume on another global batch); then each
// kind decays as documented over the steps after warmup.
TEST(LrScheduleTest, WarmupRisesToTheBaseRateThenEachKindDecaysAsDocumented) {
  // 10 epochs of 10 steps, 1 of warmup: decay over steps 10..100.
  const LearningRateSchedule cosine(LrSchedule::kCosine, 0.4, 1, 10, 10);
  EXPECT_DOUBLE_EQ(cosine.At(0), 0.04);
  EXPECT_DOUBLE_EQ(cosine.At(4), 0.2);
  EXPECT_DOUBLE_EQ(cosine.At(9), 0.4);
  double before = 0;
  for (double step = 0; step < 10; step += 0.25) {
    EXPECT_LE(cosine.At(step), 0.4) << step;
    EXPECT_GE(cosine.At(step), before) << step;
    before = cosine.At(step);
  }
  EXPECT_DOUBLE_EQ(cosine.At(10), 0.4);
  EXPECT_DOUBLE_EQ(cosine.At(55), 0.2);  // half way: half the rate
  EXPECT_NEAR(cosine.At(100), 0, 1e-12);
  EXPECT_NEAR(cosine.At(130), 0, 1e-12) << "past the end it stays at 0";

  const LearningRateSchedule step(LrSchedule::kStep, 0.4, 1, 10, 10);
  EXPECT_DOUBLE_EQ(step.At(36.9), 0.4);  // milestones at 30%, 60%, 80% of 90 steps after 10
  EXPECT_DOUBLE_EQ(step.At(37), 0.04);
  EXPECT_DOUBLE_EQ(step.At(63.9), 0.04);
  EXPECT_DOUBLE_EQ(step.At(64), 0.004);
  EXPECT_NEAR(step.At(82), 0.0004, 1e-15);

  const LearningRateSchedule constant(LrSchedule::kConstant, 0.4, 0, 10, 10);
  EXPECT_DOUBLE_EQ(constant.At(0), 0.4) << "no warmup: the base rate from the first step";
  EXPECT_DOUBLE_EQ(constant.At(99), 0.4);

  // Warmup longer than the run: it rises over the run's steps, never past base.
  const LearningRateSchedule long_warmup(LrSchedule::kCosine, 0.4, 20, 2, 10);
  EXPECT_DOUBLE_EQ(long_warmup.At(19), 0.4 * 20 / 200);
  EXPECT_LE(long_warmup.At(199.5), 0.4);
}

TEST(DistEnvTest, FirstHostOfNodeListFollowsSlurmsGrammar) {
  const std::pair<const char*, const char*> cases[] = {
      {"node1", "node1"},
      {"node1,node2", "node1"},
      {"n[01-04,07],gpu5", "n01"},
      {"n[07,01-04]", "n07"},
      {"rack[1-2]-n[01-04]", "rack1-n01"},
      {"rack[3,5]-n[009-012],rack7-n1", "rack3-n009"},
      {"gpu-a100-[0003-0010]", "gpu-a100-0003"},
      {"c[1-2]x", "c1x"},
      {"", ""},
  };
  for (const auto& [list, first] : cases) EXPECT_EQ(FirstHostOfNodeList(list), first) << list;
}

// Sets environment variables for one scope, restoring them after.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, const char*>> vars) {
    for (const char* name :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
          "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID",
          "SLURM_JOB_NUM_NODES", "CUDA_VISIBLE_DEVICES"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v, 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(DistEnvTest, TorchrunVariablesWinOverSlurmsAndMasterVariablesOverride) {
  {
    ScopedEnv env({});
    auto e = DistEnvFromEnvironment();
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->world_size, 1);
    EXPECT_EQ(e->source, "single process");
    EXPECT_EQ(e->nodes, 1);
    EXPECT_EQ(e->cuda_visible_devices, "");
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "3"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_JOB_NODELIST", "rack[1-2]-n[01-04]"},
                   {"SLURM_JOB_ID", "12345"},
                   {"SLURM_JOB_NUM_NODES", "2"},
                   {"CUDA_VISIBLE_DEVICES", "3"}});
    auto e = DistEnvFromEnvironment();
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->source, "SLURM variables");
    EXPECT_EQ(e->rank, 3);
    EXPECT_EQ(e->world_size, 8);
    EXPECT_EQ(e->local_rank, 1);
    EXPECT_EQ(e->master_addr, "rack1-n01");
    EXPECT_EQ(e->master_port, 20000 + 12345 % 12000);
    EXPECT_EQ(e->nodes, 2);
    EXPECT_EQ(e->cuda_visible_devices, "3");
  }
  {  // torchrun's variables take precedence; MASTER_* override the node list
    ScopedEnv env({{"RANK", "1"},
                   {"WORLD_SIZE", "2"},
                   {"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_JOB_NODELIST", "n[1-4]"},
                   {"MASTER_ADDR", "10.0.0.7"},
                   {"MASTER_PORT", "29511"}});
    auto e = DistEnvFromEnvironment();
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->source, "torchrun variables");
    EXPECT_EQ(e->rank, 1);
    EXPECT_EQ(e->world_size, 2);
    EXPECT_EQ(e->local_rank, 1) << "LOCAL_RANK defaults to RANK";
    EXPECT_EQ(e->master_addr, "10.0.0.7");
    EXPECT_EQ(e->master_port, 29511);
  }
  for (const auto& bad : std::vector<std::vector<std::pair<std::string, const char*>>>{
           {{"RANK", "0"}},                       // no WORLD_SIZE
           {{"RANK", "2"}, {"WORLD_SIZE", "2"}},  // rank not below world
           {{"RANK", "x"}, {"WORLD_SIZE", "2"}},  // not a number
           {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "-1"}},
       }) {
    ScopedEnv env(bad);
    EXPECT_FALSE(DistEnvFromEnvironment().ok());
  }
  ScopedEnv env({{"SLURM_JOB_NUM_NODES", "two"}, {"SLURM_JOB_ID", "1"}});
  auto e = DistEnvFromEnvironment();
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("SLURM_JOB_NUM_NODES=two"), std::string::npos)
      << e.status().message();
}

TEST(DistEnvTest, GradientBucketsFollowReverseOrderWithASmallFirstBucket) {
  // 6 parameters of 1 MB each (262144 floats): with 1 MB first and 2.5 MB
  // later buckets, reverse order gives buckets {5}, {4, 3}, {2, 1}, {0}.
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 6; ++i) params.push_back(torch::zeros({262144}, torch::requires_grad()));
  GradientReducer r(params, c10::intrusive_ptr<CollectiveGroup>(), 1, 2621440, 1 << 20);
  EXPECT_EQ(r.num_buckets(), 4u);
}

// A process group of one rank that records every collective's tensors (their
// device, dtype and size) and completes it at once: a sum or broadcast over
// one rank leaves the tensors as they are. NCCL takes CUDA tensors only, so a
// collective on the wrong device is a failure of the first multi-GPU run.
class RecordingGroup : public CollectiveGroup {
 public:
  struct Call {
    std::string op;
    torch::Device device;
    int64_t numel;
  };
  RecordingGroup() : CollectiveGroup(0, 1) {}
  const std::string getBackendName() const override { return "recording"; }
  c10::intrusive_ptr<CollectiveWork> broadcast(std::vector<at::Tensor>& t,
                                               const c10d::BroadcastOptions&) override {
    return Record("broadcast", t);
  }
  c10::intrusive_ptr<CollectiveWork> allreduce(std::vector<at::Tensor>& t,
                                               const c10d::AllreduceOptions&) override {
    return Record("allreduce", t);
  }
  std::vector<Call> calls;

 private:
  struct Done : CollectiveWork {
    bool wait(std::chrono::milliseconds) override { return true; }
    bool isCompleted() override { return true; }
  };
  c10::intrusive_ptr<CollectiveWork> Record(const char* op, std::vector<at::Tensor>& t) {
    for (const auto& x : t) calls.push_back({op, x.device(), x.numel()});
    return c10::make_intrusive<Done>();
  }
};

TrainOptions TinyTrainOptions(const std::string& data) {
  TrainOptions o;
  o.data = data;
  o.arch = "tiny";
  o.workers = 1;
  o.threads = 1;
  o.batch_size = 8;
  o.lr = 0.5;
  return o;
}

// Every collective the trainer issues (the initial broadcast, BN buffers each
// step, gradient buckets, the epoch's figures, the evaluation's hits) gets
// tensors on the training device: CPU here, the rank's GPU where one is.
TEST(TrainTest, EveryCollectiveTakesTensorsOnTheTrainingDevice) {
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  WriteToyDataset(dir / "val", 24);
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.push_back(torch::Device(torch::kCUDA, 0));
  for (const torch::Device& device : devices) {
    SCOPED_TRACE(device.str());
    TrainOptions o = TinyTrainOptions(dir / "data");
    o.val = dir / "val";
    o.epochs = 2;
    o.device = device.is_cuda() ? TrainDevice::kCuda : TrainDevice::kCpu;
    auto group = c10::make_intrusive<RecordingGroup>();
    const Status s = Train(o, DistEnv{}, group);
    ASSERT_TRUE(s.ok()) << s.ToString();
    int broadcasts = 0, reductions = 0, figures = 0, hits = 0;
    for (const auto& c : group->calls) {
      EXPECT_EQ(c.device, device) << c.op << " of " << c.numel << " elements";
      if (c.op == "broadcast") ++broadcasts;
      if (c.op == "allreduce") ++reductions;
      if (c.op == "allreduce" && c.numel == 12) ++figures;  // the epoch's figures (12 sums)
      if (c.op == "allreduce" && c.numel == 3) ++hits;      // top-1, top-5, count
    }
    const int steps = 2 * 64 / 8;
    EXPECT_GE(broadcasts, 1);  // the model once (and BN buffers every step, where there are any)
    EXPECT_GE(reductions, steps + 2 * 2);
    EXPECT_EQ(figures, 2);
    EXPECT_EQ(hits, 2);
  }
}

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

TEST(DistEnvTest, EachRankGetsAGpuOfItsOwnOrANamedRefusal) {
  // One GPU per local rank.
  EXPECT_EQ(*ChooseCudaDevice(0, 4, DistBackend::kNccl, nullptr), 0);
  EXPECT_EQ(*ChooseCudaDevice(3, 4, DistBackend::kNccl, "0,1,2,3"), 3);
  // srun --gpus-per-task: each rank sees only its own GPU.
  EXPECT_EQ(*ChooseCudaDevice(3, 1, DistBackend::kNccl, "5"), 0);
  // More local ranks than GPUs: NCCL refuses by name, Gloo may share.
  auto r = ChooseCudaDevice(2, 2, DistBackend::kNccl, "0,1");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("local rank 2"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--backend gloo"), std::string::npos);
  EXPECT_FALSE(ChooseCudaDevice(1, 1, DistBackend::kNccl, nullptr).ok());
  EXPECT_EQ(*ChooseCudaDevice(1, 1, DistBackend::kGloo, nullptr), 0);
  EXPECT_EQ(*ChooseCudaDevice(3, 2, DistBackend::kGloo, "0,1"), 1);
  EXPECT_FALSE(ChooseCudaDevice(0, 0, DistBackend::kGloo, nullptr).ok());
}

TEST(DistEnvTest, BackendsResolveToWhatTheRunAndBuildCanCarry) {
  auto auto_on_cpu = ResolveBackend(DistBackend::kAuto, false);
  if (BuildHasGloo()) {
    EXPECT_EQ(*auto_on_cpu, DistBackend::kGloo);
  } else {  // pip's LibTorch may ship no Gloo headers
    ASSERT_FALSE(auto_on_cpu.ok());
    EXPECT_NE(auto_on_cpu.status().message().find("no Gloo"), std::string::npos);
  }
  auto nccl_on_cpu = ResolveBackend(DistBackend::kNccl, false);
  ASSERT_FALSE(nccl_on_cpu.ok());
  EXPECT_NE(nccl_on_cpu.status().message().find("needs CUDA"), std::string::npos);
  if (BuildHasNccl()) {
    EXPECT_EQ(*ResolveBackend(DistBackend::kAuto, true), DistBackend::kNccl);
  } else {
    EXPECT_FALSE(ResolveBackend(DistBackend::kNccl, true).ok());
  }
  EXPECT_EQ(ResolveBackend(DistBackend::kGloo, true).ok(), BuildHasGloo());
}

// --synthetic: no loader, no --data; the same loop over one random batch.
TEST(TrainTest, SyntheticDataTrainsWithoutALoader) {
  auto r = RunCommand(kTrain +
                      " --synthetic --arch tiny --size 16 --batch-size 4 --synthetic-steps 3 "
                      "--synthetic-classes 10 --threads 1 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"synthetic\":true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"steps\":3"), std::string::npos) << r.out;
  // One process on CPU makes no group, so needs no backend: it trains on a
  // build without Gloo too (a GPU machine's pip LibTorch).
  auto cpu = RunCommand(kTrain +
                        " --synthetic --device cpu --arch tiny --size 16 --batch-size 4 "
                        "--synthetic-steps 2 --synthetic-classes 10 --threads 1 --quiet");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.out;
  TempDir dir;
  WriteToyDataset(dir / "data", 16);
  auto both = RunCommand(kTrain + " --synthetic --data " + dir / "data");
  EXPECT_EQ(both.exit_code, 2) << both.out;
  EXPECT_NE(both.out.find("--synthetic"), std::string::npos) << both.out;
  auto none = RunCommand(kTrain + " --arch tiny");
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_NE(none.out.find("--data is required"), std::string::npos) << none.out;
  auto nccl = RunCommand(kTrain + " --synthetic --device cpu --backend nccl --arch tiny");
  EXPECT_EQ(nccl.exit_code, 2) << nccl.out;
  EXPECT_NE(nccl.out.find("--backend gloo"), std::string::npos) << nccl.out;
}

// ---- CUDA: these run where a GPU is visible and are skipped otherwise.

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible: a GPU-only test"

// Two ranks (NCCL with two GPUs; Gloo sharing one otherwise) train like one
// rank with the whole batch, up to float rounding on the GPU.
TEST(CudaTest, TwoRanksEqualOneRankWithTheWholeBatch) {
  SKIP_WITHOUT_CUDA();
  TempDir dir;
  WriteToyDataset(dir / "data", 256);
  const std::string backend = torch::cuda::device_count() >= 2 ? "nccl" : "gloo";
  if (backend == "gloo" && !BuildHasGloo()) {
    // NCCL refuses two ranks on one GPU; pip's LibTorch may come without
    // Gloo's headers, and such a build has NCCL only.
    GTEST_SKIP() << "one GPU and a build without Gloo: two ranks cannot share it";
  }
  auto one = RunCommand(TrainCmd(
      dir / "data", "--device cuda --batch-size 16 --max-steps 6 --export " + dir / "one.pt"));
  ASSERT_EQ(one.exit_code, 0) << one.out;
  auto two =
      RunCommand(TrainCmd(dir / "data", "--device cuda --backend " + backend +
                                            " --batch-size 8 --max-steps 6 --nproc-per-node 2 "
                                            "--export " +
                                            dir / "two.pt"));
  ASSERT_EQ(two.exit_code, 0) << two.out;
  EXPECT_LT(MaxDiff(LoadExport(dir / "one.pt"), LoadExport(dir / "two.pt")), 1e-3) << backend;
}

TEST(CudaTest, ResumeEqualsUninterrupted) {
  SKIP_WITHOUT_CUDA();
  TempDir dir;
  WriteToyDataset(dir / "data", 200);
  const std::string base = "--device cuda --batch-size 8 --epochs 2 ";
  ASSERT_EQ(RunCommand(TrainCmd(dir / "data", base + "--max-steps 40 --export " + dir / "full.pt"))
                .exit_code,
            0);
  ASSERT_EQ(
      RunCommand(TrainCmd(dir / "data", base + "--max-steps 17 --checkpoint-dir " + dir / "ck"))
          .exit_code,
      0);
  auto r = RunCommand(TrainCmd(dir / "data", base + "--max-steps 40 --resume --checkpoint-dir " +
                                                 dir / "ck" + " --export " + dir / "resumed.pt"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_LT(MaxDiff(LoadExport(dir / "full.pt"), LoadExport(dir / "resumed.pt")), 1e-3);
}

// Mixed precision in both dtypes trains to a finite, falling loss; fp16 keeps
// a loss scale in the checkpoint.
TEST(CudaTest, AmpFp16AndBf16Train) {
  SKIP_WITHOUT_CUDA();
  TempDir dir;
  WriteToyDataset(dir / "data", 256);
  for (const char* dtype : {"fp16", "bf16"}) {
    SCOPED_TRACE(dtype);
    auto r = RunCommand(
        TrainCmd(dir / "data", std::string("--device cuda --amp --amp-dtype ") + dtype +
                                   " --batch-size 16 --epochs 3 --checkpoint-dir " + dir / dtype));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
    TrainPosition pos;
    ASSERT_TRUE(ReadToyCheckpoint(dir / (std::string(dtype) + "/last.pt"), &pos));
    EXPECT_EQ(pos.data.epoch, 3);
    if (std::string(dtype) == "fp16") {
      EXPECT_GT(pos.loss_scale, 0);
    }
  }
}

// Batches in pinned memory: the loader's slots come from the CUDA host
// allocator, and a leased batch keeps its bytes after the loader is gone.
TEST(CudaTest, PinnedLeasesOutliveTheLoader) {
  SKIP_WITHOUT_CUDA();
#ifdef SHARDKIT_WITH_CUDA
  TempDir dir;
  WriteToyDataset(dir / "data", 64);
  LoaderOptions lo;
  lo.batch_size = 8;
  lo.allocator = PinnedSlotAllocator();
  std::shared_ptr<const Batch> kept;
  std::vector<uint8_t> copy;
  {
    auto loader = Loader::Open(dir / "data", lo);
    ASSERT_TRUE(loader.ok()) << loader.status().message();
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    ASSERT_TRUE((*loader)->Next(&kept).ok());
    ASSERT_NE(kept, nullptr);
    EXPECT_TRUE(at::globalContext().isPinnedPtr(kept->data));
    copy.assign(kept->data, kept->data + kept->size * kept->sample_bytes());
    for (int i = 0; i < 5; ++i) {
      std::shared_ptr<const Batch> other;
      ASSERT_TRUE((*loader)->Next(&other).ok());
    }
  }
  EXPECT_TRUE(std::equal(copy.begin(), copy.end(), kept->data));
  auto feeder = MakeBatchFeeder(torch::Device(torch::kCUDA, 0), {0.5f}, {0.25f}, false);
  feeder->Stage(kept);
  auto [x, y] = feeder->Take();
  EXPECT_EQ(x.device().type(), torch::kCUDA);
  EXPECT_NEAR(x.cpu()[0][0][0][0].item<float>(), (copy[0] / 255.f - 0.5f) / 0.25f, 1e-5);
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
}

}  // namespace
}  // namespace shardkit
