// Scaling report from shardkit-train metrics.
#include "tools/report/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "storage/file_io.h"
#include "storage/output_file.h"
#include "tools/common/svg_plot.h"

namespace shardkit {
namespace {

std::string FormatNumber(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

struct Run {
  std::string name;
  int nodes = 1, ranks = 1, workers = 0, batch = 0;
  double epoch_seconds = 0, images_per_sec = 0, data_wait = 0, comm = 0;
  int epochs = 0;
};

// One run's metrics file: a JSON line per epoch, averaged over the epochs.
// A file with no epochs (a run that has not finished one) has epochs == 0.
Result<Run> ReadRun(const std::string& metrics_dir, const std::string& name) {
  SK_ASSIGN_OR_RETURN(std::string text,
                      Env::Default()->ReadFile(JoinPath(metrics_dir, name), 64 << 20));
  Run r;
  r.name = name.substr(0, name.size() - 6);
  std::istringstream lines(text);
  double secs = 0, ips = 0, wait = 0, comm = 0;
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (line.empty()) continue;
    const std::string where = JoinPath(metrics_dir, name) + ": line " + std::to_string(line_no);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("images_per_sec")) {
      return Status::Corruption(where +
                                ": not a shardkit-train metrics line: " + line.substr(0, 80));
    }
    // Each field a finite number in its range, or absent (its default):
    // what the tables divide by must be a count that makes sense.
    Status bad;
    auto field = [&](const char* key, double def, double lo, double hi) -> double {
      if (!j.contains(key)) return def;
      const auto& v = j[key];
      const double x = v.is_number() ? v.get<double>() : std::nan("");
      if (!(x >= lo && x <= hi)) {
        if (bad.ok()) {
          bad = Status::Corruption(where + ": \"" + key + "\" is " + v.dump().substr(0, 40) +
                                   ", not a number in [" + FormatNumber(lo) + ", " +
                                   FormatNumber(hi) + "]");
        }
        return def;  // never cast a nan or 1e30 to int
      }
      return x;
    };
    r.nodes = static_cast<int>(field("nodes", 1, 1, 1e6));
    r.ranks = static_cast<int>(field("world_size", 1, 1, 1e7));
    r.workers = static_cast<int>(field("workers", 0, 0, 1e6));
    r.batch = static_cast<int>(field("batch_size", 0, 0, 1e8));
    secs += field("seconds", 0.0, 0, 1e12);
    ips += field("images_per_sec", 0.0, 1e-9, 1e15);
    wait += field("data_wait_fraction", 0.0, 0, 1);
    comm += field("comm_exposed_fraction", 0.0, 0, 1);
    if (!bad.ok()) return bad;
    ++r.epochs;
  }
  if (r.epochs == 0) return r;
  r.epoch_seconds = secs / r.epochs;
  r.images_per_sec = ips / r.epochs;
  r.data_wait = wait / r.epochs;
  r.comm = comm / r.epochs;
  return r;
}

// Every finished run under `metrics_dir`, smallest (ranks, nodes, workers, batch) first.
Result<std::vector<Run>> ReadRuns(const std::string& metrics_dir) {
  SK_ASSIGN_OR_RETURN(auto names, Env::Default()->ListDir(metrics_dir));
  std::vector<Run> runs;
  for (const auto& name : names) {
    if (name.size() < 6 || name.substr(name.size() - 6) != ".jsonl") continue;
    SK_ASSIGN_OR_RETURN(Run r, ReadRun(metrics_dir, name));
    if (r.epochs > 0) runs.push_back(r);
  }
  if (runs.empty())
    return Status::NotFound(metrics_dir + ": no metrics (*.jsonl) from finished runs");
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    return std::tie(a.ranks, a.nodes, a.workers, a.batch) <
           std::tie(b.ranks, b.nodes, b.workers, b.batch);
  });
  return runs;
}

// The study's two tables: weak scaling (runs of one batch per rank) and
// strong scaling (runs of one global batch), each over the rank counts it
// has, with images/s, speedup and efficiency against its fewest ranks. A
// sweep gives both from --batch and --global-batch (slurm/sweep.sh).
std::string ScalingTables(const std::vector<Run>& runs, std::string* csv) {
  std::string md;
  for (const bool weak : {true, false}) {
    std::map<std::pair<int, int64_t>, std::vector<const Run*>> groups;  // (workers, batch) -> runs
    for (const Run& r : runs) {
      groups[{r.workers, weak ? r.batch : int64_t{r.batch} * r.ranks}].push_back(&r);
    }
    for (const auto& [key, group] : groups) {
      std::vector<const Run*> g = group;  // runs are sorted: fewest ranks first
      if (g.size() < 2 || g.front()->ranks == g.back()->ranks) continue;
      const Run& base = *g.front();
      char head[256];
      std::snprintf(
          head, sizeof(head),
          "\n### %s scaling: %s %lld, %d loader worker(s) per rank\n\n"
          "| nodes | ranks | batch/rank | global batch | images/s | speedup | efficiency |\n"
          "|---:|---:|---:|---:|---:|---:|---:|\n",
          weak ? "Weak" : "Strong", weak ? "batch per rank" : "global batch", (long long)key.second,
          key.first);
      md += head;
      for (const Run* r : g) {
        const double speedup = r->images_per_sec / base.images_per_sec;
        const double eff = speedup / (static_cast<double>(r->ranks) / base.ranks);
        char line[256];
        std::snprintf(line, sizeof(line), "| %d | %d | %d | %lld | %.0f | %.2fx | %.0f%% |\n",
                      r->nodes, r->ranks, r->batch, (long long)r->batch * r->ranks,
                      r->images_per_sec, speedup, 100 * eff);
        md += line;
        std::snprintf(line, sizeof(line), "%s,%d,%d,%d,%d,%lld,%.2f,%.4f,%.4f\n",
                      weak ? "weak" : "strong", r->nodes, r->ranks, r->workers, r->batch,
                      (long long)r->batch * r->ranks, r->images_per_sec, speedup, eff);
        *csv += line;
      }
    }
  }
  return md;
}

// report.md and report.csv, speedup and efficiency against the first run; prints the table.
Status WriteTables(const std::vector<Run>& runs, const std::string& out_dir) {
  const Run& base = runs.front();
  std::ostringstream md, csv;
  md << "| run | nodes | ranks | workers | batch/rank | epoch s | images/s | speedup | efficiency "
        "| data-wait | exposed comm |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  csv << "run,nodes,ranks,workers,batch,epoch_seconds,images_per_sec,speedup,efficiency,data_wait_"
         "fraction,comm_fraction\n";
  for (const Run& r : runs) {
    const double speedup = r.images_per_sec / base.images_per_sec;
    const double eff = speedup / (static_cast<double>(r.ranks) / base.ranks);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "| %s | %d | %d | %d | %d | %.2f | %.0f | %.2fx | %.0f%% | %.1f%% | %.1f%% |\n",
                  r.name.c_str(), r.nodes, r.ranks, r.workers, r.batch, r.epoch_seconds,
                  r.images_per_sec, speedup, 100 * eff, 100 * r.data_wait, 100 * r.comm);
    md << line;
    std::snprintf(line, sizeof(line), "%s,%d,%d,%d,%d,%.4f,%.2f,%.4f,%.4f,%.4f,%.4f\n",
                  r.name.c_str(), r.nodes, r.ranks, r.workers, r.batch, r.epoch_seconds,
                  r.images_per_sec, speedup, eff, r.data_wait, r.comm);
    csv << line;
  }
  std::string scaling_csv =
      "scaling,nodes,ranks,workers,batch,global_batch,images_per_sec,speedup,efficiency\n";
  md << ScalingTables(runs, &scaling_csv);
  SK_RETURN_IF_ERROR(WriteOutputFile(JoinPath(out_dir, "scaling.csv"), scaling_csv));
  SK_RETURN_IF_ERROR(WriteOutputFile(JoinPath(out_dir, "report.md"), md.str()));
  SK_RETURN_IF_ERROR(WriteOutputFile(JoinPath(out_dir, "report.csv"), csv.str()));
  std::printf("%s", md.str().c_str());
  return Status::OK();
}

// A variable the plots are drawn against.
struct Axis {
  const char* key;
  const char* label;
  int Run::*field;
};
const Axis kAxes[] = {{"ranks", "GPUs (ranks)", &Run::ranks},
                      {"nodes", "nodes", &Run::nodes},
                      {"workers", "loader workers per rank", &Run::workers}};

// The runs along `ax`: one per value of it (the first in sort order), the
// other variables and the batch at the base run's values.
std::map<int, const Run*> PointsAlong(const Axis& ax, const std::vector<Run>& runs) {
  const Run& base = runs.front();
  std::map<int, const Run*> points;
  for (const Run& r : runs) {
    bool others_match = true;
    for (const Axis& other : kAxes) {
      if (other.field == ax.field) continue;
      // Ranks and nodes move together in a sweep; match only workers and batch for those.
      if ((ax.field == &Run::ranks || ax.field == &Run::nodes) &&
          (other.field == &Run::ranks || other.field == &Run::nodes))
        continue;
      others_match = others_match && r.*(other.field) == base.*(other.field);
    }
    if (others_match && r.batch == base.batch && !points.count(r.*(ax.field)))
      points[r.*(ax.field)] = &r;
  }
  return points;
}

// Epoch time and speedup against `ax`, with the ideal lines (flat for
// workers, linear for ranks and nodes); nothing with fewer than two points.
Status WritePlotsAlong(const Axis& ax, const std::vector<Run>& runs, const std::string& out_dir) {
  const std::map<int, const Run*> points = PointsAlong(ax, runs);
  if (points.size() < 2) return Status::OK();
  const Run& first = *points.begin()->second;
  PlotSeries time{"epoch time (s)", {}, {}, false}, ideal_time{"ideal", {}, {}, true};
  PlotSeries speed{"speedup", {}, {}, false}, ideal_speed{"ideal (linear)", {}, {}, true};
  for (const auto& [x, r] : points) {
    const double scale = static_cast<double>(x) / points.begin()->first;
    time.x.push_back(x);
    time.y.push_back(r->epoch_seconds);
    ideal_time.x.push_back(x);
    ideal_time.y.push_back(first.epoch_seconds / (ax.field == &Run::workers ? 1.0 : scale));
    speed.x.push_back(x);
    speed.y.push_back(r->images_per_sec / first.images_per_sec);
    ideal_speed.x.push_back(x);
    ideal_speed.y.push_back(ax.field == &Run::workers ? 1.0 : scale);
  }
  LinePlot tp{std::string("epoch time vs ") + ax.label,
              ax.label,
              "seconds per epoch",
              true,
              {time, ideal_time}};
  LinePlot sp{std::string("speedup vs ") + ax.label,
              ax.label,
              "speedup over the smallest run",
              true,
              {speed, ideal_speed}};
  SK_RETURN_IF_ERROR(WriteOutputFile(
      JoinPath(out_dir, std::string("epoch_time_vs_") + ax.key + ".svg"), tp.ToSvg()));
  SK_RETURN_IF_ERROR(
      WriteOutputFile(JoinPath(out_dir, std::string("speedup_vs_") + ax.key + ".svg"), sp.ToSvg()));
  std::printf("plots: %s/epoch_time_vs_%s.svg, %s/speedup_vs_%s.svg\n", out_dir.c_str(), ax.key,
              out_dir.c_str(), ax.key);
  return Status::OK();
}

}  // namespace

Status WriteScalingReport(const std::string& metrics_dir, const std::string& out_dir) {
  SK_ASSIGN_OR_RETURN(std::vector<Run> runs, ReadRuns(metrics_dir));
  // Every file this writes, checked first: never over a metrics file it read
  // (by any name) nor into something that is not a directory.
  SK_RETURN_IF_ERROR(CheckOutputDir(out_dir).WithContext("--out"));
  std::vector<std::string> inputs;
  for (const Run& r : runs) inputs.push_back(JoinPath(metrics_dir, r.name + ".jsonl"));
  std::vector<std::string> outputs = {"scaling.csv", "report.md", "report.csv"};
  for (const Axis& ax : kAxes) {
    outputs.push_back(std::string("epoch_time_vs_") + ax.key + ".svg");
    outputs.push_back(std::string("speedup_vs_") + ax.key + ".svg");
  }
  for (const std::string& name : outputs) {
    SK_RETURN_IF_ERROR(CheckOutputOutsideInputs(JoinPath(out_dir, name), inputs));
  }
  SK_RETURN_IF_ERROR(Env::Default()->CreateDirs(out_dir));
  SK_RETURN_IF_ERROR(WriteTables(runs, out_dir));
  // Plots against one variable at a time, the others at the base run's values.
  for (const Axis& ax : kAxes) SK_RETURN_IF_ERROR(WritePlotsAlong(ax, runs, out_dir));
  return Status::OK();
}

}  // namespace shardkit
