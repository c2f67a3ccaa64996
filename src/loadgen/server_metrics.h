// The servers' own view of a benchmark run: prefix-cache and speculative-decoding counters and
// latency histograms scraped
// from each server's Prometheus /metrics before and after the run, summed over servers (replicas
// behind a router, or a router that re-exports them) and differenced. Parsing is a pure function
// of the text; only scrape_server_counters and scrape_latency_histograms do I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sluice::loadgen {

// Cumulative counters, as `sluice serve` exports them (src/server/metrics.cpp): the prefix
// cache's, and speculative decoding's.
struct ServerCounters {
  double queried_blocks = 0;  // sluice_prefix_cache_queries_total: full prompt blocks looked up
  double hit_blocks = 0;      // sluice_prefix_cache_hits_total
  double hit_tokens = 0;      // sluice_prefix_cache_hit_tokens_total: prompt tokens not recomputed
  double prompt_tokens = 0;   // sluice_prompt_tokens_total (0 when not exported)
  double prompt_tokens_computed = 0;  // sluice_prompt_tokens_computed_total (0 when not exported)
  // Speculative decoding (`serve --spec`; 0 when not exported):
  double spec_verify_steps = 0;     // sluice_spec_verify_steps_total: sequence-steps with a draft
  double spec_draft_tokens = 0;     // sluice_spec_draft_tokens_total
  double spec_accepted_tokens = 0;  // sluice_spec_accepted_tokens_total
  double spec_emitted_tokens = 0;   // sluice_spec_emitted_tokens_total: accepted + the target's own

  // hit_blocks / queried_blocks and hit_tokens / prompt_tokens; nullopt when the denominator is 0.
  std::optional<double> block_hit_rate() const;
  std::optional<double> token_hit_rate() const;
  // spec_accepted_tokens / spec_draft_tokens, and tokens per verifying sequence-step
  // (spec_emitted_tokens / spec_verify_steps); nullopt when nothing was drafted.
  std::optional<double> spec_acceptance() const;
  std::optional<double> spec_tokens_per_step() const;
  // Some counter below 0: a difference across a server restart.
  bool any_negative() const;
};

ServerCounters operator+(const ServerCounters& a, const ServerCounters& b);
ServerCounters operator-(const ServerCounters& a, const ServerCounters& b);

// The sum of every sample of metric `name` (exact name, any labels) in a Prometheus text
// exposition; nullopt when it has none. Comments, other metrics and malformed lines are skipped.
std::optional<double> prometheus_sum(std::string_view text, std::string_view name);

// The counters in one /metrics text; nullopt when it lacks the three prefix-cache counters
// (a server that does not export them: llama-server, vLLM under other names).
std::optional<ServerCounters> parse_server_counters(std::string_view text);

// Where a server's metrics are by default: "{scheme://host:port}/metrics" of its base URL (a
// path prefix ending in /v1 is dropped; a URL already ending in /metrics is kept).
std::string default_metrics_url(const std::string& base_url);

// GETs every URL and sums their counters. An error names the URL that failed or lacked them.
Result<ServerCounters> scrape_server_counters(const std::vector<std::string>& urls,
                                              double timeout_s = 10);

// One Prometheus histogram: its cumulative buckets, _sum and _count (summed over label sets).
struct PromHistogram {
  struct Bucket {
    double le = 0;     // upper bound, ascending; +infinity for le="+Inf"
    double count = 0;  // observations <= le (cumulative)
  };
  std::vector<Bucket> buckets;
  double sum = 0;    // NAME_sum: of all observations
  double count = 0;  // NAME_count

  // sum / count; nullopt when count <= 0.
  std::optional<double> mean() const;
  // Some count (a bucket's, _count) below 0: a difference across a server restart.
  bool any_negative() const;
};

// Histogram NAME in a Prometheus text exposition: NAME_bucket{...,le="X",...} samples, summed per
// bound X over every other label set (a router re-exporting replicas, several engines), plus the
// sums of NAME_sum and NAME_count. nullopt when the text lacks any of the three. Comments, other
// metrics and malformed lines (no le label, a le or value that is not a number, a NaN) are
// skipped. O(lines x log(distinct bounds)).
std::optional<PromHistogram> parse_prometheus_histogram(std::string_view text,
                                                        std::string_view name);

// Bucket-wise sum and difference. Histograms with the same bounds (every `sluice serve` uses
// the same) add and subtract exactly; where one lacks a bound of the other, its cumulative count
// there is read as the count at its next bound below (0 below its first), which keeps the result
// cumulative. The result has the union of the bounds.
PromHistogram operator+(const PromHistogram& a, const PromHistogram& b);
PromHistogram operator-(const PromHistogram& a, const PromHistogram& b);

// The q-quantile (0 <= q <= 1) of the observations, as Prometheus's histogram_quantile
// estimates it: counts made monotonic, rank = q x (count of the +Inf bucket), and within the
// first bucket whose cumulative count reaches the rank, linear interpolation between its lower
// bound (the previous bucket's le, 0 for the first bucket) and its le:
//   value = lower + (le - lower) x (rank - count_below) / (count_in_bucket)
// A rank that falls in the +Inf bucket gives the last finite bound; a first bucket with le <= 0
// gives its le; rank 0 in an empty first bucket gives 0 (Prometheus: NaN). Buckets are sorted by
// le first. It assumes observations spread evenly within a bucket, so with coarse bounds
// (sluice's: 0.5, 1, 2.5, 5, 10, 25, 50, 100 ms, ...) the result is an estimate, not a sample.
// nullopt when q is outside [0, 1], there is no +Inf bucket or no finite one, or the +Inf count
// is <= 0 (no observations).
std::optional<double> histogram_quantile(const PromHistogram& h, double q);

// What `sluice serve` measures per request (src/server/metrics.cpp): TTFT from arrival at the
// engine to the first token (on a prefill worker its own queue + prefill; on a decode worker
// the time after the K/V arrived) and every gap between consecutive tokens.
struct LatencyHistograms {
  PromHistogram ttft;  // sluice_time_to_first_token_seconds
  PromHistogram itl;   // sluice_inter_token_latency_seconds
};
LatencyHistograms operator+(const LatencyHistograms& a, const LatencyHistograms& b);
LatencyHistograms operator-(const LatencyHistograms& a, const LatencyHistograms& b);

// Both histograms of one /metrics text; nullopt when it lacks either.
std::optional<LatencyHistograms> parse_latency_histograms(std::string_view text);

// GETs every URL and sums their histograms. An error names the URL that failed or lacked them.
Result<LatencyHistograms> scrape_latency_histograms(const std::vector<std::string>& urls,
                                                    double timeout_s = 10);

// `--role-metrics ROLE=URL`, grouped by role in first-seen order; URLs completed as
// default_metrics_url does.
struct RoleMetricsUrls {
  std::string role;  // any non-empty label: prefill, decode, colocated
  std::vector<std::string> urls;
};

// Parses and validates (parse_base_url) every ROLE=URL before a run; an error names the bad one.
Result<std::vector<RoleMetricsUrls>> group_role_metrics(const std::vector<std::string>& specs);

// One histogram over a run, in ms: the observation count and interpolated estimates
// (histogram_quantile) of p50 and p99, and the exact mean (_sum / _count). nullopt: no
// observations.
struct HistogramSummary {
  double count = 0;
  std::optional<double> p50_ms, p99_ms, mean_ms;
};
HistogramSummary summarize_histogram(const PromHistogram& h);

// The server-side latencies of one role over a run.
struct RoleLatency {
  std::string role;
  std::vector<std::string> urls;
  std::optional<HistogramSummary> ttft, itl;  // nullopt: not available, and note says why
  std::string note;
};

// after - before, summarized; a failed scrape or histograms that went backwards leave ttft and
// itl empty with the reason in note.
RoleLatency role_latency(const RoleMetricsUrls& r, const Result<LatencyHistograms>& before,
                         const Result<LatencyHistograms>& after);

}  // namespace sluice::loadgen
