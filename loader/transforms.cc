// Crop geometry for the train and val transforms.
#include "loader/transforms.h"

#include <algorithm>
#include <cmath>

namespace shardkit {

CropDecision RandomResizedCrop(int width, int height, const TransformParams& p, KeyedRng* rng) {
  CropDecision d;
  const double area = double(width) * height;
  const double log_lo = std::log(p.min_ratio), log_hi = std::log(p.max_ratio);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * rng->Uniform(p.min_scale, p.max_scale);
    const double aspect = std::exp(rng->Uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int y = static_cast<int>(rng->Below(static_cast<uint64_t>(height - h + 1)));
      const int x = static_cast<int>(rng->Below(static_cast<uint64_t>(width - w + 1)));
      d.rect = RectF{double(x), double(y), double(w), double(h)};
      found = true;
    }
  }
  if (!found) {  // fallback: the whole image, clamped to the ratio range, centered
    const double in_ratio = double(width) / height;
    double w = width, h = height;
    if (in_ratio < p.min_ratio) {
      h = std::lround(w / p.min_ratio);
    } else if (in_ratio > p.max_ratio) {
      w = std::lround(h * p.max_ratio);
    }
    d.rect = RectF{std::floor((width - w) / 2), std::floor((height - h) / 2), w, h};
  }
  d.flip = p.hflip && rng->Uniform() < 0.5;
  return d;
}

CropDecision CenterCrop(int width, int height, const TransformParams& p) {
  const int resize = static_cast<int>(std::lround(p.size / p.crop_fraction));
  // torchvision Resize(int): the short side becomes `resize`, the long side is truncated.
  int nw, nh;
  if (width <= height) {
    nw = resize;
    nh = static_cast<int>(double(resize) * height / width);
  } else {
    nh = resize;
    nw = static_cast<int>(double(resize) * width / height);
  }
  const double left = std::round((nw - p.size) / 2.0), top = std::round((nh - p.size) / 2.0);
  const double sx = double(width) / nw, sy = double(height) / nh;
  CropDecision d;
  d.rect = RectF{left * sx, top * sy, p.size * sx, p.size * sy};
  return d;
}

}  // namespace shardkit
