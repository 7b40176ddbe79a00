#include "tests/fuzz/fuzz_targets.h"

// libFuzzer entry point for shardkit::fuzz::ValLabels.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::ValLabels(data, size);
}
