// Image buffers and the pixel operations the loader and the packer share:
// antialiased bilinear resampling of a sub-rectangle (PIL's filter, as
// torchvision uses), horizontal flip, and HWC -> CHW copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardkit {

// Interleaved 8-bit pixels, rows packed (stride = width * channels).
struct Image {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
  void Resize(int w, int h, int c) {
    width = w;
    height = h;
    channels = c;
    pixels.resize(static_cast<size_t>(w) * h * c);
  }
};

// A rectangle in (possibly fractional) pixel coordinates of an image.
struct RectF {
  double x = 0, y = 0, w = 0, h = 0;
};

// Per-thread scratch for Resample (coefficient tables, the intermediate row pass).
struct ResampleScratch {
  std::vector<float> tmp;
  std::vector<int> xb, yb;
  std::vector<float> xw, yw;
  int xk = 0, yk = 0;
};

// Resamples `region` of src (HWC, any channel count) to out_w x out_h into dst,
// which is HWC with row stride out_w * src.channels. Uses a triangle filter
// whose support widens with the downscale factor (antialiasing, as PIL's
// BILINEAR resize does). If flip, the output is mirrored horizontally.
void Resample(const Image& src, const RectF& region, int out_w, int out_h, bool flip, uint8_t* dst,
              ResampleScratch* scratch);

// Copies an HWC image into CHW planes (dst holds channels * h * w bytes).
void HwcToChw(const uint8_t* src, int w, int h, int channels, uint8_t* dst);

}  // namespace shardkit
