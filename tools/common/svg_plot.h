// LinePlot: a small SVG line chart (axes, ticks, legend) for the benchmark and
// scaling reports, so results come with a picture and no plotting dependency.
#pragma once

#include <string>
#include <vector>

namespace shardkit {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;
  bool dashed = false;  // e.g. the ideal-scaling line
};

struct LinePlot {
  std::string title, x_label, y_label;
  bool log2_x = false;  // worker and GPU counts: 1, 2, 4, 8...
  std::vector<PlotSeries> series;
  std::string ToSvg(int width = 720, int height = 440) const;
};

}  // namespace shardkit
