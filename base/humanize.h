// Human-readable figures for progress lines and summaries.
#pragma once

#include <cstdint>
#include <string>

namespace shardkit {

std::string FormatDuration(double seconds);  // "1:02:03", "2:03" or "4.56s"
std::string FormatBytes(double bytes);       // "12.3 MB" (powers of 1000)
std::string FormatCount(double n);           // "1.23G", "1.23M", "12.3k", "123"

// A size as people write one: bytes, or with K, M, G or T (powers of 1024;
// "200G", "64MiB", "1KB"), up to 2^62 bytes. False for anything else.
bool ParseByteSize(const std::string& text, uint64_t* out);

}  // namespace shardkit
