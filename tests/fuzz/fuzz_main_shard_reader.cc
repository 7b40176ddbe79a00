// libFuzzer entry point for shardkit::fuzz::ShardReader.
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::ShardReader(data, size);
}
