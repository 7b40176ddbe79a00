// The geometry of the image transforms, as torchvision defines them:
// RandomResizedCrop (train) and Resize(short) + CenterCrop (val). Each returns
// the source rectangle to decode and resample to the output size.
#pragma once

#include <string_view>

#include "base/random.h"
#include "image/image.h"

namespace shardkit {

enum class TransformKind {
  kNone,   // raw records copied; JPEGs resized whole to size x size
  kTrain,  // RandomResizedCrop(size, scale, ratio) + horizontal flip
  kVal,    // resize the short side to size / crop_fraction, center crop size
};

// "train", "val", "none": the names the tools and the Python binding use.
// Returns false for any other name.
bool TransformKindFromName(std::string_view name, TransformKind* kind);

struct TransformParams {
  TransformKind kind = TransformKind::kNone;
  int size = 224;
  double min_scale = 0.08, max_scale = 1.0;
  double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  bool hflip = true;
  double crop_fraction = 0.875;  // val: 224 / 256
};

struct CropDecision {
  RectF rect;  // in source pixels
  bool flip = false;
};

// torchvision.transforms.RandomResizedCrop.get_params, with our RNG.
CropDecision RandomResizedCrop(int width, int height, const TransformParams& p, KeyedRng* rng);
// torchvision Resize(round(size / crop_fraction)) then CenterCrop(size), as a source rectangle.
CropDecision CenterCrop(int width, int height, const TransformParams& p);

}  // namespace shardkit
