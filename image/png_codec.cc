// PNG decode and encode over libpng, where the build has it
// (SHARDKIT_WITH_PNG: always with ingest/, which converts PNGs to JPEG at
// pack time). A loader-only build needs no libpng: the loader reads shards
// of JPEG or raw records, never PNGs, and these return Unsupported there.
#include <csetjmp>
#include <cstring>
#include <vector>

#include "image/codec.h"

#ifdef SHARDKIT_WITH_PNG
#include <png.h>

namespace shardkit {

namespace {

struct PngReadState {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char error[256];
};

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* st = static_cast<PngReadState*>(png_get_io_ptr(png));
  if (n > st->size - st->pos) png_error(png, "unexpected end of PNG data");
  std::memcpy(out, st->data + st->pos, n);
  st->pos += n;
}

void PngError(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngReadState*>(png_get_error_ptr(png));
  std::snprintf(st->error, sizeof(st->error), "%s", msg);
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}

}  // namespace

Status DecodePng(const uint8_t* data, size_t size, Image* out) {
  PngReadState st{data, size, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, PngError, PngWarning);
  if (png == nullptr) return Status::IOError("libpng: cannot create a reader");
  png_infop info = png_create_info_struct(png);
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Status::Corruption(std::string("PNG: ") + st.error);
  }
  png_set_read_fn(png, &st, PngRead);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w == 0 || h == 0 || w > kMaxImageSide || h > kMaxImageSide) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Status::Corruption("PNG declares " + std::to_string(w) + "x" + std::to_string(h) +
                              " pixels, over the limit");
  }
  if (uint64_t{w} * h * 3 > kMaxDecodedBytes) {  // RGB, decoded whole
    png_destroy_read_struct(&png, &info, nullptr);
    return Status::Corruption("PNG declares " + std::to_string(w) + "x" + std::to_string(h) +
                              " pixels: decoding it needs " +
                              std::to_string((uint64_t{w} * h * 3 + (1 << 20) - 1) >> 20) +
                              " MiB, over the " + std::to_string(kMaxDecodedBytes >> 20) +
                              " MiB limit");
  }
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Status::Unsupported("PNG: could not convert to RGB");
  }
  out->Resize(static_cast<int>(w), static_cast<int>(h), 3);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = out->pixels.data() + static_cast<size_t>(y) * w * 3;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return Status::OK();
}

namespace {
void PngWriteToString(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
void PngFlushNothing(png_structp) {}
}  // namespace

Status EncodePng(const Image& image, std::string* out) {
  if (image.channels != 1 && image.channels != 3)
    return Status::InvalidArgument("EncodePng: 1 or 3 channels");
  out->clear();
  PngReadState st{nullptr, 0, 0, {0}};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &st, PngError, PngWarning);
  if (png == nullptr) return Status::IOError("libpng: cannot create a writer");
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return Status::IOError(std::string("PNG encode: ") + st.error);
  }
  png_set_write_fn(png, out, PngWriteToString, PngFlushNothing);
  png_set_IHDR(png, info, image.width, image.height, 8,
               image.channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < image.height; ++y) {
    png_write_row(png,
                  const_cast<png_bytep>(image.pixels.data() +
                                        static_cast<size_t>(y) * image.width * image.channels));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return Status::OK();
}

}  // namespace shardkit

#else  // no libpng in this build

namespace shardkit {

Status DecodePng(const uint8_t* data, size_t size, Image* out) {
  return Status::Unsupported("PNG: this shardkit was built without libpng (libpng-dev)");
}

Status EncodePng(const Image& image, std::string* out) {
  return Status::Unsupported("PNG: this shardkit was built without libpng (libpng-dev)");
}

}  // namespace shardkit

#endif
