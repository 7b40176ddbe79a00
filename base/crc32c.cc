// CRC32C: slicing-by-8 tables, and the SSE4.2 instruction chosen at run time.
#include "base/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace shardkit::crc32c {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

uint32_t ExtendPortable(uint32_t crc, const uint8_t* p, size_t n) {
  const Tables& tb = GetTables();
  uint32_t c = ~crc;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian hosts only (see shard_format.h)
    w ^= c;
    c = tb.t[7][w & 0xFF] ^ tb.t[6][(w >> 8) & 0xFF] ^ tb.t[5][(w >> 16) & 0xFF] ^
        tb.t[4][(w >> 24) & 0xFF] ^ tb.t[3][(w >> 32) & 0xFF] ^ tb.t[2][(w >> 40) & 0xFF] ^
        tb.t[1][(w >> 48) & 0xFF] ^ tb.t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ tb.t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

// Zero-shift operators: shifting a CRC over `len` zero bytes is linear over
// GF(2), so it is a 32x32 bit matrix, applied bytewise through 4 tables.
uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec; vec >>= 1, ++mat) {
    if (vec & 1) sum ^= *mat;
  }
  return sum;
}

void Gf2Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2Times(mat, mat[n]);
}

// Tables that shift a CRC over `len` zero bytes (len a power of two).
struct ShiftTables {
  uint32_t t[4][256];
  explicit ShiftTables(size_t len) {
    uint32_t odd[32], even[32];
    odd[0] = kPoly;
    for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
    Gf2Square(even, odd);  // 2 zero bits
    Gf2Square(odd, even);  // 4 zero bits
    const uint32_t* op = odd;
    for (;;) {  // square to 8 bits (1 byte), 2 bytes, ... len bytes
      Gf2Square(even, odd);
      op = even;
      len >>= 1;
      if (len == 0) break;
      Gf2Square(odd, even);
      op = odd;
      len >>= 1;
      if (len == 0) break;
    }
    for (uint32_t n = 0; n < 256; ++n) {
      t[0][n] = Gf2Times(op, n);
      t[1][n] = Gf2Times(op, n << 8);
      t[2][n] = Gf2Times(op, n << 16);
      t[3][n] = Gf2Times(op, n << 24);
    }
  }
  uint32_t Shift(uint32_t crc) const {
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
  }
};

#if defined(__x86_64__)
constexpr size_t kLong = 8192, kShort = 256;

// Three independent crc32 streams over `len`-byte chunks hide the
// instruction's latency; their results are combined with the shift tables.
__attribute__((target("sse4.2"))) inline void Triple(uint64_t* crc, const uint8_t** pp, size_t* n,
                                                     size_t len, const ShiftTables& shift) {
  uint64_t c0 = *crc;
  const uint8_t* p = *pp;
  while (*n >= 3 * len) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* end = p + len;
    do {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p, 8);
      std::memcpy(&w1, p + len, 8);
      std::memcpy(&w2, p + 2 * len, 8);
      c0 = _mm_crc32_u64(c0, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
      p += 8;
    } while (p < end);
    c0 = shift.Shift(static_cast<uint32_t>(c0)) ^ c1;
    c0 = shift.Shift(static_cast<uint32_t>(c0)) ^ c2;
    p += 2 * len;
    *n -= 3 * len;
  }
  *crc = c0;
  *pp = p;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  static const ShiftTables long_shift(kLong), short_shift(kShort);
  uint64_t c0 = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c0 = _mm_crc32_u8(static_cast<uint32_t>(c0), *p++);
    --n;
  }
  Triple(&c0, &p, &n, kLong, long_shift);
  Triple(&c0, &p, &n, kShort, short_shift);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c0 = _mm_crc32_u64(c0, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c0);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}
#endif

using ExtendFn = uint32_t (*)(uint32_t, const uint8_t*, size_t);

ExtendFn Choose() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ExtendSse42;
#endif
  return ExtendPortable;
}

}  // namespace

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  static const ExtendFn fn = Choose();
  return fn(crc, static_cast<const uint8_t*>(data), n);
}

}  // namespace shardkit::crc32c
