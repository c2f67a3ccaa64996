// The latency-throughput Pareto plot of a plan (the seeds' PaLM / LLaMA 3-70B frontier figures):
// x = step time (per-token latency), y = tokens/s per chip, both log scale, one point per batch.
// Hand-written SVG 1.1, no dependencies; hollow points do not fit in memory.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/xml.h"
#include "perf/planner.h"

namespace sluice {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  if (v >= 1e6 || v < 1e-2) {
    std::snprintf(buf, sizeof buf, "%.0e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

// A log10 axis over whole decades covering [lo, hi].
struct LogAxis {
  double lo_exp = 0, hi_exp = 1;
  double pix_lo = 0, pix_hi = 1;  // screen coordinates of lo_exp and hi_exp
  LogAxis(double lo, double hi, double p0, double p1) : pix_lo(p0), pix_hi(p1) {
    lo_exp = std::floor(std::log10(lo));
    hi_exp = std::ceil(std::log10(hi));
    if (hi_exp <= lo_exp) hi_exp = lo_exp + 1;
  }
  double map(double v) const {
    const double t = (std::log10(v) - lo_exp) / (hi_exp - lo_exp);
    return pix_lo + t * (pix_hi - pix_lo);
  }
};

}  // namespace

std::string pareto_svg(const Plan& plan) {
  constexpr double kW = 720, kH = 480, kLeft = 80, kRight = 690, kTop = 60, kBottom = 410;
  std::vector<const PlanRow*> rows;
  for (const PlanRow& r : plan.rows) {
    if (r.step_time_ms > 0 && r.tokens_per_s_per_chip > 0) rows.push_back(&r);
  }
  std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->batch < b->batch; });
  double xlo = 1, xhi = 10, ylo = 1, yhi = 10;
  if (!rows.empty()) {
    xlo = xhi = rows[0]->step_time_ms;
    ylo = yhi = rows[0]->tokens_per_s_per_chip;
    for (const PlanRow* r : rows) {
      xlo = std::min(xlo, r->step_time_ms);
      xhi = std::max(xhi, r->step_time_ms);
      ylo = std::min(ylo, r->tokens_per_s_per_chip);
      yhi = std::max(yhi, r->tokens_per_s_per_chip);
    }
  }
  const LogAxis xa(xlo, xhi, kLeft, kRight), ya(ylo, yhi, kBottom, kTop);

  const PlanParams& p = plan.params;
  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kW) + "\" height=\"" + num(kH) +
       "\" viewBox=\"0 0 " + num(kW) + " " + num(kH) + "\" font-family=\"sans-serif\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  char title[512];
  const std::string wts = p.precision.weight_bits > 0
                              ? std::to_string(p.precision.weight_bits) + "-bit weights"
                              : std::string("stored weights");
  std::snprintf(title, sizeof title, "%s on %d x %s: %s, %d-bit KV, context %lld",
                p.model.name.c_str(), p.n_chips, p.chip.name.c_str(), wts.c_str(),
                p.precision.kv_bits, (long long)p.context);
  s += "<text x=\"" + num(kW / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">" +
       html_escape(title) + "</text>\n";
  s += "<text x=\"" + num(kW / 2) +
       "\" y=\"46\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">theoretical "
       "latency-throughput frontier (roofline); hollow = does not fit in memory</text>\n";

  // Grid and ticks at 1, 2, 5 x 10^k.
  s += "<g stroke=\"#ddd\" stroke-width=\"1\">\n";
  std::string labels;
  for (double e = xa.lo_exp; e <= xa.hi_exp; ++e) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, e);
      if (std::log10(v) > xa.hi_exp + 1e-9) break;
      const double x = xa.map(v);
      s += "<line x1=\"" + num(x) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(kBottom) + "\"/>\n";
      labels += "<text x=\"" + num(x) + "\" y=\"" + num(kBottom + 16) +
                "\" text-anchor=\"middle\" font-size=\"11\">" + tick_label(v) + "</text>\n";
    }
  }
  for (double e = ya.lo_exp; e <= ya.hi_exp; ++e) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, e);
      if (std::log10(v) > ya.hi_exp + 1e-9) break;
      const double y = ya.map(v);
      s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(y) + "\" x2=\"" + num(kRight) +
           "\" y2=\"" + num(y) + "\"/>\n";
      labels += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(y + 4) +
                "\" text-anchor=\"end\" font-size=\"11\">" + tick_label(v) + "</text>\n";
    }
  }
  s += "</g>\n" + labels;
  s += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(kRight - kLeft) +
       "\" height=\"" + num(kBottom - kTop) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  s += "<text x=\"" + num((kLeft + kRight) / 2) + "\" y=\"" + num(kBottom + 40) +
       "\" text-anchor=\"middle\" font-size=\"13\">step time = per-token latency (ms)</text>\n";
  s += "<text x=\"20\" y=\"" + num((kTop + kBottom) / 2) +
       "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 20 " +
       num((kTop + kBottom) / 2) + ")\">throughput per chip (tokens/s)</text>\n";

  if (!rows.empty()) {
    s += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"";
    for (const PlanRow* r : rows) {
      s += num(xa.map(r->step_time_ms)) + "," + num(ya.map(r->tokens_per_s_per_chip)) + " ";
    }
    s += "\"/>\n";
  }
  double last_label_x = -1e9, last_label_y = -1e9;
  for (const PlanRow* r : rows) {
    const double x = xa.map(r->step_time_ms), y = ya.map(r->tokens_per_s_per_chip);
    s += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"4\" stroke=\"#1f77b4\" " +
         "stroke-width=\"2\" fill=\"" + (r->fits ? "#1f77b4" : "white") + "\"><title>batch " +
         std::to_string(r->batch) + ": " + num(r->step_time_ms) + " ms, " +
         num(r->tokens_per_s_per_chip) + " tok/s/chip</title></circle>\n";
    // Label a point unless it would overprint the previous label (its <title> still says).
    if (std::hypot(x - last_label_x, y - last_label_y) >= 28) {
      s += "<text x=\"" + num(x + 6) + "\" y=\"" + num(y - 6) +
           "\" font-size=\"10\">B=" + std::to_string(r->batch) + "</text>\n";
      last_label_x = x;
      last_label_y = y;
    }
  }
  s += "</svg>\n";
  return s;
}

}  // namespace sluice
