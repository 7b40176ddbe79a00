// Separable antialiased resampling (triangle filter) and layout copies.
#include "loader/image.h"

#include <algorithm>
#include <cmath>

namespace shardkit {
namespace {

// For each output index, the first input index and `k` weights (normalised).
// Follows PIL's ImagingResample coefficient computation for the bilinear filter.
int Coefficients(double in0, double in_len, int in_size, int out_size, std::vector<int>* bounds,
                 std::vector<float>* weights) {
  const double scale = in_len / out_size;
  const double filterscale = std::max(1.0, scale);
  const double support = 1.0 * filterscale;  // triangle filter support is 1
  const int k = static_cast<int>(std::ceil(support)) * 2 + 1;
  bounds->assign(out_size, 0);
  weights->assign(static_cast<size_t>(out_size) * k, 0.f);
  for (int i = 0; i < out_size; ++i) {
    const double center = in0 + (i + 0.5) * scale;
    int xmin = static_cast<int>(std::floor(center - support + 0.5));
    int xmax = static_cast<int>(std::floor(center + support + 0.5));
    xmin = std::max(xmin, 0);
    xmax = std::min(xmax, in_size);
    if (xmax <= xmin) {  // degenerate region: nearest pixel
      xmin = std::clamp(static_cast<int>(center), 0, in_size - 1);
      xmax = xmin + 1;
    }
    xmax = std::min(xmax, xmin + k);
    float* w = weights->data() + static_cast<size_t>(i) * k;
    double total = 0;
    for (int x = xmin; x < xmax; ++x) {
      double t = (x + 0.5 - center) / filterscale;
      double v = std::max(0.0, 1.0 - std::fabs(t));
      w[x - xmin] = static_cast<float>(v);
      total += v;
    }
    if (total <= 0) {
      w[0] = 1.f;
      xmax = xmin + 1;
      total = 1;
    }
    for (int x = 0; x < xmax - xmin; ++x) w[x] = static_cast<float>(w[x] / total);
    (*bounds)[i] = xmin;
  }
  return k;
}

inline uint8_t Clamp8(float v) {
  int i = static_cast<int>(v + 0.5f);
  return static_cast<uint8_t>(i < 0 ? 0 : (i > 255 ? 255 : i));
}

}  // namespace

void Resample(const Image& src, const RectF& region, int out_w, int out_h, bool flip, uint8_t* dst,
              ResampleScratch* s) {
  const int c = src.channels;
  s->xk = Coefficients(region.x, region.w, src.width, out_w, &s->xb, &s->xw);
  s->yk = Coefficients(region.y, region.h, src.height, out_h, &s->yb, &s->yw);
  // Rows of the source that the vertical pass needs.
  const int y0 = s->yb.front();
  int y1 = 0;
  for (int i = 0; i < out_h; ++i) y1 = std::max(y1, std::min(src.height, s->yb[i] + s->yk));
  const int rows = y1 - y0;
  s->tmp.assign(static_cast<size_t>(rows) * out_w * c, 0.f);
  const size_t src_stride = static_cast<size_t>(src.width) * c;
  // Horizontal pass: source rows [y0, y1) -> tmp (rows x out_w).
  for (int y = 0; y < rows; ++y) {
    const uint8_t* row = src.pixels.data() + (y0 + y) * src_stride;
    float* out = s->tmp.data() + static_cast<size_t>(y) * out_w * c;
    for (int x = 0; x < out_w; ++x) {
      const int xmin = s->xb[x];
      const int n = std::min(s->xk, src.width - xmin);
      const float* w = s->xw.data() + static_cast<size_t>(x) * s->xk;
      for (int ch = 0; ch < c; ++ch) {
        float acc = 0;
        for (int t = 0; t < n; ++t) acc += w[t] * row[(xmin + t) * c + ch];
        out[x * c + ch] = acc;
      }
    }
  }
  // Vertical pass: tmp -> dst, mirrored if asked.
  for (int y = 0; y < out_h; ++y) {
    const int ymin = s->yb[y] - y0;
    const int n = std::min(s->yk, rows - ymin);
    const float* w = s->yw.data() + static_cast<size_t>(y) * s->yk;
    uint8_t* out = dst + static_cast<size_t>(y) * out_w * c;
    for (int x = 0; x < out_w; ++x) {
      const int ox = flip ? out_w - 1 - x : x;
      for (int ch = 0; ch < c; ++ch) {
        float acc = 0;
        for (int t = 0; t < n; ++t) acc += w[t] * s->tmp[(static_cast<size_t>(ymin + t) * out_w + x) * c + ch];
        out[ox * c + ch] = Clamp8(acc);
      }
    }
  }
}

void HwcToChw(const uint8_t* src, int w, int h, int channels, uint8_t* dst) {
  const size_t plane = static_cast<size_t>(w) * h;
  for (size_t p = 0; p < plane; ++p) {
    for (int ch = 0; ch < channels; ++ch) dst[ch * plane + p] = src[p * channels + ch];
  }
}

}  // namespace shardkit
