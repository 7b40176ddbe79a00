// Validation and conversion of one source image into a JPEG record.
#include "image/prepare.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "image/codec.h"
#include "image/image.h"

namespace shardkit {
namespace {

Status ResizeShortAndEncode(JpegDecoder* dec, const std::string& bytes, const Image* decoded,
                            int short_side, int quality, std::string* out) {
  // `decoded` holds full pixels for PNG/CMYK; for plain JPEG decode here, DCT-scaled.
  DecodedRegion region;
  const Image* img = decoded;
  RectF crop;
  if (img == nullptr) {
    JpegInfo info;
    SK_RETURN_IF_ERROR(
        dec->ReadHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &info));
    const double s = double(short_side) / std::min(info.width, info.height);
    DecodeRequest req;
    req.min_width = std::max(1, int(std::ceil(info.width * s)));
    req.min_height = std::max(1, int(std::ceil(info.height * s)));
    SK_RETURN_IF_ERROR(
        dec->Decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), req, &region));
    img = &region.image;
    crop = region.crop;
  } else {
    crop = RectF{0, 0, double(img->width), double(img->height)};
  }
  const double s = double(short_side) / std::min(crop.w, crop.h);
  Image resized;
  resized.Resize(std::max(1, int(std::lround(crop.w * s))),
                 std::max(1, int(std::lround(crop.h * s))), 3);
  ResampleScratch scratch;
  Resample(*img, crop, resized.width, resized.height, false, resized.pixels.data(), &scratch);
  return EncodeJpeg(resized, quality, out);
}

}  // namespace

Status PrepareImage(const std::string& bytes, int resize_short, int quality, PreparedImage* out) {
  thread_local JpegDecoder dec;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  out->change = PreparedImage::Change::kNone;
  switch (SniffImageFormat(p, bytes.size())) {
    case ImageFormat::kJpeg: {
      JpegInfo info;
      SK_RETURN_IF_ERROR(dec.ReadHeader(p, bytes.size(), &info));
      DecodeRequest req;
      req.strict = true;
      if (info.cmyk) {
        DecodedRegion full;
        SK_RETURN_IF_ERROR(dec.Decode(p, bytes.size(), req, &full));
        out->change = PreparedImage::Change::kCmyk;
        if (resize_short > 0 && std::min(info.width, info.height) > resize_short) {
          return ResizeShortAndEncode(&dec, bytes, &full.image, resize_short, quality, &out->jpeg);
        }
        return EncodeJpeg(full.image, quality, &out->jpeg);
      }
      // Validate every entropy-coded segment cheaply: decode at 1/8 scale, strictly.
      req.min_width = req.min_height = 1;
      DecodedRegion small;
      SK_RETURN_IF_ERROR(dec.Decode(p, bytes.size(), req, &small));
      if (resize_short > 0 && std::min(info.width, info.height) > resize_short) {
        out->change = PreparedImage::Change::kResized;
        return ResizeShortAndEncode(&dec, bytes, nullptr, resize_short, quality, &out->jpeg);
      }
      out->jpeg = bytes;
      return Status::OK();
    }
    case ImageFormat::kPng: {
      Image img;
      SK_RETURN_IF_ERROR(DecodePng(p, bytes.size(), &img));
      out->change = PreparedImage::Change::kPng;
      if (resize_short > 0 && std::min(img.width, img.height) > resize_short) {
        return ResizeShortAndEncode(&dec, bytes, &img, resize_short, quality, &out->jpeg);
      }
      return EncodeJpeg(img, quality, &out->jpeg);
    }
    case ImageFormat::kUnknown:
      break;
  }
  return Status::Corruption("not a JPEG or PNG image (unrecognised content)");
}

Status PrepareRecord(std::string bytes, const RecordRule& rule, PreparedImage* out) {
  if (rule.jpeg) return PrepareImage(bytes, rule.resize_short, rule.quality, out);
  if (rule.raw_size > 0 && bytes.size() != rule.raw_size) {
    return Status::InvalidArgument(std::to_string(bytes.size()) + " bytes, the shape needs " +
                                   std::to_string(rule.raw_size));
  }
  out->jpeg = std::move(bytes);
  out->change = PreparedImage::Change::kNone;
  return Status::OK();
}

void ConversionCounts::Count(PreparedImage::Change change) {
  switch (change) {
    case PreparedImage::Change::kCmyk:
      ++cmyk;
      break;
    case PreparedImage::Change::kPng:
      ++png;
      break;
    case PreparedImage::Change::kResized:
      ++resized;
      break;
    case PreparedImage::Change::kNone:
      break;
  }
}

}  // namespace shardkit
