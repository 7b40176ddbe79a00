// Image buffers and the pixel operations the loader and the packer share:
// antialiased bilinear resampling of a sub-rectangle (PIL's filter, as
// torchvision uses), horizontal flip, and HWC -> CHW copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/names.h"

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

// How an image's (or a batch's) channels are stored: planar (C x H x W per
// image, PyTorch's default) or interleaved (H x W x C, channels-last).
enum class Layout { kNCHW, kNHWC };
inline constexpr EnumName<Layout> kLayoutNames[] = {{Layout::kNCHW, "NCHW"},
                                                    {Layout::kNHWC, "NHWC"}};

// Per-thread scratch for Resample (coefficient tables, intermediate passes).
struct ResampleScratch {
  std::vector<float> acc;       // one row of sums
  std::vector<uint8_t> p1, p2;  // pass outputs
  std::vector<uint8_t> tmp;     // one interleaved row
  std::vector<int> xb, yb, xn, yn;
  std::vector<float> xw, yw;
  int xk = 0, yk = 0;
  // The horizontal pass as gathers (image/resample_gather.h, PlanRows): the
  // windows of the input row the groups of outputs read, and per tap each
  // lane's byte in its window and weight.
  std::vector<int> window;
  std::vector<uint8_t> lane_byte;
  std::vector<float> lane_weight;
  int gather_taps = 0;
};

// Resamples `region` of src (HWC, 1 or 3 channels) to out_w x out_h into dst
// (HWC, or CHW planes), with a triangle filter whose support widens with the
// downscale factor (antialiasing, as PIL's BILINEAR resize and torchvision
// do). If flip, the output is mirrored horizontally. Both passes run as
// vectorisable row operations: vertical, transpose, vertical, transpose.
void Resample(const Image& src, const RectF& region, int out_w, int out_h, bool flip, uint8_t* dst,
              ResampleScratch* scratch, Layout layout = Layout::kNHWC);

// Copies an HWC image into CHW planes (dst holds channels * h * w bytes).
void HwcToChw(const uint8_t* src, int w, int h, int channels, uint8_t* dst);

}  // namespace shardkit
