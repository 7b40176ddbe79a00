// Crashes and full disks: whatever moment shardkit-pack or shardkit-augment
// is killed at, the output is absent, resumable or complete and valid, never a
// manifest naming a bad shard; a full disk is a clear error that leaves no
// temporary or final-named partial file; an interrupted staging resumes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "shard/shard.h"
#include "tests/test_util.h"

namespace shardkit {
namespace {

using testing::RunCommand;
using testing::TempDir;

const std::string kFashion = "/usr/share/datasets/fashion-mnist";
const std::string kAugment = SHARDKIT_AUGMENT_TOOL;
const std::string kStage = SHARDKIT_SOURCE_DIR "/slurm/stage.sh";

// The invariant after any crash: not a dataset, or a dataset that verifies.
void ExpectAbsentResumableOrValid(const std::string& dir) {
  if (!FileExists(dir)) return;
  if (!FileExists(dir + "/manifest.json")) {
    EXPECT_TRUE(Dataset::Open(dir).status().IsNotFound())
        << "a directory without a manifest is not a dataset";
    return;
  }
  auto r = RunCommand(testing::PackTool() + " verify " + dir);
  EXPECT_EQ(r.exit_code, 0) << "a manifest must only name good shards:\n" << r.out;
}

void KillAfter(const std::string& cmd, const std::string& log, int ms) {
  const int pid = testing::Spawn(cmd, log);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  kill(pid, SIGKILL);
  testing::WaitExit(pid, 10);
}

TEST(FaultInjection, PackKilledAtAnyPointRestartsCleanly) {
  if (!FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  const std::string cmd = testing::PackTool() + " idx --images " + kFashion +
                          "/train-images-idx3-ubyte.gz --labels " + kFashion +
                          "/train-labels-idx1-ubyte.gz --shard-size 2000000 " + dir / "out";
  for (int ms : {5, 40, 80, 120, 160, 220}) {
    SCOPED_TRACE("killed after " + std::to_string(ms) + " ms");
    KillAfter(cmd + " --force", dir / "log", ms);
    ExpectAbsentResumableOrValid(dir / "out");
    // Rerunning the same command (no --force needed unless it had finished) completes.
    auto r = RunCommand(cmd + (FileExists(dir / "out/manifest.json") ? " --force" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "out").exit_code, 0);
  }
}

TEST(FaultInjection, ImageNetPackKilledAtAnyPointRestartsCleanly) {
  TempDir dir;
  for (int c = 0; c < 4; ++c) {
    testing::MakeDirs(dir / ("src/c" + std::to_string(c)));
    for (int i = 0; i < 60; ++i) {
      testing::WriteFile(dir / ("src/c" + std::to_string(c) + "/" + std::to_string(i) + ".JPEG"),
                         testing::MakeJpeg(testing::SyntheticImage(160, 120, 3, c * 100 + i),
                                           testing::JpegFlavor::kRgb));
    }
  }
  const std::string cmd = testing::PackTool() + " imagenet " + dir / "src" + " " +
                          dir / "out --shard-size 100000 --threads 1";
  for (int ms : {10, 60, 120}) {
    SCOPED_TRACE("killed after " + std::to_string(ms) + " ms");
    KillAfter(cmd + " --force", dir / "log", ms);
    ExpectAbsentResumableOrValid(dir / "out");
    auto r = RunCommand(cmd + " --force");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "out").exit_code, 0);
  }
}

TEST(FaultInjection, AugmentKilledAtAnyPointResumes) {
  if (!FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  auto cmd = [&](const std::string& out) {
    return kAugment + " bigmnist --src " + kFashion + " " + out +
           " --limit 2000 --versions 2 --copies 40 --shard-size 200000";
  };
  ASSERT_EQ(RunCommand(cmd(dir / "ref")).exit_code, 0);
  for (int ms : {20, 150, 400, 700}) {
    SCOPED_TRACE("killed after " + std::to_string(ms) + " ms");
    KillAfter(cmd(dir / "out"), dir / "log", ms);
    ExpectAbsentResumableOrValid(dir / "out");
    if (FileExists(dir / "out/manifest.json")) continue;  // finished before the kill
    auto r = RunCommand(cmd(dir / "out"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "out").exit_code, 0);
    auto a = ReadManifest(dir / "out"), b = ReadManifest(dir / "ref");
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->shards.size(), b->shards.size());
    for (size_t i = 0; i < a->shards.size(); ++i)
      EXPECT_EQ(a->shards[i].crc32c, b->shards[i].crc32c) << i;
    ASSERT_TRUE(RemoveFile(dir / "out/manifest.json").ok());
    std::filesystem::remove_all(dir / "out");
  }
}

// Checks the directory a failed pack left: no temporaries, no manifest, and
// every final-named shard complete.
void ExpectCleanFailure(const std::string& dir) {
  if (!FileExists(dir)) return;  // a directory the pack made is removed: the cleanest failure
  auto names = ListDir(dir);
  ASSERT_TRUE(names.ok());
  for (const auto& n : *names) {
    EXPECT_EQ(n.find(".tmp"), std::string::npos) << "temporary file left behind: " << n;
    EXPECT_NE(n, "manifest.json");
    if (n.rfind("shard-", 0) == 0) {
      EXPECT_TRUE(ShardReader::Open(dir + "/" + n).ok()) << n << " is partial";
    }
  }
}

TEST(FaultInjection, FullDiskDuringPackIsAClearErrorAndLeavesNothingPartial) {
  if (!FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  const std::string args = " idx --images " + kFashion + "/train-images-idx3-ubyte.gz --labels " +
                           kFashion + "/train-labels-idx1-ubyte.gz --shard-size 3000000 ";
  // A real full disk: a 5 MB tmpfs, where the machine lets us mount one.
  testing::MakeDirs(dir / "tmpfs");
  if (mount("tmpfs", (dir / "tmpfs").c_str(), "tmpfs", 0, "size=5m") == 0) {
    auto r = RunCommand(testing::PackTool() + args + dir / "tmpfs/out");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(dir / "tmpfs/out/.shard-"), std::string::npos)
        << "the error names the file: " << r.out;
    ExpectCleanFailure(dir / "tmpfs/out");
    umount((dir / "tmpfs").c_str());
  } else {
    std::printf("(no tmpfs mount here: %s; using the injected write failure only)\n",
                std::strerror(errno));
  }
  // The same through the write-failure injection (runs everywhere).
  auto r = RunCommand("env SHARDKIT_FAULT_WRITE_BUDGET=4000000 " + testing::PackTool() + args +
                      dir / "inj");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  ExpectCleanFailure(dir / "inj");
  // And the retry, with room, succeeds.
  r = RunCommand(testing::PackTool() + args + dir / "inj");
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST(FaultInjection, ManifestWriteFailureLeavesNoDataset) {
  TempDir dir;
  // Budget enough for the shard but not the manifest.
  std::string img = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2};
  img += std::string(16, 'x');
  std::string lab = {0, 0, 8, 1, 0, 0, 0, 4, 0, 1, 0, 1};
  testing::WriteFile(dir / "i", img);
  testing::WriteFile(dir / "l", lab);
  auto shard_only = RunCommand(testing::PackTool() + " idx --images " + dir / "i" + " --labels " +
                               dir / "l" + " " + dir / "probe");
  ASSERT_EQ(shard_only.exit_code, 0);
  const uint64_t shard_bytes = *FileSize(dir / "probe/shard-00000.sks");
  auto r = RunCommand("env SHARDKIT_FAULT_WRITE_BUDGET=" + std::to_string(shard_bytes + 10) + " " +
                      testing::PackTool() + " idx --images " + dir / "i" + " --labels " +
                      dir / "l" + " " + dir / "out");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("manifest.json"), std::string::npos) << r.out;
  EXPECT_FALSE(FileExists(dir / "out/manifest.json"));
  ExpectCleanFailure(dir / "out");
}

TEST(FaultInjection, InterruptedStagingResumesCopyingOnlyWhatIsMissing) {
  if (!FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  ASSERT_EQ(RunCommand(testing::PackTool() + " idx --images " + kFashion +
                       "/train-images-idx3-ubyte.gz --labels " + kFashion +
                       "/train-labels-idx1-ubyte.gz --shard-size 1000000 " + dir / "shared")
                .exit_code,
            0);
  const std::string stage = "env SHARDKIT_PACK=" + testing::PackTool() + " " + kStage + " " +
                            dir / "shared" + " " + dir / "local --jobs 1";
  // Killed once some shards are staged, with every process it started (cp,
  // checksum, mv), however long the machine takes to get there.
  const int pid = testing::Spawn(stage, dir / "log", /*own_group=*/true);
  ASSERT_GT(pid, 0);
  const bool some_staged = testing::WaitForFile(dir / "local/shard-00004.sks", 600);
  EXPECT_EQ(kill(-pid, SIGKILL), 0) << std::strerror(errno);
  testing::WaitExit(pid, 60);
  ASSERT_TRUE(some_staged) << testing::ReadFile(dir / "log");
  EXPECT_FALSE(FileExists(dir / "local/manifest.json"))
      << "a half-staged dataset must not look complete";
  auto r = RunCommand(stage);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("already intact"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 0 already intact"), std::string::npos)
      << "the finished shards must be kept: " << r.out;
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "local").exit_code, 0);
}

TEST(FaultInjection, StagingFailsClearlyWhenLocalSpaceIsShort) {
  if (!FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  testing::MakeDirs(dir / "tmpfs");
  if (mount("tmpfs", (dir / "tmpfs").c_str(), "tmpfs", 0, "size=2m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here";
  ASSERT_EQ(RunCommand(testing::PackTool() + " idx --images " + kFashion +
                       "/train-images-idx3-ubyte.gz --labels " + kFashion +
                       "/train-labels-idx1-ubyte.gz " + dir / "shared")
                .exit_code,
            0);
  auto r = RunCommand("env SHARDKIT_PACK=" + testing::PackTool() + " " + kStage + " " +
                      dir / "shared" + " " + dir / "tmpfs/local");
  umount((dir / "tmpfs").c_str());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("not enough space"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shardkit
