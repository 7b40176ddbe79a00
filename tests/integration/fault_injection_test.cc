// Crashes and full disks: whatever moment shardkit-pack or shardkit-augment
// is killed at, the output is absent, resumable or complete and valid, never a
// manifest naming a bad shard; a full disk is a clear error that leaves no
// temporary or final-named partial file; an interrupted staging resumes.
// Every kill waits for a state of the tool's work (its output directory, so
// many shard files) and checks that the kill, not the tool, ended it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::RunCommand;
using testing::TempDir;

const std::string kFashion = "/usr/share/datasets/fashion-mnist";
const std::string kAugment = SHARDKIT_AUGMENT_TOOL;
const std::string kStage = SHARDKIT_SOURCE_DIR "/slurm/stage.sh";

// The invariant after any crash: not a dataset, or a dataset that verifies.
void ExpectAbsentResumableOrValid(const std::string& dir) {
  if (!Env::Default()->FileExists(dir)) return;
  if (!Env::Default()->FileExists(dir + "/manifest.json")) {
    EXPECT_TRUE(Dataset::Open(dir).status().IsNotFound())
        << "a directory without a manifest is not a dataset";
    return;
  }
  auto r = RunCommand(testing::PackTool() + " verify " + dir);
  EXPECT_EQ(r.exit_code, 0) << "a manifest must only name good shards:\n" << r.out;
}

// A moment of a tool's work, seen from outside: a name and whether it has come.
struct WorkState {
  std::string name;
  std::function<bool()> reached;
};

// Shard files in `dir`, temporary (".shard-N.sks.tmp") or published, or
// temporary only: how far a writer has got.
size_t ShardFiles(const std::string& dir, bool temporary_only = false) {
  auto names = Env::Default()->ListDir(dir);
  if (!names.ok()) return 0;
  size_t n = 0;
  for (const auto& name : *names) {
    n += name.find("shard-") != std::string::npos && (!temporary_only || name[0] == '.');
  }
  return n;
}

// The states of writing `shards` shards into a fresh `dir`: the directory
// made, then 1, a third, two thirds and all but a tenth (at least 2) of the
// shard files, each with work left after it.
std::vector<WorkState> WritingStates(const std::string& dir, size_t shards) {
  std::vector<WorkState> states = {
      {"output directory made", [=] { return Env::Default()->FileExists(dir); }}};
  size_t last = 0;
  for (size_t n :
       {size_t{1}, shards / 3, 2 * shards / 3, shards - std::max<size_t>(2, shards / 10)}) {
    if (n <= last) continue;  // few shards: states that coincide
    last = n;
    states.push_back({std::to_string(n) + " of " + std::to_string(shards) + " shard files",
                      [=] { return ShardFiles(dir) >= n; }});
  }
  return states;
}

enum class Kill { kMidWork, kFinishedFirst, kStateNeverReached };

// Starts `cmd`, waits (polling every millisecond) for `state` and kills the
// tool with SIGKILL at once. kMidWork only when the signal is what ended it;
// a tool that exited by itself, before or after the state, finished first.
Kill KillAtState(const std::string& cmd, const std::string& log, const WorkState& state) {
  const int pid = testing::Spawn(cmd, log);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  int status = 0;
  while (!state.reached()) {
    if (waitpid(pid, &status, WNOHANG) == pid) return Kill::kFinishedFirst;
    if (std::chrono::steady_clock::now() > deadline) {
      testing::WaitExit(pid, 0);  // kills it
      return Kill::kStateNeverReached;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? Kill::kMidWork : Kill::kFinishedFirst;
}

// Kills `cmd` at `state`, trying again (up to 3 times, `before` each try
// making the start the same) when the tool finished first: a kill that did
// not land mid-work tests nothing, and the test fails rather than pass
// without having tested it.
void KillMidWork(
    const std::string& cmd, const std::string& log, const WorkState& state,
    const std::function<void()>& before = [] {}) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    before();
    switch (KillAtState(cmd, log, state)) {
      case Kill::kMidWork:
        return;
      case Kill::kStateNeverReached:
        FAIL() << "the tool never reached '" << state.name << "':\n" << testing::ReadFile(log);
      case Kill::kFinishedFirst:
        std::printf("(the tool finished before the kill at '%s'; again)\n", state.name.c_str());
        break;
    }
  }
  FAIL() << "the tool finished before the kill at '" << state.name
         << "' three times: the state leaves too little work to kill it in";
}

TEST(FaultInjection, PackKilledAtAnyPointRestartsCleanly) {
  if (!Env::Default()->FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  const std::string cmd = testing::PackTool() + " idx --images " + kFashion +
                          "/train-images-idx3-ubyte.gz --labels " + kFashion +
                          "/train-labels-idx1-ubyte.gz --shard-size 2000000 " + dir / "out";
  ASSERT_EQ(RunCommand(cmd).exit_code, 0);
  const size_t shards = ReadManifest(dir / "out")->shards.size();
  for (const WorkState& state : WritingStates(dir / "out", shards)) {
    SCOPED_TRACE("killed at: " + state.name);
    KillMidWork(cmd, dir / "log", state, [&] { std::filesystem::remove_all(dir / "out"); });
    ExpectAbsentResumableOrValid(dir / "out");
    EXPECT_FALSE(Env::Default()->FileExists(dir / "out/manifest.json"))
        << "killed mid-work, yet complete";
    // Rerunning the same command, without --force, completes.
    auto r = RunCommand(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "out").exit_code, 0);
  }
  // --force over the complete dataset, killed a third of the way through
  // writing the new one: the dataset there stays whole until it is replaced.
  const std::string out = dir / "out";
  KillMidWork(cmd + " --force", dir / "log",
              {"a third of the replacement's shards written",
               [&] { return ShardFiles(out, /*temporary_only=*/true) >= shards / 3; }});
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + out).exit_code, 0);
}

// Two datasets are the same: every shard file byte for byte, and the
// manifest apart from when and by which command it was made.
void ExpectSameDataset(const std::string& ref, const std::string& out) {
  auto a = ReadManifest(ref), b = ReadManifest(out);
  ASSERT_TRUE(a.ok() && b.ok());
  for (Manifest* m : {&*a, &*b}) m->created_at.clear(), m->created_by = "{}";
  EXPECT_EQ(ManifestToJson(*a), ManifestToJson(*b));
  for (const ShardInfo& s : a->shards) {
    EXPECT_EQ(testing::ReadFile(JoinPath(out, s.file)), testing::ReadFile(JoinPath(ref, s.file)))
        << s.file;
  }
  EXPECT_FALSE(Env::Default()->FileExists(JoinPath(out, kResumeFileName)));
}

// How many shards the "resumed: N shard(s)" line of a pack's summary says
// were kept; 0 without one.
size_t ResumedShards(const std::string& out) {
  const size_t at = out.find("resumed: ");
  return at == std::string::npos ? 0 : std::stoul(out.substr(at + 9));
}

// A pack of fixed-size records (IDX here; HDF5, .mat and bigMNIST go through
// the same Packer) killed once a third of its shards are finished, run again,
// keeps them and writes only the rest: the dataset equals one never
// interrupted, byte for byte. A rerun with other settings keeps nothing.
TEST(FaultInjection, PackKilledMidWayResumesToTheBytesOfAnUninterruptedPack) {
  if (!Env::Default()->FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  const std::string args = " idx --images " + kFashion + "/train-images-idx3-ubyte.gz --labels " +
                           kFashion + "/train-labels-idx1-ubyte.gz --threads 1 ";
  ASSERT_EQ(
      RunCommand(testing::PackTool() + args + "--shard-size 1000000 " + dir / "ref").exit_code, 0);
  auto ref = ReadManifest(dir / "ref");
  ASSERT_TRUE(ref.ok());
  const size_t shards = ref->shards.size();
  ASSERT_GE(shards, 30u);
  // Shard n begun: shards 0 to n-1 are finished, under their temporary names.
  auto killed_at_a_third = [&](const std::string& cmd, const std::string& out) {
    const std::string begun = JoinPath(out, TempShardFileName(shards / 3));
    KillMidWork(
        cmd, dir / "log",
        {"a third of the shards finished", [=] { return Env::Default()->FileExists(begun); }},
        [&] { std::filesystem::remove_all(out); });
    EXPECT_FALSE(Env::Default()->FileExists(JoinPath(out, kManifestName)))
        << "killed mid-work, yet complete";
    EXPECT_TRUE(Env::Default()->FileExists(JoinPath(out, kResumeFileName)));
  };
  const std::string cmd = testing::PackTool() + args + "--shard-size 1000000 " + dir / "out";
  killed_at_a_third(cmd, dir / "out");
  auto r = RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_GE(ResumedShards(r.out), shards / 3) << r.out;
  ExpectSameDataset(dir / "ref", dir / "out");
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "out").exit_code, 0);
  // Killed again, then run with another shard size: nothing of the first is kept.
  killed_at_a_third(testing::PackTool() + args + "--shard-size 1000000 " + dir / "other",
                    dir / "other");
  r = RunCommand(testing::PackTool() + args + "--shard-size 900000 " + dir / "other");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(ResumedShards(r.out), 0u) << r.out;
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "other").exit_code, 0);
}

// Image c/i of the class-folder trees the image packs here are killed in
// (version > 0: another picture in its place).
std::string TreeImage(int c, int i, uint64_t version = 0) {
  return testing::MakeJpeg(testing::SyntheticImage(160, 120, 3, version * 1000 + c * 100 + i),
                           testing::JpegFlavor::kRgb);
}

// 4 class folders of 60 JPEGs each under `src`.
void WriteClassTree(const std::string& src) {
  for (int c = 0; c < 4; ++c) {
    testing::MakeDirs(src + "/c" + std::to_string(c));
    for (int i = 0; i < 60; ++i) {
      testing::WriteFile(src + "/c" + std::to_string(c) + "/" + std::to_string(i) + ".JPEG",
                         TreeImage(c, i));
    }
  }
}

TEST(FaultInjection, ImageNetPackKilledAtAnyPointRestartsCleanly) {
  TempDir dir;
  WriteClassTree(dir / "src");
  // Resized, so that every image is decoded and encoded again: work to kill it in.
  const std::string cmd = testing::PackTool() + " imagenet " + dir / "src" + " " +
                          dir / "out --shard-size 100000 --threads 1 --resize-short 100";
  ASSERT_EQ(RunCommand(cmd).exit_code, 0);
  const size_t shards = ReadManifest(dir / "out")->shards.size();
  for (const WorkState& state : WritingStates(dir / "out", shards)) {
    SCOPED_TRACE("killed at: " + state.name);
    KillMidWork(cmd, dir / "log", state, [&] { std::filesystem::remove_all(dir / "out"); });
    ExpectAbsentResumableOrValid(dir / "out");
    EXPECT_FALSE(Env::Default()->FileExists(dir / "out/manifest.json"))
        << "killed mid-work, yet complete";
    auto r = RunCommand(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "out").exit_code, 0);
  }
}

// An image pack (class folders here, or a tar of them: JPEGs, shards cut by
// bytes, the records in a seeded order known only after the scan) killed
// once a third of its shards are finished, run again, keeps them and writes
// only the rest: the dataset equals one never interrupted, byte for byte. A
// rerun over a changed image, or with another --seed or --shard-size, keeps
// nothing and equals an uninterrupted pack of what it was given.
TEST(FaultInjection, ImagePackKilledMidWayResumesToTheBytesOfAnUninterruptedPack) {
  TempDir dir;
  WriteClassTree(dir / "src");
  // Resized, so that every image is decoded and encoded again: work to kill it in.
  auto pack = [&](const std::string& src, const std::string& out, const std::string& flags) {
    return testing::PackTool() + " imagenet " + src + " " + out +
           " --threads 1 --resize-short 100 " + flags;
  };
  const std::string flags = "--shard-size 40000 --seed 7";
  ASSERT_EQ(RunCommand(pack(dir / "src", dir / "ref", flags)).exit_code, 0);
  auto ref = ReadManifest(dir / "ref");
  ASSERT_TRUE(ref.ok());
  const size_t shards = ref->shards.size();
  ASSERT_GE(shards, 9u);
  // Shard n begun, the fingerprint written: shards 0 to n-1 are finished,
  // under their temporary names.
  auto killed_at_a_third = [&](const std::string& cmd, const std::string& out) {
    const std::string begun = JoinPath(out, TempShardFileName(shards / 3));
    const std::string fingerprint = JoinPath(out, kResumeFileName);
    KillMidWork(cmd, dir / "log",
                {"a third of the shards finished",
                 [=] {
                   return Env::Default()->FileExists(fingerprint) &&
                          Env::Default()->FileExists(begun);
                 }},
                [&] { std::filesystem::remove_all(out); });
    EXPECT_FALSE(Env::Default()->FileExists(JoinPath(out, kManifestName)))
        << "killed mid-work, yet complete";
    EXPECT_TRUE(Env::Default()->FileExists(fingerprint));
  };

  // The same command again: a third kept, the rest written, the same bytes.
  const std::string cmd = pack(dir / "src", dir / "out", flags);
  killed_at_a_third(cmd, dir / "out");
  auto r = RunCommand(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_GE(ResumedShards(r.out), shards / 3) << r.out;
  EXPECT_LT(ResumedShards(r.out), shards) << r.out;
  ExpectSameDataset(dir / "ref", dir / "out");
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "out").exit_code, 0);

  // Another seed, another shard size: nothing of the killed run is kept.
  for (const std::string other : {"--shard-size 40000 --seed 8", "--shard-size 36000 --seed 7"}) {
    SCOPED_TRACE(other);
    killed_at_a_third(pack(dir / "src", dir / "other", flags), dir / "other");
    r = RunCommand(pack(dir / "src", dir / "other", other));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(ResumedShards(r.out), 0u) << r.out;
    ASSERT_EQ(RunCommand(pack(dir / "src", dir / "other_ref", other + " --force")).exit_code, 0);
    ExpectSameDataset(dir / "other_ref", dir / "other");
  }

  // A tar of the tree (its images prepared and spilled during the scan):
  // resumed the same way.
  ASSERT_EQ(RunCommand("tar -C " + dir / "src" + " -cf " + dir / "src.tar .").exit_code, 0);
  ASSERT_EQ(RunCommand(pack(dir / "src.tar", dir / "tar_ref", flags)).exit_code, 0);
  killed_at_a_third(pack(dir / "src.tar", dir / "tar", flags), dir / "tar");
  r = RunCommand(pack(dir / "src.tar", dir / "tar", flags));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_GE(ResumedShards(r.out), shards / 3) << r.out;
  ExpectSameDataset(dir / "tar_ref", dir / "tar");

  // A WebDataset shard of the same images (each group added as it streams
  // by): resumed the same way.
  testing::MakeDirs(dir / "wds");
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < 60; ++i) {
      const std::string key = dir / ("wds/c" + std::to_string(c) + "_" + std::to_string(i));
      testing::WriteFile(key + ".jpg", TreeImage(c, i));
      testing::WriteFile(key + ".cls", std::to_string(c));
    }
  }
  ASSERT_EQ(RunCommand("cd " + dir / "wds" + " && tar -cf ../wds.tar *").exit_code, 0);
  auto wds = [&](const std::string& out) {
    return testing::PackTool() + " webdataset " + dir / "wds.tar" + " " + out +
           " --threads 1 --resize-short 100 " + flags;
  };
  ASSERT_EQ(RunCommand(wds(dir / "wds_ref")).exit_code, 0);
  killed_at_a_third(wds(dir / "wds_out"), dir / "wds_out");
  r = RunCommand(wds(dir / "wds_out"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_GE(ResumedShards(r.out), shards / 3) << r.out;
  ExpectSameDataset(dir / "wds_ref", dir / "wds_out");

  // One image replaced after the kill (in the folder: its file's stamp
  // changes; in the tar, which the settings name by path only: its stored
  // bytes' checksum): nothing stale is kept, and the tar packs as its
  // extraction does.
  killed_at_a_third(pack(dir / "src", dir / "out2", flags), dir / "out2");
  killed_at_a_third(pack(dir / "src.tar", dir / "tar2", flags), dir / "tar2");
  const std::string replaced = dir / "src/c2/5.JPEG";
  testing::WriteFile(replaced, TreeImage(2, 5, 1));
  ASSERT_EQ(RunCommand("tar -C " + dir / "src" + " -cf " + dir / "src.tar .").exit_code, 0);
  ASSERT_EQ(RunCommand(pack(dir / "src", dir / "ref2", flags)).exit_code, 0);
  r = RunCommand(pack(dir / "src", dir / "out2", flags));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(ResumedShards(r.out), 0u) << r.out;
  ExpectSameDataset(dir / "ref2", dir / "out2");
  r = RunCommand(pack(dir / "src.tar", dir / "tar2", flags));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(ResumedShards(r.out), 0u) << r.out;
  ExpectSameDataset(dir / "ref2", dir / "tar2");
}

TEST(FaultInjection, AugmentKilledAtAnyPointResumes) {
  if (!Env::Default()->FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  auto cmd = [&](const std::string& out) {
    return kAugment + " bigmnist --src " + kFashion + " " + out +
           " --limit 2000 --versions 2 --copies 40 --shard-size 200000";
  };
  ASSERT_EQ(RunCommand(cmd(dir / "ref")).exit_code, 0);
  const size_t shards = ReadManifest(dir / "ref")->shards.size();
  for (const WorkState& state : WritingStates(dir / "out", shards)) {
    SCOPED_TRACE("killed at: " + state.name);
    KillMidWork(cmd(dir / "out"), dir / "log", state,
                [&] { std::filesystem::remove_all(dir / "out"); });
    ExpectAbsentResumableOrValid(dir / "out");
    EXPECT_FALSE(Env::Default()->FileExists(dir / "out/manifest.json"))
        << "killed mid-work, yet complete";
    auto r = RunCommand(cmd(dir / "out"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "out").exit_code, 0);
    auto a = ReadManifest(dir / "out"), b = ReadManifest(dir / "ref");
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->shards.size(), b->shards.size());
    for (size_t i = 0; i < a->shards.size(); ++i)
      EXPECT_EQ(a->shards[i].crc32c, b->shards[i].crc32c) << i;
  }
}

// Checks the directory a failed pack left: no temporaries, no manifest, and
// every final-named shard complete.
void ExpectCleanFailure(const std::string& dir) {
  if (!Env::Default()->FileExists(dir))
    return;  // a directory the pack made is removed: the cleanest failure
  auto names = Env::Default()->ListDir(dir);
  ASSERT_TRUE(names.ok());
  for (const auto& n : *names) {
    EXPECT_EQ(n.find(".tmp"), std::string::npos) << "temporary file left behind: " << n;
    EXPECT_NE(n, "manifest.json");
    if (n.rfind("shard-", 0) == 0) {
      EXPECT_TRUE(ShardReader::Open(dir + "/" + n).ok()) << n << " is partial";
    }
  }
}

// A real full disk: a size-limited tmpfs mounted on `dir` (made if missing),
// unmounted by path when destroyed. Where this process may not mount one
// (not root, no CAP_SYS_ADMIN), mounted() is false and why() says why.
// (Writers that fail in process, on an Env that fills up, are
// pack_fault_test's.)
class ScopedTmpfs {
 public:
  ScopedTmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    testing::MakeDirs(dir);
    mounted_ = mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
    if (!mounted_) why_ = std::strerror(errno);
  }
  ~ScopedTmpfs() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  std::string why() const {
    return "cannot mount a tmpfs on " + dir_ + " (" + why_ +
           "): a real full disk needs root or CAP_SYS_ADMIN";
  }
  // The disk made larger (room after a failure), its files kept.
  bool Resize(const std::string& size) {
    return mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT, ("size=" + size).c_str()) == 0;
  }
  // Fills the disk with `path` until a write fails, then gives back `room`
  // bytes (rounded up to whole pages, tmpfs's unit).
  void FillLeaving(const std::string& path, uint64_t room) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    const std::string page(4096, 'f');
    uint64_t size = 0;
    for (ssize_t w; (w = write(fd, page.data(), page.size())) > 0;)
      size += static_cast<uint64_t>(w);
    EXPECT_EQ(errno, ENOSPC) << std::strerror(errno);
    const uint64_t give_back = (room + page.size() - 1) / page.size() * page.size();
    ASSERT_GE(size, give_back) << "the disk is too small for the room asked";
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size - give_back)), 0) << std::strerror(errno);
    close(fd);
  }

 private:
  std::string dir_, why_;
  bool mounted_ = false;
};

TEST(FaultInjection, FullDiskDuringPackIsAClearErrorAndLeavesNothingPartial) {
  if (!Env::Default()->FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  ScopedTmpfs disk(dir / "tmpfs", "5m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  const std::string cmd = testing::PackTool() + " idx --images " + kFashion +
                          "/train-images-idx3-ubyte.gz --labels " + kFashion +
                          "/train-labels-idx1-ubyte.gz --shard-size 3000000 " + dir / "tmpfs/out";
  auto r = RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("No space left on device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(dir / "tmpfs/out/.shard-"), std::string::npos)
      << "the error names the file: " << r.out;
  ExpectCleanFailure(dir / "tmpfs/out");
  // The disk given room, the same command succeeds.
  ASSERT_TRUE(disk.Resize("256m")) << std::strerror(errno);
  r = RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "tmpfs/out").exit_code, 0);
}

TEST(FaultInjection, ManifestWriteFailureLeavesNoDataset) {
  TempDir dir;
  ScopedTmpfs disk(dir / "tmpfs", "1m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  std::string img = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2};
  img += std::string(16, 'x');
  std::string lab = {0, 0, 8, 1, 0, 0, 0, 4, 0, 1, 0, 1};
  testing::WriteFile(dir / "i", img);
  testing::WriteFile(dir / "l", lab);
  auto pack = [&](const std::string& out) {
    return RunCommand(testing::PackTool() + " idx --images " + dir / "i" + " --labels " +
                      dir / "l" + " " + out);
  };
  ASSERT_EQ(pack(dir / "probe").exit_code, 0);
  // Room on the disk for the shard, none for the manifest.
  disk.FillLeaving(dir / "tmpfs/filler", *FileSize(dir / "probe/shard-00000.sks"));
  auto r = pack(dir / "tmpfs/out");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(dir / "tmpfs/out/manifest.json.tmp: write failed: No space left on device"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(Env::Default()->FileExists(dir / "tmpfs/out/manifest.json"));
  ExpectCleanFailure(dir / "tmpfs/out");
  // Room again: the rerun succeeds.
  ASSERT_TRUE(Env::Default()->RemoveFile(dir / "tmpfs/filler").ok());
  r = pack(dir / "tmpfs/out");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "tmpfs/out").exit_code, 0);
}

TEST(FaultInjection, InterruptedStagingResumesCopyingOnlyWhatIsMissing) {
  if (!Env::Default()->FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
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
  EXPECT_FALSE(Env::Default()->FileExists(dir / "local/manifest.json"))
      << "a half-staged dataset must not look complete";
  auto r = RunCommand(stage);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("already intact"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 0 already intact"), std::string::npos)
      << "the finished shards must be kept: " << r.out;
  EXPECT_EQ(RunCommand(testing::PackTool() + " verify " + dir / "local").exit_code, 0);
}

TEST(FaultInjection, StagingFailsClearlyWhenLocalSpaceIsShort) {
  if (!Env::Default()->FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  ScopedTmpfs disk(dir / "tmpfs", "2m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  ASSERT_EQ(RunCommand(testing::PackTool() + " idx --images " + kFashion +
                       "/train-images-idx3-ubyte.gz --labels " + kFashion +
                       "/train-labels-idx1-ubyte.gz " + dir / "shared")
                .exit_code,
            0);
  auto r = RunCommand("env SHARDKIT_PACK=" + testing::PackTool() + " " + kStage + " " +
                      dir / "shared" + " " + dir / "tmpfs/local");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("not enough space"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shardkit
