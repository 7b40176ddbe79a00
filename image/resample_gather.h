// The resampler's gather kernels (image.cc's Resample runs them where the CPU
// has the instructions): the passes of the triangle filter with each output
// lane's input byte gathered by a byte permute (AVX-512 VBMI) or shuffle
// (AVX2) straight into a zero-extended 32-bit lane, so that the horizontal
// pass needs no transposes and the vertical one writes planes as it goes.
// The sums are formed as in every other resampler path (w[0] * x0, then
// + w[t] * xt in that order, in float, rounded to nearest even and clamped to
// 0..255), so the results agree with them to the bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "image/image.h"

// SIMD kernels on x86-64, except in sanitizer builds (which keep their
// reports about our code, not about intrinsics) and where asked not to.
#if (defined(__x86_64__) || defined(__i386__)) && !defined(SHARDKIT_NO_TARGET_CLONES) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define SHARDKIT_SIMD_KERNELS 1
#endif

namespace shardkit::resample {

// The kernels this CPU runs: none, AVX2 (the horizontal pass), or AVX-512
// with VBMI (both passes). Detected once.
enum class GatherIsa { kNone, kAvx2, kAvx512Vbmi };
GatherIsa DetectGatherIsa();

// Resample (image.h) with the kernels of `isa` at most (kNone: the portable
// planes, transposes and row kernels), for tests that compare the paths; isa
// must not exceed DetectGatherIsa().
void ResampleWith(GatherIsa isa, const Image& src, const RectF& region, int out_w, int out_h,
                  bool flip, uint8_t* dst, ResampleScratch* scratch, Layout layout);

// Bytes a gather may read past the last byte of a row that it uses.
inline constexpr size_t kRowPad = 64;

// Plans the horizontal pass for outputs x < out_w, mirrored if flip: output
// x sums bytes xb[x] - x0 .. + xn[x] of its input row with weights xw (the
// coefficient tables in s). False, with nothing planned, where a group's taps
// span more than its window (downscales by more than about 3 with AVX2, 14
// with AVX-512) or isa is kNone.
bool PlanRows(GatherIsa isa, int out_w, bool flip, int x0, ResampleScratch* s);

// `rows` rows of `in` (stride in_stride) through the planned horizontal pass
// into rows of out_w bytes of `out` (stride out_stride).
void GatherRows(GatherIsa isa, const uint8_t* in, size_t in_stride, int rows,
                const ResampleScratch& s, int out_w, uint8_t* out, size_t out_stride);

// The vertical pass for 3 interleaved channels, into planes (kAvx512Vbmi
// only): for each output row y < out_h and pixel p < npix, byte p of row y of
// plane c (planes + c * plane_bytes + y * row_bytes) sums byte c of pixel p
// of source rows yb[y] + t, t < yn[y], with weights yw (s's coefficient
// tables), `src` pointing at pixel 0 of source row 0. Reads no byte outside
// those pixels and writes none outside the planes' rows, but its masked
// stores span up to 48 bytes before a row's first byte and 64 past its
// last: `planes` must have kRowPad bytes of its buffer before it and after
// its last row.
void ColumnsToPlanes3(const uint8_t* src, size_t stride, const ResampleScratch& s, int out_h,
                      int npix, uint8_t* planes, size_t plane_bytes, size_t row_bytes);

// Three planes of n bytes into n interleaved pixels (kAvx2 or better).
void Interleave3(const uint8_t* r, const uint8_t* g, const uint8_t* b, size_t n, uint8_t* dst);

}  // namespace shardkit::resample
