// `sluice bench serve --url URL ...`: a serving load generator for any OpenAI-compatible server
// (src/loadgen). Sends streaming requests on an open-loop arrival schedule (Poisson or gamma,
// optionally capped in flight), measures TTFT, TPOT, ITL and E2EL from the event streams, and
// reports throughput, latency percentiles and goodput as markdown or JSON; `--sweep` runs one
// benchmark per rate and plots the latency-throughput curve (docs/perf.md). Replays a Mooncake
// trace or multi-turn chats at their own arrival times, and reports the servers' prefix-cache
// hit rate from their /metrics.
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
  std::string rate = "inf";
  double burstiness = 1.0;
  int concurrency = 0;
  int num_prompts = 100;
  std::string dataset = "synthetic";
  int input_len = 128;
  int output_len = 128;
  int prefix_len = 0;
  double range_ratio = 0;
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;
  uint64_t seed = 0;
  std::vector<std::string> sweep;
  std::string out;
  std::string plot;
  std::string output_format = "md";
  std::string tokenizer;
  double timeout_s = 600;
  bool quiet = false;
  // Replays (--dataset mooncake:FILE / multiturn).
  double scale_tokens = 1;
  double scale_time = 1;
  int trace_start = 0;
  int32_t vocab_size = 0;
  loadgen::MultiturnParams mt;
  std::vector<std::string> metrics_urls;
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

Result<double> parse_rate(const std::string& s) {
  if (s == "inf" || s == "INF" || s == "Inf") return loadgen::kInfiniteRate;
  char* end = nullptr;
  const double r = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(r > 0) || !std::isfinite(r)) {
    return make_error("bad rate '", s, "': want requests/s > 0 or 'inf'");
  }
  return r;
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

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return make_error("cannot write '", path, "'");
  f << text;
  f.close();
  if (!f) return make_error("failed writing '", path, "'");
  return {};
}

Status run_bench_serve(const ServeBenchOptions& o) {
  SLUICE_ASSIGN_OR_RETURN(loadgen::BaseUrl base, loadgen::parse_base_url(o.url));
  if (o.burstiness <= 0) return make_error("--burstiness must be > 0");
  if (o.concurrency < 0) return make_error("--concurrency must be >= 0");
  if (o.timeout_s <= 0) return make_error("--timeout must be > 0");
  std::vector<double> rates;
  for (const std::string& s : o.sweep.empty() ? std::vector<std::string>{o.rate} : o.sweep) {
    SLUICE_ASSIGN_OR_RETURN(double r, parse_rate(s));
    rates.push_back(r);
  }

  std::optional<Tokenizer> tokenizer;
  if (!o.tokenizer.empty()) {
    SLUICE_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::load(o.tokenizer));
    tokenizer.emplace(std::move(t));
  }
  const Tokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  const bool mooncake = o.dataset.rfind("mooncake:", 0) == 0;
  const bool multiturn = o.dataset == "multiturn";
  if (mooncake && !o.sweep.empty()) {
    return make_error(
        "--sweep does not apply to a trace replay (it has its own arrival times; "
        "use --scale-time)");
  }
  loadgen::Dataset dataset;
  if (mooncake) {
    loadgen::MooncakeParams p;
    p.path = o.dataset.substr(9);
    p.start = o.trace_start;
    p.n_prompts = o.num_prompts;
    p.scale_tokens = o.scale_tokens;
    p.scale_time = o.scale_time;
    p.vocab_size = o.vocab_size;
    p.seed = o.seed;
    SLUICE_ASSIGN_OR_RETURN(dataset, loadgen::load_mooncake(p, tok));
  } else if (multiturn) {
    // Built per rate below (the rate is the conversations' arrival rate).
  } else if (o.dataset == "synthetic") {
    loadgen::SyntheticParams p;
    p.n_prompts = o.num_prompts;
    p.input_len = o.input_len;
    p.output_len = o.output_len;
    p.prefix_len = o.prefix_len;
    p.range_ratio = o.range_ratio;
    p.seed = o.seed;
    SLUICE_ASSIGN_OR_RETURN(dataset, loadgen::make_synthetic(p, tok));
    if (!tok) {
      std::fprintf(
          stderr,
          "sluice bench serve: note: no --tokenizer, so prompt lengths are approximate (1 word ~ 1 "
          "token); input tokens are counted from the server's usage where it reports them\n");
    }
  } else if (o.dataset.rfind("jsonl:", 0) == 0) {
    SLUICE_ASSIGN_OR_RETURN(
        dataset, loadgen::load_jsonl(o.dataset.substr(6), o.num_prompts, o.output_len, tok));
  } else {
    return make_error(
        "--dataset must be 'synthetic', 'jsonl:FILE', 'mooncake:FILE' or 'multiturn' (got '",
        o.dataset, "')");
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

  loadgen::Slo slo;
  slo.ttft_ms = o.slo_ttft_ms;
  slo.tpot_ms = o.slo_tpot_ms;
  std::vector<loadgen::RunResult> runs;
  for (double rate : rates) {
    loadgen::LoadParams lp;
    lp.rate = rate;
    lp.burstiness = o.burstiness;
    lp.max_concurrency = o.concurrency;
    lp.seed = o.seed;
    if (multiturn) {
      loadgen::MultiturnParams p = o.mt;
      p.rate = rate;
      p.vocab_size = o.vocab_size;
      p.seed = o.seed;
      SLUICE_ASSIGN_OR_RETURN(dataset, loadgen::make_multiturn(p, tok));
    }
    RequestProgress bar(mooncake ? std::string("trace") : "rate " + loadgen::rate_label(rate),
                        !o.quiet);
    loadgen::RunResult run;
    Result<loadgen::PrefixCacheCounters> before = loadgen::scrape_prefix_cache(metrics_urls);
    run.records = loadgen::run_load(dataset.requests, lp, client,
                                    [&bar](size_t done, size_t total) { bar.update(done, total); });
    Result<loadgen::PrefixCacheCounters> after =
        before.ok() ? loadgen::scrape_prefix_cache(metrics_urls) : before;
    if (!after.ok()) {
      run.prefix_cache_note = after.message();
    } else if (const loadgen::PrefixCacheCounters d = *after - *before;
               d.queried_blocks < 0 || d.hit_blocks < 0 || d.hit_tokens < 0) {
      run.prefix_cache_note = "the counters went backwards during the run (a server restarted?)";
    } else {
      run.prefix_cache = d;
    }
    if (!run.prefix_cache) {
      std::fprintf(stderr, "sluice bench serve: note: prefix cache hit rate n/a: %s\n",
                   run.prefix_cache_note.c_str());
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
    run.info.burstiness = o.burstiness;
    run.info.max_concurrency = o.concurrency;
    run.info.seed = o.seed;
    runs.push_back(std::move(run));
  }

  if (o.output_format == "json") {
    std::printf("%s\n", loadgen::json_report(runs, /*with_requests=*/false)
                            .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
  } else {
    std::printf("%s", loadgen::markdown_report(runs).c_str());
  }
  std::fflush(stdout);
  if (!o.out.empty())
    SLUICE_RETURN_IF_ERROR(
        write_text(o.out, loadgen::json_report(runs, true)
                                  .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
                              "\n"));
  if (!o.plot.empty()) SLUICE_RETURN_IF_ERROR(write_text(o.plot, loadgen::sweep_svg(runs)));
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
  cmd->add_option("--rate", o->rate,
                  "Offered requests/s, or inf (all at once); multiturn: conversations/s")
      ->capture_default_str();
  cmd->add_option("--burstiness", o->burstiness, "Gamma shape of the arrival gaps (1: Poisson)")
      ->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "Most requests in flight (0: no cap)")
      ->capture_default_str();
  cmd->add_option("--num-prompts", o->num_prompts,
                  "Requests per run (mooncake: trace lines, 0: all)")
      ->capture_default_str();
  cmd->add_option("--dataset", o->dataset, "synthetic, jsonl:FILE, mooncake:FILE or multiturn")
      ->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "Synthetic prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "Tokens to generate (max_tokens, ignore_eos)")
      ->capture_default_str();
  cmd->add_option("--prefix-len", o->prefix_len, "Leading prompt tokens shared by every request")
      ->capture_default_str();
  cmd->add_option("--range-ratio", o->range_ratio, "Lengths uniform in [L(1-X), L(1+X)]")
      ->capture_default_str();
  cmd->add_option("--slo-ttft-ms", o->slo_ttft_ms, "Goodput SLO on TTFT (ms)");
  cmd->add_option("--slo-tpot-ms", o->slo_tpot_ms, "Goodput SLO on TPOT (ms)");
  cmd->add_option("--seed", o->seed, "Seed of prompts and arrivals")->capture_default_str();
  cmd->add_option("--sweep", o->sweep, "Rates to run one after another, e.g. 1,2,4,inf")
      ->delimiter(',');
  cmd->add_option("--out", o->out, "Write all metrics and per-request timings as JSON");
  cmd->add_option("--plot", o->plot, "Write the latency-throughput curve as SVG");
  cmd->add_option("--output-format", o->output_format, "md or json")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer, "GGUF whose tokenizer makes prompt lengths exact");
  cmd->add_option("--timeout", o->timeout_s, "Connect/read timeout per request (s)")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
  cmd->add_option("--scale-tokens", o->scale_tokens,
                  "mooncake: multiply input/output lengths and the 512-token block size")
      ->capture_default_str();
  cmd->add_option("--scale-time", o->scale_time,
                  "mooncake: multiply inter-arrival times (10: ten times slower)")
      ->capture_default_str();
  cmd->add_option("--trace-start", o->trace_start,
                  "mooncake: first trace line used (0-based; --num-prompts lines from there)")
      ->capture_default_str();
  cmd->add_option("--vocab-size", o->vocab_size,
                  "mooncake/multiturn: token ids drawn from [V/16, V - V/16) (default: the "
                  "--tokenizer's vocabulary, control tokens skipped)");
  cmd->add_option("--mt-conversations", o->mt.n_conversations, "multiturn: conversations")
      ->capture_default_str();
  cmd->add_option("--mt-turns", o->mt.n_turns, "multiturn: user turns per conversation")
      ->capture_default_str();
  cmd->add_option("--mt-system-len", o->mt.system_len,
                  "multiturn: words of the system prompt every conversation shares")
      ->capture_default_str();
  cmd->add_option("--mt-user-len", o->mt.user_len, "multiturn: words per user turn")
      ->capture_default_str();
  cmd->add_option("--mt-output-len", o->mt.output_len,
                  "multiturn: max_tokens, and words of each synthetic assistant reply")
      ->capture_default_str();
  cmd->add_option("--mt-think-time", o->mt.think_time_s,
                  "multiturn: seconds between a reply and the next user turn")
      ->capture_default_str();
  cmd->add_option("--mt-turn-time", o->mt.turn_time_s,
                  "multiturn: nominal seconds a reply takes (turns are think + turn time apart)")
      ->capture_default_str();
  cmd->add_option("--metrics-url", o->metrics_urls,
                  "A server's Prometheus /metrics for the prefix hit rate (repeat for replicas; "
                  "counters are summed; default: URL/metrics)");
  cmd->callback([o, &exit_code] {
    Status st = run_bench_serve(*o);
    if (!st.ok()) exit_code = report_error("bench serve", st.message());
  });
}

}  // namespace sluice::cli
