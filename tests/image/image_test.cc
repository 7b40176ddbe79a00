// Pixels: the resampler's planar and interleaved paths against each other and
// a naive reference, and the JPEG and PNG decoders' scaled crops and size
// limits (the transforms' geometry: tests/loader/transforms_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "image/codec.h"
#include "image/image.h"
#include "image/resample_gather.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::JpegFlavor;
using testing::MakeJpeg;
using testing::MeanAbsDiff;
using testing::NaiveCropResize;
using testing::SyntheticImage;

// The planar (CHW) resampler path shares no kernel with the interleaved
// (HWC) one past the first pass's arithmetic: they must agree to the bit, for
// widths that are and are not multiples of the SIMD tiles, with and without
// flip, for 3 channels and 1; and the interleaved one must match the naive
// reference on a smooth image.
TEST(ResampleTest, PlanarAndInterleavedAgreeToTheBit) {
  int cases = 0;
  for (int c : {3, 1}) {
    for (int trial = 0; trial < 24; ++trial) {
      const int w = 9 + (trial * 37) % 300, h = 7 + (trial * 53) % 260;
      const int ow = 1 + (trial * 13) % 90, oh = 1 + (trial * 29) % 80;
      Image img = SyntheticImage(w, h, 3, 500 + trial);
      if (c == 1) {
        Image g;
        g.Resize(w, h, 1);
        for (size_t p = 0; p < g.pixels.size(); ++p) g.pixels[p] = img.pixels[3 * p + 1];
        img = g;
      }
      const RectF r{w * 0.07, h * 0.11, w * 0.83, h * 0.8};
      const bool flip = trial & 1;
      ResampleScratch s;
      std::vector<uint8_t> hwc(size_t(ow) * oh * c), chw(hwc.size()), want(hwc.size());
      Resample(img, r, ow, oh, flip, hwc.data(), &s, Layout::kNHWC);
      Resample(img, r, ow, oh, flip, chw.data(), &s, Layout::kNCHW);
      HwcToChw(hwc.data(), ow, oh, c, want.data());
      ASSERT_EQ(chw, want) << c << " channels, " << w << "x" << h << " -> " << ow << "x" << oh
                           << " flip " << flip;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 48);
  Image img = SyntheticImage(320, 240, 3, 9);
  const RectF r{20, 10, 250, 200};
  for (bool flip : {false, true}) {
    ResampleScratch s;
    std::vector<uint8_t> out(64 * 64 * 3);
    Resample(img, r, 64, 64, flip, out.data(), &s, Layout::kNHWC);
    Image ref = NaiveCropResize(img, r, 64, flip);
    EXPECT_LT(MeanAbsDiff(out.data(), ref.pixels.data(), out.size()), 6.0) << "flip " << flip;
  }
}

// The gather kernels (AVX2, AVX-512 VBMI: whichever this CPU has) against
// the planes-and-transposes path they replace, to the bit: 3 channels and 1,
// both layouts, with and without flip, widths that are and are not
// multiples of the vectors, upscales and downscales up to 5x (past what a
// gather window spans, where Resample falls back), and regions at the
// image's edges, where the filter's taps are cut.
TEST(ResampleTest, GatherKernelsAgreeWithTransposesToTheBit) {
  using resample::GatherIsa;
  const GatherIsa best = resample::DetectGatherIsa();
  std::vector<GatherIsa> isas = {GatherIsa::kAvx2, GatherIsa::kAvx512Vbmi};
  isas.erase(std::remove_if(isas.begin(), isas.end(), [&](GatherIsa i) { return i > best; }),
             isas.end());
  if (isas.empty()) GTEST_SKIP() << "this CPU has no gather kernels (no AVX2)";
  int cases = 0;
  for (int trial = 0; trial < 160; ++trial) {
    const int c = trial % 5 == 4 ? 1 : 3;
    const int w = 17 + (trial * 71) % 420, h = 13 + (trial * 37) % 350;
    const int ow = 1 + (trial * 29) % 240, oh = 1 + (trial * 43) % 230;
    Image img = SyntheticImage(w, h, 3, 900 + trial);
    if (c == 1) {
      Image g;
      g.Resize(w, h, 1);
      for (size_t p = 0; p < g.pixels.size(); ++p) g.pixels[p] = img.pixels[3 * p];
      img = g;
    }
    // Regions from a sliver to the whole image, some flush with its edges.
    const double fx = (trial % 7) / 8.0, fy = (trial % 3) / 4.0;
    const double rw = w * (1 - fx) * (0.2 + 0.8 * ((trial * 13) % 10) / 9.0);
    const double rh = h * (1 - fy) * (0.2 + 0.8 * ((trial * 17) % 10) / 9.0);
    const RectF r{w * fx, h * fy, std::max(1.0, rw), std::max(1.0, rh)};
    for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
      const bool flip = (trial / 2) % 2;
      const size_t bytes = size_t(ow) * oh * c;
      std::vector<uint8_t> want(bytes), got(bytes);
      ResampleScratch s;
      resample::ResampleWith(GatherIsa::kNone, img, r, ow, oh, flip, want.data(), &s, layout);
      for (GatherIsa isa : isas) {
        ResampleScratch fresh;
        resample::ResampleWith(isa, img, r, ow, oh, flip, got.data(), &fresh, layout);
        ASSERT_EQ(got, want) << "isa " << int(isa) << ", " << c << " channels, " << w << "x" << h
                             << " region " << r.x << "," << r.y << " " << r.w << "x" << r.h
                             << " -> " << ow << "x" << oh << " flip " << flip << " layout "
                             << NameOf(kLayoutNames, layout);
        // A scratch reused from a larger image plans afresh.
        resample::ResampleWith(isa, img, r, ow, oh, flip, got.data(), &s, layout);
        ASSERT_EQ(got, want);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 320 * static_cast<int>(isas.size()));
}

// The filter's coefficient tables (first tap, tap count and weights of each
// output, both axes) as the kernels compute them, four outputs to a vector,
// against the scalar loop, to the bit: downscales and upscales, regions at
// and past the image's edges (cut taps, degenerate regions), fractional
// offsets, and sizes that do and do not fill the vectors.
TEST(ResampleTest, VectorCoefficientsAgreeWithScalarToTheBit) {
  using resample::GatherIsa;
  if (resample::DetectGatherIsa() == GatherIsa::kNone)
    GTEST_SKIP() << "this CPU has no gather kernels (no AVX2)";
  const Image img = SyntheticImage(97, 61, 1, 5);
  const auto check = [&](const RectF& r, int ow, int oh) {
    std::vector<uint8_t> out(static_cast<size_t>(ow) * oh);
    ResampleScratch scalar, vector;
    resample::ResampleWith(GatherIsa::kNone, img, r, ow, oh, false, out.data(), &scalar,
                           Layout::kNCHW);
    resample::ResampleWith(resample::DetectGatherIsa(), img, r, ow, oh, false, out.data(), &vector,
                           Layout::kNCHW);
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    ASSERT_TRUE(scalar.xb == vector.xb && scalar.xn == vector.xn && same(scalar.xw, vector.xw) &&
                scalar.yb == vector.yb && scalar.yn == vector.yn && same(scalar.yw, vector.yw))
        << "region " << r.x << "," << r.y << " " << r.w << "x" << r.h << " -> " << ow << "x" << oh;
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 3000; ++trial) {
    const int ow = 1 + static_cast<int>(u(rng) * 70), oh = 1 + static_cast<int>(u(rng) * 70);
    // Mostly inside the image; one in eight reaching past an edge or outside.
    const double spill = trial % 8 == 0 ? 1.6 : 1.0;
    const double rw = std::max(0.01, img.width * spill * u(rng) * u(rng) * 2);
    const double rh = std::max(0.01, img.height * spill * u(rng) * u(rng) * 2);
    check({(img.width - rw / spill) * u(rng) * spill, (img.height - rh / spill) * u(rng) * spill,
           rw, rh},
          ow, oh);
  }
  // Whole and half pixels, where centres fall exactly on taps' edges:
  // starts before, at and past the image's first pixel (a centre at
  // 0.5 - filterscale leaves an output no weight at all), widths from a
  // pixel to the image, and up- and downscales.
  for (double x : {-20.0, -0.75, -0.5, 0.0, 0.5, 1.0, 7.5, 40.0, 95.5}) {
    for (double w : {1.0, 2.0, 3.0, 5.0, 8.0, 9.0, 13.0, 24.0, 40.0, 64.0, 97.0}) {
      for (int out : {4, 5, 10, 16, 33, 40, 70}) check({x, x, w, w}, out, out);
    }
  }
}

TEST(JpegDecoderTest, ScaledCroppedDecodeChoosesTheSmallestSufficientScale) {
  Image img = SyntheticImage(800, 600, 3, 5);
  std::string jpeg = MakeJpeg(img, JpegFlavor::kRgb, 90);
  JpegDecoder dec;
  DecodeRequest req;
  req.crop = RectF{100, 100, 400, 400};
  req.min_width = req.min_height = 100;
  DecodedRegion out;
  ASSERT_TRUE(
      dec.Decode(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), req, &out).ok());
  EXPECT_EQ(out.scale_num, 2);  // 400 * 2/8 = 100 >= 100
  EXPECT_LT(out.image.width, 800 / 4 + 16) << "columns outside the crop are not decoded";
  EXPECT_LT(out.image.height, 400 / 4 + 8) << "rows outside the crop are not decoded";
  EXPECT_NEAR(out.crop.w, 100, 1e-6);
}

TEST(JpegDecoderTest, EnormousDeclaredDimensionsAreRefusedBeforeAllocation) {
  Image img = SyntheticImage(16, 16, 3, 1);
  std::string jpeg = MakeJpeg(img, JpegFlavor::kRgb);
  // Patch the SOF0 frame header's height and width to 60000 x 60000.
  size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = static_cast<char>(0xEA);
  jpeg[sof + 6] = static_cast<char>(0x60);
  jpeg[sof + 7] = static_cast<char>(0xEA);
  jpeg[sof + 8] = static_cast<char>(0x60);
  JpegDecoder dec;
  DecodedRegion out;
  Status s =
      dec.Decode(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), DecodeRequest{}, &out);
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(s.message().find("limit"), std::string::npos) << s.message();
  EXPECT_EQ(out.image.pixels.capacity(), 0u);
}

// A progressive JPEG is decoded from a buffer of all its coefficients at
// full resolution: 2 bytes a sample, allocated and zeroed before the first
// scan. A header declaring 32000 x 32000 in a few hundred bytes is refused
// before that buffer exists (it took 6 GB and 9 s to fail otherwise).
TEST(JpegDecoderTest, AProgressiveJpegsCoefficientBuffersAreBudgetedBeforeAllocation) {
  Image img = SyntheticImage(64, 64, 3, 2);
  std::string jpeg = MakeJpeg(img, JpegFlavor::kProgressive);
  const size_t sof = jpeg.find("\xFF\xC2");
  ASSERT_NE(sof, std::string::npos);
  for (int at : {5, 7}) {  // height, width: 32000 (0x7D00), under the per-side limit
    jpeg[sof + at] = static_cast<char>(0x7D);
    jpeg[sof + at + 1] = 0;
  }
  JpegDecoder dec;
  DecodeRequest req;
  req.min_width = req.min_height = 1;  // 1/8 scale: the coefficients stay full size
  DecodedRegion out;
  Status s = dec.Decode(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), req, &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("progressive (multi-scan) at 32000x32000"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("MiB of coefficient buffers, over the 512 MiB limit"),
            std::string::npos)
      << s.message();
  // Under the budget it decodes.
  jpeg = MakeJpeg(img, JpegFlavor::kProgressive);
  ASSERT_TRUE(
      dec.Decode(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), DecodeRequest{}, &out)
          .ok());
  EXPECT_EQ(out.image.width, 64);
}

// An image whose crop would decode past the budget is refused, or, for a
// caller that resamples afterwards (the loader), decoded at the largest SIMD
// DCT scale within it: the pack accepts up to 32768 pixels a side, and the
// val transform decodes at full resolution.
TEST(JpegDecoderTest, ACropOverTheBudgetIsDecodedSmallerOnlyWhenAsked) {
  Image img = SyntheticImage(800, 600, 3, 5);
  std::string jpeg = MakeJpeg(img, JpegFlavor::kRgb, 90);
  const auto* p = reinterpret_cast<const uint8_t*>(jpeg.data());
  JpegDecoder dec;
  DecodeRequest req;
  req.max_decoded_bytes = 800 * 600 * 3 / 3;  // 4/8 (400 x 300 x 3) fits, 8/8 does not
  DecodedRegion out;
  Status s = dec.Decode(p, jpeg.size(), req, &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("would decode to 1440000 bytes"), std::string::npos) << s.message();
  req.shrink_to_fit = true;
  ASSERT_TRUE(dec.Decode(p, jpeg.size(), req, &out).ok());
  EXPECT_EQ(out.scale_num, 4);
  EXPECT_EQ(out.image.width, 400);
  EXPECT_EQ(out.image.height, 300);
  EXPECT_NEAR(out.crop.w, 400, 1e-6);
  EXPECT_NEAR(out.crop.h, 300, 1e-6);
  req.max_decoded_bytes = 10;  // not even 1/8 fits
  s = dec.Decode(p, jpeg.size(), req, &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("at scale 1/8"), std::string::npos) << s.message();
}

// A PNG is decoded whole: its declared size is budgeted before any pixel
// buffer exists (a 20000 x 20000 header in a 1x1 file).
TEST(PngDecoderTest, ADeclaredSizeOverTheBudgetIsRefusedBeforeAllocation) {
  Image img = SyntheticImage(1, 1, 3, 1);
  std::string png;
  ASSERT_TRUE(EncodePng(img, &png).ok());
  // The IHDR chunk: "IHDR", width, height (big-endian), 5 bytes, then a CRC
  // of the type and data.
  const size_t ihdr = png.find("IHDR");
  ASSERT_NE(ihdr, std::string::npos);
  for (size_t at : {ihdr + 4, ihdr + 8}) {
    const uint32_t v = 20000;
    for (int b = 0; b < 4; ++b) png[at + b] = static_cast<char>(v >> (24 - 8 * b));
  }
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = ihdr; i < ihdr + 17; ++i) {
    crc ^= static_cast<uint8_t>(png[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  crc = ~crc;
  for (int b = 0; b < 4; ++b) png[ihdr + 17 + b] = static_cast<char>(crc >> (24 - 8 * b));
  Image out;
  Status s = DecodePng(reinterpret_cast<const uint8_t*>(png.data()), png.size(), &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(s.message().find("20000x20000 pixels: decoding it needs 1145 MiB, over the 512 MiB"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(out.pixels.capacity(), 0u);
}

}  // namespace
}  // namespace shardkit
