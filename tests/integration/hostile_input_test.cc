// What an adversary or an unlucky user hands the tools: FIFOs and devices
// where files belong, staging onto the source, two packs into one directory,
// a manifest that lists a shard twice, nested and non-UTF-8 folders, corrupt
// records under both policies. Nothing may hang, crash or claim success falsely.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::MakeJpeg;
using testing::RunCommand;
using testing::SyntheticImage;
using testing::TempDir;
using testing::WriteFile;

const std::string kBench = SHARDKIT_BENCH_TOOL;
const std::string kStage = SHARDKIT_SOURCE_DIR "/slurm/stage.sh";
std::string Pack() { return "timeout -s KILL 60 " + testing::PackTool(); }

// class folders c0..c(k-1) with n small JPEGs each.
void WriteJpegTree(const std::string& root, int classes, int per_class) {
  for (int c = 0; c < classes; ++c) {
    const std::string dir = root + "/c" + std::to_string(c);
    testing::MakeDirs(dir);
    for (int i = 0; i < per_class; ++i) {
      WriteFile(dir + "/" + std::to_string(i) + ".JPEG",
                MakeJpeg(SyntheticImage(48 + i, 40, 3, c * 100 + i), testing::JpegFlavor::kRgb));
    }
  }
}

TEST(HostileInput, FifoAmongImagesIsRefusedByPathWithoutBlocking) {
  TempDir dir;
  WriteJpegTree(dir / "src", 2, 3);
  ASSERT_EQ(mkfifo((dir / "src/c0/pipe.JPEG").c_str(), 0644), 0);
  auto r = RunCommand(Pack() + " imagenet " + dir / "src " + dir / "out");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("c0/pipe.JPEG: is a named pipe (FIFO), not a regular file (skipped)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("packed 6 of 7 records"), std::string::npos) << r.out;
  r = RunCommand(Pack() + " imagenet --strict " + dir / "src " + dir / "strict");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("pipe.JPEG: is a named pipe"), std::string::npos) << r.out;
  EXPECT_FALSE(Env::Default()->FileExists(dir / "strict/manifest.json"));
}

TEST(HostileInput, ManifestOrShardThatIsNotARegularFileIsRefusedByPath) {
  TempDir dir;
  WriteJpegTree(dir / "src", 2, 2);
  ASSERT_EQ(RunCommand(Pack() + " imagenet " + dir / "src " + dir / "ds").exit_code, 0);
  // A directory, a FIFO and a device where manifest.json should be.
  testing::MakeDirs(dir / "dirman/manifest.json");
  testing::MakeDirs(dir / "fifoman");
  ASSERT_EQ(mkfifo((dir / "fifoman/manifest.json").c_str(), 0644), 0);
  testing::MakeDirs(dir / "devman");
  ASSERT_EQ(symlink("/dev/zero", (dir / "devman/manifest.json").c_str()), 0);
  for (const char* d : {"dirman", "fifoman", "devman"}) {
    for (const char* cmd : {" verify ", " inspect "}) {
      auto r = RunCommand(Pack() + cmd + dir / d);
      EXPECT_EQ(r.exit_code, 2) << d << cmd << r.out;
      EXPECT_NE(r.out.find(dir / d + "/manifest.json: is a"), std::string::npos) << r.out;
    }
    auto r = RunCommand("timeout -s KILL 60 " + kBench + " loader " + dir / d +
                        " --batches 1 --workers 1");
    EXPECT_EQ(r.exit_code, 2) << r.out;
  }
  // A FIFO in place of a shard: verify names it as bad data; readers refuse it.
  ASSERT_EQ(::unlink((dir / "ds/shard-00000.sks").c_str()), 0);
  ASSERT_EQ(mkfifo((dir / "ds/shard-00000.sks").c_str(), 0644), 0);
  auto r = RunCommand(Pack() + " verify " + dir / "ds");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("shard-00000.sks: is a named pipe"), std::string::npos) << r.out;
  r = RunCommand("timeout -s KILL 60 " + kBench + " loader " + dir / "ds --batches 1 --workers 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("shard-00000.sks: is a named pipe"), std::string::npos) << r.out;
}

TEST(HostileInput, StagingOntoTheSourceLeavesTheSourceUntouched) {
  TempDir dir;
  WriteJpegTree(dir / "tmp/src", 2, 2);
  ASSERT_EQ(RunCommand(Pack() + " imagenet " + dir / "tmp/src " + dir / "tmp/ds").exit_code, 0);
  ASSERT_EQ(symlink((dir / "tmp/ds").c_str(), (dir / "link").c_str()), 0);
  const std::string env = "env -u SLURM_TMPDIR SHARDKIT_PACK=" + testing::PackTool() + " ";
  for (const std::string& cmd : {
           env + kStage + " " + dir / "tmp/ds " + dir / "tmp/ds",  // DEST is SRC
           env + kStage + " " + dir / "tmp/ds " + dir / "link",    // DEST is a symlink to SRC
           env + kStage + " " + dir / "link " + dir / "tmp/ds/",   // SRC through the link
           env + "TMPDIR=" + dir / "tmp " + kStage + " " +
               dir / "tmp/ds",  // default DEST: $TMPDIR/ds
       }) {
    auto r = RunCommand("timeout -s KILL 120 " + cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("nothing to stage"), std::string::npos) << r.out;
    ASSERT_TRUE(Env::Default()->FileExists(dir / "tmp/ds/manifest.json"))
        << "the source's manifest was removed by: " << cmd;
    EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "tmp/ds").exit_code, 0) << cmd;
  }
  // Inside the source: refused. A lock file left as a link to a shard: not
  // truncated through (the copy is made, the source still verifies). A DEST
  // that is a file: exit 2.
  auto r = RunCommand("timeout -s KILL 120 " + env + kStage + " " + dir / "tmp/ds " +
                      dir / "tmp/ds/sub");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("is inside " + dir / "tmp/ds"), std::string::npos) << r.out;
  EXPECT_FALSE(Env::Default()->FileExists(dir / "tmp/ds/sub"));
  testing::MakeDirs(dir / "dest");
  ASSERT_EQ(
      symlink((dir / "tmp/ds/shard-00000.sks").c_str(), (dir / "dest/.shardkit.lock").c_str()), 0);
  r = RunCommand("timeout -s KILL 120 " + env + kStage + " " + dir / "tmp/ds " + dir / "dest");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "tmp/ds").exit_code, 0);
  EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "dest").exit_code, 0);
  testing::WriteFile(dir / "afile", "x");
  r = RunCommand("timeout -s KILL 120 " + env + kStage + " " + dir / "tmp/ds " + dir / "afile");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("exists and is not a directory"), std::string::npos) << r.out;
}

TEST(HostileInput, ASecondWriterIntoTheSameDirectoryFailsAtOnce) {
  TempDir dir;
  WriteJpegTree(dir / "src", 2, 2);
  testing::MakeDirs(dir / "out");
  {
    auto lock = DirLock::Acquire(dir / "out");  // another writer, holding the directory
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
    auto r = RunCommand(Pack() + " imagenet " + dir / "src " + dir / "out");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("another shardkit process is writing"), std::string::npos) << r.out;
    EXPECT_FALSE(Env::Default()->FileExists(dir / "out/manifest.json"));
  }
  // Two real packs at once, several times: any that claims success left a
  // dataset that verifies, and at least one succeeds.
  WriteJpegTree(dir / "big", 4, 25);
  for (int round = 0; round < 4; ++round) {
    const std::string out = dir / ("race" + std::to_string(round));
    const int a = testing::Spawn(
        Pack() + " imagenet --force --shard-size 8192 " + dir / "big " + out, dir / "a.log");
    const int b = testing::Spawn(
        Pack() + " imagenet --force --shard-size 8192 " + dir / "big " + out, dir / "b.log");
    const int ca = testing::WaitExit(a, 120), cb = testing::WaitExit(b, 120);
    EXPECT_TRUE(ca == 0 || cb == 0)
        << testing::ReadFile(dir / "a.log") << testing::ReadFile(dir / "b.log");
    for (int c : {ca, cb}) EXPECT_TRUE(c == 0 || c == 2) << c;
    auto v = RunCommand(Pack() + " verify " + out);
    EXPECT_EQ(v.exit_code, 0) << "a pack exited 0 but its dataset does not verify: " << v.out;
  }
}

TEST(HostileInput, ManifestListingAShardTwiceIsRefused) {
  TempDir dir;
  WriteJpegTree(dir / "src", 2, 2);
  ASSERT_EQ(RunCommand(Pack() + " imagenet " + dir / "src " + dir / "ds").exit_code, 0);
  auto j = nlohmann::json::parse(testing::ReadFile(dir / "ds/manifest.json"));
  j["shards"].push_back(j["shards"][0]);
  j["records"] = j["records"].get<uint64_t>() * 2;
  WriteFile(dir / "ds/manifest.json", j.dump(1));
  auto r = RunCommand(Pack() + " verify " + dir / "ds");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("shard-00000.sks\" is listed more than once"), std::string::npos) << r.out;
  EXPECT_FALSE(Dataset::Open(dir / "ds").ok());
}

TEST(HostileInput, ImagesInSubFoldersArePackedAsImageFolderDoes) {
  TempDir dir;
  WriteJpegTree(dir / "src", 2, 2);
  testing::MakeDirs(dir / "src/c1/extra/deeper");
  WriteFile(dir / "src/c1/extra/a.JPEG",
            MakeJpeg(SyntheticImage(50, 40, 3, 9), testing::JpegFlavor::kRgb));
  WriteFile(dir / "src/c1/extra/deeper/b.JPEG",
            MakeJpeg(SyntheticImage(50, 40, 3, 8), testing::JpegFlavor::kRgb));
  ASSERT_EQ(symlink((dir / "src/c1").c_str(), (dir / "src/c1/extra/loop").c_str()),
            0);  // a loop is walked once
  auto r = RunCommand(Pack() + " imagenet --strict --follow-links " + dir / "src " + dir / "ds");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("packed 6 of 6 records (2 classes)"), std::string::npos) << r.out;
  auto ds = Dataset::Open(dir / "ds");
  ASSERT_TRUE(ds.ok());
  std::set<std::string> keys;
  for (size_t s = 0; s < (*ds)->num_shards(); ++s) {
    for (uint32_t i = 0; i < (*ds)->shard(s).num_records(); ++i) {
      keys.insert(std::string((*ds)->shard(s).key(i)));
      if ((*ds)->shard(s).key(i) == "c1/extra/deeper/b.JPEG") {
        EXPECT_EQ((*ds)->shard(s).record(i).label, 1);
      }
    }
  }
  EXPECT_TRUE(keys.count("c1/extra/a.JPEG")) << "nested images must be packed";
  EXPECT_TRUE(keys.count("c1/extra/deeper/b.JPEG"));
}

TEST(HostileInput, NonUtf8NamesNeverAbortATool) {
  TempDir dir;
  WriteJpegTree(dir / "src", 2, 2);
  const std::string bad = dir / "src/\xff\xfe";
  testing::MakeDirs(bad);
  WriteFile(bad + "/x.JPEG", MakeJpeg(SyntheticImage(50, 40, 3, 3), testing::JpegFlavor::kRgb));
  // A class folder whose name is not UTF-8 cannot name a class: skipped by
  // name like any unusable member, and a failure under --strict.
  auto r = RunCommand(Pack() + " imagenet " + dir / "src " + dir / "ds");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\\xff\\xfe: a class folder name that is not valid UTF-8"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("type_error"), std::string::npos) << r.out;
  EXPECT_EQ(ReadManifest(dir / "ds")->classes, (std::vector<std::string>{"c0", "c1"}));
  r = RunCommand(Pack() + " imagenet --strict " + dir / "src " + dir / "strict");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_FALSE(Env::Default()->FileExists(dir / "strict"));
  // Non-UTF-8 bytes in file names and in the output path are stored or shown, not fatal.
  ASSERT_EQ(::rename(bad.c_str(), (dir / "src/c2").c_str()), 0);
  ASSERT_EQ(::rename((dir / "src/c2/x.JPEG").c_str(), (dir / "src/c2/\xfa.JPEG").c_str()), 0);
  r = RunCommand(Pack() + " imagenet " + dir / "src " + dir / "\xc3out");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "\xc3out").exit_code, 0);
  EXPECT_EQ(RunCommand(Pack() + " inspect --json " + dir / "\xc3out").exit_code, 0);
}

TEST(HostileInput, BenchSkipsCorruptRecordsWhenAskedAndFailsNamingThemOtherwise) {
  TempDir dir;
  WriteJpegTree(dir / "src", 2, 8);
  ASSERT_EQ(RunCommand(Pack() + " imagenet " + dir / "src " + dir / "ds").exit_code, 0);
  auto ds = Dataset::Open(dir / "ds");
  ASSERT_TRUE(ds.ok());
  const ShardReader& r0 = (*ds)->shard(0);
  const uint64_t offset = r0.block(0).offset + 60;  // inside the first record's payload
  ds->reset();
  std::fstream f(dir / "ds/shard-00000.sks", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put('\x55');
  f.close();
  const std::string bench =
      "timeout -s KILL 60 " + kBench + " loader " + dir / "ds" +
      " --workers 1 --batch 4 --batches 8 --warmup 0 --repeat 1 --size 32 --json";
  auto r = RunCommand(bench);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("shard-00000.sks"), std::string::npos) << r.out;
  r = RunCommand(bench + " --on-corrupt skip --skip-budget 50 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("1 corrupt record(s) found"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"corrupt_records\": 1,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"samples_replaced\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"corrupt_skipped\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shardkit
