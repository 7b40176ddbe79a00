// libFuzzer entry point for shardkit::fuzz::CommandLine. scripts/fuzz.sh runs
// it with -close_fd_mask=3: the tools' messages (errors, --help) would drown
// the log, while libFuzzer keeps its own report on a duplicate of stderr.
#include "tests/fuzz/fuzz_cli.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shardkit::fuzz::CommandLine(data, size);
}
