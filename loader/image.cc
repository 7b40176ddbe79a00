// Separable antialiased resampling (triangle filter) and layout copies.
#include "loader/image.h"

#include <algorithm>
#include <cmath>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// Function multiversioning (an AVX2 clone chosen at load time through an
// ifunc). Sanitizer runtimes are not ready when ifunc resolvers run, so
// sanitized builds use the default code only.
#if defined(SHARDKIT_NO_TARGET_CLONES) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SK_TARGET_CLONES
#else
#define SK_TARGET_CLONES __attribute__((target_clones("avx2", "default")))
#endif

namespace shardkit {
namespace {

// For each output index, the first input index, the tap count and `k`
// weights (normalised). PIL's ImagingResample coefficients, bilinear filter.
int Coefficients(double in0, double in_len, int in_size, int out_size, std::vector<int>* bounds,
                 std::vector<int>* counts, std::vector<float>* weights) {
  const double scale = in_len / out_size;
  const double filterscale = std::max(1.0, scale);
  const double support = 1.0 * filterscale;  // triangle filter support is 1
  const int k = static_cast<int>(std::ceil(support)) * 2 + 1;
  bounds->assign(out_size, 0);
  counts->assign(out_size, 0);
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
    (*counts)[i] = xmax - xmin;
  }
  return k;
}

// dst[i] = sum_t w[t] * rows[t][i] for i < n: one output row of a vertical
// pass, vectorised across the row.
SK_TARGET_CLONES void WeightedRows(const uint8_t* src, size_t stride, int taps, const float* w, size_t n,
                                   float* dst) {
  const float w0 = w[0];
  for (size_t i = 0; i < n; ++i) dst[i] = w0 * static_cast<float>(src[i]);
  for (int t = 1; t < taps; ++t) {
    const uint8_t* row = src + stride * t;
    const float wt = w[t];
    for (size_t i = 0; i < n; ++i) dst[i] += wt * static_cast<float>(row[i]);
  }
}

// Rounds and clamps floats to bytes: SSE2 converts 16 at a time, with the
// saturating packs doing the clamp.
void ToBytes(const float* src, size_t n, uint8_t* dst) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= n; i += 16) {
    __m128i a = _mm_cvtps_epi32(_mm_loadu_ps(src + i));
    __m128i b = _mm_cvtps_epi32(_mm_loadu_ps(src + i + 4));
    __m128i c = _mm_cvtps_epi32(_mm_loadu_ps(src + i + 8));
    __m128i d = _mm_cvtps_epi32(_mm_loadu_ps(src + i + 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));
  }
#endif
  for (; i < n; ++i) {
    const long v = std::lrint(src[i]);
    dst[i] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
}

// Transposes pixels of C bytes in tiles: out[x][y] = in[y][x], where in has
// `rows` rows of `cols` pixels and out has `cols` rows of `rows` pixels.
template <int C>
void TransposeTiles(const uint8_t* in, int rows, int cols, uint8_t* out) {
  struct Pixel {
    uint8_t v[C];
  };
  constexpr int kTile = 32;
  const auto* ip = reinterpret_cast<const Pixel*>(in);
  auto* op = reinterpret_cast<Pixel*>(out);
  for (int ty = 0; ty < rows; ty += kTile) {
    const int ye = std::min(rows, ty + kTile);
    for (int tx = 0; tx < cols; tx += kTile) {
      const int xe = std::min(cols, tx + kTile);
      for (int y = ty; y < ye; ++y) {
        for (int x = tx; x < xe; ++x) op[static_cast<size_t>(x) * rows + y] = ip[static_cast<size_t>(y) * cols + x];
      }
    }
  }
}

// in: `rows` rows of `cols` pixels of C bytes; out: C planes of cols x rows,
// out[ch][x][y] = in[y][x][ch]: a transpose that also splits the channels.
template <int C>
void TransposeToPlanes(const uint8_t* in, int rows, int cols, uint8_t* out) {
  constexpr int kTile = 32;
  const size_t plane = static_cast<size_t>(rows) * cols;
  for (int ty = 0; ty < rows; ty += kTile) {
    const int ye = std::min(rows, ty + kTile);
    for (int tx = 0; tx < cols; tx += kTile) {
      const int xe = std::min(cols, tx + kTile);
      for (int y = ty; y < ye; ++y) {
        const uint8_t* ip = in + (static_cast<size_t>(y) * cols) * C;
        for (int x = tx; x < xe; ++x) {
          for (int ch = 0; ch < C; ++ch) out[ch * plane + static_cast<size_t>(x) * rows + y] = ip[x * C + ch];
        }
      }
    }
  }
}

void TransposePixels(const uint8_t* in, int rows, int cols, int c, uint8_t* out) {
  switch (c) {
    case 1: return TransposeTiles<1>(in, rows, cols, out);
    case 3: return TransposeTiles<3>(in, rows, cols, out);
    case 4: return TransposeTiles<4>(in, rows, cols, out);
  }
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        out[(static_cast<size_t>(x) * rows + y) * c + ch] = in[(static_cast<size_t>(y) * cols + x) * c + ch];
      }
    }
  }
}

}  // namespace

void Resample(const Image& src, const RectF& region, int out_w, int out_h, bool flip, uint8_t* dst,
              ResampleScratch* s, PixelLayout layout) {
  const int c = src.channels;
  s->xk = Coefficients(region.x, region.w, src.width, out_w, &s->xb, &s->xn, &s->xw);
  s->yk = Coefficients(region.y, region.h, src.height, out_h, &s->yb, &s->yn, &s->yw);
  // Columns of the source that the horizontal pass reads.
  const int x0 = s->xb.front();
  int x1 = 0;
  for (int i = 0; i < out_w; ++i) x1 = std::max(x1, s->xb[i] + s->xn[i]);
  const int cols = x1 - x0;
  const size_t src_stride = static_cast<size_t>(src.width) * c;
  auto grow = [](auto* v, size_t n) {
    if (v->size() < n) v->resize(n);  // never shrinks: no zero-fill per call
  };
  // Pass 1 (vertical): p1[y] = sum_t wy * src[yb[y] + t] over the needed
  // columns, accumulated in one float row (L1-resident), stored as bytes.
  const size_t row1 = static_cast<size_t>(cols) * c;
  grow(&s->acc, std::max(row1, static_cast<size_t>(out_h) * c));
  grow(&s->p1, static_cast<size_t>(out_h) * row1);
  for (int y = 0; y < out_h; ++y) {
    WeightedRows(src.pixels.data() + s->yb[y] * src_stride + static_cast<size_t>(x0) * c, src_stride, s->yn[y],
                 s->yw.data() + static_cast<size_t>(y) * s->yk, row1, s->acc.data());
    ToBytes(s->acc.data(), row1, s->p1.data() + y * row1);
  }
  // Transpose, so that the horizontal pass is a vertical one too.
  const size_t row2 = static_cast<size_t>(out_h) * c;
  grow(&s->p2, static_cast<size_t>(cols) * row2);
  TransposePixels(s->p1.data(), out_h, cols, c, s->p2.data());
  // Pass 2: p3[x'] = sum_t wx * p2[xb[x'] - x0 + t] (p3 is out_w rows of out_h pixels).
  grow(&s->p1, static_cast<size_t>(out_w) * row2);
  for (int x = 0; x < out_w; ++x) {
    const int ox = flip ? out_w - 1 - x : x;
    WeightedRows(s->p2.data() + (s->xb[x] - x0) * row2, row2, s->xn[x],
                 s->xw.data() + static_cast<size_t>(x) * s->xk, row2, s->acc.data());
    ToBytes(s->acc.data(), row2, s->p1.data() + ox * row2);
  }
  // Transpose back into HWC (directly, or via scratch and split into CHW planes).
  if (layout == PixelLayout::kHWC) {
    TransposePixels(s->p1.data(), out_w, out_h, c, dst);
  } else if (c == 3) {
    TransposeToPlanes<3>(s->p1.data(), out_w, out_h, dst);
  } else if (c == 1) {
    TransposePixels(s->p1.data(), out_w, out_h, 1, dst);
  } else {
    grow(&s->p2, static_cast<size_t>(out_w) * row2);
    TransposePixels(s->p1.data(), out_w, out_h, c, s->p2.data());
    HwcToChw(s->p2.data(), out_w, out_h, c, dst);
  }
}

void HwcToChw(const uint8_t* src, int w, int h, int channels, uint8_t* dst) {
  const size_t plane = static_cast<size_t>(w) * h;
  if (channels == 3) {
    uint8_t* d0 = dst;
    uint8_t* d1 = dst + plane;
    uint8_t* d2 = dst + 2 * plane;
    for (size_t p = 0; p < plane; ++p) {
      d0[p] = src[3 * p];
      d1[p] = src[3 * p + 1];
      d2[p] = src[3 * p + 2];
    }
    return;
  }
  for (size_t p = 0; p < plane; ++p) {
    for (int ch = 0; ch < channels; ++ch) dst[ch * plane + p] = src[p * channels + ch];
  }
}

}  // namespace shardkit
