// Human-readable figures for progress lines and summaries.
#pragma once

#include <string>

namespace shardkit {

std::string FormatDuration(double seconds);  // "1:02:03", "2:03" or "4.56s"
std::string FormatBytes(double bytes);       // "12.3 MB" (powers of 1000)
std::string FormatCount(double n);           // "1.23G", "1.23M", "12.3k", "123"

}  // namespace shardkit
