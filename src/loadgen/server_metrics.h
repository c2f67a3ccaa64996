// The servers' own view of a benchmark run: prefix-cache counters scraped from each server's
// Prometheus /metrics before and after the run, summed over servers (replicas behind a router,
// or a router that re-exports them) and differenced. Parsing is a pure function of the text;
// only scrape_prefix_cache does I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sluice::loadgen {

// Cumulative prefix-cache counters, as `sluice serve` exports them (src/server/metrics.cpp).
struct PrefixCacheCounters {
  double queried_blocks = 0;  // sluice_prefix_cache_queries_total: full prompt blocks looked up
  double hit_blocks = 0;      // sluice_prefix_cache_hits_total
  double hit_tokens = 0;      // sluice_prefix_cache_hit_tokens_total: prompt tokens not recomputed
  double prompt_tokens = 0;   // sluice_prompt_tokens_total (0 when not exported)
  double prompt_tokens_computed = 0;  // sluice_prompt_tokens_computed_total (0 when not exported)

  // hit_blocks / queried_blocks and hit_tokens / prompt_tokens; nullopt when the denominator is 0.
  std::optional<double> block_hit_rate() const;
  std::optional<double> token_hit_rate() const;
};

PrefixCacheCounters operator+(const PrefixCacheCounters& a, const PrefixCacheCounters& b);
PrefixCacheCounters operator-(const PrefixCacheCounters& a, const PrefixCacheCounters& b);

// The sum of every sample of metric `name` (exact name, any labels) in a Prometheus text
// exposition; nullopt when it has none. Comments, other metrics and malformed lines are skipped.
std::optional<double> prometheus_sum(std::string_view text, std::string_view name);

// The counters in one /metrics text; nullopt when it lacks the three prefix-cache counters
// (a server that does not export them: llama-server, vLLM under other names).
std::optional<PrefixCacheCounters> parse_prefix_cache_counters(std::string_view text);

// Where a server's metrics are by default: "{scheme://host:port}/metrics" of its base URL (a
// path prefix ending in /v1 is dropped; a URL already ending in /metrics is kept).
std::string default_metrics_url(const std::string& base_url);

// GETs every URL and sums their counters. An error names the URL that failed or lacked them.
Result<PrefixCacheCounters> scrape_prefix_cache(const std::vector<std::string>& urls,
                                                double timeout_s = 10);

}  // namespace sluice::loadgen
