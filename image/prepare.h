// PrepareRecord: one input sample made into the record to store, the one
// rule of shardkit-pack and the Python Writer. An image (PrepareImage) is
// recognised by content (not by name: a PNG saved as .JPEG is a PNG),
// validated with a full strict decode at 1/8 scale, and converted to an RGB
// JPEG the loader decodes when it is a PNG or a CMYK/YCCK JPEG; optionally
// resized (short side). A raw record is checked against its shape's size.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace shardkit {

struct PreparedImage {
  std::string jpeg;
  enum class Change { kNone, kCmyk, kPng, kResized } change = Change::kNone;
};

// The JPEG quality of re-encoded images unless a writer is told otherwise
// (shardkit-pack --quality, the Python Writer).
inline constexpr int kDefaultJpegQuality = 90;

// resize_short 0 keeps the size; quality is for re-encoded images. Thread-safe.
Status PrepareImage(const std::string& bytes, int resize_short, int quality, PreparedImage* out);

// What a dataset's records are, as far as making one goes: the Packer's from
// its source's kind and shape and --resize-short/--quality, the Python
// Writer's from its kind and shape.
struct RecordRule {
  bool jpeg = true;                   // JPEG records: each sample through PrepareImage
  uint64_t raw_size = 0;              // otherwise stored as given, of exactly this size (0: any)
  int resize_short = 0;               // JPEG: 0 keeps the size
  int quality = kDefaultJpegQuality;  // JPEG: for re-encoded images
};

// A sample's bytes (an image file's, or a raw record's) made into the record
// to store, in out->jpeg (a raw record's bytes as given, moved), with
// out->change saying how it was changed. Errors name no sample (the caller
// knows it): PrepareImage's, or for a raw record of another size
// InvalidArgument "N bytes, the shape needs M". Thread-safe; throws only
// what allocation throws.
Status PrepareRecord(std::string bytes, const RecordRule& rule, PreparedImage* out);

// Records stored other than as given, counted as they are written: a pack's
// summary, the Python Writer's `converted`.
struct ConversionCounts {
  uint64_t cmyk = 0, png = 0;  // converted to an RGB JPEG
  uint64_t resized = 0;        // re-encoded smaller (resize_short)
  void Count(PreparedImage::Change change);
  uint64_t converted() const { return cmyk + png; }
};

}  // namespace shardkit
