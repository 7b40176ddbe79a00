// libjpeg-turbo decode (scaled, cropped, CMYK-aware), TurboJPEG encode; PNG is png_codec.cc.
#include "image/codec.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <turbojpeg.h>

namespace shardkit {

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  struct ErrorMgr {
    jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX] = {0};
    int warnings = 0;
    char first_warning[JMSG_LENGTH_MAX] = {0};
  } err;
  std::vector<uint8_t> row;  // CMYK scanline

  static void ErrorExit(j_common_ptr c) {
    auto* e = reinterpret_cast<ErrorMgr*>(c->err);
    (*c->err->format_message)(c, e->message);
    longjmp(e->jump, 1);
  }
  static void EmitMessage(j_common_ptr c, int level) {
    auto* e = reinterpret_cast<ErrorMgr*>(c->err);
    if (level < 0) {  // a warning: corrupt data, premature end of data...
      if (e->warnings++ == 0) (*c->err->format_message)(c, e->first_warning);
    }
  }
};

JpegDecoder::JpegDecoder() : state_(new State) {
  state_->cinfo.err = jpeg_std_error(&state_->err.pub);
  state_->err.pub.error_exit = &State::ErrorExit;
  state_->err.pub.emit_message = &State::EmitMessage;
  jpeg_create_decompress(&state_->cinfo);
}

JpegDecoder::~JpegDecoder() { jpeg_destroy_decompress(&state_->cinfo); }

Status JpegDecoder::ReadHeader(const uint8_t* data, size_t size, JpegInfo* info) {
  jpeg_decompress_struct& cinfo = state_->cinfo;
  state_->err.warnings = 0;
  if (setjmp(state_->err.jump)) {
    jpeg_abort_decompress(&cinfo);
    return Status::Corruption(std::string("JPEG header: ") + state_->err.message);
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  info->width = static_cast<int>(cinfo.image_width);
  info->height = static_cast<int>(cinfo.image_height);
  info->components = cinfo.num_components;
  info->cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  info->progressive = cinfo.progressive_mode != 0;
  jpeg_abort_decompress(&cinfo);
  return Status::OK();
}

namespace {

// A progressive (or any multi-scan) JPEG is decoded from a buffer of all its
// DCT coefficients, at full resolution whatever the scale: 2 bytes a sample,
// allocated and zeroed before the first scan. A few hundred bytes can
// declare gigabytes of them, so they are budgeted like pixels (after
// jpeg_read_header, which sizes the components).
Status CheckCoefficientBudget(jpeg_decompress_struct& cinfo, uint64_t limit) {
  if (!jpeg_has_multiple_scans(&cinfo)) return Status::OK();
  uint64_t coefficients = 0;
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& comp = cinfo.comp_info[c];
    const uint64_t wb = (uint64_t(comp.width_in_blocks) + comp.h_samp_factor - 1) /
                        comp.h_samp_factor * comp.h_samp_factor;
    const uint64_t hb = (uint64_t(comp.height_in_blocks) + comp.v_samp_factor - 1) /
                        comp.v_samp_factor * comp.v_samp_factor;
    coefficients += wb * hb * sizeof(JBLOCK);
  }
  if (coefficients <= limit) return Status::OK();
  return Status::Corruption(
      "JPEG is progressive (multi-scan) at " + std::to_string(cinfo.image_width) + "x" +
      std::to_string(cinfo.image_height) + ": decoding it needs " +
      std::to_string((coefficients + (1 << 20) - 1) >> 20) +
      " MiB of coefficient buffers, over the " + std::to_string(limit >> 20) +
      " MiB limit (re-encode it as baseline, e.g. jpegtran, or downscale it)");
}

// One CMYK (or YCCK, converted by libjpeg) row as RGB; Adobe writes CMYK
// inverted.
void CmykRowToRgb(const uint8_t* s, int width, bool inverted, uint8_t* dst) {
  for (int x = 0; x < width; ++x, s += 4) {
    int c = s[0], m = s[1], y = s[2], k = s[3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    dst[3 * x] = static_cast<uint8_t>(c * k / 255);
    dst[3 * x + 1] = static_cast<uint8_t>(m * k / 255);
    dst[3 * x + 2] = static_cast<uint8_t>(y * k / 255);
  }
}

}  // namespace

Status JpegDecoder::Decode(const uint8_t* data, size_t size, const DecodeRequest& req,
                           DecodedRegion* out) {
  jpeg_decompress_struct& cinfo = state_->cinfo;
  State::ErrorMgr& err = state_->err;
  err.warnings = 0;
  if (setjmp(err.jump)) {
    jpeg_abort_decompress(&cinfo);
    return Status::Corruption(std::string("JPEG: ") + err.message);
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const int iw = static_cast<int>(cinfo.image_width), ih = static_cast<int>(cinfo.image_height);
  if (iw <= 0 || ih <= 0 || iw > kMaxImageSide || ih > kMaxImageSide) {
    jpeg_abort_decompress(&cinfo);
    return Status::Corruption("JPEG declares " + std::to_string(iw) + "x" + std::to_string(ih) +
                              " pixels, over the " + std::to_string(kMaxImageSide) +
                              " per side limit");
  }
  RectF crop = req.choose_crop ? req.choose_crop(iw, ih) : req.crop;
  if (crop.w <= 0 || crop.h <= 0) crop = RectF{0, 0, double(iw), double(ih)};
  crop.x = std::clamp(crop.x, 0.0, double(iw));
  crop.y = std::clamp(crop.y, 0.0, double(ih));
  crop.w = std::clamp(crop.w, 1e-3, double(iw) - crop.x);
  crop.h = std::clamp(crop.h, 1e-3, double(ih) - crop.y);
  // Smallest N/8 that keeps the crop at least the requested size.
  int num = 8;
  if (req.min_width > 0 && req.min_height > 0) {
    for (int n = 1; n <= 8; ++n) {
      if (req.simd_scales_only && (n & (n - 1)) != 0) continue;  // 1, 2, 4, 8 only
      if (crop.w * n / 8 >= req.min_width && crop.h * n / 8 >= req.min_height) {
        num = n;
        break;
      }
    }
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (Status budget = CheckCoefficientBudget(cinfo, req.max_coefficient_bytes); !budget.ok()) {
    jpeg_abort_decompress(&cinfo);
    return budget;
  }
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.dct_method = req.fast ? JDCT_IFAST : JDCT_ISLOW;
  // Fancy (smooth) chroma upsampling always: libjpeg-turbo 2.1's merged
  // upsampler combined with jpeg_skip_scanlines returned no rows now and then
  // when several decoders ran in parallel (seen as "no scanline 0" errors).
  cinfo.do_fancy_upsampling = TRUE;
  int ox0, oy0, ox1, oy1;
  double sx, sy;
  for (;;) {
    cinfo.scale_num = static_cast<unsigned>(num);
    cinfo.scale_denom = 8;
    jpeg_calc_output_dimensions(&cinfo);
    sx = double(cinfo.output_width) / iw;
    sy = double(cinfo.output_height) / ih;
    // The crop in output coordinates, and the whole rows/columns covering it
    // (one pixel of margin for the resampling filter).
    ox0 = std::max(0, int(std::floor(crop.x * sx)) - 1);
    oy0 = std::max(0, int(std::floor(crop.y * sy)) - 1);
    ox1 = std::min<int>(cinfo.output_width, int(std::ceil((crop.x + crop.w) * sx)) + 1);
    oy1 = std::min<int>(cinfo.output_height, int(std::ceil((crop.y + crop.h) * sy)) + 1);
    const uint64_t bytes = uint64_t(ox1 - ox0) * (oy1 - oy0) * (cmyk ? 4 : 3);
    if (bytes <= req.max_decoded_bytes) break;
    if (req.shrink_to_fit && num > 1) {  // the next smaller SIMD scale: 4/8, 2/8, 1/8
      num /= 2;
      continue;
    }
    jpeg_abort_decompress(&cinfo);
    return Status::Corruption(
        "JPEG crop (" + std::to_string(ox1 - ox0) + "x" + std::to_string(oy1 - oy0) +
        " pixels at scale " + std::to_string(num) + "/8 of " + std::to_string(iw) + "x" +
        std::to_string(ih) + ") would decode to " + std::to_string(bytes) + " bytes, over the " +
        std::to_string(req.max_decoded_bytes >> 20) + " MiB limit");
  }
  jpeg_start_decompress(&cinfo);
  JDIMENSION xoff = static_cast<JDIMENSION>(ox0), cw = static_cast<JDIMENSION>(ox1 - ox0);
  if (xoff != 0 || cw != cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &cw);
  const int width = static_cast<int>(cinfo.output_width);  // after cropping: cw
  const int rows = oy1 - oy0;
  out->image.Resize(width, rows, 3);
  out->scale_num = num;
  out->crop = RectF{crop.x * sx - xoff, crop.y * sy - oy0, crop.w * sx, crop.h * sy};
  if (oy0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(oy0));
  if (cmyk) state_->row.resize(static_cast<size_t>(width) * 4);
  const bool inverted = cinfo.saw_Adobe_marker;  // Adobe writes CMYK inverted
  for (int r = 0; r < rows; ++r) {
    uint8_t* dst = out->image.pixels.data() + static_cast<size_t>(r) * width * 3;
    JSAMPROW rowp = cmyk ? state_->row.data() : dst;
    if (jpeg_read_scanlines(&cinfo, &rowp, 1) != 1) {
      const unsigned at = cinfo.output_scanline, height = cinfo.output_height;
      jpeg_abort_decompress(&cinfo);
      return Status::Corruption("JPEG: no scanline " + std::to_string(r) + " of rows " +
                                std::to_string(oy0) + ".." + std::to_string(oy1) + " (decoder at " +
                                std::to_string(at) + " of " + std::to_string(height) + ", image " +
                                std::to_string(iw) + "x" + std::to_string(ih) + ", scale " +
                                std::to_string(num) + "/8)");
    }
    if (cmyk) CmykRowToRgb(state_->row.data(), width, inverted, dst);
  }
  if (req.strict && cinfo.output_scanline < cinfo.output_height) {
    // Decode the rest so corrupt data further down is noticed too.
    jpeg_skip_scanlines(&cinfo, cinfo.output_height - cinfo.output_scanline);
  }
  if (req.strict && err.warnings == 0 && cinfo.output_scanline >= cinfo.output_height) {
    jpeg_finish_decompress(&cinfo);  // reads to EOI: reports trailing corruption
  } else {
    jpeg_abort_decompress(&cinfo);
  }
  if (req.strict && err.warnings > 0) {
    return Status::Corruption(std::string("JPEG: ") + err.first_warning);
  }
  return Status::OK();
}

Status EncodeJpeg(const Image& image, int quality, std::string* out) {
  if (image.channels != 3 && image.channels != 1)
    return Status::InvalidArgument("EncodeJpeg: 1 or 3 channels");
  tjhandle tj = tjInitCompress();
  if (tj == nullptr) return Status::IOError("TurboJPEG: cannot create a compressor");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj, image.pixels.data(), image.width, 0, image.height,
                       image.channels == 3 ? TJPF_RGB : TJPF_GRAY, &buf, &size,
                       image.channels == 3 ? TJSAMP_420 : TJSAMP_GRAY, quality, TJFLAG_ACCURATEDCT);
  Status s;
  if (rc != 0) {
    s = Status::IOError(std::string("TurboJPEG encode: ") + tjGetErrorStr2(tj));
  } else {
    out->assign(reinterpret_cast<const char*>(buf), size);
  }
  tjFree(buf);
  tjDestroy(tj);
  return s;
}

ImageFormat SniffImageFormat(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::kJpeg;
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

}  // namespace shardkit
