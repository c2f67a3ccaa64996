// What `sluice bench serve` prints and writes: a markdown summary (vLLM benchmark_serving's
// rows, one column per run), the JSON document (per-run metrics, optionally every request's raw
// timings) and the latency-throughput curve of a rate sweep as SVG.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loadgen/metrics.h"
#include "loadgen/server_metrics.h"

namespace sluice::loadgen {

// How a run was driven (for reports).
struct RunInfo {
  std::string url;
  std::string endpoint;  // "completions" or "chat"
  std::string model;
  std::string dataset;  // Dataset::description
  bool exact_token_counts = false;
  int num_prompts = 0;
  double rate = 0;                // requests/s (multiturn: conversations/s); +inf: all at once
  bool dataset_arrivals = false;  // sent at the dataset's times (mooncake, multiturn)
  double burstiness = 1;
  int max_concurrency = 0;  // 0: none
  uint64_t seed = 0;
};

// One benchmark run: how, what it measured per request, and the summary.
struct RunResult {
  RunInfo info;
  RunSummary summary;
  std::vector<RequestRecord> records;
  // The servers' prefix-cache and speculative-decoding counters over the run (after - before,
  // summed over the metrics URLs); nullopt: not available, and counters_note says why.
  std::optional<ServerCounters> counters;
  std::string counters_note;
  // Server-side TTFT and ITL per --role-metrics role over the run, in the order given.
  std::vector<RoleLatency> roles;
};

// "inf" or "%g".
std::string rate_label(double rate);

// Markdown: a header line, one table (a column per run), a table of the servers' own latencies
// per role (a row per run and role) when roles were scraped, then the first distinct errors.
std::string markdown_report(const std::vector<RunResult>& runs, size_t max_errors = 5);

// {"benchmark": "sluice bench serve", "runs": [{config, metrics, roles, errors[, requests]}]};
// latencies in ms. roles: [{"role", "urls", "ttft": {"count", "p50_ms", "p99_ms", "mean_ms"} or
// null, "itl": likewise[, "note"]}]. `with_requests` adds every request's ttft, itl list, e2el,
// tokens and error.
nlohmann::ordered_json json_report(const std::vector<RunResult>& runs, bool with_requests);

// Latency vs throughput over the runs of a sweep: x = output tok/s, y = TPOT p50, TPOT p99 and
// TTFT p99 (ms, log scale), one point per run labelled with its rate. Hand-written SVG 1.1.
std::string sweep_svg(const std::vector<RunResult>& runs);

}  // namespace sluice::loadgen
