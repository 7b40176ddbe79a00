// SVG rendering of LinePlot.
#include "tools/common/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace shardkit {
namespace {

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                         "#9467bd", "#8c564b", "#7f7f7f"};

std::string Num(double v) {
  char buf[32];
  double a = std::fabs(v);
  if (a >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.3gM", v / 1e6);
  } else if (a >= 1e4) {
    std::snprintf(buf, sizeof(buf), "%.3gk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  }
  return buf;
}

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}

double NiceStep(double range, int ticks) {
  double raw = range / std::max(1, ticks);
  double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

}  // namespace

std::string LinePlot::ToSvg(int W, int H) const {
  const double ml = 80, mr = 180, mt = 40, mb = 55;
  double xmin = 1e300, xmax = -1e300, ymax = 0;
  for (const auto& s : series) {
    for (double x : s.x) {
      double v = log2_x ? std::log2(std::max(x, 1e-9)) : x;
      xmin = std::min(xmin, v);
      xmax = std::max(xmax, v);
    }
    for (double y : s.y) ymax = std::max(ymax, y);
  }
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (xmax == xmin) xmax = xmin + 1;
  if (ymax <= 0) ymax = 1;
  const double ystep = NiceStep(ymax, 5);
  ymax = std::ceil(ymax * 1.05 / ystep) * ystep;
  auto px = [&](double x) {
    double v = log2_x ? std::log2(std::max(x, 1e-9)) : x;
    return ml + (v - xmin) / (xmax - xmin) * (W - ml - mr);
  };
  auto py = [&](double y) { return H - mb - y / ymax * (H - mt - mb); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
    << Escape(title) << "</text>\n";
  // Axes and grid.
  for (double y = 0; y <= ymax + 1e-9; y += ystep) {
    o << "<line x1=\"" << ml << "\" x2=\"" << W - mr << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
      << "\" stroke=\"#ddd\"/>\n";
    o << "<text x=\"" << ml - 6 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">" << Num(y)
      << "</text>\n";
  }
  std::vector<double> xticks;
  for (const auto& s : series) xticks.insert(xticks.end(), s.x.begin(), s.x.end());
  std::sort(xticks.begin(), xticks.end());
  xticks.erase(std::unique(xticks.begin(), xticks.end()), xticks.end());
  for (double x : xticks) {
    o << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << H - mb << "\" y2=\""
      << H - mb + 5 << "\" stroke=\"black\"/>\n";
    o << "<text x=\"" << px(x) << "\" y=\"" << H - mb + 18 << "\" text-anchor=\"middle\">" << Num(x)
      << "</text>\n";
  }
  o << "<line x1=\"" << ml << "\" x2=\"" << W - mr << "\" y1=\"" << H - mb << "\" y2=\"" << H - mb
    << "\" stroke=\"black\"/>\n";
  o << "<line x1=\"" << ml << "\" x2=\"" << ml << "\" y1=\"" << mt << "\" y2=\"" << H - mb
    << "\" stroke=\"black\"/>\n";
  o << "<text x=\"" << (ml + W - mr) / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">"
    << Escape(x_label) << "</text>\n";
  o << "<text transform=\"translate(18," << (mt + H - mb) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << Escape(y_label) << "</text>\n";
  // Series.
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    const char* color = kColors[i % 7];
    o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6,4\"" : "") << " points=\"";
    for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k)
      o << px(s.x[k]) << "," << py(s.y[k]) << " ";
    o << "\"/>\n";
    if (!s.dashed) {
      for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
        o << "<circle cx=\"" << px(s.x[k]) << "\" cy=\"" << py(s.y[k]) << "\" r=\"3.5\" fill=\""
          << color << "\"/>\n";
      }
    }
    const double ly = mt + 10 + 20 * i;
    o << "<line x1=\"" << W - mr + 12 << "\" x2=\"" << W - mr + 36 << "\" y1=\"" << ly << "\" y2=\""
      << ly << "\" stroke=\"" << color << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6,4\"" : "") << "/>\n";
    o << "<text x=\"" << W - mr + 42 << "\" y=\"" << ly + 4 << "\">" << Escape(s.name)
      << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace shardkit
