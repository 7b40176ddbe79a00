// Human-readable durations, byte counts and counts.
#include "base/humanize.h"

#include <cstdio>

namespace shardkit {

std::string FormatDuration(double seconds) {
  if (seconds < 0) seconds = 0;
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  } else if (seconds >= 10) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2fs", seconds);
  }
  return buf;
}

std::string FormatBytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string FormatCount(double n) {
  char buf[32];
  if (n >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2fG", n / 1e9);
  } else if (n >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.2fM", n / 1e6);
  } else if (n >= 1e4) {
    std::snprintf(buf, sizeof(buf), "%.1fk", n / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f", n);
  }
  return buf;
}

}  // namespace shardkit
