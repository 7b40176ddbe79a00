// libFuzzer entry point for shardkit::fuzz::Manifest.
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::Manifest(data, size);
}
