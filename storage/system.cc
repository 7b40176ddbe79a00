// Memory and I/O figures from sysconf and /proc.
#include "storage/system.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace shardkit {
namespace {

// The number after `key` in a /proc file of "key value" lines, or 0.
unsigned long long ProcValue(const char* path, const char* key) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long v = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, key, n) == 0 && std::sscanf(line + n, "%llu", &v) == 1) break;
  }
  std::fclose(f);
  return v;
}

}  // namespace

uint64_t PhysicalMemoryBytes() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
}

uint64_t AvailableMemoryBytes() {
  const unsigned long long kb = ProcValue("/proc/meminfo", "MemAvailable:");
  return kb > 0 ? kb * 1024 : PhysicalMemoryBytes();
}

uint64_t StorageReadBytes() { return ProcValue("/proc/self/io", "read_bytes:"); }

}  // namespace shardkit
