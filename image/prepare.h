// PrepareImage: one source image made ready to store as a JPEG record, the
// same for shardkit-pack and the Python Writer. Recognised by content (not
// by name: a PNG saved as .JPEG is a PNG), validated with a full strict
// decode at 1/8 scale, and converted to an RGB JPEG the loader decodes when
// it is a PNG or a CMYK/YCCK JPEG; optionally resized (short side).
#pragma once

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

}  // namespace shardkit
