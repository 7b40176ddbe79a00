// libFuzzer entry point for shardkit::fuzz::JpegTransform.
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::JpegTransform(data, size);
}
