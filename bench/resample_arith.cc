// resample_arith: how much an integer resample could save, per the
// arithmetic alone. The vertical pass of the train transform's resample
// (224 output rows, each 3 taps over a 311-pixel RGB row: ImageNet's typical
// crop at the loader's DCT scale) as three AVX2 row kernels, side by side in
// one run:
//   float   today's: each tap a byte widened to float, a multiply and an add
//           (image.cc's RowsToBytesAvx2);
//   int32   Pillow's own arithmetic (22-bit weights, a 32-bit multiply and
//           add per tap, +2^21 then >> 22): the same pixels as Pillow;
//   madd15  Pillow-SIMD's (15-bit weights, one 16-bit multiply-add per two
//           taps): fewer operations, other pixels than Pillow's.
// It checks the int32 kernel against a scalar form of Pillow's loop (the
// same bytes) and prints each kernel's best time of 7 rounds and its speed
// against float. docs/performance.md ("Why not 0.9") uses the figures.
//
//   resample_arith   (x86-64 with AVX2; prints why not otherwise)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>

namespace {

constexpr int kWidth = 311 * 3, kInRows = 311, kOutRows = 224, kTaps = 3;
constexpr size_t kStride = kWidth + 64;

__attribute__((target("avx2"))) __m256 Float8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx2"))) __m256i Int8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2"))) void Store32(__m256i a, __m256i b, __m256i c, __m256i d,
                                             uint8_t* dst) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order));
}

__attribute__((target("avx2"))) void RowFloat(const uint8_t* src, const float* w, uint8_t* dst) {
  for (size_t i = 0; i + 32 <= kWidth; i += 32) {
    __m256 v[4];
    const __m256 w0 = _mm256_set1_ps(w[0]);
    for (int k = 0; k < 4; ++k) v[k] = _mm256_mul_ps(w0, Float8(src + i + 8 * k));
    for (int t = 1; t < kTaps; ++t) {
      const __m256 wt = _mm256_set1_ps(w[t]);
      for (int k = 0; k < 4; ++k)
        v[k] = _mm256_add_ps(v[k], _mm256_mul_ps(wt, Float8(src + kStride * t + i + 8 * k)));
    }
    Store32(_mm256_cvtps_epi32(v[0]), _mm256_cvtps_epi32(v[1]), _mm256_cvtps_epi32(v[2]),
            _mm256_cvtps_epi32(v[3]), dst + i);
  }
}

__attribute__((target("avx2"))) void RowInt32(const uint8_t* src, const int32_t* w, uint8_t* dst) {
  for (size_t i = 0; i + 32 <= kWidth; i += 32) {
    __m256i v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_set1_epi32(1 << 21);
    for (int t = 0; t < kTaps; ++t) {
      const __m256i wt = _mm256_set1_epi32(w[t]);
      for (int k = 0; k < 4; ++k)
        v[k] = _mm256_add_epi32(v[k], _mm256_mullo_epi32(wt, Int8(src + kStride * t + i + 8 * k)));
    }
    for (int k = 0; k < 4; ++k) v[k] = _mm256_srai_epi32(v[k], 22);
    Store32(v[0], v[1], v[2], v[3], dst + i);
  }
}

// Two rows' bytes interleaved and widened to 16-bit pairs, one vpmaddwd per
// pair of taps (an odd last tap pairs with a zero row). The unpacks leave the
// outputs in another order; for timing only.
__attribute__((target("avx2"))) void RowMadd15(const uint8_t* src, const int32_t* w, uint8_t* dst) {
  for (size_t i = 0; i + 32 <= kWidth; i += 32) {
    __m256i v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_set1_epi32(1 << 13);
    for (int t = 0; t < kTaps; t += 2) {
      const uint8_t* r0 = src + kStride * t + i;
      const bool two = t + 1 < kTaps;
      const __m256i pair = _mm256_set1_epi32((w[t] >> 8) | ((two ? w[t + 1] >> 8 : 0) << 16));
      for (int h = 0; h < 2; ++h) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + 16 * h));
        const __m128i b =
            two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + kStride + 16 * h))
                : _mm_setzero_si128();
        v[2 * h] = _mm256_add_epi32(
            v[2 * h], _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b)), pair));
        v[2 * h + 1] = _mm256_add_epi32(
            v[2 * h + 1], _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b)), pair));
      }
    }
    for (int k = 0; k < 4; ++k) v[k] = _mm256_srai_epi32(v[k], 14);
    Store32(v[0], v[1], v[2], v[3], dst + i);
  }
}

// Pillow's ImagingResampleVertical_8bpc for one output row, scalar.
void RowPillow(const uint8_t* src, const int32_t* w, uint8_t* dst) {
  for (int x = 0; x < kWidth / 32 * 32; ++x) {
    int32_t ss = 1 << 21;
    for (int t = 0; t < kTaps; ++t) ss += src[kStride * t + x] * w[t];
    const int32_t v = ss >> 22;
    dst[x] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
}

template <typename Row>
double BestMicroseconds(const std::vector<uint8_t>& src, std::vector<uint8_t>* dst, Row row) {
  double best = 1e30;
  for (int round = 0; round < 7; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 200; ++it) {
      for (int y = 0; y < kOutRows; ++y)
        row(src.data() + kStride * (y * kInRows / kOutRows), dst->data() + kStride * y);
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        200;
    best = us < best ? us : best;
  }
  return best;
}

}  // namespace

int main() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) {
    std::printf("resample_arith: this CPU has no AVX2\n");
    return 2;
  }
  std::vector<uint8_t> src(kStride * (kInRows + kTaps)), a(kStride * kOutRows), b(a.size());
  std::mt19937 rng(1);
  for (uint8_t& x : src) x = static_cast<uint8_t>(rng());
  // The weights of a 1.39x downscale's middle output (normalised), in both forms.
  const double wd[kTaps] = {0.18, 0.5, 0.32};
  float wf[kTaps];
  int32_t wi[kTaps];
  for (int t = 0; t < kTaps; ++t) {
    wf[t] = static_cast<float>(wd[t]);
    wi[t] = static_cast<int32_t>(0.5 + wd[t] * (1 << 22));
  }
  for (int y = 0; y < kOutRows; ++y) {
    RowInt32(src.data() + kStride * y, wi, a.data() + kStride * y);
    RowPillow(src.data() + kStride * y, wi, b.data() + kStride * y);
  }
  if (a != b) {
    std::printf("resample_arith: the int32 kernel differs from Pillow's loop\n");
    return 1;
  }
  const double f =
      BestMicroseconds(src, &a, [&](const uint8_t* s, uint8_t* d) { RowFloat(s, wf, d); });
  const double i =
      BestMicroseconds(src, &a, [&](const uint8_t* s, uint8_t* d) { RowInt32(s, wi, d); });
  const double m =
      BestMicroseconds(src, &a, [&](const uint8_t* s, uint8_t* d) { RowMadd15(s, wi, d); });
  std::printf("vertical pass, %d output rows x %d bytes, %d taps (best of 7 rounds of 200)\n",
              kOutRows, kWidth, kTaps);
  std::printf("| kernel | us per pass | speed against float |\n|---|---:|---:|\n");
  std::printf("| float (today's pixels) | %.1f | 1.00x |\n", f);
  std::printf("| int32 (Pillow's pixels) | %.1f | %.2fx |\n", i, f / i);
  std::printf("| madd, 15-bit weights (neither) | %.1f | %.2fx |\n", m, f / m);
  return 0;
}
#else
int main() {
  std::printf("resample_arith: x86-64 only\n");
  return 2;
}
#endif
