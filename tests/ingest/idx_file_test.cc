// IDX parsing: good headers (plain and gzip) and every bad one.
#include <gtest/gtest.h>
#include <zlib.h>

#include "ingest/idx_file.h"
#include "tests/common/test_util.h"

namespace shardkit {
namespace {

using testing::TempDir;
using testing::WriteFile;

std::string Idx(uint8_t type, std::vector<uint32_t> dims, size_t data_bytes) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((d >> (8 * k)) & 0xFF));
  }
  for (size_t i = 0; i < data_bytes; ++i) s.push_back(static_cast<char>(i % 256));
  return s;
}

// Level 0: stored blocks, which carry no check of their own.
std::string Gzip(const std::string& in, int level = 6) {
  uLongf n = compressBound(in.size()) + 64;
  std::string out(n, '\0');
  z_stream z{};
  deflateInit2(&z, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);  // 31: gzip wrapper
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = in.size();
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = out.size();
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(IdxTest, ParsesPlainAndGzip) {
  TempDir dir;
  std::string images = Idx(0x08, {5, 4, 3}, 60);
  WriteFile(dir / "img", images);
  WriteFile(dir / "img.gz", Gzip(images));
  for (const char* name : {"img", "img.gz"}) {
    auto a = ReadIdxFile(dir / name);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->dims, (std::vector<uint32_t>{5, 4, 3}));
    EXPECT_EQ(a->item_size(), 12u);
    EXPECT_EQ(a->data.size(), 60u);
    EXPECT_EQ(a->data[59], 59);
  }
}

TEST(IdxTest, BadHeaders) {
  TempDir dir;
  struct Case {
    std::string name, bytes, expect;
  } cases[] = {
      {"bad_magic", "\x01\x02\x08\x01\x00\x00\x00\x01x", "bad IDX magic"},
      {"float_type", Idx(0x0D, {2}, 8), "not unsigned byte"},
      {"zero_dims", Idx(0x08, {}, 0), "0 dimensions"},
      {"truncated_header", Idx(0x08, {5, 4, 3}, 0).substr(0, 9), "truncated IDX header"},
      {"short_data", Idx(0x08, {5, 4, 3}, 59), "declares 60 data bytes, file has 59"},
      {"extra_data", Idx(0x08, {5, 4, 3}, 61), "continues past"},
      {"huge_declared", Idx(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFF}, 0), "declares more than"},
      {"too_short", "\x00\x00", "too short"},
  };
  for (const auto& c : cases) {
    WriteFile(dir / c.name, c.bytes);
    auto a = ReadIdxFile(dir / c.name, 1ull << 30);
    EXPECT_FALSE(a.ok()) << c.name;
    EXPECT_NE(a.status().message().find(c.expect), std::string::npos)
        << c.name << ": " << a.status().message();
    EXPECT_NE(a.status().message().find(dir / c.name), std::string::npos) << "must name the file";
  }
}

TEST(IdxTest, CorruptGzipIsAnError) {
  TempDir dir;
  std::string gz = Gzip(Idx(0x08, {100, 10, 10}, 10000));
  gz[gz.size() / 2] ^= 0x55;
  gz.resize(gz.size() - 4);
  WriteFile(dir / "bad.gz", gz);
  EXPECT_FALSE(ReadIdxFile(dir / "bad.gz").ok());
}

// A gzip stream cut anywhere in its 8-byte trailer (CRC32, length) has all
// its data but nothing to check it by: refused, a damaged byte or not, as
// `gzip -t` refuses it. (Stored blocks, so a flipped byte stays undetected by
// the deflate format itself.)
TEST(IdxTest, AGzipStreamWithoutItsTrailerIsRefused) {
  TempDir dir;
  const std::string stored = Gzip(Idx(0x08, {10, 6, 5}, 300), /*level=*/0);
  for (size_t cut = 1; cut <= 8; ++cut) {
    for (bool flip : {false, true}) {
      std::string gz = stored.substr(0, stored.size() - cut);
      if (flip) gz[gz.size() - 60] ^= 0x7F;  // a pixel byte inside the stored block
      const std::string path = dir / ("cut" + std::to_string(cut) + (flip ? "f" : "") + ".gz");
      WriteFile(path, gz);
      auto a = ReadIdxFile(path);
      ASSERT_FALSE(a.ok()) << "cut " << cut << " flip " << flip;
      // With the CRC whole (cut <= 4) a flipped byte is caught by it first.
      const bool named = a.status().message().find("truncated") != std::string::npos ||
                         (flip && a.status().message().find("corrupt") != std::string::npos);
      EXPECT_TRUE(named) << a.status().message();
      EXPECT_NE(a.status().message().find(path), std::string::npos);
    }
  }
  WriteFile(dir / "whole.gz", stored);  // the same stream whole reads back
  auto whole = ReadIdxFile(dir / "whole.gz");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->data.size(), 300u);
}

TEST(IdxTest, DatasetChecksCountsAndRanks) {
  TempDir dir;
  WriteFile(dir / "img", Idx(0x08, {5, 4, 3}, 60));
  WriteFile(dir / "lab5", Idx(0x08, {5}, 5));
  WriteFile(dir / "lab6", Idx(0x08, {6}, 6));
  WriteFile(dir / "lab2d", Idx(0x08, {5, 1}, 5));
  auto ok = ReadIdxDataset(dir / "img", dir / "lab5");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->count(), 5u);
  EXPECT_EQ(ok->height, 4);
  EXPECT_EQ(ok->width, 3);
  auto mismatch = ReadIdxDataset(dir / "img", dir / "lab6");
  EXPECT_NE(mismatch.status().message().find("count mismatch"), std::string::npos);
  EXPECT_NE(ReadIdxDataset(dir / "img", dir / "lab2d").status().message().find("1 dimension"),
            std::string::npos);
  EXPECT_NE(ReadIdxDataset(dir / "lab5", dir / "lab5").status().message().find("3 (N,H,W)"),
            std::string::npos);
  EXPECT_TRUE(ReadIdxDataset(dir / "nope", dir / "lab5").status().IsNotFound());
}

}  // namespace
}  // namespace shardkit
