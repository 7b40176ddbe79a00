// shardkit-pack as a user runs it: exit codes and the messages they see.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::RunCommand;
using testing::TempDir;
using testing::WriteFile;

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::string Pack() { return testing::PackTool(); }

// A small IDX pair: n images of 6x5 and labels 0..2.
void WriteTinyIdx(const TempDir& dir, int n) {
  std::string img = {0, 0, 8, 3, 0, 0, 0, static_cast<char>(n), 0, 0, 0, 6, 0, 0, 0, 5};
  for (int i = 0; i < n * 30; ++i) img.push_back(static_cast<char>(i * 7));
  std::string lab = {0, 0, 8, 1, 0, 0, 0, static_cast<char>(n)};
  for (int i = 0; i < n; ++i) lab.push_back(static_cast<char>(i % 3));
  WriteFile(dir / "img.idx", img);
  WriteFile(dir / "lab.idx", lab);
}

// WriteTinyIdx's files packed into dir/ds.
void PackTinyIdx(const TempDir& dir, int n) {
  WriteTinyIdx(dir, n);
  auto r = RunCommand(Pack() + " idx --images " + dir / "img.idx" + " --labels " + dir / "lab.idx" +
                      " " + dir / "ds");
  ASSERT_EQ(r.exit_code, 0) << r.out;
}

TEST(PackCli, IdxPackVerifyInspectExtract) {
  TempDir dir;
  WriteTinyIdx(dir, 50);
  auto r = RunCommand(Pack() + " idx --images " + dir / "img.idx" + " --labels " + dir / "lab.idx" +
                      " " + dir / "ds");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("packed 50 of 50 records (6x5x1, 3 classes)"), std::string::npos) << r.out;
  r = RunCommand(Pack() + " verify " + dir / "ds");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("OK"), std::string::npos);
  r = RunCommand(Pack() + " inspect --json " + dir / "ds" + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["records"], 50);
  EXPECT_EQ(j["classes"], 3);
  EXPECT_EQ(j["shards"], 1);
  EXPECT_EQ(j["class_histogram"]["0"], 17);
  r = RunCommand(Pack() + " extract " + dir / "ds" + " 7 " + dir / "rec7");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::string rec = testing::ReadFile(dir / "rec7");
  ASSERT_EQ(rec.size(), 30u);
  EXPECT_EQ(static_cast<uint8_t>(rec[0]), static_cast<uint8_t>(7 * 30 * 7));
}

TEST(PackCli, RepackingRequiresForce) {
  TempDir dir;
  WriteTinyIdx(dir, 10);
  const std::string cmd = Pack() + " idx --images " + dir / "img.idx" + " --labels " +
                          dir / "lab.idx" + " " + dir / "ds";
  ASSERT_EQ(RunCommand(cmd).exit_code, 0);
  auto r = RunCommand(cmd);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("already holds a dataset"), std::string::npos) << r.out;
  EXPECT_EQ(RunCommand(cmd + " --force").exit_code, 0);
}

TEST(PackCli, VerifyExitsOneAndNamesEachCorruption) {
  TempDir dir;
  WriteTinyIdx(dir, 50);
  ASSERT_EQ(RunCommand(Pack() + " idx --images " + dir / "img.idx" + " --labels " +
                       dir / "lab.idx" + " " + dir / "ds")
                .exit_code,
            0);
  std::string shard = dir / "ds/shard-00000.sks";
  std::string b = testing::ReadFile(shard);
  b[40] ^= 1;
  WriteFile(shard, b);
  auto r = RunCommand(Pack() + " verify " + dir / "ds");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("shard-00000.sks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos) << r.out;
}

TEST(PackCli, ClearErrorsForBadInput) {
  TempDir dir;
  WriteFile(dir / "junk", "hello world, not idx");
  struct Case {
    std::string args, expect;
    int code;
  } cases[] = {
      {"idx --images " + dir / "missing" + " --labels " + dir / "junk" + " " + dir / "o",
       "missing: no such file", 2},
      {"idx --images " + dir / "junk" + " --labels " + dir / "junk" + " " + dir / "o",
       "bad IDX magic", 2},
      {"verify " + dir.path(), "no manifest.json", 2},
      {"inspect " + dir / "nope", "nope: no such file or directory", 2},
      {"imagenet " + dir / "nope" + " " + dir / "o", "nope: No such file or directory", 2},
      {"hdf5 " + dir / "junk" + " " + dir / "o --images /x --labels /y", "not an HDF5 file", 2},
      {"svhn " + dir / "junk" + " " + dir / "o", "junk: not a MATLAB file", 2},
      {"frobnicate", "frobnicate", 2},
      {"inspect " + dir.path() + " --jsn", "--jsn (see shardkit-pack inspect --help)", 2},
      {"get " + dir / "junk" + " " + dir / "o --manifest ''", "--manifest: an empty path", 2},
      {"get " + dir / "junk" + " " + dir / "o --manifest " + dir.path(), "is a directory", 2},
  };
  for (const auto& c : cases) {
    auto r = RunCommand(Pack() + " " + c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
  }
}

// A MATLAB level 5 element: type, byte count, data padded to 8 bytes.
std::string MatElement(uint32_t type, const std::string& data) {
  const uint32_t n = static_cast<uint32_t>(data.size());
  std::string e(reinterpret_cast<const char*>(&type), 4);
  e.append(reinterpret_cast<const char*>(&n), 4);
  e += data;
  e.resize((e.size() + 7) / 8 * 8, '\0');
  return e;
}

// An uncompressed numeric array (miMATRIX): flags with its class, dims, name, data.
std::string MatArray(const std::string& name, char mx_class, const std::vector<int32_t>& dims,
                     uint32_t data_type, const std::string& data) {
  std::string flags(8, '\0');
  flags[0] = mx_class;
  std::string d;
  for (int32_t x : dims) d.append(reinterpret_cast<const char*>(&x), 4);
  return MatElement(14, MatElement(6, flags) + MatElement(5, d) + MatElement(1, name) +
                            MatElement(data_type, data));
}

// An SVHN file as scipy.io.savemat writes one (level 5, not compressed): X
// 2 x 2 x 3 x N uint8 and y N x 1 double holding `labels`.
std::string SvhnMat(const std::vector<double>& labels) {
  std::string header = "MATLAB 5.0 MAT-file, written by pack_cli_test";
  header.resize(116, ' ');
  header += std::string(8, '\0') + std::string("\x00\x01IM", 4);
  const int32_t n = static_cast<int32_t>(labels.size());
  std::string x(12 * labels.size(), '\0');
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<char>(i * 37);
  const std::string y(reinterpret_cast<const char*>(labels.data()), 8 * labels.size());
  return header + MatArray("X", 9, {2, 2, 3, n}, 2, x) + MatArray("y", 6, {n, 1}, 9, y);
}

// Issue 62: SVHN's labels are 1..10, 10 the digit 0. A 0 was packed as the
// digit 0 while 11 and 255 were refused; every value outside 1..10 is now
// refused alike (exit 2, nothing in OUT), naming the value and its index
// (record i is the file's item i).
TEST(PackCli, SvhnRefusesEveryLabelOutsideOneToTenNamingItsIndex) {
  TempDir dir;
  WriteFile(dir / "good.mat", SvhnMat({1, 10, 5, 9}));
  auto r = RunCommand(Pack() + " svhn " + dir / "good.mat " + dir / "good");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto ds = Dataset::Open(dir / "good");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const ShardReader& shard = (*ds)->shard(0);
  ASSERT_EQ(shard.num_records(), 4u);
  EXPECT_EQ(shard.label(0), 1);
  EXPECT_EQ(shard.label(1), 0);  // 10 is the digit 0
  EXPECT_EQ(shard.label(3), 9);
  for (double bad : {0.0, 11.0, 255.0, -1.0, 100.0}) {
    const std::string label = std::to_string(static_cast<int>(bad));
    WriteFile(dir / "bad.mat", SvhnMat({1, 10, 5, bad, 2}));
    r = RunCommand(Pack() + " svhn " + dir / "bad.mat " + dir / "bad");
    EXPECT_EQ(r.exit_code, 2) << label << "\n" << r.out;
    EXPECT_NE(r.out.find("bad.mat:y: label " + label +
                         " at index 3 (MATLAB's y(4)) is outside SVHN's labels 1..10"),
              std::string::npos)
        << r.out;
    struct stat st;
    EXPECT_NE(::stat((dir / "bad").c_str(), &st), 0) << label;  // nothing in OUT
  }
  // `pack mat` keeps its own classes: a file labelled 0..9 packs as it says.
  WriteFile(dir / "zero.mat", SvhnMat({0, 9, 3}));
  r = RunCommand(Pack() + " mat " + dir / "zero.mat " + dir / "zero" +
                 " --images X --labels y --layout HWCN --class-names 0,1,2,3,4,5,6,7,8,9");
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST(PackCli, ExtractOutOfRange) {
  TempDir dir;
  PackTinyIdx(dir, 5);
  auto r = RunCommand(Pack() + " extract " + dir / "ds" + " 5 " + dir / "x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("record 5 out of range"), std::string::npos) << r.out;
}

// An output file is written through a link (the link stays) and through a
// device or FIFO in place; a directory, a missing directory, a FIFO nobody
// reads and a path inside the dataset read are refused before anything is
// written, and the dataset still verifies.
TEST(PackCli, ExtractOutputPaths) {
  TempDir dir;
  PackTinyIdx(dir, 5);
  const std::string extract = Pack() + " extract " + dir / "ds" + " 2 ";
  ASSERT_EQ(::symlink("target.bin", (dir / "link").c_str()), 0);
  auto r = RunCommand(extract + dir / "link");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(testing::ReadFile(dir / "target.bin").size(), 30u) << "the link's file is written";
  struct stat st;
  ASSERT_EQ(::lstat((dir / "link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link stays a link";
  r = RunCommand(extract + "/dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null must stay a device";
  if (Env::Default()->FileExists("/dev/full")) {
    r = RunCommand(extract + "/dev/full");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("/dev/full: cannot write"), std::string::npos) << r.out;
    ASSERT_EQ(::stat("/dev/full", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/full must stay a device";
  }
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  r = RunCommand(extract + dir / "fifo");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("a FIFO that nothing reads"), std::string::npos) << r.out;
  Env::Default()->CreateDirs(dir / "sub").IgnoreError();
  const struct {
    std::string out, expect;
  } refused[] = {
      {dir / "sub", "sub: is a directory"},
      {dir / "none/x", "its directory " + dir / "none" + " does not exist"},
      {dir / "ds/manifest.json", "manifest.json: is inside " + dir / "ds"},
      {dir / "ds/../ds/shard-00000.sks", "is inside " + dir / "ds"},
  };
  for (const auto& c : refused) {
    r = RunCommand(extract + c.out);
    EXPECT_EQ(r.exit_code, 2) << c.out << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.out << "\n" << r.out;
  }
  // Descriptors by number are written to, never reopened or replaced: a
  // closed stdout is refused (a shard would take its number), a stdout
  // appending to a log appends.
  r = RunCommand("(" + extract + "/dev/stdout 2>&1 >&-)");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("descriptor 1 was not open"), std::string::npos) << r.out;
  testing::WriteFile(dir / "log", "kept\n");
  r = RunCommand("(" + extract + "/dev/stdout >> " + dir / "log)");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(testing::ReadFile(dir / "log").size(), 5u + 30u);
  r = RunCommand("(" + extract + "- 2>&1 >&-)");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("standard output was closed"), std::string::npos) << r.out;
  if (Env::Default()->FileExists("/dev/full")) {
    r = RunCommand("(" + extract + "- > /dev/full)");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("standard output: write error"), std::string::npos) << r.out;
  }
  // A stale FILE.tmp that links into the dataset is removed, not written through.
  ASSERT_EQ(::symlink((dir / "ds/shard-00000.sks").c_str(), (dir / "x.bin.tmp").c_str()), 0);
  r = RunCommand(extract + dir / "x.bin");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = RunCommand(extract + "''");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("an empty output path"), std::string::npos) << r.out;
  // get: never onto what it copies, never onto a device it might remove.
  r = RunCommand(Pack() + " get " + dir / "ds/shard-00000.sks " + dir / "ds/shard-00000.sks");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("is the same file as"), std::string::npos) << r.out;
  ASSERT_EQ(RunCommand("cp -r " + dir / "ds " + dir / "other").exit_code, 0);
  r = RunCommand(Pack() + " get " + dir / "ds/shard-00000.sks " + dir / "other/shard-00000.sks");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("inside dataset"), std::string::npos) << r.out;
  r = RunCommand(Pack() + " get " + dir / "ds/shard-00000.sks " + dir / "copy.sks");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(testing::ReadFile(dir / "copy.sks"), testing::ReadFile(dir / "ds/shard-00000.sks"));
  EXPECT_FALSE(Env::Default()->FileExists(dir / "copy.sks.tmp"));
  r = RunCommand(Pack() + " get " + dir / "ds/shard-00000.sks /dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null must stay a device";
  // The dataset's shard by another name (a hard link) is still the dataset.
  ASSERT_EQ(::link((dir / "ds/shard-00000.sks").c_str(), (dir / "hard").c_str()), 0);
  r = RunCommand(extract + dir / "hard");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("is the same file as " + dir / "ds/shard-00000.sks"), std::string::npos)
      << r.out;
  auto names = Env::Default()->ListDir(dir / "sub");
  ASSERT_TRUE(names.ok());
  EXPECT_TRUE(names->empty());
  EXPECT_FALSE(Env::Default()->FileExists(dir / "sub.tmp"));
  EXPECT_EQ(RunCommand(Pack() + " verify " + dir / "ds").exit_code, 0);
}

TEST(PackCli, FashionMnistPacksAndVerifies) {
  if (!Env::Default()->FileExists(kFashion + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  TempDir dir;
  auto r =
      RunCommand(Pack() + " idx --images " + kFashion + "/train-images-idx3-ubyte.gz --labels " +
                 kFashion + "/train-labels-idx1-ubyte.gz " + dir / "fm");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = RunCommand(Pack() + " verify " + dir / "fm");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = RunCommand(Pack() + " inspect --json " + dir / "fm" + " 2>/dev/null");
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["records"], 60000);
  EXPECT_EQ(j["classes"], 10);
}

}  // namespace
}  // namespace shardkit
