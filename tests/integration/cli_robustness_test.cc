// Every tool's command line against missing, malformed, out-of-range and
// hostile values: each must exit 2 (0 for --help) with one short error line,
// never a crash, an uncaught exception, a library backtrace or a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <sstream>

#include "shard/shard.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::RunCommand;
using testing::TempDir;
using testing::WriteFile;

const std::string kPack = SHARDKIT_PACK_TOOL;
const std::string kBench = SHARDKIT_BENCH_TOOL;
const std::string kReport = SHARDKIT_REPORT_TOOL;
const std::string kAugment = SHARDKIT_AUGMENT_TOOL;
#ifdef SHARDKIT_TRAIN_TOOL
const std::string kTrain = SHARDKIT_TRAIN_TOOL;
#endif

struct Case {
  std::string tool, args;
  int code;
  std::string expect;  // a substring of the output ("" to check only the shape)
};

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Runs each case under a 60 s watchdog and checks the contract.
void Check(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tool + " " + c.args);
    auto r = RunCommand("timeout -s KILL 60 " + c.tool + " " + c.args + " </dev/null");
    EXPECT_NE(r.exit_code, 137) << "hung (killed after 60 s)";
    EXPECT_EQ(r.exit_code, c.code) << r.out;
    if (!c.expect.empty()) {
      EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
    }
    for (const char* bad : {"terminate called", "what():", "Exception raised from", "Aborted",
                            "Segmentation", "std::invalid_argument", "type_error", "frame #"}) {
      EXPECT_EQ(r.out.find(bad), std::string::npos) << "crash or backtrace: " << r.out;
    }
    if (c.code == 2) {
      const auto lines = Lines(r.out);
      ASSERT_FALSE(lines.empty()) << "an error must say something";
      EXPECT_LE(lines.size(), 2u) << "one error line (and at most a hint): " << r.out;
      EXPECT_NE(lines[0].find("error"), std::string::npos) << r.out;
    }
  }
}

class CliRobustness : public ::testing::Test {
 protected:
  void SetUp() override {
    // A tiny raw dataset (6x5x1, 3 classes) and an IDX pair to point tools at.
    std::string img = {0, 0, 8, 3, 0, 0, 0, 40, 0, 0, 0, 6, 0, 0, 0, 5};
    for (int i = 0; i < 40 * 30; ++i) img.push_back(static_cast<char>(i * 7));
    std::string lab = {0, 0, 8, 1, 0, 0, 0, 40};
    for (int i = 0; i < 40; ++i) lab.push_back(static_cast<char>(i % 3));
    testing::MakeDirs(dir_ / "idx");
    WriteFile(dir_ / "idx/train-images-idx3-ubyte", img);
    WriteFile(dir_ / "idx/train-labels-idx1-ubyte", lab);
    auto r = RunCommand(kPack + " idx --images " + dir_ / "idx/train-images-idx3-ubyte" +
                        " --labels " + dir_ / "idx/train-labels-idx1-ubyte " + ds_);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    testing::MakeDirs(dir_ / "fifo-ds");
    ASSERT_EQ(mkfifo((dir_ / "fifo-ds/manifest.json").c_str(), 0644), 0);
    ASSERT_EQ(mkfifo((dir_ / "pipe").c_str(), 0644), 0);
  }
  TempDir dir_;
  const std::string ds_ = dir_ / "ds";
};

TEST_F(CliRobustness, PackRefusesEveryBadValueWithOneLine) {
  const std::string idx = " --images " + dir_ / "idx/train-images-idx3-ubyte" + " --labels " +
                          dir_ / "idx/train-labels-idx1-ubyte " + dir_ / "out";
  const std::string in = " imagenet " + dir_.path() + " " + dir_ / "out";
  Check({
      {kPack, "", 2, "subcommand"},
      {kPack, "--help", 0, "verify"},
      {kPack, "frobnicate", 2, "unknown command"},
      {kPack, "imagenet", 2, "required"},
      {kPack, in + " --threads abc", 2, "--threads"},
      {kPack, in + " --threads 99999999999", 2, "--threads"},
      {kPack, in + " --threads 100000", 2, "0..256"},
      {kPack, in + " --threads -1", 2, "--threads"},
      {kPack, in + " --shard-size 0", 2, "--shard-size"},
      {kPack, in + " --shard-size -5", 2, "--shard-size"},
      {kPack, in + " --quality 101", 2, "--quality"},
      {kPack, in + " --quality nan", 2, "--quality"},
      {kPack, in + " --resize-short -5", 2, "--resize-short"},
      {kPack, in + " --seed -1", 2, "--seed"},
      {kPack, in + " --seed 1e400", 2, "--seed"},
      {kPack, "idx" + idx + " --shard-size 1e99", 2, "--shard-size"},
      {kPack, "idx --images " + dir_ / "pipe" + " --labels " + dir_ / "pipe " + dir_ / "o", 2,
       "named pipe"},
      {kPack, "hdf5 " + dir_ / "pipe " + dir_ / "o --images /x --labels /y", 2, "named pipe"},
      {kPack, "mat " + dir_ / "pipe " + dir_ / "o --images X --labels y", 2, "named pipe"},
      {kPack, "svhn " + dir_ / "pipe " + dir_ / "o", 2, "named pipe"},
      {kPack, "mat " + dir_ / "pipe " + dir_ / "o --images X --labels y --layout xy", 2,
       "--layout"},
      {kPack, "mat " + dir_ / "pipe " + dir_ / "o --images X --labels y --label-map 1-2", 2,
       "--label-map"},
      {kPack, "svhn " + dir_ / "pipe", 2, "required"},
      {kPack, "imagenet " + dir_ / "idx " + dir_ / "o --val-labels " + dir_ / "pipe", 2,
       "named pipe"},
      {kPack, "imagenet " + dir_.path() + " " + dir_ / "o", 2, "OUT is inside SRC"},
      {kPack, "verify " + ds_ + " --threads 1e9", 2, "--threads"},
      {kPack, "verify " + dir_ / "fifo-ds", 2, "named pipe"},
      {kPack, "inspect " + dir_ / "fifo-ds", 2, "named pipe"},
      {kPack, "inspect --json " + dir_ / "fifo-ds", 2, "named pipe"},
      {kPack, "checksum " + dir_ / "pipe", 2, "named pipe"},
      {kPack, "checksum /dev/zero", 2, "character device"},
      {kPack, "extract " + ds_ + " -1 " + dir_ / "x", 2, "INDEX"},
      {kPack, "extract " + ds_ + " abc " + dir_ / "x", 2, "INDEX"},
      {kPack, "extract " + ds_ + " 99999999999999999999999 " + dir_ / "x", 2, "INDEX"},
      {kPack, "extract " + ds_ + " 40 " + dir_ / "x", 2, "out of range"},
      {kPack, "inspect $'" + dir_.path() + "/\\xff\\xfe'", 2, "no such file or directory"},
      {kPack, "verify " + dir_.path() + "/idx/train-images-idx3-ubyte", 2, ""},
  });
}

TEST_F(CliRobustness, BenchRefusesEveryBadValueWithOneLine) {
  const std::string l = " loader " + ds_;
  Check({
      {kBench, "", 2, "subcommand"},
      {kBench, "--help", 0, "loader"},
      {kBench, "loader", 2, "required"},
      {kBench, l + " --workers abc", 2, "--workers"},
      {kBench, l + " --workers 99999999999", 2, "--workers"},
      {kBench, l + " --workers 100000", 2, "1..256"},
      {kBench, l + " --workers 0", 2, "--workers"},
      {kBench, l + " --workers ''", 2, "--workers"},
      {kBench, l + " --workers 1,,2", 2, "--workers"},
      {kBench, l + " --workers -2", 2, "--workers"},
      {kBench, l + " --batch 0", 2, "--batch"},
      {kBench, l + " --batch -1", 2, "--batch"},
      {kBench, l + " --batch 999999999", 2, "--batch"},
      {kBench, l + " --batch 1048576 --prefetch 1024", 2, "memory"},
      {kBench, l + " --transform foo", 2, "--transform"},
      {kBench, l + " --layout foo", 2, "--layout"},
      {kBench, l + " --shuffle sometimes", 2, "--shuffle"},
      {kBench, l + " --size 0", 2, "--size"},
      {kBench, l + " --prefetch 0", 2, "--prefetch"},
      {kBench, l + " --cache-mb 0", 2, "--cache-mb"},
      {kBench, l + " --repeat 0", 2, "--repeat"},
      {kBench, l + " --batches -3", 2, "--batches"},
      {kBench, l + " --on-corrupt maybe", 2, "--on-corrupt"},
      {kBench, l + " --skip-budget -1", 2, "--skip-budget"},
      {kBench, "loader " + dir_ / "fifo-ds", 2, "named pipe"},
      {kBench, "reference " + ds_ + " --max-records 0", 2, "--max-records"},
      {kBench, "reference " + dir_ / "fifo-ds", 2, "named pipe"},
      {kReport, dir_ / "nope", 2, "nope"},
      {kBench, l + " --workers 1,1", 2, "listed twice"},
      {kBench, l + " --csv " + ds_ + "/manifest.json", 2, "is inside " + ds_},
      {kBench, l + " --plot " + dir_ / "idx", 2, "is a directory"},
      {kBench, l + " --csv " + dir_ / "nope/x.csv", 2, "does not exist"},
      {kBench, l + " --csv " + dir_ / "f --plot " + dir_ / "f", 2, "is also"},
  });
}

// Metrics lines with a field of the wrong type or out of range: one named
// error, never an abort, a nan or an overflowed count.
TEST_F(CliRobustness, ReportRefusesMetricsFieldsThatMakeNoSense) {
  const std::string good =
      R"({"images_per_sec": 100, "world_size": 1, "batch_size": 8, "seconds": 2})";
  const struct {
    std::string line, expect;
  } bad[] = {
      {R"({"images_per_sec": 100, "world_size": "two"})", "\"world_size\" is \"two\""},
      {R"({"images_per_sec": 100, "world_size": 0})", "\"world_size\" is 0"},
      {R"({"images_per_sec": 100, "batch_size": 1e30})", "\"batch_size\""},
      {R"({"images_per_sec": 0})", "\"images_per_sec\" is 0"},
      {R"({"images_per_sec": [1]})", "\"images_per_sec\""},
      {R"({"images_per_sec": 100, "data_wait_fraction": null})", "data_wait_fraction"},
      {R"([1, 2])", "not a shardkit-train metrics line"},
  };
  int k = 0;
  for (const auto& c : bad) {
    const std::string d = dir_ / ("m" + std::to_string(k++));
    testing::MakeDirs(d);
    WriteFile(d + "/a.jsonl", good + "\n");
    WriteFile(d + "/b.jsonl", c.line + "\n");
    Check({{kReport, d, 2, c.expect}});
    EXPECT_FALSE(Env::Default()->FileExists(d + "/report.md"));
  }
  // Outputs: not a file or device as --out, never over a metrics file read.
  const std::string d = dir_ / "met";
  testing::MakeDirs(d);
  WriteFile(d + "/a.jsonl", good + "\n");
  Check({{kReport, d + " --out /dev/null", 2, "is not a directory"}});
  testing::MakeDirs(dir_ / "rep");
  ASSERT_EQ(symlink((d + "/a.jsonl").c_str(), (dir_ / "rep/report.csv").c_str()), 0);
  Check({{kReport, d + " --out " + dir_ / "rep", 2, "is the same file as"}});
  EXPECT_EQ(testing::ReadFile(d + "/a.jsonl"), good + "\n");
}

TEST_F(CliRobustness, AugmentRefusesEveryBadValueWithOneLine) {
  const std::string b = " bigmnist --src " + dir_ / "idx " + dir_ / "big";
  Check({
      {kAugment, "", 2, "subcommand"},
      {kAugment, "--help", 0, "bigmnist"},
      {kAugment, "bigmnist " + dir_ / "big", 2, "--src"},
      {kAugment, b + " --versions 0", 2, "--versions"},
      {kAugment, b + " --interpolation bicubic", 2, "--interpolation"},
      {kAugment, b + " --versions -1", 2, "--versions"},
      {kAugment, b + " --copies 99999999999", 2, "--copies"},
      {kAugment, b + " --flip-prob 1.5", 2, "--flip-prob"},
      {kAugment, b + " --flip-prob nan", 2, "--flip-prob"},
      {kAugment, b + " --rotation inf", 2, "--rotation"},
      {kAugment, b + " --scale-min 0", 2, "--scale-min"},
      {kAugment, b + " --scale-min 1.2 --scale-max 1.1", 2, "--scale-min"},
      {kAugment, b + " --elastic-sigma -1", 2, "--elastic-sigma"},
      {kAugment, b + " --threads 100000", 2, "--threads"},
      {kAugment, b + " --format xml", 2, "--format"},
      {kAugment, b + " --zstd-level 99", 2, "--zstd-level"},
      {kAugment, b + " --shard-size 0", 2, "--shard-size"},
      {kAugment, b + " --versions 10000 --copies 1", 0, ""},  // 40 x 10000 x 30 bytes: fits
      {kAugment, "bigmnist --src " + dir_ / "nope " + dir_ / "big2", 2, "nope"},
      {kAugment, "preview --src " + dir_ / "idx " + dir_ / "p.png --samples 0", 2, "--samples"},
      {kAugment, "preview --src " + dir_ / "idx " + dir_ / "idx", 2, "is a directory"},
      {kAugment, "bigmnist --format hdf5 --src " + dir_ / "idx " + dir_ / "idx", 2,
       "is a directory"},
      {kAugment, "bigmnist --src " + dir_ / "idx " + dir_ / "idx/train-labels-idx1-ubyte", 2,
       "is not a directory"},
      {kAugment, "preview --src " + dir_ / "idx " + dir_ / "p2.png --samples 1000", 0, ""},
      {kAugment, "preview --src " + dir_ / "idx " + dir_ / "idx/train-images-idx3-ubyte", 2,
       "is the same file as"},
      {kAugment,
       "bigmnist --format hdf5 --src " + dir_ / "idx " + dir_ / "idx/train-labels-idx1-ubyte", 2,
       "is the same file as"},
      {kAugment, "preview --src " + dir_ / "idx " + dir_ / "idx/preview.png", 0, ""},  // beside
  });
}

#ifdef SHARDKIT_TRAIN_TOOL
TEST_F(CliRobustness, TrainRefusesEveryBadValueWithOneLine) {
  const std::string t = " --data " + ds_ + " --arch tiny";
  Check({
      {kTrain, "", 2, "--data"},
      {kTrain, "--help", 0, "--arch"},
      {kTrain, t + " --arch foo", 2, "--arch"},
      {kTrain, t + " --lr nan", 2, "--lr"},
      {kTrain, t + " --lr -1", 2, "--lr"},
      {kTrain, t + " --lr inf", 2, "--lr"},
      {kTrain, t + " --lr 0", 2, "--lr"},
      {kTrain, t + " --label-smoothing 2", 2, "--label-smoothing"},
      {kTrain, t + " --label-smoothing -0.5", 2, "--label-smoothing"},
      {kTrain, t + " --momentum 2", 2, "--momentum"},
      {kTrain, t + " --weight-decay nan", 2, "--weight-decay"},
      {kTrain, t + " --warmup-epochs -1", 2, "--warmup-epochs"},
      {kTrain, t + " --schedule linear", 2, "--schedule"},
      {kTrain, t + " --device tpu", 2, "--device"},
      {kTrain, t + " --amp-dtype fp8", 2, "--amp-dtype"},
      {kTrain, t + " --stem resnet", 2, "--stem"},
      {kTrain, t + " --normalize mnist", 2, "--normalize"},
      {kTrain, t + " --num-classes -1", 2, "--num-classes"},
      {kTrain, t + " --num-classes 2", 2, "fewer than the data's 3 classes"},
      {kTrain, t + " --workers 100000", 2, "--workers"},
      {kTrain, t + " --workers abc", 2, "--workers"},
      {kTrain, t + " --batch-size 0", 2, "--batch-size"},
      {kTrain, t + " --batch-size 99999999999", 2, "--batch-size"},
      {kTrain, t + " --epochs -1", 2, "--epochs"},
      {kTrain, t + " --timeout 0", 2, "--timeout"},
      {kTrain, t + " --bucket-mb 0", 2, "--bucket-mb"},
      {kTrain, t + " --prefetch 0", 2, "--prefetch"},
      {kTrain, t + " --size 3", 2, "--size"},
      {kTrain, t + " --threads -4", 2, "--threads"},
      {kTrain, t + " --nproc-per-node 100000", 2, "--nproc-per-node"},
      {kTrain, t + " --max-steps -1", 2, "--max-steps"},
      {kTrain, t + " --on-corrupt maybe", 2, "--on-corrupt"},
      {kTrain, "--data " + dir_ / "fifo-ds --arch tiny", 2, "named pipe"},
      {kTrain, "--data " + dir_ / "nope --arch tiny", 2, "no such file or directory"},
      {kTrain, t + " --amp --device cpu", 2, "--amp needs a CUDA device"},
      {kTrain, t + " --metrics " + dir_ / "pipe", 2, "named pipe"},
      {kTrain, t + " --metrics /dev/null", 2, "character device"},
  });
}
#endif

}  // namespace
}  // namespace shardkit
