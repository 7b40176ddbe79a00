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
#include "loader/options.h"

namespace shardkit {

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
