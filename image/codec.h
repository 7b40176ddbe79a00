// JPEG and PNG codecs over libjpeg-turbo and libpng. JpegDecoder decodes only
// what a crop needs: it picks the DCT scale (N/8) that keeps the crop at least
// the requested size, skips the rows above and below it and, with
// jpeg_crop_scanline, the columns beside it. One decoder per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "image/image.h"

namespace shardkit {

struct JpegInfo {
  int width = 0, height = 0;
  int components = 0;
  bool cmyk = false;  // CMYK or YCCK: needs conversion to RGB
  bool progressive = false;
};

// Limits checked from the header, before any pixel buffer is allocated.
inline constexpr int kMaxImageSide = 32768;
inline constexpr uint64_t kMaxDecodedBytes = 512ull << 20;

struct DecodeRequest {
  RectF crop;  // in full-resolution source pixels; w == 0 means the whole image
  // If set, called once the header is read, with the image's full size, to
  // choose the crop (instead of `crop`): saves parsing the header twice.
  std::function<RectF(int width, int height)> choose_crop;
  int min_width = 0;  // the decoded crop must keep at least this size (0: full resolution)
  int min_height = 0;
  // Only the DCT scales libjpeg-turbo has SIMD for (8/8, 4/8, 2/8, 1/8): the
  // loader's choice. Other N/8 scales cost more and, resampled afterwards,
  // land further from a full decode (PIL, torchvision).
  bool simd_scales_only = false;
  // The fast integer IDCT instead of the accurate one: training input, where
  // augmentation dwarfs its error. Val uses the accurate one, which keeps its
  // pixels within a fraction of a level of torchvision's on real photos.
  bool fast = false;
  // A crop whose decode at the chosen scale would exceed max_decoded_bytes is
  // decoded at the largest SIMD scale (4/8, 2/8, 1/8) within it instead of
  // refused: for callers that resample the crop afterwards (the loader's
  // full-resolution transforms on images of over about 170 megapixels).
  bool shrink_to_fit = false;
  // The budget for the decoded crop, and for a progressive (multi-scan)
  // JPEG's coefficient buffers, full size at any scale (2 bytes a sample).
  uint64_t max_decoded_bytes = kMaxDecodedBytes;
  uint64_t max_coefficient_bytes = kMaxDecodedBytes;
  bool strict = false;  // treat libjpeg's corrupt-data warnings (truncated data, bad
                        // Huffman codes) as errors instead of decoding gray filler
};

// RGB pixels of (a region around) the requested crop, and where the crop lies in them.
struct DecodedRegion {
  Image image;        // 3 channels
  RectF crop;         // the requested crop, in image's pixel coordinates (scaled, shifted)
  int scale_num = 8;  // the DCT scale used: scale_num / 8
};

// Not thread-safe; reusable across images.
class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  Status ReadHeader(const uint8_t* data, size_t size, JpegInfo* info);
  Status Decode(const uint8_t* data, size_t size, const DecodeRequest& req, DecodedRegion* out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Encodes RGB (3 channels) or gray (1 channel) pixels as a baseline JPEG with
// 4:2:0 chroma subsampling. Thread-safe (a TurboJPEG handle per call).
Status EncodeJpeg(const Image& image, int quality, std::string* out);

// Decodes a PNG to 8-bit RGB (palette, gray, 16-bit and alpha are converted;
// alpha is dropped). Thread-safe.
Status DecodePng(const uint8_t* data, size_t size, Image* out);

// Encodes 8-bit gray (1 channel) or RGB (3 channels) pixels as PNG. Thread-safe.
Status EncodePng(const Image& image, std::string* out);

enum class ImageFormat { kUnknown, kJpeg, kPng };
// Recognises an image by its leading bytes, not its name.
ImageFormat SniffImageFormat(const uint8_t* data, size_t size);

}  // namespace shardkit
