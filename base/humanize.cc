// Human-readable durations, byte counts and counts.
#include "base/humanize.h"

#include <cctype>
#include <cstdint>
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

bool ParseByteSize(const std::string& text, uint64_t* out) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 18) return false;
  uint64_t n = std::stoull(text.substr(0, digits)), unit = 1;
  const std::string suffix = text.substr(digits);
  if (suffix.size() > 1 && !(suffix.size() == 3 && suffix.substr(1) == "iB") &&
      !(suffix.size() == 2 && suffix[1] == 'B')) {
    return false;
  }
  if (!suffix.empty()) {
    const std::string units = "KMGT";
    const size_t k =
        units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0]))));
    if (k == std::string::npos) return false;
    unit = uint64_t{1} << (10 * (k + 1));
  }
  if (n > (uint64_t{1} << 62) / unit) return false;
  *out = n * unit;
  return true;
}

}  // namespace shardkit
