// Crop geometry for the train, val and crop transforms; RandomCrop's pixels.
#include "loader/transforms.h"

#include <cstdio>

#include <algorithm>
#include <cmath>
#include <cstring>

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
  if (p.kind == TransformKind::kCrop) {
    add(" pad %d,%d,%d,%d %s%s fill %d", p.pad_left, p.pad_top, p.pad_right, p.pad_bottom,
        NameOf(kPaddingModeNames, p.padding_mode), p.pad_if_needed ? " if-needed" : "", p.fill[0]);
    for (int c = 1; c < p.fill_channels; ++c) add(",%d", p.fill[c]);
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

namespace {

// The padded sizes of a RandomCrop along one axis: n padded by before and
// after, then by `needed` at both ends where pad_if_needed finds it short.
struct PaddedAxis {
  int needed = 0;
  int64_t size = 0;
};
PaddedAxis PadAxis(int n, int before, int after, int out, bool if_needed) {
  PaddedAxis a;
  const int64_t first = int64_t{n} + before + after;
  a.needed = if_needed && first < out ? static_cast<int>(out - first) : 0;
  a.size = first + 2 * int64_t{a.needed};
  return a;
}

// NumPy's pad of n pixels by `before` and `after` (torchvision's for PIL
// images) as a source index per padded pixel, -1 for the constant's fill:
// edge repeats the border; reflect and symmetric mirror in chunks, each at
// most the area filled so far (numpy/lib/arraypad.py, _set_reflect_both),
// which padding wider than the image makes differ from a plain periodic
// mirror; a single pixel is extended as edge.
void PadMap(int n, int before, int after, PaddingMode mode, std::vector<int>* map) {
  const int64_t size = int64_t{n} + before + after;
  map->assign(static_cast<size_t>(size), -1);
  int* a = map->data();
  for (int i = 0; i < n; ++i) a[before + i] = i;
  if (mode == PaddingMode::kConstant) return;
  if (mode == PaddingMode::kEdge || n == 1) {
    for (int i = 0; i < before; ++i) a[i] = 0;
    for (int64_t i = before + int64_t{n}; i < size; ++i) a[i] = n - 1;
    return;
  }
  const bool symmetric = mode == PaddingMode::kSymmetric;
  const int64_t edge = symmetric ? 1 : 0;
  int64_t left = before, right = after;
  while (left > 0 || right > 0) {
    const int64_t filled = size - left - right - (symmetric ? 0 : 1);
    if (left > 0) {  // mirror the chunk next to the left edge into the pad
      const int64_t chunk = std::min(filled, left), stop = left - edge;
      for (int64_t k = 0; k < chunk; ++k) a[left - 1 - k] = a[stop + 1 + k];
      left -= chunk;
    }
    if (right > 0) {
      const int64_t chunk = std::min(filled, right), start = size - right + edge - 2;
      for (int64_t k = 0; k < chunk; ++k) a[size - right + k] = a[start - k];
      right -= chunk;
    }
  }
}

}  // namespace

Result<CropDecision> RandomCrop(int width, int height, const TransformParams& p, KeyedRng* rng) {
  const int tw = p.out_width(), th = p.out_height();
  const PaddedAxis x = PadAxis(width, p.pad_left, p.pad_right, tw, p.pad_if_needed);
  const PaddedAxis y = PadAxis(height, p.pad_top, p.pad_bottom, th, p.pad_if_needed);
  if (x.size < tw || y.size < th) {
    return Status::InvalidArgument(
        "RandomCrop " + std::to_string(th) + "x" + std::to_string(tw) + " of an image of " +
        std::to_string(height) + "x" + std::to_string(width) + ", " + std::to_string(y.size) + "x" +
        std::to_string(x.size) + " once padded: the crop is larger than the image " +
        "(torchvision raises too); pad_if_needed=True pads it to the crop's size");
  }
  CropDecision d;
  int64_t top = 0, left = 0;
  if (x.size != tw || y.size != th) {  // get_params draws nothing for an image of the crop's size
    top = static_cast<int64_t>(rng->Below(static_cast<uint64_t>(y.size - th + 1)));
    left = static_cast<int64_t>(rng->Below(static_cast<uint64_t>(x.size - tw + 1)));
  }
  d.rect = RectF{double(left), double(top), double(tw), double(th)};
  d.flip = rng->Uniform() < p.flip();
  return d;
}

void CropIndexMap(int n, int before, int after, int needed, int offset, int out, PaddingMode mode,
                  std::vector<int>* map, std::vector<int>* scratch) {
  PadMap(n, before, after, mode, scratch);
  map->resize(static_cast<size_t>(out));
  if (needed == 0) {
    for (int k = 0; k < out; ++k) (*map)[k] = (*scratch)[offset + k];
    return;
  }
  // The second padding pads the first's result: indices into it, then through it.
  std::vector<int> second;
  PadMap(static_cast<int>(scratch->size()), needed, needed, mode, &second);
  for (int k = 0; k < out; ++k) {
    const int i = second[offset + k];
    (*map)[k] = i < 0 ? -1 : (*scratch)[i];
  }
}

void PadCrop(const uint8_t* src, int w, int h, int c, const TransformParams& p,
             const CropDecision& crop, Layout layout, uint8_t* out, PadCropScratch* s) {
  const int tw = p.out_width(), th = p.out_height();
  const PaddedAxis x = PadAxis(w, p.pad_left, p.pad_right, tw, p.pad_if_needed);
  const PaddedAxis y = PadAxis(h, p.pad_top, p.pad_bottom, th, p.pad_if_needed);
  CropIndexMap(w, p.pad_left, p.pad_right, x.needed, static_cast<int>(crop.rect.x), tw,
               p.padding_mode, &s->cols, &s->work);
  CropIndexMap(h, p.pad_top, p.pad_bottom, y.needed, static_cast<int>(crop.rect.y), th,
               p.padding_mode, &s->rows, &s->work);
  if (crop.flip) std::reverse(s->cols.begin(), s->cols.end());
  // The fill of each channel: one value for all, or one each (fill_channels == c).
  const int fill_step = p.fill_channels == 1 ? 0 : 1;
  const size_t plane = static_cast<size_t>(tw) * th;
  for (int r = 0; r < th; ++r) {
    const int sr = s->rows[r];
    for (int k = 0; k < tw; ++k) {
      const int sc = s->cols[k];
      const uint8_t* px = sr < 0 || sc < 0 ? nullptr : src + (size_t(sr) * w + sc) * c;
      const size_t at = size_t(r) * tw + k;
      for (int ch = 0; ch < c; ++ch) {
        const uint8_t v = px != nullptr ? px[ch] : p.fill[ch * fill_step];
        if (layout == Layout::kNHWC) {
          out[at * c + ch] = v;
        } else {
          out[ch * plane + at] = v;
        }
      }
    }
  }
}

}  // namespace shardkit
