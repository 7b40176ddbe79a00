// Separable antialiased resampling (triangle filter) and layout copies.
#include "image/image.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "image/resample_gather.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace shardkit {
namespace {

// The triangle filter (support 1, widened by the downscale factor) of one
// resample pass over an axis: outputs i < out_size of a region starting at
// in0, in_len long, of an axis of in_size pixels.
struct Filter {
  double in0, scale, filterscale, support;
  int in_size, k;  // k: weights stored per output
};

// Output i's first input index, tap count and weights (normalised), into w
// (k of them). PIL's ImagingResample coefficients, bilinear filter.
void OutputTaps(const Filter& f, int i, int* first, int* count, float* w) {
  const double center = f.in0 + (i + 0.5) * f.scale;
  int xmin = static_cast<int>(std::floor(center - f.support + 0.5));
  int xmax = static_cast<int>(std::floor(center + f.support + 0.5));
  xmin = std::max(xmin, 0);
  xmax = std::min(xmax, f.in_size);
  if (xmax <= xmin) {  // degenerate region: nearest pixel
    xmin = std::clamp(static_cast<int>(center), 0, f.in_size - 1);
    xmax = xmin + 1;
  }
  xmax = std::min(xmax, xmin + f.k);
  double total = 0;
  for (int x = xmin; x < xmax; ++x) {
    // Upscales (filterscale 1) skip a division that would leave t as it is.
    double t = x + 0.5 - center;
    if (f.filterscale != 1.0) t /= f.filterscale;
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
  *first = xmin;
  *count = xmax - xmin;
}

#if defined(SHARDKIT_SIMD_KERNELS)
// OutputTaps for outputs i0 .. i0 + 3, one to a lane: the same operations in
// the same order on each (IEEE division, floor, conversions rounded to
// nearest; each output's sum added tap by tap), so the same values to the
// bit, with a quarter of the divisions. False, with nothing written, where
// an output needs OutputTaps' special cases (a degenerate region or no
// weight): the caller runs OutputTaps for those four.
__attribute__((target("avx2"))) bool FourOutputsTaps(const Filter& f, int i0, int* first,
                                                     int* count, float* weights) {
  const __m256d half = _mm256_set1_pd(0.5), one = _mm256_set1_pd(1.0), sign = _mm256_set1_pd(-0.0),
                zero = _mm256_setzero_pd();
  const __m256d i =
      _mm256_cvtepi32_pd(_mm_add_epi32(_mm_set1_epi32(i0), _mm_setr_epi32(0, 1, 2, 3)));
  const __m256d center = _mm256_add_pd(
      _mm256_set1_pd(f.in0), _mm256_mul_pd(_mm256_add_pd(i, half), _mm256_set1_pd(f.scale)));
  const __m256d support = _mm256_set1_pd(f.support);
  const __m256d lo = _mm256_floor_pd(_mm256_add_pd(_mm256_sub_pd(center, support), half));
  const __m256d hi = _mm256_floor_pd(_mm256_add_pd(_mm256_add_pd(center, support), half));
  // Bounds past the int range: OutputTaps' conversions (and clamps) decide.
  const __m256d range = _mm256_set1_pd(1 << 30);
  if (_mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(sign, lo), range, _CMP_NLT_UQ)) ||
      _mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(sign, hi), range, _CMP_NLT_UQ)))
    return false;
  __m128i xmin = _mm_max_epi32(_mm256_cvttpd_epi32(lo), _mm_setzero_si128());
  __m128i xmax = _mm_min_epi32(_mm256_cvttpd_epi32(hi), _mm_set1_epi32(f.in_size));
  if (_mm_movemask_epi8(_mm_cmpgt_epi32(xmax, xmin)) != 0xffff) return false;
  xmax = _mm_min_epi32(xmax, _mm_add_epi32(xmin, _mm_set1_epi32(f.k)));
  alignas(16) int n[4], x0[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(n), _mm_sub_epi32(xmax, xmin));
  _mm_store_si128(reinterpret_cast<__m128i*>(x0), xmin);
  const int taps = std::max(std::max(n[0], n[1]), std::max(n[2], n[3]));
  const __m256d fs = _mm256_set1_pd(f.filterscale);
  const bool divide = f.filterscale != 1.0;
  // v[j]: tap j of each output (0 past its count), then its weight.
  constexpr int kMaxTaps = 32;
  if (taps > kMaxTaps) return false;
  __m256d v[kMaxTaps];
  __m256d total = zero;
  for (int j = 0; j < taps; ++j) {
    const __m128i x = _mm_add_epi32(xmin, _mm_set1_epi32(j));
    __m256d t = _mm256_sub_pd(_mm256_add_pd(_mm256_cvtepi32_pd(x), half), center);
    if (divide) t = _mm256_div_pd(t, fs);
    // max(1 - |t|, 0): 0 where 1 - |t| is negative (or NaN), as std::max(0.0, .) gives.
    const __m256d tap = _mm256_max_pd(_mm256_sub_pd(one, _mm256_andnot_pd(sign, t)), zero);
    const __m256d on = _mm256_castsi256_pd(
        _mm256_cvtepi32_epi64(_mm_cmpgt_epi32(_mm_sub_epi32(xmax, xmin), _mm_set1_epi32(j))));
    v[j] = _mm256_and_pd(tap, on);
    total = _mm256_add_pd(total, v[j]);  // + 0 past a count leaves the sum as it was
  }
  if (_mm256_movemask_pd(_mm256_cmp_pd(total, zero, _CMP_LE_OQ))) return false;
  alignas(16) float w[kMaxTaps][4];
  for (int j = 0; j < taps; ++j) {
    // The weight as float, back to double, over the sum: as OutputTaps does.
    const __m256d wf = _mm256_cvtps_pd(_mm256_cvtpd_ps(v[j]));
    _mm_store_ps(w[j], _mm256_cvtpd_ps(_mm256_div_pd(wf, total)));
  }
  for (int l = 0; l < 4; ++l) {
    first[l] = x0[l];
    count[l] = n[l];
    for (int j = 0; j < n[l]; ++j) weights[static_cast<size_t>(l) * f.k + j] = w[j][l];
  }
  return true;
}
#endif

// For each output index, the first input index, the tap count and `k`
// weights (normalised); returns k. With `simd`, four outputs at a time where
// the CPU can (the same values; ResampleWith's kNone path keeps the scalar
// loop, which the tests compare with).
int Coefficients(double in0, double in_len, int in_size, int out_size, bool simd,
                 std::vector<int>* bounds, std::vector<int>* counts, std::vector<float>* weights) {
  Filter f;
  f.in0 = in0;
  f.in_size = in_size;
  f.scale = in_len / out_size;
  f.filterscale = std::max(1.0, f.scale);
  f.support = 1.0 * f.filterscale;  // triangle filter support is 1
  f.k = static_cast<int>(std::ceil(f.support)) * 2 + 1;
  bounds->assign(out_size, 0);
  counts->assign(out_size, 0);
  weights->assign(static_cast<size_t>(out_size) * f.k, 0.f);
  int i = 0;
#if defined(SHARDKIT_SIMD_KERNELS)
  if (simd) {  // ResampleWith: isa != kNone, so the CPU has AVX2
    for (; i + 4 <= out_size; i += 4) {
      float* w = weights->data() + static_cast<size_t>(i) * f.k;
      if (FourOutputsTaps(f, i, bounds->data() + i, counts->data() + i, w)) continue;
      for (int l = 0; l < 4; ++l)
        OutputTaps(f, i + l, &(*bounds)[i + l], &(*counts)[i + l],
                   w + static_cast<size_t>(l) * f.k);
    }
  }
#else
  (void)simd;
#endif
  for (; i < out_size; ++i) {
    OutputTaps(f, i, &(*bounds)[i], &(*counts)[i], weights->data() + static_cast<size_t>(i) * f.k);
  }
  return f.k;
}

// One output row of a vertical pass: dst[i] = round(sum_t w[t] * src[t * stride + i])
// clamped to 0..255, for i < n. Sums are formed as w[0] * x0, then + w[t] * xt
// in that order, in float, in every variant, so the variants agree to the bit.
void RowsToBytesPortable(const uint8_t* src, size_t stride, int taps, const float* w, size_t n,
                         float* acc, uint8_t* dst) {
  const float w0 = w[0];
  for (size_t i = 0; i < n; ++i) acc[i] = w0 * static_cast<float>(src[i]);
  for (int t = 1; t < taps; ++t) {
    const uint8_t* row = src + stride * t;
    const float wt = w[t];
    for (size_t i = 0; i < n; ++i) acc[i] += wt * static_cast<float>(row[i]);
  }
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= n; i += 16) {  // the saturating packs do the clamp
    __m128i a = _mm_cvtps_epi32(_mm_loadu_ps(acc + i));
    __m128i b = _mm_cvtps_epi32(_mm_loadu_ps(acc + i + 4));
    __m128i c = _mm_cvtps_epi32(_mm_loadu_ps(acc + i + 8));
    __m128i d = _mm_cvtps_epi32(_mm_loadu_ps(acc + i + 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));
  }
#endif
  for (; i < n; ++i) {
    const long v = std::lrint(acc[i]);
    dst[i] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
}

#if defined(SHARDKIT_SIMD_KERNELS)
// AVX2: 32 outputs at a time, the sums kept in registers across the taps
// (no float row in memory), converted and packed to bytes in place.
__attribute__((target("avx2"))) inline __m256 Widen8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

__attribute__((target("avx2"))) void RowsToBytesAvx2(const uint8_t* src, size_t stride, int taps,
                                                     const float* w, size_t n, float* acc,
                                                     uint8_t* dst) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 w0 = _mm256_set1_ps(w[0]);
    __m256 a = _mm256_mul_ps(w0, Widen8(src + i));
    __m256 b = _mm256_mul_ps(w0, Widen8(src + i + 8));
    __m256 c = _mm256_mul_ps(w0, Widen8(src + i + 16));
    __m256 d = _mm256_mul_ps(w0, Widen8(src + i + 24));
    for (int t = 1; t < taps; ++t) {
      const uint8_t* row = src + stride * t + i;
      const __m256 wt = _mm256_set1_ps(w[t]);
      a = _mm256_add_ps(a, _mm256_mul_ps(wt, Widen8(row)));
      b = _mm256_add_ps(b, _mm256_mul_ps(wt, Widen8(row + 8)));
      c = _mm256_add_ps(c, _mm256_mul_ps(wt, Widen8(row + 16)));
      d = _mm256_add_ps(d, _mm256_mul_ps(wt, Widen8(row + 24)));
    }
    const __m256i ab = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));
    const __m256i cd = _mm256_packs_epi32(_mm256_cvtps_epi32(c), _mm256_cvtps_epi32(d));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order));
  }
  if (i < n) RowsToBytesPortable(src + i, stride, taps, w, n - i, acc, dst + i);
}

// Pass 1 for 3 channels, written as planes: the AVX2 row kernel on 16 pixels
// (48 bytes) at a time, then an SSSE3 shuffle splits R, G and B.
__attribute__((target("avx2"))) void RowsToPlanes3Avx2(const uint8_t* src, size_t stride, int taps,
                                                       const float* w, int npix, float* acc,
                                                       uint8_t* tmp, uint8_t* r, uint8_t* g,
                                                       uint8_t* b) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m128i ra = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i rb = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
  const __m128i rc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
  const __m128i ga = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i gb = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
  const __m128i gc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
  const __m128i ba = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i bb = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
  const __m128i bc = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
  int p = 0;
  for (; p + 16 <= npix; p += 16) {
    const uint8_t* s0 = src + 3 * p;
    const __m256 w0 = _mm256_set1_ps(w[0]);
    __m256 v[6];
    for (int k = 0; k < 6; ++k) v[k] = _mm256_mul_ps(w0, Widen8(s0 + 8 * k));
    for (int t = 1; t < taps; ++t) {
      const uint8_t* row = s0 + stride * t;
      const __m256 wt = _mm256_set1_ps(w[t]);
      for (int k = 0; k < 6; ++k)
        v[k] = _mm256_add_ps(v[k], _mm256_mul_ps(wt, Widen8(row + 8 * k)));
    }
    const __m256i p01 = _mm256_packs_epi32(_mm256_cvtps_epi32(v[0]), _mm256_cvtps_epi32(v[1]));
    const __m256i p23 = _mm256_packs_epi32(_mm256_cvtps_epi32(v[2]), _mm256_cvtps_epi32(v[3]));
    const __m256i p45 = _mm256_packs_epi32(_mm256_cvtps_epi32(v[4]), _mm256_cvtps_epi32(v[5]));
    const __m256i lo =
        _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);  // bytes 0..31
    const __m256i hi =
        _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p45, p45), order);  // bytes 32..47
    const __m128i a = _mm256_castsi256_si128(lo), bv = _mm256_extracti128_si256(lo, 1),
                  c = _mm256_castsi256_si128(hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r + p),
                     _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ra), _mm_shuffle_epi8(bv, rb)),
                                  _mm_shuffle_epi8(c, rc)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(g + p),
                     _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ga), _mm_shuffle_epi8(bv, gb)),
                                  _mm_shuffle_epi8(c, gc)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + p),
                     _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, ba), _mm_shuffle_epi8(bv, bb)),
                                  _mm_shuffle_epi8(c, bc)));
  }
  if (p < npix) {
    const int rest = npix - p;
    RowsToBytesPortable(src + 3 * p, stride, taps, w, static_cast<size_t>(rest) * 3, acc, tmp);
    for (int q = 0; q < rest; ++q) {
      r[p + q] = tmp[3 * q];
      g[p + q] = tmp[3 * q + 1];
      b[p + q] = tmp[3 * q + 2];
    }
  }
}
#endif

void RowsToPlanes3Portable(const uint8_t* src, size_t stride, int taps, const float* w, int npix,
                           float* acc, uint8_t* tmp, uint8_t* r, uint8_t* g, uint8_t* b) {
  RowsToBytesPortable(src, stride, taps, w, static_cast<size_t>(npix) * 3, acc, tmp);
  for (int q = 0; q < npix; ++q) {
    r[q] = tmp[3 * q];
    g[q] = tmp[3 * q + 1];
    b[q] = tmp[3 * q + 2];
  }
}

#if defined(SHARDKIT_SIMD_KERNELS)
bool HasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}
#define SK_PICK(avx2, portable) (HasAvx2() ? (avx2) : (portable))
#else
#define SK_PICK(avx2, portable) (portable)
#endif

void RowsToPlanes3(const uint8_t* src, size_t stride, int taps, const float* w, int npix,
                   float* acc, uint8_t* tmp, uint8_t* r, uint8_t* g, uint8_t* b) {
  static const auto fn = SK_PICK(RowsToPlanes3Avx2, RowsToPlanes3Portable);
  fn(src, stride, taps, w, npix, acc, tmp, r, g, b);
}

void RowsToBytes(const uint8_t* src, size_t stride, int taps, const float* w, size_t n, float* acc,
                 uint8_t* dst) {
  static const auto fn = SK_PICK(RowsToBytesAvx2, RowsToBytesPortable);
  fn(src, stride, taps, w, n, acc, dst);
}

// Byte matrix transpose: out[x * out_stride + y] = in[y * in_stride + x] for
// y < rows, x < cols; 16x16 tiles with SSE2 unpacks, scalar edges.
void TransposeBytes(const uint8_t* in, size_t in_stride, int rows, int cols, uint8_t* out,
                    size_t out_stride) {
  int y0 = 0;
#if defined(__SSE2__)
  for (; y0 + 16 <= rows; y0 += 16) {
    int x0 = 0;
    for (; x0 + 16 <= cols; x0 += 16) {
      __m128i x[16], y[16];
      for (int i = 0; i < 16; ++i) {
        x[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + (y0 + i) * in_stride + x0));
      }
      // Interleave neighbouring rows in 1-, 2-, 4- then 8-byte units.
      auto round = [](const __m128i* a, __m128i* b, auto lo, auto hi) {
        for (int i = 0; i < 8; ++i) {
          b[i] = lo(a[2 * i], a[2 * i + 1]);
          b[i + 8] = hi(a[2 * i], a[2 * i + 1]);
        }
      };
      round(
          x, y, [](__m128i a, __m128i b) { return _mm_unpacklo_epi8(a, b); },
          [](__m128i a, __m128i b) { return _mm_unpackhi_epi8(a, b); });
      round(
          y, x, [](__m128i a, __m128i b) { return _mm_unpacklo_epi16(a, b); },
          [](__m128i a, __m128i b) { return _mm_unpackhi_epi16(a, b); });
      round(
          x, y, [](__m128i a, __m128i b) { return _mm_unpacklo_epi32(a, b); },
          [](__m128i a, __m128i b) { return _mm_unpackhi_epi32(a, b); });
      round(
          y, x, [](__m128i a, __m128i b) { return _mm_unpacklo_epi64(a, b); },
          [](__m128i a, __m128i b) { return _mm_unpackhi_epi64(a, b); });
      // Four rounds of the perfect shuffle leave column j in x[bitreverse4(j)].
      static constexpr int kColumn[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
      for (int k = 0; k < 16; ++k) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + (x0 + kColumn[k]) * out_stride + y0),
                         x[k]);
      }
    }
    for (int yy = y0; yy < y0 + 16; ++yy) {
      for (int xx = x0; xx < cols; ++xx) out[xx * out_stride + yy] = in[yy * in_stride + xx];
    }
  }
#endif
  for (int yy = y0; yy < rows; ++yy) {
    for (int xx = 0; xx < cols; ++xx) out[xx * out_stride + yy] = in[yy * in_stride + xx];
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
        for (int x = tx; x < xe; ++x)
          op[static_cast<size_t>(x) * rows + y] = ip[static_cast<size_t>(y) * cols + x];
      }
    }
  }
}

void TransposePixels(const uint8_t* in, int rows, int cols, int c, uint8_t* out) {
  switch (c) {
    case 1:
      return TransposeTiles<1>(in, rows, cols, out);
    case 3:
      return TransposeTiles<3>(in, rows, cols, out);
    case 4:
      return TransposeTiles<4>(in, rows, cols, out);
  }
  for (int y = 0; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        out[(static_cast<size_t>(x) * rows + y) * c + ch] =
            in[(static_cast<size_t>(y) * cols + x) * c + ch];
      }
    }
  }
}

// Pass 1 (vertical) into planes, one per channel, out_h rows of `cols` each
// (for one channel HWC and CHW are the same bytes): source rows yb[y].. of
// columns x0.. with weights yw[y].
void VerticalToPlanes(const Image& src, int x0, int cols, int out_h, resample::GatherIsa isa,
                      ResampleScratch* s, uint8_t* planes) {
  const int c = src.channels;
  const size_t src_stride = static_cast<size_t>(src.width) * c,
               row1 = static_cast<size_t>(cols) * c;
  const size_t mid_plane = static_cast<size_t>(cols) * out_h;
  auto source_rows = [&](int y) {
    return src.pixels.data() + s->yb[y] * src_stride + static_cast<size_t>(x0) * c;
  };
  auto y_weights = [&](int y) { return s->yw.data() + static_cast<size_t>(y) * s->yk; };
  if (c == 3 && isa == resample::GatherIsa::kAvx512Vbmi) {
    resample::ColumnsToPlanes3(src.pixels.data() + static_cast<size_t>(x0) * c, src_stride, *s,
                               out_h, cols, planes, mid_plane, cols);
    return;
  }
  if (c == 3) {  // split into planes as the rows are written
    if (s->tmp.size() < row1) s->tmp.resize(row1);
    for (int y = 0; y < out_h; ++y) {
      uint8_t* r = planes + static_cast<size_t>(y) * cols;
      RowsToPlanes3(source_rows(y), src_stride, s->yn[y], y_weights(y), cols, s->acc.data(),
                    s->tmp.data(), r, r + mid_plane, r + 2 * mid_plane);
    }
    return;
  }
  // One channel written in place; others interleaved, then split.
  if (c > 1 && s->tmp.size() < out_h * row1) s->tmp.resize(out_h * row1);
  uint8_t* rows = c == 1 ? planes : s->tmp.data();
  for (int y = 0; y < out_h; ++y) {
    RowsToBytes(source_rows(y), src_stride, s->yn[y], y_weights(y), row1, s->acc.data(),
                rows + y * row1);
  }
  if (c > 1) {
    for (int ch = 0; ch < c; ++ch) {
      for (size_t p = 0; p < mid_plane; ++p) planes[ch * mid_plane + p] = rows[p * c + ch];
    }
  }
}

// Pass 2 (horizontal) as planned gathers (resample::PlanRows) from the planes
// of pass 1 (`cols` wide, in s->p1) straight into dst: planes (CHW, or one
// channel), or for 3 channels HWC through planes in scratch.
void HorizontalByGathers(resample::GatherIsa isa, int c, int cols, int out_w, int out_h,
                         Layout layout, const uint8_t* planes, ResampleScratch* s, uint8_t* dst) {
  const size_t mid_plane = static_cast<size_t>(cols) * out_h,
               out_plane = static_cast<size_t>(out_w) * out_h;
  if (layout == Layout::kNCHW || c == 1) {
    for (int ch = 0; ch < c; ++ch) {
      resample::GatherRows(isa, planes + ch * mid_plane, cols, out_h, *s, out_w,
                           dst + ch * out_plane, out_w);
    }
    return;
  }
  if (s->p2.size() < 3 * out_plane) s->p2.resize(3 * out_plane);
  for (int ch = 0; ch < 3; ++ch) {
    resample::GatherRows(isa, planes + ch * mid_plane, cols, out_h, *s, out_w,
                         s->p2.data() + ch * out_plane, out_w);
  }
  resample::Interleave3(s->p2.data(), s->p2.data() + out_plane, s->p2.data() + 2 * out_plane,
                        out_plane, dst);
}

// The horizontal pass run as a vertical one on transposed data: output row x
// (mirrored if flip) sums input rows xb[x] - x0 + t, rows of `len` bytes.
void HorizontalAsVertical(const uint8_t* in, size_t len, int x0, int out_w, bool flip,
                          ResampleScratch* s, uint8_t* out) {
  for (int x = 0; x < out_w; ++x) {
    const int ox = flip ? out_w - 1 - x : x;
    RowsToBytes(in + static_cast<size_t>(s->xb[x] - x0) * len, len, s->xn[x],
                s->xw.data() + static_cast<size_t>(x) * s->xk, len, s->acc.data(),
                out + static_cast<size_t>(ox) * len);
  }
}

// Pass 2 (horizontal) by transposes from the planes of pass 1 (in s->p1):
// byte transposes turn each into cols rows of out_h, the horizontal pass
// runs as a vertical one on each, and byte transposes put the planes upright
// into dst (CHW).
void HorizontalByTransposes(int c, int x0, int cols, int out_w, int out_h, bool flip,
                            ResampleScratch* s, uint8_t* dst) {
  const size_t mid_plane = static_cast<size_t>(cols) * out_h,
               out_plane = static_cast<size_t>(out_w) * out_h;
  const uint8_t* planes = s->p1.data();
  if (s->p2.size() < mid_plane * c) s->p2.resize(mid_plane * c);
  for (int ch = 0; ch < c; ++ch) {
    TransposeBytes(planes + ch * mid_plane, cols, out_h, cols, s->p2.data() + ch * mid_plane,
                   out_h);
  }
  if (s->p1.size() < out_plane * c) s->p1.resize(out_plane * c);
  for (int ch = 0; ch < c; ++ch) {
    uint8_t* outp = s->p1.data() + ch * out_plane;
    HorizontalAsVertical(s->p2.data() + ch * mid_plane, out_h, x0, out_w, flip, s, outp);
    TransposeBytes(outp, out_h, out_w, out_h, dst + ch * out_plane, out_w);
  }
}

}  // namespace

void Resample(const Image& src, const RectF& region, int out_w, int out_h, bool flip, uint8_t* dst,
              ResampleScratch* s, Layout layout) {
  resample::ResampleWith(resample::DetectGatherIsa(), src, region, out_w, out_h, flip, dst, s,
                         layout);
}

void resample::ResampleWith(GatherIsa isa, const Image& src, const RectF& region, int out_w,
                            int out_h, bool flip, uint8_t* dst, ResampleScratch* s, Layout layout) {
  const int c = src.channels;
  const bool simd = isa != GatherIsa::kNone;
  s->xk = Coefficients(region.x, region.w, src.width, out_w, simd, &s->xb, &s->xn, &s->xw);
  s->yk = Coefficients(region.y, region.h, src.height, out_h, simd, &s->yb, &s->yn, &s->yw);
  // Columns of the source that the horizontal pass reads.
  const int x0 = s->xb.front();
  int x1 = 0;
  for (int i = 0; i < out_w; ++i) x1 = std::max(x1, s->xb[i] + s->xn[i]);
  const int cols = x1 - x0;
  const size_t src_stride = static_cast<size_t>(src.width) * c;
  auto grow = [](auto* v, size_t n) {
    if (v->size() < n) v->resize(n);  // never shrinks: no zero-fill per call
  };
  const size_t row1 = static_cast<size_t>(cols) * c;
  grow(&s->acc, std::max(row1, static_cast<size_t>(out_h) * c));
  grow(&s->p1, static_cast<size_t>(out_h) * row1 + 2 * resample::kRowPad);
  // Gathers where the CPU has them and the scale suits them (every output
  // the same to the bit either way); planes and transposes otherwise.
  if ((c == 1 || c == 3) && resample::PlanRows(isa, out_w, flip, x0, s)) {
    uint8_t* planes = s->p1.data() + resample::kRowPad;  // see ColumnsToPlanes3
    VerticalToPlanes(src, x0, cols, out_h, isa, s, planes);
    HorizontalByGathers(isa, c, cols, out_w, out_h, layout, planes, s, dst);
    return;
  }
  if (layout == Layout::kNCHW || c == 1) {
    VerticalToPlanes(src, x0, cols, out_h, resample::GatherIsa::kNone, s, s->p1.data());
    HorizontalByTransposes(c, x0, cols, out_w, out_h, flip, s, dst);
    return;
  }
  // Interleaved (HWC out): pass 1 into pixel rows, transpose pixels, the
  // horizontal pass as a vertical one over pixel rows, transpose back.
  for (int y = 0; y < out_h; ++y) {
    RowsToBytes(src.pixels.data() + s->yb[y] * src_stride + static_cast<size_t>(x0) * c, src_stride,
                s->yn[y], s->yw.data() + static_cast<size_t>(y) * s->yk, row1, s->acc.data(),
                s->p1.data() + y * row1);
  }
  const size_t row2 = static_cast<size_t>(out_h) * c;
  grow(&s->p2, static_cast<size_t>(cols) * row2);
  TransposePixels(s->p1.data(), out_h, cols, c, s->p2.data());
  grow(&s->p1, static_cast<size_t>(out_w) * row2);
  HorizontalAsVertical(s->p2.data(), row2, x0, out_w, flip, s, s->p1.data());
  TransposePixels(s->p1.data(), out_w, out_h, c, dst);
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
