// Gather kernels of the resampler: plans (which byte and weight each lane
// takes, per tap) and the AVX2 and AVX-512 VBMI loops that run them.
#include "image/resample_gather.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <vector>

#if defined(SHARDKIT_SIMD_KERNELS)
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start from an _mm512_undefined vector that
// -W(maybe-)uninitialized takes for an uninitialized read (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif

namespace shardkit::resample {
namespace {

// A group: the outputs one vector holds, and the windows of the row they
// read. AVX2 splits a group of 8 into halves of 4, each with a 16-byte window
// (vpshufb works within 128-bit lanes); AVX-512 reads one 64-byte window for
// a group of 16 (vpermb).
struct Shape {
  int group, window_outputs, window_bytes;
};
Shape ShapeOf(GatherIsa isa) {
  return isa == GatherIsa::kAvx512Vbmi ? Shape{16, 16, 64} : Shape{8, 4, 16};
}

}  // namespace

GatherIsa DetectGatherIsa() {
#if defined(SHARDKIT_SIMD_KERNELS)
  static const GatherIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi"))
      return GatherIsa::kAvx512Vbmi;
    return __builtin_cpu_supports("avx2") ? GatherIsa::kAvx2 : GatherIsa::kNone;
  }();
  return isa;
#else
  return GatherIsa::kNone;
#endif
}

// The plan, in s: per window, its first byte in the row (window); per group
// and tap, each lane's byte within its window at byte 4 * lane of a vector
// (lane_byte; 0x80, a zero byte for vpshufb, where a lane has no such tap)
// and its weight (lane_weight; 0 past a lane's taps: + 0 * x leaves a sum of
// non-negative terms as it was). Groups cover out_w rounded up to 32.
bool PlanRows(GatherIsa isa, int out_w, bool flip, int x0, ResampleScratch* s) {
  if (isa == GatherIsa::kNone) return false;
  const Shape shape = ShapeOf(isa);
  const int groups = (out_w + 31) / 32 * (32 / shape.group);
  const int windows = groups * (shape.group / shape.window_outputs);
  int taps = 1;
  for (int x = 0; x < out_w; ++x) taps = std::max(taps, s->xn[x]);
  s->window.assign(static_cast<size_t>(windows), 0);
  s->lane_byte.assign(static_cast<size_t>(groups) * taps * shape.group * 4, 0x80);
  s->lane_weight.assign(static_cast<size_t>(groups) * taps * shape.group, 0.f);
  for (int wnd = 0; wnd < windows; ++wnd) {
    const int j0 = wnd * shape.window_outputs, j1 = std::min(j0 + shape.window_outputs, out_w);
    if (j0 >= j1) continue;  // past the row: lanes of zeros
    int lo = INT_MAX, hi = 0;
    for (int j = j0; j < j1; ++j) {
      const int x = flip ? out_w - 1 - j : j;
      lo = std::min(lo, s->xb[x] - x0);
      hi = std::max(hi, s->xb[x] - x0 + s->xn[x]);
    }
    if (hi - lo > shape.window_bytes) return false;
    s->window[wnd] = lo;
    for (int j = j0; j < j1; ++j) {
      const int x = flip ? out_w - 1 - j : j, g = j / shape.group, lane = j % shape.group;
      for (int t = 0; t < s->xn[x]; ++t) {
        const size_t k = static_cast<size_t>(g) * taps + t;
        s->lane_byte[(k * shape.group + lane) * 4] = static_cast<uint8_t>(s->xb[x] - x0 + t - lo);
        s->lane_weight[k * shape.group + lane] = s->xw[static_cast<size_t>(x) * s->xk + t];
      }
    }
  }
  s->gather_taps = taps;
  return true;
}

#if defined(SHARDKIT_SIMD_KERNELS)
namespace {

// ---- AVX2 ----

// One tap of a group: each lane's byte of v (as `sel` picks it within its
// 128-bit half) times its weight.
__attribute__((target("avx2"))) inline __m256 TapAvx2(__m256i v, const uint8_t* sel,
                                                      const float* w) {
  const __m256i bytes =
      _mm256_shuffle_epi8(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sel)));
  return _mm256_mul_ps(_mm256_loadu_ps(w), _mm256_cvtepi32_ps(bytes));
}

// Groups of 8 outputs, 4 to a store of 32 bytes; kTaps taps (0: s.gather_taps).
template <int kTaps>
__attribute__((target("avx2"))) void GatherRowsAvx2(const uint8_t* in, size_t in_stride, int rows,
                                                    const ResampleScratch& s, int out_w,
                                                    uint8_t* out, size_t out_stride) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int taps = kTaps > 0 ? kTaps : s.gather_taps, blocks = (out_w + 31) / 32;
  alignas(32) uint8_t tail[32];
  for (int y = 0; y < rows; ++y) {
    const uint8_t* row = in + static_cast<size_t>(y) * in_stride;
    uint8_t* o = out + static_cast<size_t>(y) * out_stride;
    const int* window = s.window.data();
    const uint8_t* sel = s.lane_byte.data();
    const float* w = s.lane_weight.data();
    for (int b = 0; b < blocks; ++b) {
      __m256i sums[4];
      for (int q = 0; q < 4; ++q, window += 2, sel += taps * 32, w += taps * 8) {
        const __m256i v = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(row + window[1]),
                                              reinterpret_cast<const __m128i*>(row + window[0]));
        __m256 a = TapAvx2(v, sel, w);
        for (int t = 1; t < taps; ++t) a = _mm256_add_ps(a, TapAvx2(v, sel + 32 * t, w + 8 * t));
        sums[q] = _mm256_cvtps_epi32(a);
      }
      const __m256i packed =
          _mm256_permutevar8x32_epi32(_mm256_packus_epi16(_mm256_packs_epi32(sums[0], sums[1]),
                                                          _mm256_packs_epi32(sums[2], sums[3])),
                                      order);
      if ((b + 1) * 32 <= out_w) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + b * 32), packed);
      } else {
        _mm256_store_si256(reinterpret_cast<__m256i*>(tail), packed);
        std::memcpy(o + b * 32, tail, static_cast<size_t>(out_w - b * 32));
      }
    }
  }
}

__attribute__((target("avx2"))) void Interleave3Avx2(const uint8_t* r, const uint8_t* g,
                                                     const uint8_t* b, size_t n, uint8_t* dst) {
  // For output bytes 0..15, 16..31 and 32..47 of 16 pixels: the byte of R, G
  // and B each takes (-1: none).
  static const int8_t kFrom[3][3][16] = {
      {{0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1, 5},
       {-1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1},
       {-1, -1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1}},
      {{-1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10, -1},
       {5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10},
       {-1, 5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1}},
      {{-1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1, -1},
       {-1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1},
       {10, -1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15}}};
  __m128i sel[3][3];
  for (int k = 0; k < 3; ++k) {
    for (int c = 0; c < 3; ++c)
      sel[k][c] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kFrom[k][c]));
  }
  size_t p = 0;
  for (; p + 16 <= n; p += 16) {
    const __m128i in[3] = {_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + p)),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + p)),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + p))};
    for (int k = 0; k < 3; ++k) {
      const __m128i v = _mm_or_si128(
          _mm_or_si128(_mm_shuffle_epi8(in[0], sel[k][0]), _mm_shuffle_epi8(in[1], sel[k][1])),
          _mm_shuffle_epi8(in[2], sel[k][2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * p + 16 * k), v);
    }
  }
  for (; p < n; ++p) {
    dst[3 * p] = r[p];
    dst[3 * p + 1] = g[p];
    dst[3 * p + 2] = b[p];
  }
}

// ---- AVX-512 VBMI ----

#define SK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

// Bytes 4 * lane of a vector: a zero-extended 32-bit lane each.
constexpr __mmask64 kLaneLowBytes = 0x1111111111111111ull;

// One tap: each lane's byte of v (as `sel` picks it), zero-extended, as
// float, times its weight.
SK_AVX512 inline __m512 TapAvx512(__m512i v, __m512i sel, __m512 w) {
  return _mm512_mul_ps(w, _mm512_cvtepi32_ps(_mm512_maskz_permutexvar_epi8(kLaneLowBytes, sel, v)));
}

// Sums to bytes: rounded to nearest even, clamped to 0..255 (as packs then
// packus clamp them in the AVX2 kernels).
SK_AVX512 inline __m128i ToBytesAvx512(__m512 sum) {
  return _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_cvtps_epi32(sum), _mm512_setzero_si512()));
}

// Four vectors of sums to bytes, vector q's 16 in bytes 16 * q.. of the
// result: rounded to nearest even and clamped to 0..255 by the saturating
// packs (int32 to int16, int16 to uint8), as ToBytesAvx512 clamps them, with
// half its instructions per vector.
SK_AVX512 inline __m512i Pack4Avx512(__m512 a, __m512 b, __m512 c, __m512 d) {
  // The packs leave element 4 * L + i of vector q at byte 16 * L + 4 * q + i.
  alignas(64) static constexpr auto kOrder = [] {
    std::array<uint8_t, 64> idx{};
    for (int q = 0; q < 4; ++q) {
      for (int l = 0; l < 4; ++l) {
        for (int i = 0; i < 4; ++i)
          idx[16 * q + 4 * l + i] = static_cast<uint8_t>(16 * l + 4 * q + i);
      }
    }
    return idx;
  }();
  const __m512i order = _mm512_load_si512(kOrder.data());
  const __m512i ab = _mm512_packs_epi32(_mm512_cvtps_epi32(a), _mm512_cvtps_epi32(b));
  const __m512i cd = _mm512_packs_epi32(_mm512_cvtps_epi32(c), _mm512_cvtps_epi32(d));
  return _mm512_permutexvar_epi8(order, _mm512_packus_epi16(ab, cd));
}

// The sums of group g's 16 outputs, from the 64-byte window at `in`.
SK_AVX512 inline __m512 GroupAvx512(const uint8_t* in, const uint8_t* sel, const float* w, int g,
                                    int taps) {
  sel += static_cast<size_t>(g) * taps * 64;
  w += static_cast<size_t>(g) * taps * 16;
  const __m512i v = _mm512_loadu_si512(in);
  __m512 a = TapAvx512(v, _mm512_loadu_si512(sel), _mm512_loadu_ps(w));
  for (int t = 1; t < taps; ++t)
    a = _mm512_add_ps(a,
                      TapAvx512(v, _mm512_loadu_si512(sel + 64 * t), _mm512_loadu_ps(w + 16 * t)));
  return a;
}

template <int kTaps>
SK_AVX512 void GatherRowsAvx512(const uint8_t* in, size_t in_stride, int rows,
                                const ResampleScratch& s, int out_w, uint8_t* out,
                                size_t out_stride) {
  const int taps = kTaps > 0 ? kTaps : s.gather_taps, groups = (out_w + 15) / 16;
  for (int y = 0; y < rows; ++y) {
    const uint8_t* row = in + static_cast<size_t>(y) * in_stride;
    uint8_t* o = out + static_cast<size_t>(y) * out_stride;
    const uint8_t* sel = s.lane_byte.data();
    const float* w = s.lane_weight.data();
    int g = 0;
    for (; g + 4 <= groups; g += 4) {  // 64 outputs to a store
      const __m512 a = GroupAvx512(row + s.window[g], sel, w, g, taps),
                   b = GroupAvx512(row + s.window[g + 1], sel, w, g + 1, taps),
                   c = GroupAvx512(row + s.window[g + 2], sel, w, g + 2, taps),
                   d = GroupAvx512(row + s.window[g + 3], sel, w, g + 3, taps);
      const int n = std::min(64, out_w - 16 * g);
      const __mmask64 m = n == 64 ? ~0ull : (1ull << n) - 1;
      _mm512_mask_storeu_epi8(o + 16 * g, m, Pack4Avx512(a, b, c, d));
    }
    for (; g < groups; ++g) {
      const int n = std::min(16, out_w - 16 * g);
      _mm_mask_storeu_epi8(o + 16 * g, static_cast<__mmask16>((1u << n) - 1),
                           ToBytesAvx512(GroupAvx512(row + s.window[g], sel, w, g, taps)));
    }
  }
}

// For channel c, lane i takes byte 3 * i + c of 16 interleaved pixels.
SK_AVX512 inline __m512i ChannelSelect(int c) {
  alignas(64) uint8_t idx[64] = {0};
  for (int i = 0; i < 16; ++i) idx[4 * i] = static_cast<uint8_t>(3 * i + c);
  return _mm512_load_si512(idx);
}

// Output rows y0 .. y0 + kRows of the vertical pass, 16 pixels at a time:
// each source row the rows use is loaded, split into channels and converted
// once, then added into each row it is a tap of (a sum starts at +0: + the
// first product leaves it exactly that product).
// How far ahead along a source row the vertical pass asks for its bytes: the
// decoded crop it reads was just written and sits in L2, not L1, and the
// hardware prefetchers follow the span's several rows poorly (256 bytes,
// 5 blocks of 16 pixels: 0.92-0.95 of the time without, measured with
// bench/resample_ab.sh against 128 and 512).
constexpr int kAhead = 256;
template <int kRows>
SK_AVX512 void ColumnsToPlanes3Avx512(const uint8_t* src, size_t stride, const ResampleScratch& s,
                                      int y0, int npix, uint8_t* planes, size_t plane_bytes,
                                      size_t row_bytes) {
  const __m512i sel[3] = {ChannelSelect(0), ChannelSelect(1), ChannelSelect(2)};
  const int lo = s.yb[y0], span = s.yb[y0 + kRows - 1] + s.yn[y0 + kRows - 1] - lo;
  // Per source row of the span: the rows it is a tap of (bit r) and its weight
  // in each, taken out of the loop (stores through bytes would reload them);
  // on the stack but for downscales by more than about 16.
  constexpr int kStackSpan = 64;
  float stack_weight[kStackSpan * kRows];
  unsigned stack_taps[kStackSpan];
  std::vector<float> heap_weight(span > kStackSpan ? static_cast<size_t>(span) * kRows : 0);
  std::vector<unsigned> heap_taps(span > kStackSpan ? span : 0);
  float* weight = span > kStackSpan ? heap_weight.data() : stack_weight;
  unsigned* taps_of = span > kStackSpan ? heap_taps.data() : stack_taps;
  for (int j = 0; j < span; ++j) {
    taps_of[j] = 0;
    for (int r = 0; r < kRows; ++r) {
      const int y = y0 + r, t = lo + j - s.yb[y];
      const bool on = t >= 0 && t < s.yn[y];
      taps_of[j] |= on ? 1u << r : 0;
      weight[j * kRows + r] = on ? s.yw[static_cast<size_t>(y) * s.yk + t] : 0.f;
    }
  }
  const uint8_t* first = src + static_cast<size_t>(lo) * stride;
  for (int p = 0; p < npix; p += 16) {
    const int n = std::min(16, npix - p);
    const __mmask64 bytes = n == 16 ? (1ull << 48) - 1 : (1ull << (3 * n)) - 1;
    __m512 a[kRows][3];
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < 3; ++c) a[r][c] = _mm512_setzero_ps();
    }
    const uint8_t* at = first + 3 * static_cast<size_t>(p);
    // A whole vector where the row's pixels fill it (a masked byte load
    // costs an extra instruction); the bytes past the 16 pixels go unused.
    const bool whole = 3 * (p + 16) + 16 <= 3 * npix;
    for (int j = 0; j < span; ++j, at += stride) {
      _mm_prefetch(reinterpret_cast<const char*>(at) + kAhead, _MM_HINT_T0);
      const __m512i v = whole ? _mm512_loadu_si512(at) : _mm512_maskz_loadu_epi8(bytes, at);
      __m512 f[3];
      for (int c = 0; c < 3; ++c)
        f[c] = _mm512_cvtepi32_ps(_mm512_maskz_permutexvar_epi8(kLaneLowBytes, sel[c], v));
      for (int r = 0; r < kRows; ++r) {
        if (!(taps_of[j] >> r & 1)) continue;
        const __m512 w = _mm512_set1_ps(weight[j * kRows + r]);
        for (int c = 0; c < 3; ++c) a[r][c] = _mm512_add_ps(a[r][c], _mm512_mul_ps(w, f[c]));
      }
    }
    const unsigned mask = (1u << n) - 1;
    if constexpr (kRows == 4) {
      // A channel's four rows packed into one vector, row r's bytes in its
      // 128-bit lane r, stored from 16 * r bytes before the row's pixels.
      const __mmask64 m = mask;
      const __mmask64 lane[4] = {m, m << 16, m << 32, m << 48};
      uint8_t* out = planes + y0 * row_bytes + p;
      const ptrdiff_t step = static_cast<ptrdiff_t>(row_bytes) - 16;  // < 0 for rows under 16
      for (int c = 0; c < 3; ++c, out += plane_bytes) {
        const __m512i v = Pack4Avx512(a[0][c], a[1][c], a[2][c], a[3][c]);
        for (int r = 0; r < 4; ++r) _mm512_mask_storeu_epi8(out + r * step, lane[r], v);
      }
    } else {
      for (int r = 0; r < kRows; ++r) {
        for (int c = 0; c < 3; ++c) {
          _mm_mask_storeu_epi8(planes + c * plane_bytes + (y0 + r) * row_bytes + p,
                               static_cast<__mmask16>(mask), ToBytesAvx512(a[r][c]));
        }
      }
    }
  }
}

}  // namespace

void GatherRows(GatherIsa isa, const uint8_t* in, size_t in_stride, int rows,
                const ResampleScratch& s, int out_w, uint8_t* out, size_t out_stride) {
  using Fn = void (*)(const uint8_t*, size_t, int, const ResampleScratch&, int, uint8_t*, size_t);
  // Unrolled for the common tap counts (2 to 5: scales 1/2 to 2), a loop otherwise.
  static constexpr Fn kAvx2[] = {GatherRowsAvx2<0>, GatherRowsAvx2<1>, GatherRowsAvx2<2>,
                                 GatherRowsAvx2<3>, GatherRowsAvx2<4>, GatherRowsAvx2<5>};
  static constexpr Fn kAvx512[] = {GatherRowsAvx512<0>, GatherRowsAvx512<1>, GatherRowsAvx512<2>,
                                   GatherRowsAvx512<3>, GatherRowsAvx512<4>, GatherRowsAvx512<5>};
  const int k = s.gather_taps < 6 ? s.gather_taps : 0;
  (isa == GatherIsa::kAvx512Vbmi ? kAvx512 : kAvx2)[k](in, in_stride, rows, s, out_w, out,
                                                       out_stride);
}

void ColumnsToPlanes3(const uint8_t* src, size_t stride, const ResampleScratch& s, int out_h,
                      int npix, uint8_t* planes, size_t plane_bytes, size_t row_bytes) {
  int y = 0;
  for (; y + 4 <= out_h; y += 4)
    ColumnsToPlanes3Avx512<4>(src, stride, s, y, npix, planes, plane_bytes, row_bytes);
  for (; y < out_h; ++y)
    ColumnsToPlanes3Avx512<1>(src, stride, s, y, npix, planes, plane_bytes, row_bytes);
}

void Interleave3(const uint8_t* r, const uint8_t* g, const uint8_t* b, size_t n, uint8_t* dst) {
  Interleave3Avx2(r, g, b, n, dst);
}

#else  // no SIMD kernels: DetectGatherIsa() says kNone and nothing calls these

void GatherRows(GatherIsa, const uint8_t*, size_t, int, const ResampleScratch&, int, uint8_t*,
                size_t) {}
void ColumnsToPlanes3(const uint8_t*, size_t, const ResampleScratch&, int, int, uint8_t*, size_t,
                      size_t) {}
void Interleave3(const uint8_t*, const uint8_t*, const uint8_t*, size_t, uint8_t*) {}

#endif

}  // namespace shardkit::resample
