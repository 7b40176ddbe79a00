// The geometry of the image transforms, as torchvision defines them:
// RandomResizedCrop (train), Resize + CenterCrop (val), Resize((h, w))
// (resize), each optionally followed by RandomHorizontalFlip(p). Each returns
// the source rectangle to decode and resample to the output size, and
// whether to flip it.
#pragma once

#include <string>
#include <string_view>

#include "base/names.h"
#include "base/random.h"
#include "image/image.h"

namespace shardkit {

enum class TransformKind {
  kNone,    // raw records copied; JPEGs resized whole to the output size
  kTrain,   // RandomResizedCrop(output, scale, ratio) + horizontal flip
  kVal,     // Resize(resize) + CenterCrop(output)
  kResize,  // Resize((height, width)): the whole image, squashed to the output
};

// "train", "val", "resize", "none": the names the tools and the Python
// binding use. Returns false for any other name.
inline constexpr EnumName<TransformKind> kTransformKindNames[] = {
    {TransformKind::kTrain, "train"},
    {TransformKind::kVal, "val"},
    {TransformKind::kResize, "resize"},
    {TransformKind::kNone, "none"}};
const char* TransformKindName(TransformKind kind);
bool TransformKindFromName(std::string_view name, TransformKind* kind);

struct TransformParams {
  TransformKind kind = TransformKind::kNone;
  int size = 224;             // the output's side, unless height and width are set
  int height = 0, width = 0;  // a non-square output (both, or neither)
  double min_scale = 0.08, max_scale = 1.0;
  double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  // RandomHorizontalFlip(p) after the geometry; below 0: torchvision's
  // pipelines' habit, 0.5 for train and none otherwise.
  double flip_prob = -1;
  // val's Resize: the short side to `resize` (aspect kept, torchvision's
  // Resize(int)), or to resize_height x resize_width (Resize((h, w))); with
  // neither, the short side to round(size / crop_fraction).
  int resize = 0;
  int resize_height = 0, resize_width = 0;
  double crop_fraction = 0.875;  // val: 224 / 256

  int out_height() const { return height > 0 ? height : size; }
  int out_width() const { return width > 0 ? width : size; }
  double flip() const {
    return flip_prob >= 0 ? flip_prob : kind == TransformKind::kTrain ? 0.5 : 0;
  }
};

// What decides a transform's output for a given (seed, epoch, position):
// kind, output size and the ranges and sizes of its geometry, as one line
// ("train 224x224 scale 0.08-1 ratio 0.75-1.33333 flip 0.5"). Loader states
// compare it: a crop of a resumed epoch is the one it would have been.
std::string TransformSignature(const TransformParams& p);

struct CropDecision {
  RectF rect;  // in source pixels
  bool flip = false;
};

// torchvision.transforms.RandomResizedCrop.get_params, with our RNG, then
// the flip drawn from the same RNG.
CropDecision RandomResizedCrop(int width, int height, const TransformParams& p, KeyedRng* rng);
// torchvision Resize then CenterCrop(output), as a source rectangle (no flip).
CropDecision CenterCrop(int width, int height, const TransformParams& p);

}  // namespace shardkit
