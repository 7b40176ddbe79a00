// libFuzzer entry point for shardkit::fuzz::CommandLine. The tools' messages
// (errors, --help) go to /dev/null: thousands a second would drown the log.
#include <cstdio>

#include "tests/fuzz/fuzz_cli.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::freopen("/dev/null", "w", stdout) == nullptr) return 0;
  if (std::freopen("/dev/null", "w", stderr) == nullptr) return 0;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::CommandLine(data, size);
}
