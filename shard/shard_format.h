// The byte layout of a shard file, shared by the writer and the reader.
// docs/shard_format.md is the specification; this header is its code form.
// All integers are little-endian; shardkit builds only on little-endian hosts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "base/crc32c.h"
#include "base/names.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shardkit assumes a little-endian host");

namespace shardkit::format {

inline constexpr char kHeaderMagic[8] = {'S', 'K', 'S', 'H', 'A', 'R', 'D', '\0'};
inline constexpr char kTrailerMagic[8] = {'S', 'K', 'I', 'N', 'D', 'E', 'X', '\0'};
// Version 2 adds the chunk table (per-chunk index checksums); a reader reads
// versions 1 and 2.
inline constexpr uint32_t kVersion = 2;
inline constexpr uint32_t kFirstChunkedVersion = 2;

inline constexpr uint32_t kHeaderSize = 32;   // magic, version, header size, kind, reserved, crc
inline constexpr uint32_t kTrailerSize = 32;  // index offset, size, crc, version, magic
inline constexpr uint32_t kIndexHeaderSize = 16;  // block count, record count, keys size
inline constexpr uint32_t kBlockEntrySize = 32;
inline constexpr uint32_t kRecordEntrySize = 28;

// The chunk table (version 2): the record entries in chunks of
// kChunkRecords, each with a CRC32C of its entries followed by the key bytes
// they span, so a reader checks only the chunks it uses; then a CRC32C of the
// index header, the block table and the chunk CRCs, checked at open.
inline constexpr uint32_t kChunkShift = 10;
inline constexpr uint32_t kChunkRecords = 1u << kChunkShift;
inline uint64_t NumChunks(uint64_t records) { return (records + kChunkRecords - 1) >> kChunkShift; }
// Bytes of the chunk table for a version's index (0 before version 2).
inline uint64_t ChunkTableSize(uint32_t version, uint64_t records) {
  return version >= kFirstChunkedVersion ? 4 * NumChunks(records) + 4 : 0;
}
// Where the record entries start within the index.
inline uint64_t EntriesOffset(uint32_t version, uint64_t blocks, uint64_t records) {
  return kIndexHeaderSize + blocks * kBlockEntrySize + ChunkTableSize(version, records);
}

// Limits a reader enforces before it allocates anything.
inline constexpr uint64_t kMaxBlockRawSize = 256ull << 20;  // decompressed block
inline constexpr uint64_t kMaxRecordSize = kMaxBlockRawSize;
inline constexpr uint64_t kMaxIndexSize = 1ull << 30;
inline constexpr uint32_t kMaxKeySize = 4096;

enum class Codec : uint32_t { kStored = 0, kZstd = 1 };

// What a record holds; also written to the manifest.
enum class RecordKind : uint32_t { kBytes = 0, kJpeg = 1, kRawU8 = 2 };
// The names the manifest, the tools and the Python binding use (base/names.h).
inline constexpr EnumName<RecordKind> kRecordKindNames[] = {
    {RecordKind::kJpeg, "jpeg"}, {RecordKind::kRawU8, "raw_u8"}, {RecordKind::kBytes, "bytes"}};

struct BlockEntry {
  uint64_t offset;        // of the stored bytes, from the start of the file
  uint32_t stored_size;   // bytes on disk
  uint32_t raw_size;      // bytes after decompression
  uint32_t codec;         // Codec
  uint32_t crc32c;        // of the stored bytes
  uint32_t first_record;  // index of its first record in the shard
  uint32_t num_records;
};

struct RecordEntry {
  uint32_t block;
  uint32_t offset;  // within the block's raw bytes
  uint32_t length;
  int32_t label;
  uint32_t crc32c;      // of the payload
  uint32_t key_offset;  // into the keys blob
  uint32_t key_length;
};

inline void PutU32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void PutU64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline void EncodeBlock(const BlockEntry& b, char* p) {
  PutU64(p, b.offset);
  PutU32(p + 8, b.stored_size);
  PutU32(p + 12, b.raw_size);
  PutU32(p + 16, b.codec);
  PutU32(p + 20, b.crc32c);
  PutU32(p + 24, b.first_record);
  PutU32(p + 28, b.num_records);
}
inline BlockEntry DecodeBlock(const char* p) {
  return BlockEntry{GetU64(p),      GetU32(p + 8),  GetU32(p + 12), GetU32(p + 16),
                    GetU32(p + 20), GetU32(p + 24), GetU32(p + 28)};
}
inline void EncodeRecord(const RecordEntry& r, char* p) {
  PutU32(p, r.block);
  PutU32(p + 4, r.offset);
  PutU32(p + 8, r.length);
  PutU32(p + 12, static_cast<uint32_t>(r.label));
  PutU32(p + 16, r.crc32c);
  PutU32(p + 20, r.key_offset);
  PutU32(p + 24, r.key_length);
}
inline RecordEntry DecodeRecord(const char* p) {
  return RecordEntry{
      GetU32(p),      GetU32(p + 4),  GetU32(p + 8), static_cast<int32_t>(GetU32(p + 12)),
      GetU32(p + 16), GetU32(p + 20), GetU32(p + 24)};
}

// A chunk's CRC (version 2): of its n record entries, then of the key bytes
// they span (from the least key offset to the greatest key end). False if a
// key lies outside `keys`.
inline bool ChunkCrc(const char* entries, uint64_t n, std::string_view keys, uint32_t* crc) {
  uint64_t lo = n == 0 ? 0 : UINT64_MAX, hi = 0;
  for (const char* e = entries; e < entries + n * kRecordEntrySize; e += kRecordEntrySize) {
    const uint64_t offset = GetU32(e + 20);
    lo = std::min(lo, offset);
    hi = std::max(hi, offset + GetU32(e + 24));
  }
  if (hi > keys.size()) return false;
  *crc = crc32c::Extend(crc32c::Value(entries, n * kRecordEntrySize), keys.data() + lo, hi - lo);
  return true;
}

}  // namespace shardkit::format
