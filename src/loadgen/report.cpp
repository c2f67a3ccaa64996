#include "loadgen/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/xml.h"

namespace sluice::loadgen {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

nlohmann::ordered_json dist_json(const Distribution& d) {
  return {{"mean", d.mean}, {"std", d.std}, {"median", d.median},
          {"p90", d.p90},   {"p99", d.p99}, {"n", d.n}};
}

nlohmann::ordered_json histogram_json(const std::optional<HistogramSummary>& h) {
  if (!h) return nullptr;
  auto ms = [](std::optional<double> v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  // Counts are whole numbers unless a server exports fractional ones.
  const bool whole = h->count == std::floor(h->count) && std::abs(h->count) < 9e15;
  const nlohmann::ordered_json count =
      whole ? nlohmann::ordered_json(int64_t(h->count)) : nlohmann::ordered_json(h->count);
  return {{"count", count},
          {"p50_ms", ms(h->p50_ms)},
          {"p99_ms", ms(h->p99_ms)},
          {"mean_ms", ms(h->mean_ms)}};
}

// The servers' own TTFT and ITL per role: a row per (run, role).
std::string roles_markdown(const std::vector<RunResult>& runs) {
  bool any = false;
  for (const RunResult& r : runs) any = any || !r.roles.empty();
  if (!any) return "";
  const bool sweep = runs.size() > 1;
  std::string s =
      "\nServer-side latency by role (each role's /metrics histograms over the run, summed over "
      "its URLs; TTFT from arrival at that server's engine; p50/p99 are estimates, interpolated "
      "within the histogram buckets):\n\n";
  s += sweep ? "| rate | role |" : "| role |";
  s += " TTFT n | TTFT p50 (ms) | TTFT p99 (ms) | TTFT mean (ms) | ITL n | ITL p50 (ms) | ITL p99 "
       "(ms) | ITL mean (ms) |\n";
  s += sweep ? "|---|---|" : "|---|";
  s += "---:|---:|---:|---:|---:|---:|---:|---:|\n";
  auto ms = [](std::optional<double> v) { return v ? fmt("%.2f", *v) : std::string("-"); };
  auto cells = [&](const std::optional<HistogramSummary>& h) {
    if (!h) return std::string(" n/a | n/a | n/a | n/a |");
    return " " + fmt("%.0f", h->count) + " | " + ms(h->p50_ms) + " | " + ms(h->p99_ms) + " | " +
           ms(h->mean_ms) + " |";
  };
  for (const RunResult& r : runs) {
    for (const RoleLatency& role : r.roles) {
      s += sweep ? "| " + rate_label(r.info.rate) + " | " : "| ";
      s += role.role + " |" + cells(role.ttft) + cells(role.itl) + "\n";
    }
  }
  for (const RunResult& r : runs) {
    for (const RoleLatency& role : r.roles) {
      if (role.note.empty()) continue;
      s += "\nRole " + role.role + (sweep ? " at rate " + rate_label(r.info.rate) : std::string()) +
           ": n/a (" + role.note + ")\n";
    }
  }
  return s;
}

nlohmann::ordered_json rate_json(double rate) {
  return std::isinf(rate) ? nlohmann::ordered_json("inf") : nlohmann::ordered_json(rate);
}

}  // namespace

std::string rate_label(double rate) {
  return std::isinf(rate) ? "inf" : fmt("%g", rate);
}

std::string markdown_report(const std::vector<RunResult>& runs, size_t max_errors) {
  if (runs.empty()) return "";
  const RunInfo& i0 = runs[0].info;
  std::string s = "Serving benchmark: " + i0.url + " /v1/" +
                  (i0.endpoint == "chat" ? "chat/completions" : "completions") +
                  (i0.model.empty() ? "" : ", model " + i0.model) + "; " + i0.dataset +
                  "; token counts " +
                  (i0.exact_token_counts
                       ? "exact (tokenizer)"
                       : "approximate (1 word ~ 1 token; input tokens from the server's usage "
                         "where reported)") +
                  "\n\n";
  // One column per run.
  s += runs.size() == 1 ? "| metric | value |\n|---|---:|\n" : "| metric |";
  if (runs.size() > 1) {
    for (const RunResult& r : runs) s += " rate " + rate_label(r.info.rate) + " |";
    s += "\n|---|";
    for (size_t i = 0; i < runs.size(); ++i) s += "---:|";
    s += "\n";
  }
  auto row = [&](const std::string& name, auto value_of) {
    s += "| " + name + " |";
    for (const RunResult& r : runs) s += " " + value_of(r) + " |";
    s += "\n";
  };
  auto num = [](const char* f, auto get) {
    return [f, get](const RunResult& r) { return fmt(f, double(get(r))); };
  };
  row("Request rate (req/s)", [](const RunResult& r) {
    if (!r.info.dataset_arrivals) return rate_label(r.info.rate);
    return "dataset times" +
           (std::isinf(r.info.rate) ? std::string() : ", " + rate_label(r.info.rate) + " conv/s");
  });
  row("Burstiness", num("%g", [](const RunResult& r) { return r.info.burstiness; }));
  row("Max concurrency", [](const RunResult& r) {
    return r.info.max_concurrency > 0 ? std::to_string(r.info.max_concurrency) : std::string("-");
  });
  row("Successful requests", num("%.0f", [](const RunResult& r) { return r.summary.completed; }));
  row("Failed requests", num("%.0f", [](const RunResult& r) { return r.summary.failed; }));
  row("Benchmark duration (s)",
      num("%.2f", [](const RunResult& r) { return r.summary.duration_s; }));
  row("Total input tokens",
      num("%.0f", [](const RunResult& r) { return r.summary.total_input_tokens; }));
  row("Total generated tokens",
      num("%.0f", [](const RunResult& r) { return r.summary.total_output_tokens; }));
  row("Request throughput (req/s)",
      num("%.2f", [](const RunResult& r) { return r.summary.request_throughput; }));
  row("Input token throughput (tok/s)",
      num("%.2f", [](const RunResult& r) { return r.summary.input_throughput; }));
  row("Output token throughput (tok/s)",
      num("%.2f", [](const RunResult& r) { return r.summary.output_throughput; }));
  row("Total token throughput (tok/s)",
      num("%.2f", [](const RunResult& r) { return r.summary.total_token_throughput; }));
  bool any_slo = false;
  for (const RunResult& r : runs) any_slo = any_slo || r.summary.slo.any();
  if (any_slo) {
    const Slo& slo = runs[0].summary.slo;
    std::string what;
    if (slo.ttft_ms) what += "TTFT <= " + fmt("%g", *slo.ttft_ms) + " ms";
    if (slo.tpot_ms)
      what +=
          std::string(what.empty() ? "" : " and ") + "TPOT <= " + fmt("%g", *slo.tpot_ms) + " ms";
    row("Request goodput (req/s, " + what + ")",
        num("%.2f", [](const RunResult& r) { return r.summary.request_goodput; }));
    row("Requests within SLO (%)",
        num("%.1f", [](const RunResult& r) { return r.summary.good_percent; }));
  }
  auto percent = [](std::optional<double> v, double num, double den) {
    return v ? fmt("%.1f", *v * 100) + " (" + fmt("%.0f", num) + " / " + fmt("%.0f", den) + ")"
             : std::string("n/a");
  };
  row("Prefix cache hit rate, blocks (%)", [&](const RunResult& r) {
    if (!r.counters) return std::string("n/a");
    const ServerCounters& c = *r.counters;
    return percent(c.block_hit_rate(), c.hit_blocks, c.queried_blocks);
  });
  row("Prefix cache hit rate, tokens (%)", [&](const RunResult& r) {
    if (!r.counters) return std::string("n/a");
    const ServerCounters& c = *r.counters;
    return percent(c.token_hit_rate(), c.hit_tokens, c.prompt_tokens);
  });
  // Speculative decoding, when some run drafted (`serve --spec`).
  bool any_spec = false;
  for (const RunResult& r : runs) any_spec |= r.counters && r.counters->spec_draft_tokens > 0;
  if (any_spec) {
    row("Spec draft acceptance (%)", [&](const RunResult& r) {
      if (!r.counters) return std::string("n/a");
      const ServerCounters& c = *r.counters;
      return percent(c.spec_acceptance(), c.spec_accepted_tokens, c.spec_draft_tokens);
    });
    row("Spec tokens per verify step", [&](const RunResult& r) {
      const std::optional<double> v =
          r.counters ? r.counters->spec_tokens_per_step() : std::nullopt;
      return v ? fmt("%.2f", *v) : std::string("n/a");
    });
  }
  struct Metric {
    const char* name;
    const Distribution RunSummary::*field;
  };
  for (const Metric& m :
       {Metric{"TTFT", &RunSummary::ttft_ms}, Metric{"TPOT", &RunSummary::tpot_ms},
        Metric{"ITL", &RunSummary::itl_ms}, Metric{"E2EL", &RunSummary::e2el_ms}}) {
    const std::string n = m.name;
    auto f = m.field;
    row("Mean " + n + " (ms)",
        [f](const RunResult& r) { return fmt("%.2f", (r.summary.*f).mean); });
    row("Median " + n + " (ms)",
        [f](const RunResult& r) { return fmt("%.2f", (r.summary.*f).median); });
    row("P90 " + n + " (ms)", [f](const RunResult& r) { return fmt("%.2f", (r.summary.*f).p90); });
    row("P99 " + n + " (ms)", [f](const RunResult& r) { return fmt("%.2f", (r.summary.*f).p99); });
    row("Std " + n + " (ms)", [f](const RunResult& r) { return fmt("%.2f", (r.summary.*f).std); });
  }
  s += roles_markdown(runs);
  for (const RunResult& r : runs) {
    if (r.counters || r.counters_note.empty()) continue;
    s += "\nPrefix cache" +
         (runs.size() > 1 ? " at rate " + rate_label(r.info.rate) : std::string()) + ": n/a (" +
         r.counters_note + ")\n";
  }
  for (const RunResult& r : runs) {
    if (r.summary.errors.empty()) continue;
    s += "\nErrors" + (runs.size() > 1 ? " at rate " + rate_label(r.info.rate) : std::string()) +
         " (" + std::to_string(r.summary.errors.size()) + " distinct" +
         (r.summary.errors.size() > max_errors ? ", first " + std::to_string(max_errors)
                                               : std::string()) +
         "):\n";
    for (size_t i = 0; i < r.summary.errors.size() && i < max_errors; ++i) {
      s += "- " + std::to_string(r.summary.errors[i].second) + " x " + r.summary.errors[i].first +
           "\n";
    }
  }
  return s;
}

nlohmann::ordered_json json_report(const std::vector<RunResult>& runs, bool with_requests) {
  nlohmann::ordered_json out;
  out["benchmark"] = "sluice bench serve";
  out["runs"] = nlohmann::ordered_json::array();
  for (const RunResult& r : runs) {
    const RunInfo& i = r.info;
    const RunSummary& s = r.summary;
    nlohmann::ordered_json j;
    j["url"] = i.url;
    j["endpoint"] = i.endpoint;
    j["model"] = i.model;
    j["dataset"] = i.dataset;
    j["token_counts"] = i.exact_token_counts ? "exact" : "approximate";
    j["num_prompts"] = i.num_prompts;
    j["request_rate"] = rate_json(i.rate);
    j["arrivals"] = i.dataset_arrivals ? "dataset" : "rate";
    j["burstiness"] = i.burstiness;
    j["max_concurrency"] =
        i.max_concurrency > 0 ? nlohmann::ordered_json(i.max_concurrency) : nullptr;
    j["seed"] = i.seed;
    j["completed"] = s.completed;
    j["failed"] = s.failed;
    j["duration_s"] = s.duration_s;
    j["total_input_tokens"] = s.total_input_tokens;
    j["total_output_tokens"] = s.total_output_tokens;
    j["request_throughput"] = s.request_throughput;
    j["input_throughput"] = s.input_throughput;
    j["output_throughput"] = s.output_throughput;
    j["total_token_throughput"] = s.total_token_throughput;
    j["ttft_ms"] = dist_json(s.ttft_ms);
    j["tpot_ms"] = dist_json(s.tpot_ms);
    j["itl_ms"] = dist_json(s.itl_ms);
    j["e2el_ms"] = dist_json(s.e2el_ms);
    if (s.slo.any()) {
      nlohmann::ordered_json slo = nlohmann::ordered_json::object();
      if (s.slo.ttft_ms) slo["ttft_ms"] = *s.slo.ttft_ms;
      if (s.slo.tpot_ms) slo["tpot_ms"] = *s.slo.tpot_ms;
      j["slo"] = slo;
      j["good_requests"] = s.good_requests;
      j["request_goodput"] = s.request_goodput;
      j["good_percent"] = s.good_percent;
    }
    if (r.counters) {
      const ServerCounters& c = *r.counters;
      auto rate = [](std::optional<double> v) {
        return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
      };
      j["prefix_cache"] = {{"queried_blocks", c.queried_blocks},
                           {"hit_blocks", c.hit_blocks},
                           {"hit_tokens", c.hit_tokens},
                           {"prompt_tokens", c.prompt_tokens},
                           {"prompt_tokens_computed", c.prompt_tokens_computed},
                           {"block_hit_rate", rate(c.block_hit_rate())},
                           {"token_hit_rate", rate(c.token_hit_rate())}};
      j["spec"] = {{"verify_steps", c.spec_verify_steps},
                   {"draft_tokens", c.spec_draft_tokens},
                   {"accepted_tokens", c.spec_accepted_tokens},
                   {"emitted_tokens", c.spec_emitted_tokens},
                   {"acceptance", rate(c.spec_acceptance())},
                   {"tokens_per_step", rate(c.spec_tokens_per_step())}};
    } else {
      j["prefix_cache"] = nullptr;
      if (!r.counters_note.empty()) j["prefix_cache_note"] = r.counters_note;
    }
    j["roles"] = nlohmann::ordered_json::array();
    for (const RoleLatency& role : r.roles) {
      nlohmann::ordered_json rj = {{"role", role.role},
                                   {"urls", role.urls},
                                   {"ttft", histogram_json(role.ttft)},
                                   {"itl", histogram_json(role.itl)}};
      if (!role.note.empty()) rj["note"] = role.note;
      j["roles"].push_back(std::move(rj));
    }
    j["errors"] = nlohmann::ordered_json::array();
    for (const auto& [message, count] : s.errors)
      j["errors"].push_back({{"message", message}, {"count", count}});
    if (with_requests) {
      nlohmann::ordered_json reqs = nlohmann::ordered_json::array();
      for (const RequestRecord& q : r.records) {
        nlohmann::ordered_json itl = nlohmann::ordered_json::array();
        for (double g : q.itl_s) itl.push_back(g * 1e3);
        reqs.push_back({{"ok", q.ok},
                        {"error", q.error},
                        {"start_s", q.start_s},
                        {"ttft_ms", q.ttft_s * 1e3},
                        {"tpot_ms", q.tpot_s() * 1e3},
                        {"e2el_ms", q.e2el_s * 1e3},
                        {"input_tokens", q.input_tokens},
                        {"output_tokens", q.output_tokens},
                        {"usage_reported", q.usage_reported},
                        {"itl_ms", std::move(itl)}});
      }
      j["requests"] = std::move(reqs);
    }
    out["runs"].push_back(std::move(j));
  }
  return out;
}

std::string sweep_svg(const std::vector<RunResult>& runs) {
  constexpr double kW = 760, kH = 500, kLeft = 80, kRight = 600, kTop = 60, kBottom = 430;
  struct Series {
    const char* name;
    const char* color;
    double (*get)(const RunSummary&);
  };
  const Series series[] = {
      {"TPOT p50", "#1f77b4", [](const RunSummary& s) { return s.tpot_ms.median; }},
      {"TPOT p99", "#ff7f0e", [](const RunSummary& s) { return s.tpot_ms.p99; }},
      {"TTFT p99", "#d62728", [](const RunSummary& s) { return s.ttft_ms.p99; }},
  };
  // Runs in order of offered rate (inf last).
  std::vector<const RunResult*> rs;
  for (const RunResult& r : runs) rs.push_back(&r);
  std::stable_sort(rs.begin(), rs.end(),
                   [](auto* a, auto* b) { return a->info.rate < b->info.rate; });

  // x: linear from 0 to a 1-2-5 step above the largest throughput.
  double xmax_data = 0, ylo = 0, yhi = 0;
  for (const RunResult* r : rs) {
    xmax_data = std::max(xmax_data, r->summary.output_throughput);
    for (const Series& se : series) {
      const double v = se.get(r->summary);
      if (v <= 0) continue;
      ylo = ylo == 0 ? v : std::min(ylo, v);
      yhi = std::max(yhi, v);
    }
  }
  double xstep = 1;
  if (xmax_data > 0) {
    const double raw = xmax_data / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
    xstep = raw / mag <= 1 ? mag : raw / mag <= 2 ? 2 * mag : raw / mag <= 5 ? 5 * mag : 10 * mag;
  }
  const double xmax = xmax_data > 0 ? std::ceil(xmax_data * 1.05 / xstep) * xstep : 5;
  auto xmap = [&](double v) { return kLeft + v / xmax * (kRight - kLeft); };
  // y: log10 over whole decades.
  if (ylo <= 0) ylo = 1, yhi = 10;
  const double ye_lo = std::floor(std::log10(ylo)),
               ye_hi = std::max(ye_lo + 1, std::ceil(std::log10(yhi)));
  auto ymap = [&](double v) {
    return kBottom - (std::log10(v) - ye_lo) / (ye_hi - ye_lo) * (kBottom - kTop);
  };

  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", kW) + "\" height=\"" +
       fmt("%.0f", kH) + "\" viewBox=\"0 0 " + fmt("%.0f", kW) + " " + fmt("%.0f", kH) +
       "\" font-family=\"sans-serif\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::string title = "sluice bench serve: latency vs throughput";
  if (!runs.empty() && !runs[0].info.model.empty()) title += " (" + runs[0].info.model + ")";
  s += "<text x=\"" + fmt("%.1f", kW / 2) + "\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">" +
       html_escape(title) + "</text>\n";
  if (!runs.empty()) {
    s += "<text x=\"" + fmt("%.1f", kW / 2) +
         "\" y=\"44\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">" +
         html_escape(runs[0].info.url + "; " + runs[0].info.dataset +
                     "; one point per offered rate") +
         "</text>\n";
  }
  // Grid, ticks and labels.
  std::string labels;
  s += "<g stroke=\"#ddd\" stroke-width=\"1\">\n";
  for (double v = 0; v <= xmax + 1e-9; v += xstep) {
    const double x = xmap(v);
    s += "<line x1=\"" + fmt("%.1f", x) + "\" y1=\"" + fmt("%.1f", kTop) + "\" x2=\"" +
         fmt("%.1f", x) + "\" y2=\"" + fmt("%.1f", kBottom) + "\"/>\n";
    labels += "<text x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", kBottom + 16) +
              "\" text-anchor=\"middle\" font-size=\"11\">" + fmt("%g", v) + "</text>\n";
  }
  for (double e = ye_lo; e <= ye_hi; ++e) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, e);
      if (std::log10(v) > ye_hi + 1e-9) break;
      const double y = ymap(v);
      s += "<line x1=\"" + fmt("%.1f", kLeft) + "\" y1=\"" + fmt("%.1f", y) + "\" x2=\"" +
           fmt("%.1f", kRight) + "\" y2=\"" + fmt("%.1f", y) + "\"/>\n";
      labels += "<text x=\"" + fmt("%.1f", kLeft - 6) + "\" y=\"" + fmt("%.1f", y + 4) +
                "\" text-anchor=\"end\" font-size=\"11\">" + fmt("%g", v) + "</text>\n";
    }
  }
  s += "</g>\n" + labels;
  s += "<rect x=\"" + fmt("%.1f", kLeft) + "\" y=\"" + fmt("%.1f", kTop) + "\" width=\"" +
       fmt("%.1f", kRight - kLeft) + "\" height=\"" + fmt("%.1f", kBottom - kTop) +
       "\" fill=\"none\" stroke=\"#333\"/>\n";
  s += "<text x=\"" + fmt("%.1f", (kLeft + kRight) / 2) + "\" y=\"" + fmt("%.1f", kBottom + 40) +
       "\" text-anchor=\"middle\" font-size=\"13\">output throughput (tokens/s)</text>\n";
  s += "<text x=\"22\" y=\"" + fmt("%.1f", (kTop + kBottom) / 2) +
       "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 22 " +
       fmt("%.1f", (kTop + kBottom) / 2) + ")\">latency (ms, log scale)</text>\n";

  // Series: a polyline and points (with a tooltip) each.
  for (const Series& se : series) {
    std::string pts;
    for (const RunResult* r : rs) {
      const double v = se.get(r->summary);
      if (v <= 0) continue;
      pts += fmt("%.1f", xmap(r->summary.output_throughput)) + "," + fmt("%.1f", ymap(v)) + " ";
    }
    if (!pts.empty()) {
      s += "<polyline fill=\"none\" stroke=\"" + std::string(se.color) +
           "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    }
    for (const RunResult* r : rs) {
      const double v = se.get(r->summary);
      if (v <= 0) continue;
      s += "<circle cx=\"" + fmt("%.1f", xmap(r->summary.output_throughput)) + "\" cy=\"" +
           fmt("%.1f", ymap(v)) + "\" r=\"4\" fill=\"" + se.color + "\"><title>rate " +
           rate_label(r->info.rate) + ": " + se.name + " " + fmt("%.2f", v) + " ms at " +
           fmt("%.1f", r->summary.output_throughput) + " tok/s</title></circle>\n";
    }
  }
  // Rate labels above the highest point of each run.
  for (const RunResult* r : rs) {
    double top = 0;
    for (const Series& se : series) top = std::max(top, se.get(r->summary));
    if (top <= 0) continue;
    s += "<text x=\"" + fmt("%.1f", xmap(r->summary.output_throughput) + 6) + "\" y=\"" +
         fmt("%.1f", ymap(top) - 8) + "\" font-size=\"10\" fill=\"#333\">rate " +
         rate_label(r->info.rate) + "</text>\n";
  }
  // Legend.
  double ly = kTop + 10;
  for (const Series& se : series) {
    s += "<line x1=\"" + fmt("%.1f", kRight + 20) + "\" y1=\"" + fmt("%.1f", ly) + "\" x2=\"" +
         fmt("%.1f", kRight + 44) + "\" y2=\"" + fmt("%.1f", ly) + "\" stroke=\"" + se.color +
         "\" stroke-width=\"2\"/>\n";
    s += "<text x=\"" + fmt("%.1f", kRight + 50) + "\" y=\"" + fmt("%.1f", ly + 4) +
         "\" font-size=\"12\">" + se.name + "</text>\n";
    ly += 20;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace sluice::loadgen
