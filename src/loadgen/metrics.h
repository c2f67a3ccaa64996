// Serving-benchmark metrics (`sluice bench serve`): from per-request timings to the summary a
// run reports. Pure functions of their inputs (no clocks, no I/O), so tests check every number
// against hand arithmetic.
//
// Definitions (all latencies in ms in the summary, seconds in RequestRecord):
//   TTFT  = t(first chunk with text) - t(send)
//   E2EL  = t(response complete: data: [DONE]) - t(send)
//   TPOT  = (E2EL - TTFT) / (output_tokens - 1)       requests with output_tokens > 1 only
//   ITL   = every gap between consecutive text chunks, pooled over all requests
//   duration = first send to last finish (failed requests included)
//   throughput = completed requests (or their tokens) / duration
//   goodput = completed requests meeting every SLO given / duration
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::loadgen {

// What one request measured. Times are seconds on the steady clock, relative to the run start.
struct RequestRecord {
  bool ok = false;
  std::string error;  // why it failed (empty when ok)
  int64_t input_tokens =
      0;  // usage.prompt_tokens when the server sent it, else the dataset's count
  int64_t output_tokens = 0;    // usage.completion_tokens when sent, else the number of text chunks
  bool usage_reported = false;  // the token counts above came from the server's usage chunk
  double start_s = 0;           // when the request was sent
  double ttft_s = 0;            // first text chunk - start (0 when no text arrived)
  double e2el_s = 0;            // response complete (or failed) - start
  std::vector<double> itl_s;    // gaps between consecutive text chunks; n_chunks - 1 entries

  double end_s() const { return start_s + e2el_s; }
  // (E2EL - TTFT) / (output_tokens - 1); only meaningful when output_tokens > 1.
  double tpot_s() const {
    return output_tokens > 1 ? (e2el_s - ttft_s) / double(output_tokens - 1) : 0.0;
  }
};

// Summary statistics of one metric, in ms. `n` = number of samples (0: all fields 0).
struct Distribution {
  size_t n = 0;
  double mean = 0, std = 0, median = 0, p90 = 0, p99 = 0;
};

// Service-level objectives; only the ones given take part in goodput.
struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  bool any() const { return ttft_ms.has_value() || tpot_ms.has_value(); }
};

struct RunSummary {
  int64_t completed = 0;
  int64_t failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;   // completed requests only
  int64_t total_output_tokens = 0;  // completed requests only
  double request_throughput = 0;    // completed / duration (req/s)
  double input_throughput = 0;      // tok/s
  double output_throughput = 0;     // tok/s
  double total_token_throughput = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2el_ms;
  // Goodput (only when an SLO was given).
  Slo slo;
  int64_t good_requests = 0;   // completed and within every given SLO
  double request_goodput = 0;  // good_requests / duration (req/s)
  double good_percent = 0;     // 100 * good_requests / (completed + failed)
  // Distinct error messages, first-seen order, with how often each occurred.
  std::vector<std::pair<std::string, int64_t>> errors;
};

// The p-th percentile (0 <= p <= 100) of `sorted` (ascending), by linear interpolation between
// the two nearest ranks, as numpy.percentile's default: rank = p/100 * (n - 1),
// value = v[floor(rank)] + (v[ceil(rank)] - v[floor(rank)]) * frac(rank). 0 when empty.
double percentile(const std::vector<double>& sorted, double p);

// mean, population standard deviation (numpy's default, ddof = 0), median, p90, p99 of
// `values_ms`.
Distribution distribution(std::vector<double> values_ms);

// Whether a completed request meets every SLO given. A request with one output token has no
// TPOT and meets any TPOT objective.
bool meets_slo(const RequestRecord& r, const Slo& slo);

// The run's summary. Duration is min(start) .. max(end) over all records.
RunSummary summarize(const std::vector<RequestRecord>& records, const Slo& slo);

}  // namespace sluice::loadgen
