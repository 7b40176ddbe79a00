// On a GPU (skipped where none is visible): two ranks equal one, resume
// equals uninterrupted, mixed precision trains, pinned leases outlive the
// loader. scripts/gpu_kit/test.sh runs these on the GPU machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "loader/loader.h"
#include "tests/common/test_util.h"
#include "tests/train/train_test_util.h"
#include "train/checkpoint.h"
#include "train/device_feeder.h"
#include "train/dist.h"

namespace shardkit {
namespace {

using testing::LoadExport;
using testing::MaxDiff;
using testing::ReadToyCheckpoint;
using testing::RunCommand;
using testing::TempDir;
using testing::TrainCmd;
using testing::WriteToyDataset;

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
