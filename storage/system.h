// What this machine and process report about themselves: memory (for
// refusing buffers that cannot fit, and for choosing read paths) and the bytes
// the process has made storage read (cold-read benchmarks and tests).
#pragma once

#include <cstdint>

namespace shardkit {

// Physical memory of the machine, in bytes.
uint64_t PhysicalMemoryBytes();
// MemAvailable from /proc/meminfo: what the page cache could hold of a
// dataset; PhysicalMemoryBytes() where it cannot be read.
uint64_t AvailableMemoryBytes();
// What this process has made storage read so far (/proc/self/io's
// read_bytes; 0 where the kernel or the filesystem reports none, e.g. tmpfs).
uint64_t StorageReadBytes();

}  // namespace shardkit
