#include "loadgen/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sluice::loadgen {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - double(lo));
}

Distribution distribution(std::vector<double> values_ms) {
  Distribution d;
  d.n = values_ms.size();
  if (values_ms.empty()) return d;
  std::sort(values_ms.begin(), values_ms.end());
  double sum = 0;
  for (double v : values_ms) sum += v;
  d.mean = sum / double(d.n);
  double sq = 0;
  for (double v : values_ms) sq += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(sq / double(d.n));
  d.median = percentile(values_ms, 50);
  d.p90 = percentile(values_ms, 90);
  d.p99 = percentile(values_ms, 99);
  return d;
}

bool meets_slo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_ms && r.ttft_s * 1e3 > *slo.ttft_ms) return false;
  if (slo.tpot_ms && r.output_tokens > 1 && r.tpot_s() * 1e3 > *slo.tpot_ms) return false;
  return true;
}

RunSummary summarize(const std::vector<RequestRecord>& records, const Slo& slo) {
  RunSummary s;
  s.slo = slo;
  double first = std::numeric_limits<double>::infinity(), last = -first;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestRecord& r : records) {
    first = std::min(first, r.start_s);
    last = std::max(last, r.end_s());
    if (!r.ok) {
      ++s.failed;
      auto it = std::find_if(s.errors.begin(), s.errors.end(),
                             [&](const auto& e) { return e.first == r.error; });
      if (it == s.errors.end()) {
        s.errors.emplace_back(r.error, 1);
      } else {
        ++it->second;
      }
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.input_tokens;
    s.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2el.push_back(r.e2el_s * 1e3);
    if (r.output_tokens > 1) tpot.push_back(r.tpot_s() * 1e3);
    for (double g : r.itl_s) itl.push_back(g * 1e3);
    if (slo.any() && meets_slo(r, slo)) ++s.good_requests;
  }
  s.duration_s = records.empty() ? 0 : std::max(0.0, last - first);
  if (s.duration_s > 0) {
    s.request_throughput = double(s.completed) / s.duration_s;
    s.input_throughput = double(s.total_input_tokens) / s.duration_s;
    s.output_throughput = double(s.total_output_tokens) / s.duration_s;
    s.total_token_throughput = s.input_throughput + s.output_throughput;
    s.request_goodput = double(s.good_requests) / s.duration_s;
  }
  if (!records.empty()) s.good_percent = 100.0 * double(s.good_requests) / double(records.size());
  s.ttft_ms = distribution(std::move(ttft));
  s.tpot_ms = distribution(std::move(tpot));
  s.itl_ms = distribution(std::move(itl));
  s.e2el_ms = distribution(std::move(e2el));
  return s;
}

}  // namespace sluice::loadgen
