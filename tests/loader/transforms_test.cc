// The transforms' geometry against torchvision's: CenterCrop's offsets (odd
// margins rounded half to even, as Python does), RandomResizedCrop inside the
// image and its ranges, RandomCrop's padding as NumPy pads.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "base/random.h"
#include "loader/transforms.h"

namespace shardkit {
namespace {

TEST(TransformGeometry, CenterCropMatchesTorchvision) {
  TransformParams p;
  p.kind = TransformKind::kVal;
  p.size = 224;
  // 500x375: Resize(256) -> 341x256, CenterCrop(224) -> left round(58.5)=58 (banker's: 58), top 16.
  CropDecision d = CenterCrop(500, 375, p);
  const double s = 375.0 / 256;
  EXPECT_NEAR(d.rect.w, 224 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(d.rect.h, 224 * s, 1e-9);
  EXPECT_NEAR(d.rect.y, 16 * s, 1e-9);
  EXPECT_NEAR(d.rect.x, 58 * 500.0 / 341, 1e-9);
  // Square image: the crop is centered and 224/256 of the side.
  d = CenterCrop(512, 512, p);
  EXPECT_NEAR(d.rect.w, 448, 1e-9);
  EXPECT_NEAR(d.rect.x, 32, 1e-9);
}

TEST(TransformGeometry, CenterCropRoundsOddMarginsHalfToEvenAsPythonDoes) {
  // torchvision: crop_top = int(round((H - 224) / 2.0)) with Python's round,
  // so a margin of x.5 goes to the even neighbour: 58.5 -> 58, 79.5 -> 80.
  struct Case {
    int w, h;       // source
    int nw, nh;     // after Resize(256): short side 256, long side truncated
    int left, top;  // torchvision's CenterCrop(224) offsets in the resized image
  } cases[] = {
      {500, 375, 341, 256, 58, 16},                                // 58.5 -> 58
      {375, 500, 256, 341, 16, 58}, {640, 427, 383, 256, 80, 16},  // 79.5 -> 80
      {427, 640, 256, 383, 16, 80}, {333, 500, 256, 384, 16, 80},  // even margins
      {257, 256, 257, 256, 16, 16},                                // 16.5 -> 16
      {259, 256, 259, 256, 18, 16},                                // 17.5 -> 18
  };
  TransformParams p;
  p.kind = TransformKind::kVal;
  p.size = 224;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h));
    CropDecision d = CenterCrop(c.w, c.h, p);
    const double sx = double(c.w) / c.nw, sy = double(c.h) / c.nh;
    EXPECT_NEAR(d.rect.x, c.left * sx, 1e-9);
    EXPECT_NEAR(d.rect.y, c.top * sy, 1e-9);
    EXPECT_NEAR(d.rect.w, 224 * sx, 1e-9);
    EXPECT_NEAR(d.rect.h, 224 * sy, 1e-9);
  }
}

TEST(TransformGeometry, RandomResizedCropStaysInsideAndWithinRanges) {
  TransformParams p;
  for (uint64_t k = 0; k < 2000; ++k) {
    KeyedRng rng(1, k);
    const int w = 50 + static_cast<int>(k % 500), h = 40 + static_cast<int>((k * 7) % 400);
    CropDecision d = RandomResizedCrop(w, h, p, &rng);
    ASSERT_GE(d.rect.x, 0);
    ASSERT_GE(d.rect.y, 0);
    ASSERT_LE(d.rect.x + d.rect.w, w);
    ASSERT_LE(d.rect.y + d.rect.h, h);
    ASSERT_GT(d.rect.w, 0);
    ASSERT_GT(d.rect.h, 0);
  }
}

// RandomCrop's padding is NumPy's pad (torchvision's for PIL images), the
// mirrored modes included where the padding is wider than the image (NumPy
// mirrors in chunks, not periodically), and pad_if_needed pads the padded
// image again; the expected maps are np.pad's.
TEST(TransformGeometry, RandomCropPadsAsNumpyPadsAndStaysInside) {
  std::vector<int> map, scratch;
  auto padded = [&](PaddingMode mode, int n, int before, int after, int needed) {
    const int size = n + before + after + 2 * needed;
    CropIndexMap(n, before, after, needed, 0, size, mode, &map, &scratch);
    return map;
  };
  using V = std::vector<int>;
  EXPECT_EQ(padded(PaddingMode::kReflect, 3, 5, 4, 0), V({1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2}));
  EXPECT_EQ(padded(PaddingMode::kSymmetric, 3, 5, 4, 0), V({1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0}));
  EXPECT_EQ(padded(PaddingMode::kEdge, 3, 5, 4, 0), V({0, 0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2}));
  EXPECT_EQ(padded(PaddingMode::kConstant, 3, 2, 1, 0), V({-1, -1, 0, 1, 2, -1}));
  // np.pad(np.pad(arange(4), (1, 2), 'reflect'), (3, 3), 'reflect')
  EXPECT_EQ(padded(PaddingMode::kReflect, 4, 1, 2, 3), V({2, 1, 0, 1, 0, 1, 2, 3, 2, 1, 2, 3, 2}));
  EXPECT_EQ(padded(PaddingMode::kReflect, 1, 2, 2, 0), V({0, 0, 0, 0, 0}));  // NumPy: as edge
  // A window: the map from its offset on.
  CropIndexMap(3, 5, 4, 0, 4, 3, PaddingMode::kSymmetric, &map, &scratch);
  EXPECT_EQ(map, V({0, 0, 1}));

  TransformParams p;
  p.kind = TransformKind::kCrop;
  p.size = 32;
  p.pad_left = p.pad_right = p.pad_top = p.pad_bottom = 4;
  p.flip_prob = 0.5;
  std::set<std::pair<int, int>> offsets;
  for (uint64_t k = 0; k < 2000; ++k) {
    KeyedRng rng(3, k);
    Result<CropDecision> d = RandomCrop(32, 32, p, &rng);
    ASSERT_TRUE(d.ok());
    ASSERT_GE(d->rect.x, 0);
    ASSERT_LE(d->rect.x, 8);
    ASSERT_GE(d->rect.y, 0);
    ASSERT_LE(d->rect.y, 8);
    offsets.insert({int(d->rect.x), int(d->rect.y)});
  }
  EXPECT_EQ(offsets.size(), 81u) << "every window of the 40x40 padded image is drawn";
  KeyedRng rng(3);
  p.size = 48;
  Result<CropDecision> big = RandomCrop(32, 32, p, &rng);
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(big.status().IsInvalidArgument());
  p.pad_if_needed = true;  // 40 padded to 48 by 8 on both ends, then the crop
  ASSERT_TRUE(RandomCrop(32, 32, p, &rng).ok());
}

}  // namespace
}  // namespace shardkit
