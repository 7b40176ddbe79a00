// The geometry of the image transforms, as torchvision defines them:
// RandomResizedCrop (train), Resize + CenterCrop (val), Resize((h, w))
// (resize), RandomCrop with its padding (crop), each optionally followed by
// RandomHorizontalFlip(p). Each returns the source rectangle to decode and
// resample to the output size (RandomCrop: the window to copy), and whether
// to flip it; RandomCrop's pixels are copied here (PadCrop).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/names.h"
#include "base/random.h"
#include "base/status.h"
#include "image/image.h"
#include "loader/options.h"

namespace shardkit {

// What decides a transform's output for a given (seed, epoch, position):
// kind, output size and the ranges and sizes of its geometry, as one line
// ("train 224x224 scale 0.08-1 ratio 0.75-1.33333 flip 0.5"). Loader states
// compare it: a crop of a resumed epoch is the one it would have been.
std::string TransformSignature(const TransformParams& p);

struct CropDecision {
  RectF rect;  // in source pixels (RandomCrop: in the padded image's, whole numbers)
  bool flip = false;
};

// torchvision.transforms.RandomResizedCrop.get_params, with our RNG, then
// the flip drawn from the same RNG.
CropDecision RandomResizedCrop(int width, int height, const TransformParams& p, KeyedRng* rng);
// torchvision Resize then CenterCrop(output), as a source rectangle (no flip).
CropDecision CenterCrop(int width, int height, const TransformParams& p);

// torchvision.transforms.RandomCrop for a width x height image: the image
// padded as p says (padding, then pad_if_needed), the window's offset in it
// drawn as RandomCrop.get_params draws it (top, then left; no draw where the
// padded image is the output's size), then the flip from the same RNG.
// rect: the window, x and y its offsets in the padded image. InvalidArgument
// when the padded image is smaller than the output (torchvision raises too).
Result<CropDecision> RandomCrop(int width, int height, const TransformParams& p, KeyedRng* rng);

// The source column (or row) of each of the `out` pixels of a RandomCrop
// window from `offset` on, along an axis of n pixels padded by `before` and
// `after`, then by `needed` at both ends (pad_if_needed), all in `mode`, as
// torchvision pads PIL images (NumPy's pad, padding wider than the image
// included; tensors agree where torch pads them); -1 for the fill. *map is
// resized to `out`; *scratch is working memory.
void CropIndexMap(int n, int before, int after, int needed, int offset, int out, PaddingMode mode,
                  std::vector<int>* map, std::vector<int>* scratch);

// Scratch for PadCrop, one per thread.
struct PadCropScratch {
  std::vector<int> rows, cols, work;
};

// Copies the RandomCrop window `crop` of the w x h x c (HWC) image `src`,
// padded as p says, into `out` (p's output size, c channels, in `layout`),
// mirrored if crop.flip: pixels copied, none resampled.
void PadCrop(const uint8_t* src, int w, int h, int c, const TransformParams& p,
             const CropDecision& crop, Layout layout, uint8_t* out, PadCropScratch* scratch);

}  // namespace shardkit
