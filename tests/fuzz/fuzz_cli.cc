// The command-line fuzz target: arbitrary bytes become an argv for one of the
// five tools (the first byte picks which), parsed exactly as the tool parses
// it (PackMain/BenchMain/AugmentMain/ReportMain with parse_only, AddTrainFlags). A parse
// may fail, never crash, throw or hang.
#include "tests/fuzz/fuzz_cli.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "tools/common/cli.h"
#include "tools/train/train_cli.h"

namespace shardkit {
int PackMain(int argc, char** argv, bool parse_only);
int BenchMain(int argc, char** argv, bool parse_only);
int AugmentMain(int argc, char** argv, bool parse_only);
int ReportMain(int argc, char** argv, bool parse_only);
}  // namespace shardkit

namespace shardkit::fuzz {

int CommandLine(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* kTools[] = {"shardkit-pack", "shardkit-bench", "shardkit-augment",
                                 "shardkit-train", "shardkit-report"};
  const int tool = data[0] % 5;
  // Arguments are separated by NUL or newline bytes.
  std::vector<std::string> args = {kTools[tool]};
  std::string cur;
  for (size_t i = 1; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) args.push_back(cur);
  if (args.size() > 64) args.resize(64);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int argc = static_cast<int>(args.size());
  int rc = 0;
  switch (tool) {
    case 0:
      rc = PackMain(argc, argv.data(), true);
      break;
    case 1:
      rc = BenchMain(argc, argv.data(), true);
      break;
    case 2:
      rc = AugmentMain(argc, argv.data(), true);
      break;
    case 4:
      rc = ReportMain(argc, argv.data(), true);
      break;
    default: {
      CLI::App app{"shardkit-train"};
      TrainOptions o;
      TrainToolFlags tool;
      AddTrainFlags(app, &o, &tool);
      rc = cli::Parse(app, argc, argv.data(), "shardkit-train");
      if (rc < 0) rc = 0;
    }
  }
  // The contract: 0 (parsed, or --help) or 2 (usage error); nothing else.
  if (rc != 0 && rc != cli::kExitError) __builtin_trap();
  return 0;
}

}  // namespace shardkit::fuzz
