// Crop geometry for the train and val transforms.
#include "loader/transforms.h"

#include <cstdio>

#include <algorithm>
#include <cmath>

namespace shardkit {

const char* TransformKindName(TransformKind kind) { return NameOf(kTransformKindNames, kind); }

bool TransformKindFromName(std::string_view name, TransformKind* kind) {
  return ValueOf(kTransformKindNames, name, kind);
}

std::string TransformSignature(const TransformParams& p) {
  char buf[256];
  int n = std::snprintf(buf, sizeof(buf), "%s %dx%d", TransformKindName(p.kind), p.out_height(),
                        p.out_width());
  auto add = [&](const char* fmt, auto... v) {
    n += std::snprintf(buf + n, sizeof(buf) - static_cast<size_t>(n), fmt, v...);
  };
  if (p.kind == TransformKind::kTrain) {
    add(" scale %g-%g ratio %g-%g", p.min_scale, p.max_scale, p.min_ratio, p.max_ratio);
  }
  if (p.kind == TransformKind::kVal) {
    add(" resize %d %dx%d crop %g", p.resize, p.resize_height, p.resize_width, p.crop_fraction);
  }
  add(" flip %g", p.flip());
  return buf;
}

namespace {

// Python's round(): halves go to the even neighbour (58.5 -> 58, 59.5 -> 60).
// std::nearbyint rounds the same way in the default rounding mode.
double PyRound(double v) { return std::nearbyint(v); }

}  // namespace

CropDecision RandomResizedCrop(int width, int height, const TransformParams& p, KeyedRng* rng) {
  CropDecision d;
  const double area = double(width) * height;
  const double log_lo = std::log(p.min_ratio), log_hi = std::log(p.max_ratio);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * rng->Uniform(p.min_scale, p.max_scale);
    const double aspect = std::exp(rng->Uniform(log_lo, log_hi));
    const int w = static_cast<int>(PyRound(std::sqrt(target * aspect)));
    const int h = static_cast<int>(PyRound(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int y = static_cast<int>(rng->Below(static_cast<uint64_t>(height - h + 1)));
      const int x = static_cast<int>(rng->Below(static_cast<uint64_t>(width - w + 1)));
      d.rect = RectF{double(x), double(y), double(w), double(h)};
      found = true;
    }
  }
  if (!found) {  // fallback: the whole image, clamped to the ratio range, centered
    const double in_ratio = double(width) / height;
    int w = width, h = height;
    if (in_ratio < p.min_ratio) {
      h = static_cast<int>(PyRound(w / p.min_ratio));
    } else if (in_ratio > p.max_ratio) {
      w = static_cast<int>(PyRound(h * p.max_ratio));
    }
    // torchvision: i = (height - h) // 2 (floor division, h may exceed height by rounding).
    const auto floor_div2 = [](int v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
    d.rect =
        RectF{double(floor_div2(width - w)), double(floor_div2(height - h)), double(w), double(h)};
  }
  d.flip = rng->Uniform() < p.flip();
  return d;
}

CropDecision CenterCrop(int width, int height, const TransformParams& p) {
  const int ow = p.out_width(), oh = p.out_height();
  int nw, nh;
  if (p.resize_height > 0 && p.resize_width > 0) {  // Resize((h, w))
    nw = p.resize_width;
    nh = p.resize_height;
  } else {
    // torchvision Resize(int): the short side becomes `resize`, the long side is truncated.
    const int resize =
        p.resize > 0 ? p.resize : static_cast<int>(PyRound(p.size / p.crop_fraction));
    if (width <= height) {
      nw = resize;
      nh = static_cast<int>(double(resize) * height / width);
    } else {
      nh = resize;
      nw = static_cast<int>(double(resize) * width / height);
    }
  }
  // torchvision CenterCrop: int(round((resized - crop) / 2.0)), halves to even.
  const double left = PyRound((nw - ow) / 2.0), top = PyRound((nh - oh) / 2.0);
  const double sx = double(width) / nw, sy = double(height) / nh;
  CropDecision d;
  d.rect = RectF{left * sx, top * sy, ow * sx, oh * sy};
  return d;
}

}  // namespace shardkit
