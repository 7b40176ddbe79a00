// What the tests of the loader's stages share: a small raw dataset whose
// record i is filled from i, and the bytes a dataset holds for a record.
#pragma once

#include <cstdint>
#include <string>

#include "shard/shard.h"

namespace shardkit::testing {

// Records of side x side x 1 bytes, record i filled from i, labels i % 4 of
// classes a..d: zstd blocks of about `block` bytes (compressed) or stored
// ones; `corrupt` records hold a shorter payload (a raw record of the wrong
// size: Corruption when decoded).
void WriteRaw(const std::string& dir, int n, int side, CompressionMode mode, uint32_t block,
              int corrupt = -1);

// Record `record`'s bytes as the dataset holds them.
std::string Expected(const Dataset& ds, uint64_t record);

}  // namespace shardkit::testing
