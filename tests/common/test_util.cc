// Test helpers: temp dirs, synthetic JPEG/PNG files, running commands.
#include "tests/common/test_util.h"

#include <gtest/gtest.h>

#include <jpeglib.h>
#include <netinet/in.h>
#include <png.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "base/random.h"
#include "shard/dataset_writer.h"

namespace shardkit::testing {

void WriteRawDataset(const std::string& dir, int n, int side, CompressionMode compression,
                     uint32_t block_size, uint64_t shard_size) {
  const size_t bytes = size_t(side) * side * 3;
  DatasetWriterOptions o;
  o.shard.compression = compression;
  o.shard.kind = format::RecordKind::kRawU8;
  o.shard.block_size = block_size;
  o.shard_size = shard_size;
  auto w = DatasetWriter::Create(dir, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < n; ++i) {
    std::string p(bytes, '\0');
    for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<char>((i * 131 + j * 7) & 0xFF);
    ASSERT_TRUE((*w)->Add(p, i % 10, std::to_string(i)).ok());
  }
  Manifest m;
  m.record.kind = format::RecordKind::kRawU8;
  m.record.shape = {side, side, 3};
  for (int c = 0; c < 10; ++c) m.classes.push_back(std::to_string(c));
  ASSERT_TRUE((*w)->Finish(m).ok());
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/shardkit-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Image SyntheticImage(int width, int height, int channels, uint64_t seed) {
  Image img;
  img.Resize(width, height, channels);
  KeyedRng rng(seed, 77);
  double cx[4], cy[4], r[4], col[4][3];
  for (int k = 0; k < 4; ++k) {
    cx[k] = rng.Uniform(0, width);
    cy[k] = rng.Uniform(0, height);
    r[k] = rng.Uniform(0.1, 0.4) * std::min(width, height);
    for (int c = 0; c < 3; ++c) col[k][c] = rng.Uniform(0, 255);
  }
  const double gx = rng.Uniform(-1, 1), gy = rng.Uniform(-1, 1);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      double v[3];
      for (int c = 0; c < 3; ++c)
        v[c] = 128 + 60 * (gx * x / width + gy * y / height) +
               20 * std::sin(0.05 * (x + c * 7) + 0.03 * y);
      for (int k = 0; k < 4; ++k) {
        double d = std::hypot(x - cx[k], y - cy[k]);
        if (d < r[k]) {
          double a = 1 - d / r[k];
          for (int c = 0; c < 3; ++c) v[c] = v[c] * (1 - a) + col[k][c] * a;
        }
      }
      for (int c = 0; c < channels; ++c) {
        double val = channels == 1 ? (v[0] + v[1] + v[2]) / 3 : v[c];
        img.pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(val, 0.0, 255.0));
      }
    }
  }
  return img;
}

std::string MakeJpeg(const Image& rgb, JpegFlavor flavor, int quality) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = rgb.width;
  cinfo.image_height = rgb.height;
  const bool cmyk = flavor == JpegFlavor::kCmyk || flavor == JpegFlavor::kCmykAdobe;
  std::vector<uint8_t> pixels;
  if (flavor == JpegFlavor::kGray) {
    cinfo.input_components = 1;
    cinfo.in_color_space = JCS_GRAYSCALE;
    for (size_t p = 0; p < rgb.pixels.size() / 3; ++p) {
      pixels.push_back((rgb.pixels[3 * p] + rgb.pixels[3 * p + 1] + rgb.pixels[3 * p + 2]) / 3);
    }
  } else if (cmyk) {
    cinfo.input_components = 4;
    cinfo.in_color_space = JCS_CMYK;
    for (size_t p = 0; p < rgb.pixels.size() / 3; ++p) {
      // K = 0 (255 in inverted form): C = 255 - R, ...; Adobe stores inverted.
      for (int c = 0; c < 3; ++c) {
        uint8_t v = 255 - rgb.pixels[3 * p + c];
        pixels.push_back(flavor == JpegFlavor::kCmykAdobe ? 255 - v : v);
      }
      pixels.push_back(flavor == JpegFlavor::kCmykAdobe ? 255 : 0);
    }
  } else {
    cinfo.input_components = 3;
    cinfo.in_color_space = JCS_RGB;
    pixels = rgb.pixels;
  }
  jpeg_set_defaults(&cinfo);
  if (cmyk) jpeg_set_colorspace(&cinfo, JCS_CMYK);
  cinfo.write_Adobe_marker = flavor == JpegFlavor::kCmykAdobe ? TRUE : FALSE;
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (flavor == JpegFlavor::kProgressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  const int stride = rgb.width * cinfo.input_components;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = pixels.data() + static_cast<size_t>(cinfo.next_scanline) * stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buf), size);
  free(buf);
  return out;
}

namespace {
void PngWrite(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<char*>(data), n);
}
void PngFlush(png_structp) {}
}  // namespace

std::string MakePng(const Image& rgb) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, PngWrite, PngFlush);
  png_set_IHDR(png, info, rgb.width, rgb.height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < rgb.height; ++y) {
    png_write_row(
        png, const_cast<png_bytep>(rgb.pixels.data() + static_cast<size_t>(y) * rgb.width * 3));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::string JoinLines(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void MakeDirs(const std::string& path) { std::filesystem::create_directories(path); }

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

int Spawn(const std::string& cmd, const std::string& log, bool own_group) {
  pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return -1;
  }
  if (pid == 0) {
    if (own_group) setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + log + " 2>&1").c_str(), nullptr);
    _exit(127);
  }
  if (own_group) setpgid(pid, pid);  // both sides, so the group exists whichever runs first
  return pid;
}

int WaitExit(int pid, int timeout_s) {
  for (int i = 0; i < timeout_s * 20; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

namespace {
// Polls `done` every 50 ms for up to timeout_s; whether it came true.
template <typename Pred>
bool PollFor(Pred done, int timeout_s) {
  for (int i = 0; i < timeout_s * 20; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}
}  // namespace

bool WaitForText(const std::string& file, const std::string& text, int timeout_s) {
  return PollFor([&] { return ReadFile(file).find(text) != std::string::npos; }, timeout_s);
}

bool WaitForFile(const std::string& path, int timeout_s) {
  return PollFor([&] { return access(path.c_str(), F_OK) == 0; }, timeout_s);
}

std::string PackTool() { return SHARDKIT_PACK_TOOL; }

Image NaiveCropResize(const Image& full, const RectF& r, int size, bool flip) {
  Image out;
  out.Resize(size, size, 3);
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      double sx = r.x + (x + 0.5) * r.w / size - 0.5, sy = r.y + (y + 0.5) * r.h / size - 0.5;
      sx = std::clamp(sx, 0.0, full.width - 1.0);
      sy = std::clamp(sy, 0.0, full.height - 1.0);
      int x0 = int(sx), y0 = int(sy);
      int x1 = std::min(x0 + 1, full.width - 1), y1 = std::min(y0 + 1, full.height - 1);
      double fx = sx - x0, fy = sy - y0;
      for (int c = 0; c < 3; ++c) {
        auto px = [&](int xx, int yy) {
          return full.pixels[(size_t(yy) * full.width + xx) * 3 + c];
        };
        double v = (1 - fy) * ((1 - fx) * px(x0, y0) + fx * px(x1, y0)) +
                   fy * ((1 - fx) * px(x0, y1) + fx * px(x1, y1));
        int ox = flip ? size - 1 - x : x;
        out.pixels[(size_t(y) * size + ox) * 3 + c] = static_cast<uint8_t>(std::lround(v));
      }
    }
  }
  return out;
}

double MeanAbsDiff(const uint8_t* a, const uint8_t* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / n;
}

namespace {

// True when a TCP socket can bind port on every address now.
bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

}  // namespace

int TrainingPort() {
  static const int port = [] {
    std::random_device seed;
    std::mt19937 rng(seed());
    std::uniform_int_distribution<int> pick(20000, 31999);
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const int p = pick(rng);
      if (PortFree(p)) return p;
    }
    throw std::runtime_error("no free port in 20000-31999 after 1000 draws");
  }();
  return port;
}

}  // namespace shardkit::testing
