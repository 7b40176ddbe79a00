// Time for the loader's stages: MonotonicNs, the one clock they time
// themselves with (steady, nanoseconds since an arbitrary start; differences
// only), and Clock, the same behind an interface where a decision depends on
// elapsed time (the batch filler's way of filling, the read planner's probe
// through the read queue's timings), so that a test can drive the decision
// with a clock of its own. Production passes SteadyClock().
#pragma once

#include <chrono>
#include <cstdint>

namespace shardkit {

inline uint64_t MonotonicNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// A monotonic time source. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNs() const = 0;  // never decreases; differences only
};

// MonotonicNs as a Clock; lives as long as the program.
inline const Clock& SteadyClock() {
  struct Steady final : Clock {
    uint64_t NowNs() const override { return MonotonicNs(); }
  };
  static const Steady clock;
  return clock;
}

}  // namespace shardkit
