#include "tests/fuzz/fuzz_targets.h"

// libFuzzer entry point for shardkit::fuzz::Archive.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::Archive(data, size);
}
