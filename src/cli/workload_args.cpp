#include "cli/workload_args.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "loadgen/runner.h"

namespace sluice::cli {
namespace {

Result<double> parse_rate(const std::string& s) {
  if (s == "inf" || s == "INF" || s == "Inf") return loadgen::kInfiniteRate;
  char* end = nullptr;
  const double r = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(r > 0) || !std::isfinite(r)) {
    return make_error("bad rate '", s, "': want requests/s > 0 or 'inf'");
  }
  return r;
}

}  // namespace

void add_workload_options(CLI::App* cmd, WorkloadOptions& o, const std::string& datasets) {
  cmd->add_option("--dataset", o.dataset, datasets)->capture_default_str();
  cmd->add_option("--num-prompts", o.num_prompts,
                  "Requests per run (mooncake: trace lines, 0: all)")
      ->capture_default_str();
  cmd->add_option("--input-len", o.input_len, "Synthetic prompt tokens")->capture_default_str();
  cmd->add_option("--output-len", o.output_len, "Tokens to generate (max_tokens, ignore_eos)")
      ->capture_default_str();
  cmd->add_option("--prefix-len", o.prefix_len, "Leading prompt tokens shared by every request")
      ->capture_default_str();
  cmd->add_option("--range-ratio", o.range_ratio, "Lengths uniform in [L(1-X), L(1+X)]")
      ->capture_default_str();
  cmd->add_option("--scale-tokens", o.scale_tokens,
                  "mooncake: multiply input/output lengths and the 512-token block size")
      ->capture_default_str();
  cmd->add_option("--scale-time", o.scale_time,
                  "mooncake: multiply inter-arrival times (10: ten times slower)")
      ->capture_default_str();
  cmd->add_option("--trace-start", o.trace_start,
                  "mooncake: first trace line used (0-based; --num-prompts lines from there)")
      ->capture_default_str();
  cmd->add_option("--mt-conversations", o.mt.n_conversations, "multiturn: conversations")
      ->capture_default_str();
  cmd->add_option("--mt-turns", o.mt.n_turns, "multiturn: user turns per conversation")
      ->capture_default_str();
  cmd->add_option("--mt-system-len", o.mt.system_len,
                  "multiturn: words of the system prompt every conversation shares")
      ->capture_default_str();
  cmd->add_option("--mt-user-len", o.mt.user_len, "multiturn: words per user turn")
      ->capture_default_str();
  cmd->add_option("--mt-output-len", o.mt.output_len,
                  "multiturn: max_tokens, and words of each synthetic assistant reply")
      ->capture_default_str();
  cmd->add_option("--mt-think-time", o.mt.think_time_s,
                  "multiturn: seconds between a reply and the next user turn")
      ->capture_default_str();
  cmd->add_option("--mt-turn-time", o.mt.turn_time_s,
                  "multiturn: nominal seconds a reply takes (turns are think + turn time apart)")
      ->capture_default_str();
  cmd->add_option("--rate", o.rate,
                  "Offered requests/s, or inf (all at once); multiturn: conversations/s")
      ->capture_default_str();
  cmd->add_option("--sweep", o.sweep, "Rates to run one after another, e.g. 1,2,4,inf")
      ->delimiter(',');
  cmd->add_option("--burstiness", o.burstiness, "Gamma shape of the arrival gaps (1: Poisson)")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of prompts and arrivals")->capture_default_str();
  cmd->add_option("--slo-ttft-ms", o.slo_ttft_ms, "Goodput SLO on TTFT (ms)");
  cmd->add_option("--slo-tpot-ms", o.slo_tpot_ms, "Goodput SLO on TPOT (ms)");
  cmd->add_option("--out", o.out, "Write all metrics and per-request timings as JSON");
  cmd->add_option("--plot", o.plot, "Write the latency-throughput curve as SVG");
  cmd->add_option("--output-format", o.output_format, "md or json")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
}

Result<std::vector<double>> workload_rates(const WorkloadOptions& o) {
  if (o.burstiness <= 0) return make_error("--burstiness must be > 0");
  if (o.mooncake() && !o.sweep.empty()) {
    return make_error(
        "--sweep does not apply to a trace replay (it has its own arrival times; "
        "use --scale-time)");
  }
  std::vector<double> rates;
  for (const std::string& s : o.sweep.empty() ? std::vector<std::string>{o.rate} : o.sweep) {
    SLUICE_ASSIGN_OR_RETURN(double r, parse_rate(s));
    rates.push_back(r);
  }
  return rates;
}

loadgen::Slo workload_slo(const WorkloadOptions& o) {
  loadgen::Slo slo;
  slo.ttft_ms = o.slo_ttft_ms;
  slo.tpot_ms = o.slo_tpot_ms;
  return slo;
}

loadgen::SyntheticParams synthetic_params(const WorkloadOptions& o) {
  loadgen::SyntheticParams p;
  p.n_prompts = o.num_prompts;
  p.input_len = o.input_len;
  p.output_len = o.output_len;
  p.prefix_len = o.prefix_len;
  p.range_ratio = o.range_ratio;
  p.seed = o.seed;
  return p;
}

loadgen::MooncakeParams mooncake_params(const WorkloadOptions& o, int32_t vocab_size) {
  loadgen::MooncakeParams p;
  p.path = o.dataset.substr(9);
  p.start = o.trace_start;
  p.n_prompts = o.num_prompts;
  p.scale_tokens = o.scale_tokens;
  p.scale_time = o.scale_time;
  p.vocab_size = vocab_size;
  p.seed = o.seed;
  return p;
}

loadgen::MultiturnParams multiturn_params(const WorkloadOptions& o, double rate,
                                          int32_t vocab_size) {
  loadgen::MultiturnParams p = o.mt;
  p.rate = rate;
  p.vocab_size = vocab_size;
  p.seed = o.seed;
  return p;
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return make_error("cannot write '", path, "'");
  f << text;
  f.close();
  if (!f) return make_error("failed writing '", path, "'");
  return {};
}

Status write_reports(const WorkloadOptions& o, const std::vector<loadgen::RunResult>& runs,
                     const std::string& md_extra) {
  const auto dump = [](const nlohmann::ordered_json& j) {
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (o.output_format == "json") {
    std::printf("%s\n", dump(loadgen::json_report(runs, /*with_requests=*/false)).c_str());
  } else {
    std::printf("%s%s", loadgen::markdown_report(runs).c_str(), md_extra.c_str());
  }
  std::fflush(stdout);
  if (!o.out.empty()) {
    SLUICE_RETURN_IF_ERROR(write_text(o.out, dump(loadgen::json_report(runs, true)) + "\n"));
  }
  if (!o.plot.empty()) SLUICE_RETURN_IF_ERROR(write_text(o.plot, loadgen::sweep_svg(runs)));
  return {};
}

}  // namespace sluice::cli
