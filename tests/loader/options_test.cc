// The loader's options, checked once (ValidateLoaderOptions) before the
// dataset is opened, and the one rule of which transforms a record kind
// takes (TransformApplies), which the loader enforces by name.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loader/loader.h"
#include "loader/options.h"
#include "tests/common/test_util.h"
#include "tests/loader/loader_test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;
using testing::WriteRaw;

// One rule for every front end: JPEG records take every transform, raw
// records only none and crop (pixels copied, none resampled), and the loader
// refuses the others by name rather than ignore them.
TEST(TransformRuleTest, RawRecordsTakeOnlyTransformNoneOrCropAndTheLoaderSaysSo) {
  for (const auto& [kind, name] : kTransformKindNames) {
    EXPECT_TRUE(TransformApplies(format::RecordKind::kJpeg, kind)) << name;
    EXPECT_EQ(TransformApplies(format::RecordKind::kRawU8, kind),
              kind == TransformKind::kNone || kind == TransformKind::kCrop)
        << name;
  }
  TempDir dir;
  WriteRaw(dir / "raw", 20, 4, CompressionMode::kStore, 1 << 20);
  LoaderOptions o;
  o.batch_size = 4;
  ASSERT_TRUE(Loader::Open(dir / "raw", o).ok()) << "transform none, the default";
  for (TransformKind kind : {TransformKind::kTrain, TransformKind::kVal, TransformKind::kResize}) {
    o.transform.kind = kind;
    auto l = Loader::Open(dir / "raw", o);
    ASSERT_FALSE(l.ok()) << TransformKindName(kind);
    EXPECT_TRUE(l.status().IsInvalidArgument());
    EXPECT_EQ(l.status().message(),
              dir / "raw" +
                  ": holds raw 4x4x1 records, which the loader returns as stored or cropped; "
                  "transform '" +
                  TransformKindName(kind) +
                  "' resizes JPEG records: use transform none, or crop (RandomCrop), and resize "
                  "or augment the batches after the loader if you need to");
  }
}

TEST(LoaderOptionsTest, EveryRangeIsCheckedInOnePlaceBeforeTheDatasetIsOpened) {
  EXPECT_TRUE(ValidateLoaderOptions(LoaderOptions()).ok());
  auto with = [](const std::function<void(LoaderOptions&)>& change) {
    LoaderOptions o;
    change(o);
    return o;
  };
  for (auto [o, why] : std::vector<std::pair<LoaderOptions, std::string>>{
           {with([](auto& o) { o.workers = 0; }), "workers must be in 1..256, not 0"},
           {with([](auto& o) { o.prefetch = kMaxPrefetch + 1; }), "prefetch must be in 1..1024"},
           {with([](auto& o) { o.batch_size = 0; }), "batch size must be in 1.."},
           {with([](auto& o) { o.rank = 2, o.world_size = 2; }),
            "rank 2 is not in 0..world_size-1"},
           {with([](auto& o) { o.world_size = kMaxWorldSize + 1; }), "world size must be at most"},
           {with([](auto& o) { o.read_depth = -2; }), "read depth must be in 0..1024"},
           {with([](auto& o) { o.read_ahead_bytes = 0; }), "read-ahead bytes"},
           {with([](auto& o) { o.transform.size = 0; }), "transform size must be in 1..4096"},
           {with([](auto& o) { o.transform.height = 10; }), "height and width together"},
           {with([](auto& o) { o.transform.flip_prob = 2; }), "flip probability"},
           {with([](auto& o) { o.transform.min_scale = std::nan(""); }), "crop scale range"},
           {with([](auto& o) { o.transform.max_ratio = 0.1; }), "aspect-ratio range"},
           {with([](auto& o) { o.transform.crop_fraction = 0; }), "val crop fraction"},
           {with([](auto& o) {
              o.transform.kind = TransformKind::kVal;
              o.transform.resize = 100;
            }),
            "CenterCrop 224x224 is larger than the Resize before it"}}) {
    Status s = ValidateLoaderOptions(o);
    EXPECT_TRUE(s.IsInvalidArgument()) << why;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
    // Loader::Open checks them before it looks for the dataset.
    auto loader = Loader::Open("/nonexistent/dataset", o);
    ASSERT_FALSE(loader.ok());
    EXPECT_EQ(loader.status().message(), s.message());
  }
}

}  // namespace
}  // namespace shardkit
