// Replays every fuzz seed (tests/fuzz/corpus/TARGET/*) and every input that
// once crashed a target (tests/fuzz/regressions/TARGET/*) through the fuzz
// targets, so a fixed crash stays fixed in every build, sanitized or not.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "tests/common/test_util.h"
#include "tests/fuzz/fuzz_cli.h"
#include "tests/fuzz/fuzz_targets.h"

namespace shardkit {
namespace {

namespace fs = std::filesystem;

void Replay(const std::string& target, const std::function<int(const uint8_t*, size_t)>& fn) {
  int inputs = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(SHARDKIT_FUZZ_DIR) / kind / target;
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string bytes = testing::ReadFile(e.path());
      SCOPED_TRACE(e.path().string());
      EXPECT_EQ(fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
      ++inputs;
    }
  }
  EXPECT_GT(inputs, 0) << "no seed corpus for " << target;
}

TEST(FuzzRegression, ShardReader) { Replay("shard_reader", fuzz::ShardReader); }
TEST(FuzzRegression, Manifest) { Replay("manifest", fuzz::Manifest); }
TEST(FuzzRegression, Idx) { Replay("idx", fuzz::Idx); }
TEST(FuzzRegression, JpegTransform) { Replay("jpeg_transform", fuzz::JpegTransform); }
TEST(FuzzRegression, Hdf5Import) { Replay("hdf5_import", fuzz::Hdf5Import); }
TEST(FuzzRegression, MetaMat) { Replay("meta_mat", fuzz::MetaMat); }
TEST(FuzzRegression, Mat) { Replay("mat", fuzz::Mat); }
TEST(FuzzRegression, Archive) { Replay("archive", fuzz::Archive); }
TEST(FuzzRegression, ValLabels) { Replay("val_labels", fuzz::ValLabels); }
TEST(FuzzRegression, CommandLine) { Replay("cli", fuzz::CommandLine); }

}  // namespace
}  // namespace shardkit
