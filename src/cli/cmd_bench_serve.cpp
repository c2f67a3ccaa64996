// `sluice bench serve --url URL ...`: a serving load generator for any OpenAI-compatible server
// (src/loadgen). Sends streaming requests on an open-loop arrival schedule (Poisson or gamma,
// optionally capped in flight), measures TTFT, TPOT, ITL and E2EL from the event streams, and
// reports throughput, latency percentiles and goodput as markdown or JSON; `--sweep` runs one
// benchmark per rate and plots the latency-throughput curve (docs/perf.md). Replays a Mooncake
// trace or multi-turn chats at their own arrival times, and reports the servers' prefix-cache
// hit rate and, per --role-metrics role (prefill, decode workers), their own TTFT and ITL from
// their /metrics.
#include <sys/resource.h>
#include <unistd.h>

#include <httplib.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/workload_args.h"
#include "loadgen/client.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "loadgen/server_metrics.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

struct ServeBenchOptions {
  std::string url;
  std::string model;
  std::string endpoint = "completions";
  std::string api_key;
  int concurrency = 0;
  WorkloadOptions w;  // --dataset, lengths, rates, SLOs, reports (shared with `sluice sim`)
  std::string tokenizer;
  double timeout_s = 600;
  bool quiet = false;
  int32_t vocab_size = 0;  // replays' token ids
  std::vector<std::string> metrics_urls;
  std::vector<std::string> role_metrics;  // ROLE=URL, repeatable
};

// "finished/total requests" redrawn in place on stderr; silent unless stderr is a terminal.
class RequestProgress {
 public:
  RequestProgress(std::string label, bool enabled)
      : label_(std::move(label)),
        tty_(enabled && ::isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}

  void update(size_t done, size_t total) {
    if (!tty_ || total == 0 || finished_) return;
    const double frac = double(done) / double(total);
    const int width = 30, filled = int(frac * width);
    std::string bar(size_t(filled), '#');
    bar.append(size_t(width - filled), '.');
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "\r%s [%s] %3.0f%% %zu/%zu requests  %.1f s", label_.c_str(), bar.c_str(),
                 frac * 100, done, total, secs);
    if (done >= total) {
      std::fprintf(stderr, "\n");
      finished_ = true;
    }
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

// Hundreds of connections need hundreds of descriptors: raise the soft limit to the hard one.
void raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// The first model id of GET /v1/models, or "" when the server does not say.
std::string discover_model(const loadgen::BaseUrl& base, const std::string& api_key) {
  httplib::Client cli(base.scheme_host_port);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  const std::string prefix =
      base.path_prefix.size() >= 3 &&
              base.path_prefix.compare(base.path_prefix.size() - 3, 3, "/v1") == 0
          ? base.path_prefix
          : base.path_prefix + "/v1";
  httplib::Result r = cli.Get(prefix + "/models", h);
  if (!r || r->status != 200) return "";
  const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
    return "";
  const nlohmann::json& m = j["data"][0];
  return m.is_object() && m.contains("id") && m["id"].is_string() ? m["id"].get<std::string>() : "";
}

Status run_bench_serve(const ServeBenchOptions& o) {
  SLUICE_ASSIGN_OR_RETURN(loadgen::BaseUrl base, loadgen::parse_base_url(o.url));
  const WorkloadOptions& w = o.w;
  if (o.concurrency < 0) return make_error("--concurrency must be >= 0");
  if (o.timeout_s <= 0) return make_error("--timeout must be > 0");
  SLUICE_ASSIGN_OR_RETURN(const std::vector<double> rates, workload_rates(w));

  std::optional<Tokenizer> tokenizer;
  if (!o.tokenizer.empty()) {
    SLUICE_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::load(o.tokenizer));
    tokenizer.emplace(std::move(t));
  }
  const Tokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  const bool mooncake = w.mooncake();
  const bool multiturn = w.multiturn();
  loadgen::Dataset dataset;
  if (mooncake) {
    SLUICE_ASSIGN_OR_RETURN(dataset, loadgen::load_mooncake(mooncake_params(w, o.vocab_size), tok));
  } else if (multiturn) {
    // Built per rate below (the rate is the conversations' arrival rate).
  } else if (w.dataset == "synthetic") {
    SLUICE_ASSIGN_OR_RETURN(dataset, loadgen::make_synthetic(synthetic_params(w), tok));
    if (!tok) {
      std::fprintf(
          stderr,
          "sluice bench serve: note: no --tokenizer, so prompt lengths are approximate (1 word ~ 1 "
          "token); input tokens are counted from the server's usage where it reports them\n");
    }
  } else if (w.dataset.rfind("jsonl:", 0) == 0) {
    SLUICE_ASSIGN_OR_RETURN(
        dataset, loadgen::load_jsonl(w.dataset.substr(6), w.num_prompts, w.output_len, tok));
  } else {
    return make_error(
        "--dataset must be 'synthetic', 'jsonl:FILE', 'mooncake:FILE' or 'multiturn' (got '",
        w.dataset, "')");
  }

  loadgen::ClientConfig client;
  client.url = o.url;
  client.endpoint = o.endpoint == "chat" ? loadgen::ApiKind::kChat : loadgen::ApiKind::kCompletions;
  client.api_key = o.api_key;
  if (client.api_key.empty()) {
    if (const char* k = std::getenv("OPENAI_API_KEY"); k && *k) client.api_key = k;
  }
  client.timeout_s = o.timeout_s;
  client.model = o.model.empty() ? discover_model(base, client.api_key) : o.model;
  raise_fd_limit();

  std::vector<std::string> metrics_urls = o.metrics_urls;
  if (metrics_urls.empty()) metrics_urls.push_back(loadgen::default_metrics_url(o.url));
  for (const std::string& u : metrics_urls) {
    SLUICE_RETURN_IF_ERROR(loadgen::parse_base_url(u));  // a typo fails now, not after the run
  }
  SLUICE_ASSIGN_OR_RETURN(const std::vector<loadgen::RoleMetricsUrls> roles,
                          loadgen::group_role_metrics(o.role_metrics));

  const loadgen::Slo slo = workload_slo(w);
  std::vector<loadgen::RunResult> runs;
  for (double rate : rates) {
    loadgen::LoadParams lp;
    lp.rate = rate;
    lp.burstiness = w.burstiness;
    lp.max_concurrency = o.concurrency;
    lp.seed = w.seed;
    if (multiturn) {
      SLUICE_ASSIGN_OR_RETURN(
          dataset, loadgen::make_multiturn(multiturn_params(w, rate, o.vocab_size), tok));
    }
    RequestProgress bar(mooncake ? std::string("trace") : "rate " + loadgen::rate_label(rate),
                        !o.quiet);
    loadgen::RunResult run;
    Result<loadgen::ServerCounters> before = loadgen::scrape_server_counters(metrics_urls);
    std::vector<Result<loadgen::LatencyHistograms>> roles_before;
    for (const loadgen::RoleMetricsUrls& r : roles)
      roles_before.push_back(loadgen::scrape_latency_histograms(r.urls));
    run.records = loadgen::run_load(dataset.requests, lp, client,
                                    [&bar](size_t done, size_t total) { bar.update(done, total); });
    Result<loadgen::ServerCounters> after =
        before.ok() ? loadgen::scrape_server_counters(metrics_urls) : before;
    if (!after.ok()) {
      run.counters_note = after.message();
    } else if (const loadgen::ServerCounters d = *after - *before; d.any_negative()) {
      run.counters_note = "the counters went backwards during the run (a server restarted?)";
    } else {
      run.counters = d;
    }
    if (!run.counters) {
      std::fprintf(stderr, "sluice bench serve: note: prefix cache hit rate n/a: %s\n",
                   run.counters_note.c_str());
    }
    for (size_t i = 0; i < roles.size(); ++i) {
      const Result<loadgen::LatencyHistograms>& b = roles_before[i];
      run.roles.push_back(loadgen::role_latency(
          roles[i], b, b.ok() ? loadgen::scrape_latency_histograms(roles[i].urls) : b));
      if (!run.roles.back().note.empty()) {
        std::fprintf(stderr, "sluice bench serve: note: server latency of role %s n/a: %s\n",
                     roles[i].role.c_str(), run.roles.back().note.c_str());
      }
    }
    run.summary = loadgen::summarize(run.records, slo);
    run.info.url = o.url;
    run.info.endpoint = mooncake ? "completions" : multiturn ? "chat" : o.endpoint;
    run.info.model = client.model;
    run.info.dataset = dataset.description;
    run.info.exact_token_counts = dataset.exact_token_counts;
    run.info.num_prompts = int(dataset.requests.size());
    run.info.rate = mooncake ? loadgen::kInfiniteRate : rate;
    run.info.dataset_arrivals = loadgen::has_dataset_arrivals(dataset.requests);
    run.info.burstiness = w.burstiness;
    run.info.max_concurrency = o.concurrency;
    run.info.seed = w.seed;
    runs.push_back(std::move(run));
  }

  SLUICE_RETURN_IF_ERROR(write_reports(w, runs));
  for (const loadgen::RunResult& r : runs) {
    if (r.summary.completed == 0) {
      return make_error(
          "no request completed at rate ", loadgen::rate_label(r.info.rate), " (",
          r.summary.errors.empty() ? std::string("no requests") : r.summary.errors[0].first, ")");
    }
  }
  return {};
}

}  // namespace

void register_bench_serve(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<ServeBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "serve", "Load-test any OpenAI-compatible server (TTFT, TPOT, ITL, goodput)");
  cmd->add_option("--url", o->url, "Server base URL, e.g. http://127.0.0.1:8080")->required();
  cmd->add_option("--model", o->model, "Model name to send (default: the first of GET /v1/models)");
  cmd->add_option("--endpoint", o->endpoint, "completions or chat")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Bearer token (default: $OPENAI_API_KEY)");
  cmd->add_option("--concurrency", o->concurrency, "Most requests in flight (0: no cap)")
      ->capture_default_str();
  add_workload_options(cmd, o->w, "synthetic, jsonl:FILE, mooncake:FILE or multiturn");
  cmd->add_option("--tokenizer", o->tokenizer, "GGUF whose tokenizer makes prompt lengths exact");
  cmd->add_option("--timeout", o->timeout_s, "Connect/read timeout per request (s)")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
  cmd->add_option("--vocab-size", o->vocab_size,
                  "mooncake/multiturn: token ids drawn from [V/16, V - V/16) (default: the "
                  "--tokenizer's vocabulary, control tokens skipped)");
  cmd->add_option("--metrics-url", o->metrics_urls,
                  "A server's Prometheus /metrics for the prefix hit rate (repeat for replicas; "
                  "counters are summed; default: URL/metrics)");
  cmd->add_option("--role-metrics", o->role_metrics,
                  "ROLE=URL: report the server-side TTFT and ITL (p50/p99/mean from the "
                  "histograms of its /metrics) under ROLE, e.g. prefill=http://127.0.0.1:8001 "
                  "(repeat; URLs of one role are summed; /metrics appended when missing)");
  cmd->callback([o, &exit_code] {
    Status st = run_bench_serve(*o);
    if (!st.ok()) exit_code = report_error("bench serve", st.message());
  });
}

}  // namespace sluice::cli
