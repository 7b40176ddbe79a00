// The command-line fuzz target (see fuzz_cli.cc); apart from fuzz_targets.h
// because it links the four tools' command-line code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardkit::fuzz {

int CommandLine(const uint8_t* data,
                size_t size);  // argv for one of the four tools, parsed as the tool does

}  // namespace shardkit::fuzz
