// Transform sampling and application for bigMNIST.
#include "tools/augment/augment.h"

#include <algorithm>
#include <cmath>

#include "base/random.h"

namespace shardkit {

SampleTransform DrawTransform(const AugmentParams& p, uint64_t seed, uint64_t index,
                              uint64_t version) {
  KeyedRng rng(seed, index, version, 0xB16);
  SampleTransform t;
  t.angle_rad = rng.Uniform(-p.rotation_deg, p.rotation_deg) * M_PI / 180.0;
  t.shear = rng.Uniform(-p.shear, p.shear);
  t.scale = rng.Uniform(p.scale_min, p.scale_max);
  t.tx = rng.Uniform(-p.translate_px, p.translate_px);
  t.ty = rng.Uniform(-p.translate_px, p.translate_px);
  t.flip = rng.Uniform() < p.flip_prob;
  t.elastic_key = rng.Next();
  t.elastic_alpha = p.elastic_alpha;
  t.elastic_sigma = p.elastic_sigma;
  return t;
}

namespace {

// Smooths `field` (w x h) with a separable Gaussian, zero outside.
void GaussianSmooth(std::vector<float>* field, int w, int h, double sigma, AugmentScratch* s) {
  const int r = std::max(1, static_cast<int>(std::ceil(3 * sigma)));
  s->kernel.resize(2 * r + 1);
  double total = 0;
  for (int i = -r; i <= r; ++i)
    total += s->kernel[i + r] = static_cast<float>(std::exp(-0.5 * i * i / (sigma * sigma)));
  for (auto& k : s->kernel) k = static_cast<float>(k / total);
  s->tmp.assign(static_cast<size_t>(w) * h, 0.f);
  std::vector<float>& f = *field;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      float acc = 0;
      for (int k = std::max(-r, -x); k <= std::min(r, w - 1 - x); ++k)
        acc += s->kernel[k + r] * f[y * w + x + k];
      s->tmp[y * w + x] = acc;
    }
  }
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      float acc = 0;
      for (int k = std::max(-r, -y); k <= std::min(r, h - 1 - y); ++k)
        acc += s->kernel[k + r] * s->tmp[(y + k) * w + x];
      f[y * w + x] = acc;
    }
  }
}

inline float Pixel(const uint8_t* src, int w, int h, int x, int y) {
  return (x < 0 || y < 0 || x >= w || y >= h) ? 0.f : static_cast<float>(src[y * w + x]);
}

}  // namespace

void ApplyTransform(const uint8_t* src, int w, int h, const SampleTransform& t, uint8_t* dst,
                    AugmentScratch* s) {
  const size_t n = static_cast<size_t>(w) * h;
  // Elastic displacement field: uniform(-1, 1), smoothed, scaled by alpha.
  const bool elastic = t.elastic_alpha != 0;
  if (elastic) {
    s->dx.resize(n);
    s->dy.resize(n);
    KeyedRng rng(t.elastic_key);
    for (size_t i = 0; i < n; ++i) {
      s->dx[i] = static_cast<float>(rng.Uniform(-1, 1));
      s->dy[i] = static_cast<float>(rng.Uniform(-1, 1));
    }
    GaussianSmooth(&s->dx, w, h, t.elastic_sigma, s);
    GaussianSmooth(&s->dy, w, h, t.elastic_sigma, s);
  }
  // Forward affine about the centre: p' = c + T + S R Sh (p - c). We need the
  // inverse to find, for each output pixel, where it comes from.
  const double cx = (w - 1) / 2.0, cy = (h - 1) / 2.0;
  const double c = std::cos(t.angle_rad), sn = std::sin(t.angle_rad);
  // M = scale * R * Sh, Sh = [[1, shear], [0, 1]].
  const double m00 = t.scale * c, m01 = t.scale * (c * t.shear - sn);
  const double m10 = t.scale * sn, m11 = t.scale * (sn * t.shear + c);
  const double det = m00 * m11 - m01 * m10;
  const double i00 = m11 / det, i01 = -m01 / det, i10 = -m10 / det, i11 = m00 / det;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double px = x, py = y;
      if (elastic) {
        px += t.elastic_alpha * s->dx[y * w + x];
        py += t.elastic_alpha * s->dy[y * w + x];
      }
      const double qx = px - cx - t.tx, qy = py - cy - t.ty;
      double sx = cx + i00 * qx + i01 * qy;
      const double sy = cy + i10 * qx + i11 * qy;
      if (t.flip) sx = (w - 1) - sx;
      // Bilinear; exact at integer coordinates (identity reproduces the source).
      const double fx = std::floor(sx), fy = std::floor(sy);
      const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
      const float ax = static_cast<float>(sx - fx), ay = static_cast<float>(sy - fy);
      float v =
          (1 - ay) * ((1 - ax) * Pixel(src, w, h, x0, y0) + ax * Pixel(src, w, h, x0 + 1, y0)) +
          ay * ((1 - ax) * Pixel(src, w, h, x0, y0 + 1) + ax * Pixel(src, w, h, x0 + 1, y0 + 1));
      dst[y * w + x] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    }
  }
}

}  // namespace shardkit
