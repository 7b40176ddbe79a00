// libFuzzer entry point for shardkit::fuzz::Hdf5Import.
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::Hdf5Import(data, size);
}
