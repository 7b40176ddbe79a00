// bigMNIST's distortions, made once when a set is synthesised (shardkit-augment
// bigmnist), not the loader's per-epoch transforms (loader/): per-sample random
// affine and elastic transforms (rotation, shear, translation, scaling,
// horizontal flip, elastic deformation) with bilinear or nearest-neighbour
// resampling. A sample's parameters depend only on its key (seed, source
// index, version, copy), so output is byte-identical whatever the threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/names.h"

namespace shardkit {

// How a version's transform is made.
//   kCompose: every transform at once, each drawn from AugmentParams' range.
//   kRcc: version 0 is the source unchanged and versions 1..5 each apply one
//     transform (RccView), drawn from the fixed ranges of kRcc.
enum class Recipe { kCompose, kRcc };
inline constexpr EnumName<Recipe> kRecipeNames[] = {{Recipe::kCompose, "compose"},
                                                    {Recipe::kRcc, "rcc"}};

// How an output pixel is sampled from the source: bilinearly from the four
// pixels around where it maps, or the nearest one (torchvision's
// InterpolationMode.NEAREST, RandomAffine's default). Under rcc, nearest
// applies to the affine views (rotation, scale); the elastic view stays
// bilinear, as ElasticTransform's default is.
enum class Interpolation { kBilinear, kNearest };
inline constexpr EnumName<Interpolation> kInterpolationNames[] = {
    {Interpolation::kBilinear, "bilinear"}, {Interpolation::kNearest, "nearest"}};

// Ranges each transform of the compose recipe draws from (uniformly unless
// stated). Defaults follow the usual MNIST augmentation and Simard et al.
// (2003) for the elastic part.
struct AugmentParams {
  Recipe recipe = Recipe::kCompose;
  Interpolation interpolation = Interpolation::kBilinear;
  double rotation_deg = 15;  // angle in [-r, r]
  double shear = 0.15;       // x-shear factor in [-s, s]
  double translate_px = 2;   // shift in [-t, t] on each axis
  double scale_min = 0.9, scale_max = 1.1;
  double flip_prob = 0.5;     // horizontal flip
  double elastic_alpha = 34;  // displacement scale (pixels); 0 disables
  double elastic_sigma = 4;   // Gaussian smoothing of the displacement field
};

// The rcc recipe's versions, in order: one transform each.
enum class RccView { kOriginal, kRotation, kTranslation, kScale, kFlip, kElastic };
inline constexpr uint64_t kRccVersions = 6;

// The rcc recipe's ranges, torchvision's transforms with these arguments:
struct RccParams {
  double rotation_deg;          // RandomAffine(degrees=20): angle uniform in [-20, 20]
  double translate_frac;        // RandomAffine(translate=(0.2, 0.2)): shift of
                                // round(U[-0.2 W, 0.2 W]) px across, round(U[-0.2 H, 0.2 H]) down
  double scale_min, scale_max;  // RandomAffine(scale=(0.8, 1.2)): uniform
  double elastic_alpha;         // ElasticTransform(alpha=30) ...
  double elastic_sigma;         // ... and its default sigma=5, both in pixels
};
inline constexpr RccParams kRcc = {20, 0.2, 0.8, 1.2, 30, 5};

// How an elastic displacement field is made from uniform(-1, 1) noise.
//   kSimard: smoothed by a Gaussian of radius ceil(3 sigma), zero outside the
//     image; displacement alpha * field pixels (Simard et al.; compose).
//   kTorchvision: as torchvision's ElasticTransform: kernel of int(8 sigma + 1)
//     taps (made odd), the noise reflected at the border; displacement
//     alpha / 2 * field pixels, since torchvision adds alpha / size * field to
//     a sampling grid whose [-1, 1] spans the image's size pixels.
enum class ElasticStyle { kSimard, kTorchvision };

// The transform drawn for one sample. The default is the identity.
struct SampleTransform {
  double angle_rad = 0, shear = 0, scale = 1, tx = 0, ty = 0;
  bool flip = false;
  uint64_t elastic_key = 0;                     // keys the displacement field
  double elastic_alpha = 0, elastic_sigma = 4;  // alpha 0: no elastic deformation
  ElasticStyle elastic_style = ElasticStyle::kSimard;
  bool nearest = false;  // nearest-neighbour sampling, else bilinear
};

// Which sample a transform is drawn for. With identical copies every copy is
// drawn as copy 0; copy 0 draws what the tool drew before copies could differ.
struct SampleKey {
  uint64_t seed = 0, index = 0, version = 0, copy = 0;
};

// The transform of `key` under p.recipe, for a w x h image (rcc's translation
// is a fraction of it). With kRcc, key.version < kRccVersions; rcc's version
// 0 is the identity whatever the copy.
SampleTransform DrawTransform(const AugmentParams& p, const SampleKey& key, int w, int h);

// Per-thread buffers.
struct AugmentScratch {
  std::vector<float> dx, dy, tmp, kernel, row;
  std::vector<int> reflect;
};

// t's elastic displacement in pixels: output pixel (x, y) samples the source
// at (x + dx, y + dy), before the affine part. Row-major, w x h each.
void ElasticDisplacement(const SampleTransform& t, int w, int h, AugmentScratch* s,
                         std::vector<double>* dx, std::vector<double>* dy);

// Applies t to a w x h single-channel image; pixels mapped from outside the
// source are 0 (MNIST's background).
void ApplyTransform(const uint8_t* src, int w, int h, const SampleTransform& t, uint8_t* dst,
                    AugmentScratch* s);

}  // namespace shardkit
