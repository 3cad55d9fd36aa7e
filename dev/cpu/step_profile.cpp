#include "dev/cpu/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace gpt2 {
namespace cpuprof {

namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "212.3 MFLOP", "93.01 MB": 4 significant digits in the largest unit below the value.
std::string amount(double v, const char* unit) {
  static const struct { double scale; const char* prefix; } kPrefixes[] = {{1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& p : kPrefixes)
    if (v >= p.scale) return fmt("%.4g ", v / p.scale) + p.prefix + unit;
  return fmt("%.4g ", v) + unit;
}

// | op | calls | ms/step | % of step | work/step | GFLOP/s | % of peak | GB/s | % of bandwidth |
std::string op_row(const std::string& op, const OpTotals& t, double step_s, const Roofs& roofs) {
  std::string row = "| " + op + " | " + std::to_string(t.calls) + " | " + fmt("%.3f", t.seconds * 1e3) + " | " +
                    fmt("%.1f", 100 * t.seconds / step_s) + " | ";
  if (t.compute()) {
    const double gflops = t.flops / t.seconds / 1e9;
    row += amount(t.flops, "FLOP") + " | " + fmt("%.1f", gflops) + " | " +
           fmt("%.1f", 100 * gflops / roofs.peak_gflops) + " |  |  |";
  } else {
    const double gbps = t.bytes / t.seconds / 1e9;
    row += amount(t.bytes, "B") + " |  |  | " + fmt("%.1f", gbps) + " | " +
           fmt("%.1f", 100 * gbps / roofs.bandwidth_gbps) + " |";
  }
  return row + "\n";
}

}  // namespace

std::string profile_table(const Step& step, const Roofs& roofs) {
  std::vector<std::pair<std::string, OpTotals>> rows(step.ops.begin(), step.ops.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::string out =
      "| op | calls | ms/step | % of step | work/step | GFLOP/s | % of peak | GB/s | % of bandwidth |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  double in_ops = 0;
  long calls = 0;
  for (const auto& [op, t] : rows) {
    out += op_row(op, t, step.seconds, roofs);
    in_ops += t.seconds;
    calls += t.calls;
  }
  const double between = std::max(0.0, step.seconds - in_ops);
  out += "| (between ops) |  | " + fmt("%.3f", between * 1e3) + " | " + fmt("%.1f", 100 * between / step.seconds) +
         " |  |  |  |  |  |\n";
  const double gflops = step.model_flops / step.seconds / 1e9;
  out += "| **step** | " + std::to_string(calls) + " | " + fmt("%.3f", step.seconds * 1e3) + " | 100.0 | " +
         amount(step.model_flops, "FLOP") + " (model) | " + fmt("%.1f", gflops) + " | " +
         fmt("%.1f", 100 * gflops / roofs.peak_gflops) + " (MFU) |  |  |\n";
  return out;
}

}  // namespace cpuprof
}  // namespace gpt2
