// CRC32C: the RFC 3720 vectors, and the hardware path (three interleaved
// streams over 256- and 8192-byte chunks) equal to the bytewise one at every
// length and alignment around its boundaries.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "base/crc32c.h"

namespace shardkit {
namespace {

TEST(Crc32cTest, KnownVectors) {
  // RFC 3720 test vectors.
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c::Value(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c::Value(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c::Value("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c::Extend(crc32c::Value("1234", 4), "56789", 5), 0xE3069283u);
}

// The hardware path interleaves three streams over 256- and 8192-byte chunks;
// every length and alignment around those boundaries must match the table path.
TEST(Crc32cTest, AllLengthsAndAlignmentsAgreeWithBytewise) {
  std::string data(3 * 8192 * 2 + 100, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  auto bytewise = [](const char* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= static_cast<uint8_t>(p[i]);
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  for (size_t len : {0, 1, 7, 8, 9, 255, 767, 768, 769, 784, 1000, 24575, 24576, 24577, 49252}) {
    for (size_t align = 0; align < 8; ++align) {
      if (align + len > data.size()) continue;
      EXPECT_EQ(crc32c::Value(data.data() + align, len), bytewise(data.data() + align, len))
          << "len " << len << " align " << align;
    }
  }
}

}  // namespace
}  // namespace shardkit
