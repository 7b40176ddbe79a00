// A dataset prepared in parts (shardkit-pack ... --part I/N) and joined with
// shardkit-pack merge, as a user runs them: the merged dataset is the bytes of
// a one-process run, and parts that do not make one dataset are refused by
// name, with exit 2 and no manifest.json in OUT. The settings parts agree on
// (PackSettings), through the library, for the sources of both tools.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ingest/bigmnist_source.h"
#include "ingest/hdf5.h"
#include "ingest/idx_file.h"
#include "ingest/packer.h"
#include "ingest/tree_source.h"
#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::RunCommand;
using testing::TempDir;
using testing::WriteFile;

std::string Pack() { return testing::PackTool(); }

// n images of 16x16 (bytes that compress unevenly, so size-based shard
// boundaries would differ from count-based ones) and labels 0..4.
void WriteIdx(const TempDir& dir, uint32_t n) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  std::string img = std::string{0, 0, 8, 3} + be32(n) + be32(16) + be32(16);
  uint32_t x = 12345;
  for (uint32_t i = 0; i < n * 256; ++i) {
    x = x * 1103515245u + 12345u;
    img.push_back(static_cast<char>((i / 256) % 7 == 0 ? (x >> 16) : (i % 256) / 16));
  }
  std::string lab = std::string{0, 0, 8, 1} + be32(n);
  for (uint32_t i = 0; i < n; ++i) lab.push_back(static_cast<char>(i % 5));
  WriteFile(dir / "img.idx", img);
  WriteFile(dir / "lab.idx", lab);
}

// The idx pack command of `dir`'s files into `out`, with `extra` flags.
std::string IdxPack(const TempDir& dir, const std::string& out, const std::string& extra = "") {
  return Pack() + " idx --images " + dir / "img.idx" + " --labels " + dir / "lab.idx" +
         " --shard-size 8192 " + extra + " " + out;
}

// Packs parts 0..n-1 of `n` into dir/parts/p<i>; their directories.
std::vector<std::string> PackParts(const TempDir& dir, int n, const std::string& extra = "") {
  std::vector<std::string> parts;
  for (int i = 0; i < n; ++i) {
    parts.push_back(dir / ("parts/p" + std::to_string(i)));
    auto r = RunCommand(IdxPack(
        dir, parts.back(), "--part " + std::to_string(i) + "/" + std::to_string(n) + " " + extra));
    EXPECT_EQ(r.exit_code, 0) << r.out;
  }
  return parts;
}

std::string Merge(const std::string& out, const std::vector<std::string>& parts,
                  const std::string& extra = "") {
  std::string cmd = Pack() + " merge " + extra + " " + out;
  for (const auto& p : parts) cmd += " " + p;
  return cmd;
}

// A manifest without created_at and created_by: what a merge must reproduce.
nlohmann::json Fields(const std::string& path) {
  auto j = nlohmann::json::parse(testing::ReadFile(path));
  j.erase("created_at");
  j.erase("created_by");
  return j;
}

// Every shard of `a` byte-identical in `b`, and the manifests equal but for
// created_*.
void ExpectSameDataset(const std::string& a, const std::string& b) {
  EXPECT_EQ(Fields(a + "/manifest.json"), Fields(b + "/manifest.json"));
  auto m = ReadManifest(a);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (const auto& s : m->shards) {
    EXPECT_EQ(testing::ReadFile(a + "/" + s.file), testing::ReadFile(b + "/" + s.file)) << s.file;
  }
}

// A refused merge: exit 2, one line naming `name` and `why`, no manifest.json.
void ExpectRefused(const std::string& cmd, const std::string& out, const std::string& name,
                   const std::string& why) {
  auto r = RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("error: " + name), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
  EXPECT_FALSE(Env::Default()->FileExists(out + "/manifest.json")) << r.out;
}

TEST(PackParts, IdxPartsWriteTheOneProcessShardsAndMergeToItsBytes) {
  TempDir dir;
  WriteIdx(dir, 700);
  auto r = RunCommand(IdxPack(dir, dir / "whole"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto whole = ReadManifest(dir / "whole");
  ASSERT_TRUE(whole.ok());
  ASSERT_GE(whole->shards.size(), 4u);
  const auto parts = PackParts(dir, 3);
  // Each part holds exactly the whole's shards of its range, under their names.
  size_t shards = 0;
  for (const auto& p : parts) {
    auto m = ReadPartManifest(p);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->part.first_shard, shards);
    for (const auto& s : m->shards) {
      EXPECT_EQ(testing::ReadFile(p + "/" + s.file), testing::ReadFile(dir / "whole/" + s.file));
    }
    shards += m->shards.size();
    EXPECT_FALSE(Env::Default()->FileExists(p + "/manifest.json")) << "a part is not a dataset";
  }
  EXPECT_EQ(shards, whole->shards.size());
  // Merged in any order of arguments.
  r = RunCommand(Merge(dir / "merged", {parts[2], parts[0], parts[1]}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("merged 3 parts"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("700 records"), std::string::npos) << r.out;
  ExpectSameDataset(dir / "whole", dir / "merged");
  EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "merged").exit_code, 0);
  auto merged = nlohmann::json::parse(testing::ReadFile(dir / "merged/manifest.json"));
  EXPECT_EQ(merged["created_by"]["merged"]["parts"], 3);
  EXPECT_EQ(merged["created_by"]["tool"], "shardkit-pack idx");
}

TEST(PackParts, Hdf5PartsMergeToTheOneProcessBytes) {
  TempDir dir;
  const uint64_t n = 500;
  std::vector<uint8_t> images(n * 12 * 10);
  std::vector<int32_t> labels(n);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>(i * i % 251);
  for (uint64_t i = 0; i < n; ++i) labels[i] = static_cast<int32_t>(i % 3);
  {
    auto w = Hdf5ImageWriter::Create(dir / "d.h5", n, 12, 10);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Write(0, n, images.data(), labels.data()).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  const std::string cmd =
      Pack() + " hdf5 " + dir / "d.h5" + " --images /images --labels /labels --shard-size 8192 ";
  auto r = RunCommand(cmd + dir / "whole");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> parts;
  for (int i = 0; i < 4; ++i) {
    parts.push_back(dir / ("p" + std::to_string(i)));
    r = RunCommand(cmd + "--part " + std::to_string(i) + "/4 " + parts.back());
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  r = RunCommand(Merge(dir / "merged", parts));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ExpectSameDataset(dir / "whole", dir / "merged");
}

// shardkit-augment's parts (another tool writing part.json) merge the same way.
TEST(PackParts, AugmentPartsMergeToTheOneProcessBytes) {
  const std::string fashion = "/usr/share/datasets/fashion-mnist";
  if (!Env::Default()->FileExists(fashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  const std::string cmd = std::string(SHARDKIT_AUGMENT_TOOL) + " bigmnist --src " + fashion +
                          " --limit 500 --versions 2 --copies 6 --shard-size 100000 ";
  auto r = RunCommand(cmd + "--threads 1 " + dir / "whole");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> parts;
  for (int i = 0; i < 3; ++i) {
    parts.push_back(dir / ("p" + std::to_string(i)));
    // A part's bytes do not depend on its threads.
    const std::string threads = i == 1 ? "--threads 2 " : "--threads 1 ";
    r = RunCommand(cmd + threads + "--part " + std::to_string(i) + "/3 " + parts.back());
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  r = RunCommand(Merge(dir / "merged", {parts[1], parts[2], parts[0]}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ExpectSameDataset(dir / "whole", dir / "merged");
  EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "merged").exit_code, 0);
}

TEST(PackParts, MergeNeverChangesThePartsAndLinksWhereItCan) {
  TempDir dir;
  WriteIdx(dir, 400);
  const auto parts = PackParts(dir, 2);
  const std::string before = testing::ReadFile(parts[1] + "/part.json");
  auto r = RunCommand(Merge(dir / "merged", parts));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("hard-linked, 0 copied"), std::string::npos) << r.out;
  EXPECT_EQ(testing::ReadFile(parts[1] + "/part.json"), before);
  auto m = ReadPartManifest(parts[1]);
  ASSERT_TRUE(m.ok());
  for (const auto& s : m->shards) {
    EXPECT_EQ(*FileCrc32c(Env::Default(), parts[1] + "/" + s.file), s.crc32c) << s.file;
  }
  // Into a part itself: refused, the part untouched.
  ExpectRefused(Merge(parts[1], parts), parts[1], parts[1], "merge into another directory");
  ExpectRefused(Merge(parts[0] + "/merged", parts), parts[0] + "/merged", parts[0] + "/merged",
                "is inside the part " + parts[0]);
  EXPECT_FALSE(Env::Default()->FileExists(parts[0] + "/merged"));
  EXPECT_TRUE(ReadPartManifest(parts[1]).ok());
  EXPECT_EQ(RunCommand(Merge(dir / "again", parts)).exit_code, 0) << "the parts still merge";
  // Onto another filesystem (a tmpfs, where there is one): copied, same bytes.
  struct stat a, b;
  if (stat("/dev/shm", &b) == 0 && stat(dir.path().c_str(), &a) == 0 && a.st_dev != b.st_dev &&
      access("/dev/shm", W_OK) == 0) {
    const std::string shm = "/dev/shm/shardkit-merge-test-" + std::to_string(getpid());
    r = RunCommand(Merge(shm, parts));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("(0 hard-linked"), std::string::npos) << r.out;
    ExpectSameDataset(dir / "merged", shm);
    RunCommand("rm -rf " + shm);
  }
}

TEST(PackParts, MergeRefusesOverlappingParts) {
  TempDir dir;
  WriteIdx(dir, 700);
  auto parts = PackParts(dir, 3);
  // The same part twice.
  ExpectRefused(Merge(dir / "out", {parts[0], parts[1], parts[1], parts[2]}), dir / "out", parts[1],
                "part 1 of 3, and so is " + parts[1] + " (the parts overlap)");
  // Part 2 claiming records part 1 holds.
  auto j = nlohmann::json::parse(testing::ReadFile(parts[2] + "/part.json"));
  j["part"]["first_record"] = j["part"]["first_record"].get<uint64_t>() - 1;
  WriteFile(parts[2] + "/part.json", j.dump(1));
  ExpectRefused(Merge(dir / "out", parts), dir / "out", parts[2], "(the parts overlap)");
  // Parts of another split.
  testing::MakeDirs(dir / "two");
  ASSERT_EQ(RunCommand(IdxPack(dir, dir / "two/p1", "--part 1/2")).exit_code, 0);
  ExpectRefused(Merge(dir / "out", {parts[0], dir / "two/p1"}), dir / "out", dir / "two/p1",
                "is part 1 of 2, but " + parts[0] + " is part 0 of 3");
  EXPECT_FALSE(Env::Default()->FileExists(dir / "out"))
      << "a merge that fails removes the OUT it made";
}

TEST(PackParts, MergeRefusesMissingPartsNamingThem) {
  TempDir dir;
  WriteIdx(dir, 700);
  auto parts = PackParts(dir, 5);
  ExpectRefused(Merge(dir / "out", {parts[0], parts[2], parts[4]}), dir / "out", "missing",
                "missing parts 1, 3 of 5");
  ExpectRefused(Merge(dir / "out", {parts[1], parts[2], parts[3], parts[4]}), dir / "out",
                "missing", "missing part 0 of 5");
}

TEST(PackParts, MergeRefusesDamagedPartsNamingTheShard) {
  TempDir dir;
  WriteIdx(dir, 700);
  auto parts = PackParts(dir, 3);
  auto m = ReadPartManifest(parts[1]);
  ASSERT_TRUE(m.ok());
  const std::string shard = parts[1] + "/" + m->shards.back().file;
  const std::string good = testing::ReadFile(shard);
  // A flipped byte (the size is right: only the CRC tells).
  std::string bad = good;
  bad[bad.size() / 2] ^= 1;
  WriteFile(shard, bad);
  ExpectRefused(Merge(dir / "out", parts), dir / "out", shard, "the part is damaged");
  // A shard cut short.
  WriteFile(shard, good.substr(0, good.size() - 10));
  ExpectRefused(Merge(dir / "out", parts), dir / "out", shard, "bytes, part.json says");
  // A shard gone.
  ASSERT_TRUE(Env::Default()->RemoveFile(shard).ok());
  ExpectRefused(Merge(dir / "out", parts), dir / "out", shard, "missing");
  WriteFile(shard, good);
  // part.json gone: not a part (or not finished).
  ASSERT_TRUE(Env::Default()->RemoveFile(parts[2] + "/part.json").ok());
  ExpectRefused(Merge(dir / "out", parts), dir / "out", parts[2], "no part.json");
  EXPECT_FALSE(Env::Default()->FileExists(dir / "out"));
}

TEST(PackParts, MergeRefusesPartsMadeWithOtherSettingsNamingWhatDiffers) {
  TempDir dir;
  WriteIdx(dir, 700);
  auto parts = PackParts(dir, 3);
  const std::string other = dir / "other/p2";
  ASSERT_EQ(RunCommand(IdxPack(dir, other, "--part 2/3 --class-names a,b,c,d,e")).exit_code, 0);
  ExpectRefused(Merge(dir / "out", {parts[0], parts[1], other}), dir / "out", other,
                "made with other settings than " + parts[0] + " (class_names");
  ASSERT_EQ(RunCommand(Pack() + " idx --images " + dir / "img.idx" + " --labels " +
                       dir / "lab.idx" + " --shard-size 9000 --part 2/3 --force " + other)
                .exit_code,
            0);
  ExpectRefused(Merge(dir / "out", {parts[0], parts[1], other}), dir / "out", other,
                "shard_size: 9000 here, 8192 in " + parts[0]);
}

// A part's settings name its inputs by content: the same bytes at another
// path merge, other bytes at the same path do not.
TEST(PackParts, PartsAgreeOnTheirInputsByContentNotByPath) {
  TempDir dir;
  WriteIdx(dir, 700);
  auto parts = PackParts(dir, 3);
  ASSERT_EQ(RunCommand(IdxPack(dir, dir / "whole")).exit_code, 0);
  TempDir copy;
  WriteFile(copy / "img.idx", testing::ReadFile(dir / "img.idx"));
  WriteFile(copy / "lab.idx", testing::ReadFile(dir / "lab.idx"));
  const std::string elsewhere = dir / "elsewhere/p2";
  ASSERT_EQ(RunCommand(IdxPack(copy, elsewhere, "--part 2/3")).exit_code, 0);
  auto r = RunCommand(Merge(dir / "merged", {parts[0], parts[1], elsewhere}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ExpectSameDataset(dir / "whole", dir / "merged");
  // One pixel of the last image changed in place: part 2 is another dataset's.
  std::string img = testing::ReadFile(copy / "img.idx");
  img.back() ^= 0x01;
  WriteFile(copy / "img.idx", img);
  ASSERT_EQ(RunCommand(IdxPack(copy, elsewhere, "--part 2/3 --force")).exit_code, 0);
  ExpectRefused(Merge(dir / "out", {parts[0], parts[1], elsewhere}), dir / "out", elsewhere,
                "made with other settings than " + parts[0]);
}

// A part's shard that is a symbolic link (parts gathered from elsewhere) is
// merged as the file it names, not as a link that may dangle in OUT.
TEST(PackParts, MergeFollowsASymlinkedShardToItsFile) {
  TempDir dir;
  WriteIdx(dir, 700);
  auto parts = PackParts(dir, 2);
  ASSERT_EQ(RunCommand(IdxPack(dir, dir / "whole")).exit_code, 0);
  auto m = ReadManifest(dir / "whole");
  ASSERT_TRUE(m.ok());
  const std::string shard = parts[1] + "/" + m->shards.back().file;
  testing::MakeDirs(dir / "kept");
  ASSERT_EQ(::rename(shard.c_str(), (dir / "kept/s.sks").c_str()), 0);
  ASSERT_EQ(::symlink("../../kept/s.sks", shard.c_str()), 0);
  auto r = RunCommand(Merge(dir / "merged", parts));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  struct stat st;
  ASSERT_EQ(::lstat((dir / "merged/" + m->shards.back().file).c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  ExpectSameDataset(dir / "whole", dir / "merged");
  EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "merged").exit_code, 0);
}

TEST(PackParts, MergeIntoAnExistingDatasetNeedsForceAndKeepsItIfRefused) {
  TempDir dir;
  WriteIdx(dir, 400);
  auto parts = PackParts(dir, 2);
  ASSERT_EQ(RunCommand(Merge(dir / "out", parts)).exit_code, 0);
  const std::string manifest = testing::ReadFile(dir / "out/manifest.json");
  auto r = RunCommand(Merge(dir / "out", parts));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("already holds a dataset"), std::string::npos) << r.out;
  // A damaged part under --force: the old dataset stays whole. (The damaged
  // shard is a new file: the old dataset shares the part's, hard-linked.)
  auto m = ReadPartManifest(parts[0]);
  ASSERT_TRUE(m.ok());
  const std::string shard = parts[0] + "/" + m->shards[0].file;
  std::string good = testing::ReadFile(shard), bad = good;
  bad[100] ^= 1;
  WriteFile(shard + ".new", bad);
  ASSERT_TRUE(Env::Default()->RenameFile(shard + ".new", shard).ok());
  r = RunCommand(Merge(dir / "out", parts, "--force"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(testing::ReadFile(dir / "out/manifest.json"), manifest);
  EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "out").exit_code, 0);
  WriteFile(shard, good);
  EXPECT_EQ(RunCommand(Merge(dir / "out", parts, "--force")).exit_code, 0);
}

TEST(PackParts, PartIsRefusedWhereItCannotBeExact) {
  TempDir dir;
  WriteIdx(dir, 700);
  for (const char* c : {"tree/a", "tree/b"}) {
    testing::MakeDirs(dir / c);
    WriteFile(dir / c + "/1.jpg",
              testing::MakeJpeg(testing::SyntheticImage(16, 16, 3, 1), testing::JpegFlavor::kRgb));
  }
  struct Case {
    std::string args, expect;
  } cases[] = {
      // Images: which are kept and their stored sizes are known only once decoded.
      {"imagenet " + dir / "tree" + " " + dir / "o --part 0/2", "cannot be split into exact parts"},
      {"idx --images " + dir / "img.idx" + " --labels " + dir / "lab.idx" + " --part 3/3 " +
           dir / "o",
       "'3/3': part 3 does not exist"},
      {"idx --images " + dir / "img.idx" + " --labels " + dir / "lab.idx" + " --part x " +
           dir / "o",
       "'x' is not I/N"},
      // More parts than shards: some part would be empty.
      {"idx --images " + dir / "img.idx" + " --labels " + dir / "lab.idx" + " --part 2/3 " +
           dir / "o",
       "use at most 1 part(s)"},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(Pack() + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_FALSE(Env::Default()->FileExists(dir / "o")) << c.args;
  }
}

TEST(PackParts, APartIsNotReplacedWithoutForce) {
  TempDir dir;
  WriteIdx(dir, 400);
  const std::string cmd = IdxPack(dir, dir / "p0", "--part 0/2");
  ASSERT_EQ(RunCommand(cmd).exit_code, 0);
  auto r = RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("already holds a part of a dataset"), std::string::npos) << r.out;
  EXPECT_EQ(RunCommand(cmd + " --force").exit_code, 0);
}

// --- Settings, through the library: what parts must agree on and a killed
// pack is resumed by, one function (PackSettings) for every source of both
// tools.

// shardkit-pack idx's source of dir's files.
Result<std::string> IdxSettings(const std::string& dir) {
  SK_ASSIGN_OR_RETURN(auto source, OpenIdx(dir + "/img.idx", dir + "/lab.idx", {}));
  return PackSettings(*source, PackOptions());
}

// shardkit-augment bigmnist's source of dir's files.
Result<std::string> BigMnistSettings(const std::string& dir) {
  SK_ASSIGN_OR_RETURN(IdxDataset ds, ReadIdxDataset(dir + "/img.idx", dir + "/lab.idx"));
  Plan plan;
  plan.n = ds.count();
  plan.h = ds.height;
  plan.w = ds.width;
  plan.versions = 2;
  plan.copies = 3;
  BigMnistSource source(dir, std::move(ds), plan, 1);
  return PackSettings(source, PackOptions());
}

TEST(PackSettings, BothToolsSourcesTellTheirInputsApartByContentNotByPath) {
  TempDir a, b;
  WriteIdx(a, 60);
  WriteIdx(b, 60);  // the same bytes at another path
  using Settings = Result<std::string> (*)(const std::string&);
  for (Settings settings : {&IdxSettings, &BigMnistSettings}) {
    auto x = settings(a.path()), y = settings(b.path());
    ASSERT_TRUE(x.ok() && y.ok()) << x.status().ToString() << " " << y.status().ToString();
    EXPECT_EQ(*x, *y);
    EXPECT_NE(*x, "{}");
  }
  EXPECT_NE(*IdxSettings(a.path()), *BigMnistSettings(a.path())) << "two readings of one file";
  // One pixel of the last image changed in place: the same size, other bytes.
  std::string img = testing::ReadFile(b / "img.idx");
  img.back() ^= 0x01;
  WriteFile(b / "img.idx", img);
  for (Settings settings : {&IdxSettings, &BigMnistSettings}) {
    auto x = settings(a.path()), y = settings(b.path());
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_NE(*x, *y);
  }
}

// A file read only in ranges (HDF5) is named by its size and modification
// time: a copy that keeps them agrees, a copy that does not (cp) differs.
TEST(PackSettings, Hdf5FileIsNamedBySizeAndModificationTime) {
  TempDir dir;
  std::vector<uint8_t> images(20 * 4 * 4, 7);
  std::vector<int32_t> labels(20, 1);
  {
    auto w = Hdf5ImageWriter::Create(dir / "d.h5", 20, 4, 4);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Write(0, 20, images.data(), labels.data()).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  testing::MakeDirs(dir / "copy");
  WriteFile(dir / "copy/d.h5", testing::ReadFile(dir / "d.h5"));
  auto set_mtime = [](const std::string& path, time_t sec) {
    const struct timespec times[2] = {{sec, 0}, {sec, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  };
  auto settings = [](const std::string& file) -> Result<std::string> {
    Hdf5Options o;
    o.file = file;
    SK_ASSIGN_OR_RETURN(auto source, OpenHdf5(o));
    return PackSettings(*source, PackOptions());
  };
  set_mtime(dir / "d.h5", 1600000000);
  set_mtime(dir / "copy/d.h5", 1600000001);
  auto x = settings(dir / "d.h5"), y = settings(dir / "copy/d.h5");
  ASSERT_TRUE(x.ok() && y.ok()) << x.status().ToString() << " " << y.status().ToString();
  EXPECT_NE(*x, *y);
  set_mtime(dir / "copy/d.h5", 1600000000);  // as cp -p or rsync -t copy it
  EXPECT_EQ(*x, *settings(dir / "copy/d.h5"));
}

// A source that names nothing of itself.
class UnnamedSource : public SampleSource {
 public:
  std::string name() const override { return "unnamed"; }
  RecordSpec spec() const override { return RecordSpec(); }
  Result<Listing> Scan(SampleSink*) override { return Listing(); }
};

// The source's settings with the options that decide the bytes: the shard
// size, and for images the re-encoding and the seeded order; never the part
// (the parts of one dataset agree) or the threads.
TEST(PackSettings, AddTheOptionsThatDecideTheBytesAndNotThePart) {
  TempDir dir;
  WriteIdx(dir, 60);
  testing::MakeDirs(dir / "tree/a");
  auto idx = OpenIdx(dir / "img.idx", dir / "lab.idx", {});
  auto named = OpenIdx(dir / "img.idx", dir / "lab.idx", {"a", "b", "c", "d", "e"});
  TreeOptions t;
  t.src = dir / "tree";
  auto tree = OpenTree(t);
  ASSERT_TRUE(idx.ok() && named.ok() && tree.ok());
  for (const SampleSource* source : {idx->get(), tree->get()}) {
    PackOptions base;
    const std::string s = *PackSettings(*source, base);
    PackOptions o = base;
    o.part_index = 1;
    o.part_count = 3;
    o.threads = 7;
    EXPECT_EQ(*PackSettings(*source, o), s) << source->name();
    o = base;
    o.shard_size = 1 << 20;
    EXPECT_NE(*PackSettings(*source, o), s) << source->name();
    // The seed orders images; IDX records keep their file's order.
    o = base;
    o.seed = 5;
    EXPECT_EQ(*PackSettings(*source, o) != s, source == tree->get()) << source->name();
    o = base;
    o.quality = 75;
    EXPECT_EQ(*PackSettings(*source, o) != s, source == tree->get()) << source->name();
  }
  EXPECT_NE(*PackSettings(**named, PackOptions()), *PackSettings(**idx, PackOptions()));
  // Nothing to name: never resumed, whatever the options.
  PackOptions o;
  o.shard_size = 4096;
  EXPECT_EQ(*PackSettings(UnnamedSource(), o), "{}");
}

}  // namespace
}  // namespace shardkit
