// Scaling report: collects shardkit-train metrics files (one JSON line per
// epoch, one file per run of a sweep) into a table and SVG plots like the
// scaling study's: epoch time and speedup against GPUs (ranks), nodes and
// loader workers, with the ideal line.
#pragma once

#include <string>

#include "base/status.h"

namespace shardkit {

// Reads every *.jsonl under `metrics_dir`, writes report.md (every run, then
// the weak- and strong-scaling tables the runs make: one batch per rank, one
// global batch), report.csv, scaling.csv and the plots into `out_dir`, and
// prints the tables. Fails if no run has metrics.
Status WriteScalingReport(const std::string& metrics_dir, const std::string& out_dir);

}  // namespace shardkit
