#include "loader/sample_decoder.h"

#include <cstring>

#include "base/clock.h"
#include "base/random.h"

namespace shardkit {

Result<SampleDecoder> SampleDecoder::Make(const RecordFormat& record,
                                          const TransformParams& transform, Layout layout,
                                          uint64_t seed, const std::string& where) {
  SampleDecoder d;
  d.transform_ = transform;
  d.layout_ = layout;
  d.seed_ = seed;
  switch (record.kind) {
    case format::RecordKind::kJpeg:
      d.jpeg_ = true;
      d.channels_ = 3;
      d.height_ = transform.out_height();
      d.width_ = transform.out_width();
      break;
    case format::RecordKind::kRawU8:
      if (!TransformApplies(record.kind, transform.kind)) {
        return Status::InvalidArgument(
            where + ": holds raw " + std::to_string(record.shape[0]) + "x" +
            std::to_string(record.shape[1]) + "x" + std::to_string(record.shape[2]) +
            " records, which the loader returns as stored or cropped; transform '" +
            TransformKindName(transform.kind) +
            "' resizes JPEG records: use transform none, or crop (RandomCrop), and resize or "
            "augment the batches after the loader if you need to");
      }
      d.record_height_ = d.height_ = static_cast<int>(record.shape[0]);
      d.record_width_ = d.width_ = static_cast<int>(record.shape[1]);
      d.channels_ = static_cast<int>(record.shape[2]);
      if (transform.kind == TransformKind::kCrop) {
        d.height_ = transform.out_height();
        d.width_ = transform.out_width();
        KeyedRng rng(0);
        Result<CropDecision> fits = RandomCrop(d.record_width_, d.record_height_, transform, &rng);
        if (!fits.ok()) return Status::InvalidArgument(where + ": " + fits.status().message());
      }
      break;
    case format::RecordKind::kBytes:
      return Status::Unsupported(where + ": records of kind 'bytes' have no image shape to load");
  }
  if (transform.kind == TransformKind::kCrop && transform.fill_channels != 1 &&
      transform.fill_channels != d.channels_) {
    return Status::InvalidArgument(where + ": RandomCrop's fill has " +
                                   std::to_string(transform.fill_channels) + " values, and its " +
                                   "images have " + std::to_string(d.channels_) +
                                   " channels: give one value, or one per channel");
  }
  return d;
}

Result<CropDecision> SampleDecoder::ChooseCrop(int w, int h, uint64_t epoch,
                                               uint64_t position) const {
  CropDecision crop;
  switch (transform_.kind) {
    case TransformKind::kCrop: {
      KeyedRng rng(seed_, epoch, position, 0xC20B);
      return RandomCrop(w, h, transform_, &rng);
    }
    case TransformKind::kTrain: {
      KeyedRng rng(seed_, epoch, position, 0xA06);
      crop = RandomResizedCrop(w, h, transform_, &rng);
      break;
    }
    case TransformKind::kVal:
      crop = CenterCrop(w, h, transform_);
      break;
    case TransformKind::kResize:
    case TransformKind::kNone:
      crop.rect = RectF{0, 0, double(w), double(h)};
      break;
  }
  if (transform_.kind != TransformKind::kTrain && transform_.flip() > 0) {
    KeyedRng rng(seed_, epoch, position, 0xF11);
    crop.flip = rng.Uniform() < transform_.flip();
  }
  return crop;
}

Status SampleDecoder::DecodeRaw(std::string_view payload, uint8_t* out) const {
  if (payload.size() != sample_bytes()) {
    return Status::Corruption(std::to_string(payload.size()) + " bytes, the record shape needs " +
                              std::to_string(sample_bytes()));
  }
  const auto* src = reinterpret_cast<const uint8_t*>(payload.data());
  if (layout_ == Layout::kNCHW && channels_ > 1) {
    HwcToChw(src, width_, height_, channels_, out);
  } else {
    std::memcpy(out, src, sample_bytes());
  }
  return Status::OK();
}

Status SampleDecoder::CropRaw(State& st, std::string_view payload, uint64_t epoch,
                              uint64_t position, uint8_t* out) const {
  const size_t bytes = size_t(record_width_) * record_height_ * channels_;
  if (payload.size() != bytes) {
    return Status::Corruption(std::to_string(payload.size()) + " bytes, the record shape needs " +
                              std::to_string(bytes));
  }
  SK_ASSIGN_OR_RETURN(const CropDecision crop,
                      ChooseCrop(record_width_, record_height_, epoch, position));
  PadCrop(reinterpret_cast<const uint8_t*>(payload.data()), record_width_, record_height_,
          channels_, transform_, crop, layout_, out, &st.pad_crop);
  return Status::OK();
}

Status SampleDecoder::DecodeRegion(State& st, std::string_view payload, uint64_t epoch,
                                   uint64_t position, CropDecision* crop) const {
  DecodeRequest req;
  // RandomCrop copies pixels of the whole image (a mirrored pad may take any).
  const bool whole = transform_.kind == TransformKind::kCrop;
  Status chosen;
  req.choose_crop = [&](int w, int h) {
    Result<CropDecision> c = ChooseCrop(w, h, epoch, position);
    if (!c.ok()) {
      chosen = c.status();
      return RectF{0, 0, 1, 1};  // decode next to nothing: the sample fails
    }
    *crop = *c;
    return whole ? RectF{0, 0, double(w), double(h)} : crop->rect;
  };
  // Random crops: the smallest DCT scale that keeps the crop at least the
  // output size (speed; augmentation dwarfs the difference). The
  // deterministic transforms (val, resize) decode at full resolution, as
  // torchvision does, at every output size: DCT downscaling followed by a
  // resample differs from one antialiased resample by 0.7 grey levels on
  // average at 64 px and 1.2 at 32 (0.1 at full resolution).
  if (transform_.kind == TransformKind::kTrain) {
    req.min_width = width_;
    req.min_height = height_;
  }
  // An image too large to decode whole within the decoder's budget (over
  // about 170 megapixels: the pack accepts up to 32768 per side) is decoded
  // at the largest DCT scale that fits, still larger than the output, rather
  // than failing as a corrupt record: pack and verify accepted it.
  req.shrink_to_fit = !whole;  // RandomCrop's window is in full-resolution pixels
  // Records passed a pack's strict decode, which before this budget took
  // progressive JPEGs up to 32768 pixels a side (6 GiB of coefficients at
  // 4:4:4): the loader still reads what an earlier pack wrote.
  req.max_coefficient_bytes = uint64_t{8} << 30;
  req.simd_scales_only = true;
  req.fast = transform_.kind == TransformKind::kTrain;  // random crops: speed over the last bit
  SK_RETURN_IF_ERROR(st.jpeg.Decode(reinterpret_cast<const uint8_t*>(payload.data()),
                                    payload.size(), req, &st.region));
  return chosen;
}

Status SampleDecoder::DecodeJpeg(State& st, std::string_view payload, uint64_t epoch,
                                 uint64_t position, uint8_t* out) const {
  const uint64_t t0 = MonotonicNs();
  CropDecision crop;
  SK_RETURN_IF_ERROR(DecodeRegion(st, payload, epoch, position, &crop));
  const uint64_t t1 = MonotonicNs();
  st.decode_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  if (transform_.kind == TransformKind::kCrop) {
    const Image& im = st.region.image;  // the whole image, at full scale
    if (st.region.scale_num != 8 || st.region.crop.x != 0 || st.region.crop.y != 0 ||
        st.region.crop.w != im.width || st.region.crop.h != im.height) {
      return Status::IOError("RandomCrop: the decoder returned part of the image");
    }
    PadCrop(im.pixels.data(), im.width, im.height, 3, transform_, crop, layout_, out, &st.pad_crop);
  } else {
    Resample(st.region.image, st.region.crop, width_, height_, crop.flip, out, &st.resample,
             layout_);
  }
  st.transform_ns.fetch_add(MonotonicNs() - t1, std::memory_order_relaxed);
  return Status::OK();
}

}  // namespace shardkit
