// CRC32C (Castagnoli), the checksum of every record, block, index and shard file.
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardkit::crc32c {

// Returns the CRC32C of data[0, n) continuing from `crc` (the CRC of earlier bytes; 0 to start).
uint32_t Extend(uint32_t crc, const void* data, size_t n);
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

}  // namespace shardkit::crc32c
