// shardkit-train's command line as a user meets it: clear errors (exit 2),
// every output checked before training, validation sets and labels that do
// not match refused, corrupt records named or skipped, --synthetic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "shard/shard.h"
#include "storage/env.h"
#include "tests/common/test_util.h"
#include "tests/train/train_test_util.h"

namespace shardkit {
namespace {

using testing::kTrain;
using testing::RunCommand;
using testing::TempDir;
using testing::TrainCmd;
using testing::WriteToyDataset;

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

}  // namespace
}  // namespace shardkit
