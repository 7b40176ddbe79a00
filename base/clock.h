// MonotonicNs: the one clock the loader's stages time themselves with
// (steady, nanoseconds since an arbitrary start; differences only).
#pragma once

#include <chrono>
#include <cstdint>

namespace shardkit {

inline uint64_t MonotonicNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace shardkit
