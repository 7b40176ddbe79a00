// SampleDecoder: a record's bytes -> one sample's pixels in the batch. JPEG
// records are decoded with the transform's crop chosen from the header
// (RandomResizedCrop for train, Resize + CenterCrop for val, the whole image
// otherwise), at the smallest DCT scale that keeps the output size, and
// resampled into the output layout; raw_u8 records are size-checked and
// copied (transposed to planar for NCHW). RandomCrop (crop) decodes a JPEG
// whole, at full resolution, and copies its padded window, as it copies a
// raw record's. The crop of a sample depends only on (seed, epoch,
// position), so it is the same for any worker count.
//
// Threading: const after construction; each worker passes its own State.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "base/status.h"
#include "image/codec.h"
#include "image/image.h"
#include "loader/transforms.h"
#include "shard/manifest.h"

namespace shardkit {

class SampleDecoder {
 public:
  // A worker's decoding state: decoder handle, buffers, counters.
  struct State {
    JpegDecoder jpeg;
    DecodedRegion region;
    ResampleScratch resample;
    PadCropScratch pad_crop;
    std::atomic<uint64_t> decode_ns{0}, transform_ns{0};
  };

  // The output shape for the dataset's records: JPEGs become 3 x size x size,
  // raw_u8 records keep their {H, W, C} (crop: the crop's H x W, C kept);
  // records of kind 'bytes' are refused, and a crop's fill of other than 1
  // value or one per channel, or (raw records) a crop larger than the padded
  // record.
  static Result<SampleDecoder> Make(const RecordFormat& record, const TransformParams& transform,
                                    Layout layout, uint64_t seed, const std::string& where);

  bool jpeg() const { return jpeg_; }
  int channels() const { return channels_; }
  int height() const { return height_; }
  int width() const { return width_; }
  Layout layout() const { return layout_; }
  size_t sample_bytes() const { return static_cast<size_t>(channels_) * height_ * width_; }

  // Decodes `payload`, the record at `position` of epoch `epoch`, into `out`
  // (sample_bytes() bytes). A payload that does not decode, or a raw record
  // of the wrong size, is a Corruption naming only what is wrong; the caller
  // adds the shard and record.
  Status Decode(State& st, std::string_view payload, uint64_t epoch, uint64_t position,
                uint8_t* out) const {
    if (jpeg_) return DecodeJpeg(st, payload, epoch, position, out);
    if (transform_.kind == TransformKind::kCrop) return CropRaw(st, payload, epoch, position, out);
    if (payload.size() == sample_bytes() && (layout_ == Layout::kNHWC || channels_ == 1)) {
      std::memcpy(out, payload.data(), payload.size());  // the raw fast path, inline
      return Status::OK();
    }
    return DecodeRaw(payload, out);
  }

  // The source rectangle and flip for a w x h image at (epoch, position)
  // (RandomCrop: the window in the padded image, InvalidArgument when the
  // crop is larger than the padded image).
  Result<CropDecision> ChooseCrop(int w, int h, uint64_t epoch, uint64_t position) const;

  // The decode half of a JPEG sample: the rows and columns of `payload` that
  // the sample at (epoch, position) needs, at the DCT scale and with the IDCT
  // the transform picks, into st.region; *crop gets the crop decision.
  // DecodeJpeg is this, then a resample into the output; alone, it is the
  // decode floor that bench/decode_floor.cc measures the loader against.
  Status DecodeRegion(State& st, std::string_view payload, uint64_t epoch, uint64_t position,
                      CropDecision* crop) const;

 private:
  Status DecodeJpeg(State& st, std::string_view payload, uint64_t epoch, uint64_t position,
                    uint8_t* out) const;
  Status DecodeRaw(std::string_view payload, uint8_t* out) const;
  Status CropRaw(State& st, std::string_view payload, uint64_t epoch, uint64_t position,
                 uint8_t* out) const;

  bool jpeg_ = false;
  int channels_ = 0, height_ = 0, width_ = 0;
  int record_height_ = 0, record_width_ = 0;  // raw records' stored size
  Layout layout_ = Layout::kNCHW;
  TransformParams transform_;
  uint64_t seed_ = 0;
};

}  // namespace shardkit
