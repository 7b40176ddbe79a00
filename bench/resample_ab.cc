// resample_ab's side: one commit's resampler in a shared object.
// bench/resample_ab.sh compiles this file with a commit's image/image.cc and
// image/resample_gather.cc (the namespace renamed, -Dshardkit=..., and
// linked -Bsymbolic, so two commits' copies and the driver's own never
// resolve to each other) and build/bench/resample_ab loads two of them.
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "image/image.h"

using namespace shardkit;

// The layout of the Image this side was built with, for the driver to check
// against its own before it passes one in.
extern "C" size_t resample_side_image_layout() {
  return sizeof(Image) * 1000000 + offsetof(Image, pixels) * 1000 + offsetof(Image, channels);
}

// Resamples `region` of *image (an Image of the driver's, laid out as this
// side's) to out_w x out_h NCHW into out; returns the microseconds it took.
extern "C" double resample_side(const void* image, double x, double y, double w, double h, int flip,
                                int out_w, int out_h, uint8_t* out) {
  static ResampleScratch scratch;
  const auto& src = *static_cast<const Image*>(image);
  const auto t0 = std::chrono::steady_clock::now();
  Resample(src, RectF{x, y, w, h}, out_w, out_h, flip != 0, out, &scratch, Layout::kNCHW);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}
