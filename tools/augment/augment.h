// bigMNIST augmentation: per-sample random transforms (rotation, shear,
// translation, scaling, horizontal flip, elastic deformation) with bilinear
// resampling. A sample's parameters depend only on (seed, source index,
// version), so output is byte-identical whatever the threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardkit {

// Ranges each transform draws from (uniformly unless stated). Defaults follow
// the usual MNIST augmentation and Simard et al. (2003) for the elastic part.
struct AugmentParams {
  double rotation_deg = 15;  // angle in [-r, r]
  double shear = 0.15;       // x-shear factor in [-s, s]
  double translate_px = 2;   // shift in [-t, t] on each axis
  double scale_min = 0.9, scale_max = 1.1;
  double flip_prob = 0.5;     // horizontal flip
  double elastic_alpha = 34;  // displacement scale (pixels); 0 disables
  double elastic_sigma = 4;   // Gaussian smoothing of the displacement field
};

// The transform drawn for one sample.
struct SampleTransform {
  double angle_rad = 0, shear = 0, scale = 1, tx = 0, ty = 0;
  bool flip = false;
  uint64_t elastic_key = 0;  // keys the displacement field
  double elastic_alpha = 0, elastic_sigma = 4;
};

SampleTransform DrawTransform(const AugmentParams& p, uint64_t seed, uint64_t index,
                              uint64_t version);

// Per-thread buffers.
struct AugmentScratch {
  std::vector<float> dx, dy, tmp, kernel;
};

// Applies t to a w x h single-channel image; pixels mapped from outside the
// source are 0 (MNIST's background).
void ApplyTransform(const uint8_t* src, int w, int h, const SampleTransform& t, uint8_t* dst,
                    AugmentScratch* s);

}  // namespace shardkit
