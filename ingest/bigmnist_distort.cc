// bigMNIST's distortions: drawing a sample's transform, and applying it.
#include "ingest/bigmnist_distort.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "base/random.h"

namespace shardkit {

namespace {

SampleTransform DrawCompose(const AugmentParams& p, KeyedRng* rng) {
  SampleTransform t;
  t.angle_rad = rng->Uniform(-p.rotation_deg, p.rotation_deg) * M_PI / 180.0;
  t.shear = rng->Uniform(-p.shear, p.shear);
  t.scale = rng->Uniform(p.scale_min, p.scale_max);
  t.tx = rng->Uniform(-p.translate_px, p.translate_px);
  t.ty = rng->Uniform(-p.translate_px, p.translate_px);
  t.flip = rng->Uniform() < p.flip_prob;
  t.elastic_key = rng->Next();
  t.elastic_alpha = p.elastic_alpha;
  t.elastic_sigma = p.elastic_sigma;
  return t;
}

// One transform, the rest the identity. The rotation's sense does not matter
// (its range is symmetric); the shift is whole pixels, rounded half to even,
// as torchvision's int(round(uniform(-max, max))).
SampleTransform DrawRcc(RccView view, KeyedRng* rng, int w, int h) {
  SampleTransform t;
  switch (view) {
    case RccView::kOriginal:
      break;
    case RccView::kRotation:
      t.angle_rad = rng->Uniform(-kRcc.rotation_deg, kRcc.rotation_deg) * M_PI / 180.0;
      break;
    case RccView::kTranslation:
      t.tx = std::nearbyint(rng->Uniform(-kRcc.translate_frac * w, kRcc.translate_frac * w));
      t.ty = std::nearbyint(rng->Uniform(-kRcc.translate_frac * h, kRcc.translate_frac * h));
      break;
    case RccView::kScale:
      t.scale = rng->Uniform(kRcc.scale_min, kRcc.scale_max);
      break;
    case RccView::kFlip:
      t.flip = true;  // RandomHorizontalFlip(p=1): this view is the mirrored image
      break;
    case RccView::kElastic:
      t.elastic_key = rng->Next();
      t.elastic_alpha = kRcc.elastic_alpha;
      t.elastic_sigma = kRcc.elastic_sigma;
      t.elastic_style = ElasticStyle::kTorchvision;
      break;
  }
  return t;
}

}  // namespace

SampleTransform DrawTransform(const AugmentParams& p, const SampleKey& key, int w, int h) {
  // Copy 0's stream is the one every copy used before copies could differ, so
  // identical-copies output keeps its bytes (copies < 2^52 stay distinct).
  KeyedRng rng(key.seed, key.index, key.version, 0xB16 | (key.copy << 12));
  const bool nearest = p.interpolation == Interpolation::kNearest;
  if (p.recipe == Recipe::kRcc) {
    assert(key.version < kRccVersions);
    SampleTransform t = DrawRcc(static_cast<RccView>(key.version), &rng, w, h);
    t.nearest = nearest && t.elastic_alpha == 0;  // ElasticTransform's default is bilinear
    return t;
  }
  SampleTransform t = DrawCompose(p, &rng);
  t.nearest = nearest;
  return t;
}

namespace {

// Gaussian weights for offsets -r..r, summing to 1.
void GaussianKernel(double sigma, int r, std::vector<float>* kernel) {
  kernel->resize(2 * r + 1);
  double total = 0;
  for (int i = -r; i <= r; ++i)
    total += (*kernel)[i + r] = static_cast<float>(std::exp(-0.5 * i * i / (sigma * sigma)));
  for (auto& k : *kernel) k = static_cast<float>(k / total);
}

// Smooths `field` (w x h) with s->kernel, separably, zero outside.
void SmoothZeroPadded(std::vector<float>* field, int w, int h, AugmentScratch* s) {
  const int r = static_cast<int>(s->kernel.size() / 2);
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

// i reflected into [0, n) about the edge pixels, which are not repeated
// (torch's "reflect" padding), for any i, also when the kernel is wider than n.
int Reflect(int i, int n) {
  if (n == 1) return 0;
  const int period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// Fills s->reflect with the source index of padded positions -r..n-1+r.
void ReflectTable(int n, int r, AugmentScratch* s) {
  s->reflect.resize(n + 2 * r);
  for (int j = 0; j < n + 2 * r; ++j) s->reflect[j] = Reflect(j - r, n);
}

// Smooths `field` (w x h) with s->kernel, separably, reflected at the border.
// Each output pixel sums its taps in order from 0, as a plain loop would, but
// pixels side by side accumulate together, which the compiler vectorises.
void SmoothReflected(std::vector<float>* field, int w, int h, AugmentScratch* s) {
  const int taps = static_cast<int>(s->kernel.size()), r = taps / 2;
  float* f = field->data();
  s->tmp.assign(static_cast<size_t>(w) * h, 0.f);
  s->row.resize(w + 2 * r);
  ReflectTable(w, r, s);
  for (int y = 0; y < h; ++y) {
    for (int j = 0; j < w + 2 * r; ++j) s->row[j] = f[y * w + s->reflect[j]];
    float* out = s->tmp.data() + y * w;
    const float* row = s->row.data();
    for (int k = 0; k < taps; ++k) {
      const float weight = s->kernel[k];
      for (int x = 0; x < w; ++x) out[x] += weight * row[x + k];
    }
  }
  ReflectTable(h, r, s);
  for (int y = 0; y < h; ++y) {
    float* out = f + y * w;
    std::fill(out, out + w, 0.f);
    for (int k = 0; k < taps; ++k) {
      const float weight = s->kernel[k];
      const float* in = s->tmp.data() + s->reflect[y + k] * w;
      for (int x = 0; x < w; ++x) out[x] += weight * in[x];
    }
  }
}

// The unscaled displacement field of t into s->dx, s->dy: uniform(-1, 1)
// noise, smoothed as t.elastic_style says.
void ElasticField(const SampleTransform& t, int w, int h, AugmentScratch* s) {
  const size_t n = static_cast<size_t>(w) * h;
  s->dx.resize(n);
  s->dy.resize(n);
  KeyedRng rng(t.elastic_key);
  for (size_t i = 0; i < n; ++i) {
    s->dx[i] = static_cast<float>(rng.Uniform(-1, 1));
    s->dy[i] = static_cast<float>(rng.Uniform(-1, 1));
  }
  if (t.elastic_style == ElasticStyle::kSimard) {
    GaussianKernel(t.elastic_sigma, std::max(1, static_cast<int>(std::ceil(3 * t.elastic_sigma))),
                   &s->kernel);
    SmoothZeroPadded(&s->dx, w, h, s);
    SmoothZeroPadded(&s->dy, w, h, s);
  } else {
    int taps = static_cast<int>(8 * t.elastic_sigma + 1);
    if (taps % 2 == 0) ++taps;
    GaussianKernel(t.elastic_sigma, taps / 2, &s->kernel);
    SmoothReflected(&s->dx, w, h, s);
    SmoothReflected(&s->dy, w, h, s);
  }
}

// Pixels per unit of ElasticField's output.
double ElasticScale(const SampleTransform& t) {
  return t.elastic_style == ElasticStyle::kTorchvision ? t.elastic_alpha / 2 : t.elastic_alpha;
}

// std::floor for |v| < 2^62, inline: without SSE4.1 std::floor is a call,
// and two a pixel were most of ApplyTransform's time.
inline double Floor(double v) {
  const double t = static_cast<double>(static_cast<int64_t>(v));
  return t > v ? t - 1 : t;
}

// std::lround for 0 <= v < 2^23, inline: v + 0.5 is exact in double.
inline long RoundNonNegative(float v) { return static_cast<long>(static_cast<double>(v) + 0.5); }

inline float Pixel(const uint8_t* src, int w, int h, int x, int y) {
  return (x < 0 || y < 0 || x >= w || y >= h) ? 0.f : static_cast<float>(src[y * w + x]);
}

// Moves whole pixels only: a shift by whole pixels, maybe mirrored. Bilinear
// sampling then lands on pixel centres, where it returns the pixel itself.
bool MovesWholePixels(const SampleTransform& t) {
  return t.angle_rad == 0 && t.shear == 0 && t.scale == 1 && t.elastic_alpha == 0 &&
         std::abs(t.tx) < 1 << 20 && std::abs(t.ty) < 1 << 20 && t.tx == std::floor(t.tx) &&
         t.ty == std::floor(t.ty);
}

// ApplyTransform's bytes for such a t, by copying: source x = x - tx, then
// mirrored, as ApplyTransform maps it.
void CopyWholePixels(const uint8_t* src, int w, int h, const SampleTransform& t, uint8_t* dst) {
  const int tx = static_cast<int>(t.tx), ty = static_cast<int>(t.ty);
  for (int y = 0; y < h; ++y) {
    const int sy = y - ty;
    for (int x = 0; x < w; ++x) {
      const int sx = t.flip ? (w - 1) - (x - tx) : x - tx;
      dst[y * w + x] = (sx < 0 || sy < 0 || sx >= w || sy >= h) ? 0 : src[sy * w + sx];
    }
  }
}

}  // namespace

void ElasticDisplacement(const SampleTransform& t, int w, int h, AugmentScratch* s,
                         std::vector<double>* dx, std::vector<double>* dy) {
  ElasticField(t, w, h, s);
  const double alpha = ElasticScale(t);
  dx->resize(s->dx.size());
  dy->resize(s->dy.size());
  for (size_t i = 0; i < s->dx.size(); ++i) {
    (*dx)[i] = alpha * s->dx[i];
    (*dy)[i] = alpha * s->dy[i];
  }
}

void ApplyTransform(const uint8_t* src, int w, int h, const SampleTransform& t, uint8_t* dst,
                    AugmentScratch* s) {
  if (MovesWholePixels(t)) return CopyWholePixels(src, w, h, t, dst);
  const bool elastic = t.elastic_alpha != 0;
  if (elastic) ElasticField(t, w, h, s);
  const double alpha = ElasticScale(t);
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
        px += alpha * s->dx[y * w + x];
        py += alpha * s->dy[y * w + x];
      }
      const double qx = px - cx - t.tx, qy = py - cy - t.ty;
      double sx = cx + i00 * qx + i01 * qy;
      double sy = cy + i10 * qx + i11 * qy;
      if (t.flip) sx = (w - 1) - sx;
      // Bilinear; exact at integer coordinates (identity reproduces the source).
      // Points this far out sample only zeros wherever they are.
      sx = std::clamp(sx, -1e9, 1e9);
      sy = std::clamp(sy, -1e9, 1e9);
      if (t.nearest) {  // the pixel whose centre is nearest (ties to the higher index)
        dst[y * w + x] = static_cast<uint8_t>(
            Pixel(src, w, h, static_cast<int>(Floor(sx + 0.5)), static_cast<int>(Floor(sy + 0.5))));
        continue;
      }
      const double fx = Floor(sx), fy = Floor(sy);
      const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
      const float ax = static_cast<float>(sx - fx), ay = static_cast<float>(sy - fy);
      float v =
          (1 - ay) * ((1 - ax) * Pixel(src, w, h, x0, y0) + ax * Pixel(src, w, h, x0 + 1, y0)) +
          ay * ((1 - ax) * Pixel(src, w, h, x0, y0 + 1) + ax * Pixel(src, w, h, x0 + 1, y0 + 1));
      // v >= 0: a sum of pixels times weights in [0, 1].
      dst[y * w + x] = static_cast<uint8_t>(std::min(RoundNonNegative(v), 255L));
    }
  }
}

}  // namespace shardkit
