// ResolutionSchedule: FFCV's linear ramp of the training resolution.
#include "loader/resolution_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace shardkit {

int ResolutionSchedule::SizeAt(int epoch) const {
  if (!active()) return 0;
  if (epoch <= start_epoch) return min_size;
  if (epoch >= end_epoch) return max_size;
  const double t = double(epoch - start_epoch) / double(end_epoch - start_epoch);
  const double size = min_size + t * (max_size - min_size);
  // numpy's round: halves to even, as FFCV's np.round(interp / 32) * 32.
  return static_cast<int>(std::nearbyint(size / 32)) * 32;
}

Result<ResolutionSchedule> MakeResolutionSchedule(long min_size, long max_size, long start_epoch,
                                                  long end_epoch) {
  if (min_size < 16 || max_size > 4096 || min_size > 4096 || max_size < 16) {
    return Status::InvalidArgument("sides must be in 16..4096");
  }
  if (min_size > max_size) return Status::InvalidArgument("MIN is larger than MAX");
  if (start_epoch < 0 || end_epoch > 1000000 || start_epoch > 1000000) {
    return Status::InvalidArgument("epochs must be in 0..1000000");
  }
  if (start_epoch > end_epoch) return Status::InvalidArgument("START is after END");
  ResolutionSchedule s;
  s.min_size = static_cast<int>(min_size);
  s.max_size = static_cast<int>(max_size);
  s.start_epoch = static_cast<int>(start_epoch);
  s.end_epoch = static_cast<int>(end_epoch);
  return s;
}

Result<ResolutionSchedule> ParseResolutionSchedule(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--resolution-schedule " + text + ": " + why +
                                   " (expected MIN:MAX:START:END, e.g. 160:192:65:76)");
  };
  std::vector<long> v;
  size_t at = 0;
  while (v.size() < 5) {
    const size_t colon = std::min(text.find(':', at), text.size());
    const std::string part = text.substr(at, colon - at);
    char* end = nullptr;
    const long x = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || part.size() > 7 || *end != '\0' || part[0] == '-' || part[0] == '+' ||
        part[0] == ' ') {
      return bad("'" + part + "' is not a whole number");
    }
    v.push_back(x);
    if (colon == text.size()) break;
    at = colon + 1;
  }
  if (v.size() != 4)
    return bad("four numbers, not " +
               std::string(v.size() > 4 ? "more" : std::to_string(v.size())));
  auto made = MakeResolutionSchedule(v[0], v[1], v[2], v[3]);
  if (!made.ok()) return bad(made.status().message());
  return made;
}

}  // namespace shardkit
