#include "tests/fuzz/fuzz_targets.h"

// libFuzzer entry point for shardkit::fuzz::Mat.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::Mat(data, size);
}
