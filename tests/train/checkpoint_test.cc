// Checkpoints: an interrupted write or a flipped bit never costs the previous
// one, a checkpoint of the previous format still loads, what does not fit
// the model is refused by name, and a resumed run equals an uninterrupted one
// (after a SIGTERM or Ctrl-C too).
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "storage/env.h"
#include "tests/common/test_util.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/sgd.h"

namespace shardkit {
namespace {

using testing::kTrain;
using testing::LoadExport;
using testing::MaxDiff;
using testing::ReadToyCheckpoint;
using testing::RunCommand;
using testing::Spawn;
using testing::TempDir;
using testing::TinyModel;
using testing::TrainCmd;
using testing::WaitExit;
using testing::WaitForText;
using testing::WriteToyDataset;

// Plain SGD over a model's named parameters.
Sgd SgdOver(torch::nn::AnyModule& m) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& p : AsModule(m).named_parameters()) named.emplace_back(p.key(), p.value());
  return Sgd(named, Sgd::Options{});
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

}  // namespace
}  // namespace shardkit
