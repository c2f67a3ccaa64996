// libFuzzer target: the load generator's text parsers. The first byte picks the parser (and the
// trace parameters), the rest is its input:
//   even: loadgen::parse_mooncake_line, one line of a Mooncake trace (load_mooncake's step), at
//         a token scale and trace block size picked by the first byte
//   odd:  loadgen::prometheus_sum / parse_server_counters, parse_prometheus_histogram /
//         parse_latency_histograms, their sums and differences, and histogram_quantile on a
//         /metrics text
// Checks: no crash, hang or exception; an error names the line; an accepted line's prompt has
// exactly its input_tokens ids, all from the id space, and positive lengths; a sum or histogram
// is found only for a metric the text names; a histogram's bounds ascend strictly, none NaN;
// h - h is all zeros; a quantile lies between min(0, first bound) and the last finite bound, and
// p50 <= p99.
//
//   scripts/fuzz 60 loadgen_parse_fuzz
// Seeds: fuzz/seeds/loadgen_parse_fuzz (trace lines, a sluice serve /metrics text).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "loadgen/dataset.h"
#include "loadgen/server_metrics.h"

namespace {

using namespace sluice::loadgen;

void mooncake_line(std::string_view line, uint8_t pick) {
  // A trace line names one hash block per trace_block_size tokens: cap the line so that the
  // prompt it expands to stays small (at most ~2000 blocks of 512 ids).
  if (line.size() > 4096) return;
  static const TokenIdSpace space = *make_token_id_space(1000, nullptr);
  MooncakeParams p;
  p.path = "trace.jsonl";
  const double scales[] = {1, 0.25, 0.01, 3};
  p.scale_tokens = scales[pick % 4];
  p.trace_block_size = (pick >> 2) % 2 ? 16 : 512;
  const std::string where = "trace.jsonl:7: ";
  const auto r = parse_mooncake_line(line, p, space, where);
  if (!r.ok()) {
    if (r.message().rfind(where, 0) != 0) std::abort();
    return;
  }
  const RequestSpec& q = r->request;
  if (q.input_tokens < 1 || q.output_tokens < 1 || !(r->timestamp_ms >= 0)) std::abort();
  if (int64_t(q.prompt_ids.size()) != q.input_tokens) std::abort();
  for (int32_t id : q.prompt_ids)
    if (id < space.ids.front() || id > space.ids.back()) std::abort();
}

void metrics(std::string_view text) {
  for (std::string_view name : {"sluice_prefix_cache_queries_total", "sluice_prompt_tokens_total",
                                "a", "sluice_prefix_cache_hits_total"}) {
    if (prometheus_sum(text, name) && text.find(name) == std::string_view::npos) std::abort();
  }
  if (const auto c = parse_server_counters(text)) {
    (void)c->block_hit_rate();
    (void)c->token_hit_rate();
    (void)c->spec_acceptance();
    (void)c->spec_tokens_per_step();
    // Counters parsed from one text less themselves: nothing below 0 (NaN and infinities give
    // NaN, which is not below 0 either).
    if ((*c - *c).any_negative()) std::abort();
  }
  for (std::string_view name : {"sluice_time_to_first_token_seconds", "lat", "a"}) {
    const std::optional<PromHistogram> h = parse_prometheus_histogram(text, name);
    if (!h) continue;
    if (text.find(std::string(name) + "_bucket") == std::string_view::npos) std::abort();
    if (h->buckets.empty()) std::abort();
    for (size_t i = 0; i < h->buckets.size(); ++i) {
      if (std::isnan(h->buckets[i].le) || h->buckets[i].le == -HUGE_VAL) std::abort();
      if (i > 0 && !(h->buckets[i - 1].le < h->buckets[i].le)) std::abort();
    }
    // Differences of finite counts: exactly 0.
    const PromHistogram zero = *h - *h;
    if (zero.buckets.size() != h->buckets.size()) std::abort();
    for (size_t i = 0; i < zero.buckets.size(); ++i) {
      if (std::isfinite(h->buckets[i].count) && zero.buckets[i].count != 0) std::abort();
    }
    (void)(*h + *h).mean();
    (void)h->any_negative();
    const std::optional<double> p50 = histogram_quantile(*h, 0.5);
    const std::optional<double> p99 = histogram_quantile(*h, 0.99);
    (void)histogram_quantile(*h, 0);
    (void)histogram_quantile(*h, 1);
    (void)summarize_histogram(*h);
    for (const std::optional<double>& q : {p50, p99}) {
      if (!q) continue;
      // Only with a +Inf bucket after at least one finite one.
      if (h->buckets.size() < 2 || h->buckets.back().le != HUGE_VAL) std::abort();
      const double lo = std::min(0.0, h->buckets.front().le);
      const double hi = h->buckets[h->buckets.size() - 2].le;
      const double tol = 1e-9 * std::max(std::abs(lo), std::abs(hi));
      if (!std::isfinite(*q) || *q < lo - tol || *q > hi + tol) std::abort();
    }
    if (p50 && p99 && *p50 > *p99 + 1e-9 * std::max(std::abs(*p50), std::abs(*p99))) std::abort();
  }
  if (const auto l = parse_latency_histograms(text)) (void)(*l - *l);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    mooncake_line(text, data[0] >> 1);
  } else {
    metrics(text);
  }
  return 0;
}
