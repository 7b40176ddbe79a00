// shardkit-report: a training sweep's metrics (shardkit-train --metrics files,
// one per run) as the scaling tables and plots (tools/report/report.h);
// what slurm/report runs.
#include <string>

#include "tools/common/cli.h"
#include "tools/report/report.h"

namespace shardkit {

int ReportMain(int argc, char** argv, bool parse_only) {
  CLI::App app{"shardkit-report: a training sweep's scaling tables and plots"};
  std::string metrics_dir, out;
  app.add_option("METRICS_DIR", metrics_dir, "directory of *.jsonl metrics files, one per run")
      ->required();
  app.add_option("--out", out,
                 "where report.md, report.csv and the SVG plots go (default: METRICS_DIR)");
  if (int rc = cli::Parse(app, argc, argv, "shardkit-report"); rc >= 0) return rc;
  if (parse_only) return 0;
  const Status s = WriteScalingReport(metrics_dir, out.empty() ? metrics_dir : out);
  return s.ok() ? cli::kExitOk : cli::Fail("shardkit-report", s);
}

}  // namespace shardkit

#ifndef SHARDKIT_NO_MAIN
int main(int argc, char** argv) {
  return shardkit::cli::FlushedExit("shardkit-report",
                                    shardkit::ReportMain(argc, argv, /*parse_only=*/false));
}
#endif
