// `sluice bench throughput MODEL --requests N --input-len L --output-len M`: offline serving
// throughput through the real engine (scheduler, paged KV, prefix cache, continuous batching).
// A closed loop keeps `--concurrency` requests in flight; reports requests/s, total and output
// tok/s, and mean/p50/p99 TTFT and TPOT (TPOT excludes the first token).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/engine_session.h"
#include "cli/parallel_session.h"
#include "grammar/constraint.h"

namespace sluice::cli {
namespace {

struct ThroughputOptions;
EngineCliOptions engine_options(const ThroughputOptions& o);

struct ThroughputOptions {
  std::string model;
  int requests = 64;
  int input_len = 128;
  int output_len = 128;
  int concurrency = 0;  // 0: all at once
  int shared_prefix = 0;
  uint64_t seed = 0;
  std::string output_format = "md";
  std::string json_schema;  // constrain every output (structured output) to this schema file
  float temp = 0;
  int top_k = 0;
  EngineCliOptions engine;
};

// The context holds one request: input, output and the next token.
EngineCliOptions engine_options(const ThroughputOptions& o) {
  EngineCliOptions eo = o.engine;
  if (eo.ctx_size == 0) eo.ctx_size = o.input_len + o.output_len + 1;
  return eo;
}

struct Summary {
  double mean = 0, p50 = 0, p99 = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  auto pct = [&](double p) {
    const double idx = p * double(v.size() - 1);
    const size_t lo = size_t(std::floor(idx)), hi = size_t(std::ceil(idx));
    return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
  };
  s.p50 = pct(0.50);
  s.p99 = pct(0.99);
  return s;
}

Status run_throughput(const ThroughputOptions& o) {
  if (o.requests < 1 || o.input_len < 1 || o.output_len < 1 || o.concurrency < 0 ||
      o.shared_prefix < 0 || o.shared_prefix > o.input_len) {
    return make_error(
        "need --requests, --input-len, --output-len >= 1 and 0 <= --shared-prefix <= --input-len");
  }
  SLUICE_ASSIGN_OR_RETURN(auto s, open_engine_session(o.model, engine_options(o)));
  Engine& engine = *s->engine;
  const int32_t n_vocab = int32_t(s->tokenizer.vocab().n_tokens());

  // Prompts: random ordinary tokens; the first `shared_prefix` are the same in every request.
  std::mt19937_64 rng(o.seed);
  auto random_token = [&] {
    while (true) {
      const int32_t t = int32_t(rng() % uint64_t(n_vocab));
      if (!s->tokenizer.vocab().is_eog(t)) return t;
    }
  };
  std::vector<int32_t> prefix(static_cast<size_t>(o.shared_prefix));
  for (int32_t& t : prefix) t = random_token();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < o.requests; ++i) {
    std::vector<int32_t> p = prefix;
    while (int(p.size()) < o.input_len) p.push_back(random_token());
    prompts.push_back(std::move(p));
  }
  GenerationParams g;
  g.sampling.temperature = o.temp;
  g.sampling.top_k = o.top_k;
  g.sampling.seed = o.seed;
  g.max_tokens = o.output_len;
  g.ignore_eos = true;
  if (!o.json_schema.empty()) {
    std::ifstream f(o.json_schema);
    if (!f) return make_error("cannot read '", o.json_schema, "'");
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    Result<grammar::GrammarSpec> spec = grammar::schema_text_grammar(text);
    if (!spec.ok()) return make_error("'", o.json_schema, "': ", spec.message());
    SLUICE_ASSIGN_OR_RETURN(g.sampling.grammar,
                            grammar::compile_grammar(*spec, engine.grammar_vocab()));
  }

  const int concurrency = o.concurrency > 0 ? o.concurrency : o.requests;
  std::vector<RequestId> ids;
  size_t next = 0;
  int in_flight = 0;
  const double t0 = engine.now();
  uint64_t out_tokens = 0;
  while (next < prompts.size() || in_flight > 0) {
    while (in_flight < concurrency && next < prompts.size()) {
      SLUICE_ASSIGN_OR_RETURN(RequestId id, engine.add_request(prompts[next++], g));
      ids.push_back(id);
      ++in_flight;
    }
    SLUICE_ASSIGN_OR_RETURN(std::vector<EngineEvent> events, engine.step());
    for (const EngineEvent& ev : events) {
      out_tokens += ev.tokens.size();
      if (ev.finished()) --in_flight;
    }
  }
  const double duration = engine.now() - t0;

  std::vector<double> ttft, tpot;
  for (RequestId id : ids) {
    const RequestTimes* t = engine.times(id);
    if (!t || t->first_token < 0) continue;
    ttft.push_back(t->first_token - t->arrival);
    if (t->tokens.size() > 1) {
      tpot.push_back((t->tokens.back() - t->first_token) / double(t->tokens.size() - 1));
    }
  }
  const Summary a = summarize(ttft), b = summarize(tpot);
  const double in_tokens = double(o.requests) * o.input_len;
  const auto& ps = engine.kv().prefix_stats();
  if (o.output_format == "json") {
    nlohmann::ordered_json j = {
        {"requests", o.requests},
        {"input_len", o.input_len},
        {"output_len", o.output_len},
        {"concurrency", concurrency},
        {"shared_prefix", o.shared_prefix},
        {"prefix_cache", !o.engine.no_prefix_cache},
        {"duration_s", duration},
        {"requests_per_s", o.requests / duration},
        {"total_tokens_per_s", (in_tokens + double(out_tokens)) / duration},
        {"output_tokens_per_s", double(out_tokens) / duration},
        {"ttft_ms", {{"mean", a.mean * 1e3}, {"p50", a.p50 * 1e3}, {"p99", a.p99 * 1e3}}},
        {"tpot_ms", {{"mean", b.mean * 1e3}, {"p50", b.p50 * 1e3}, {"p99", b.p99 * 1e3}}},
        {"prefix_cache_hit_tokens", ps.hit_tokens},
        {"preemptions", engine.scheduler().n_preemptions()},
        {"steps", engine.stats().steps}};
    const EngineStats& es = engine.stats();
    if (g.sampling.grammar) {
      const auto& gs = engine.grammar_stats();
      j["grammar"] = {{"masks", gs.masks},
                      {"mask_ms_total", gs.mask_seconds * 1e3},
                      {"mask_us_mean", gs.masks ? gs.mask_seconds / double(gs.masks) * 1e6 : 0.0},
                      {"fast_accepts", gs.fast_accepts},
                      {"mask_cache_entries", g.sampling.grammar->cache->n_entries()},
                      {"mask_cache_build_ms", g.sampling.grammar->cache->build_seconds() * 1e3}};
    }
    if (o.engine.spec != "none") {
      j["spec"] = {{"mode", o.engine.spec},
                   {"draft_tokens", es.spec_draft_tokens},
                   {"accepted_tokens", es.spec_accepted_tokens},
                   {"acceptance_rate", es.spec_acceptance_rate()},
                   {"mean_accepted_length", es.spec_mean_accepted_length()},
                   {"skipped_steps", es.spec_skipped_steps}};
    }
    if (const StepRoofline* r = engine.roofline()) {
      const RooflineStats& st = r->stats();
      j["roofline"] = {{"memory_bound_steps", st.memory_bound_steps},
                       {"compute_bound_steps", st.compute_bound_steps},
                       {"mbu", st.mbu()},
                       {"mfu", st.mfu()}};
      if (r->cost().comm.any()) {
        const double steps = double(st.memory_bound_steps + st.compute_bound_steps);
        j["comm"] = {{"tp", r->cost().comm.tp},
                     {"pp", r->cost().comm.pp},
                     {"link_gbps", r->cost().comm.link_bytes_per_s / 1e9},
                     {"link_latency_us", r->cost().comm.link_latency_s * 1e6},
                     {"measured_ms_per_step", steps > 0 ? st.comm_seconds / steps * 1e3 : 0},
                     {"predicted_ms_per_step", steps > 0 ? st.comm_predicted / steps * 1e3 : 0},
                     {"bytes_per_step", steps > 0 ? st.comm_bytes / steps : 0}};
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "| requests | in | out | concurrency | shared prefix | prefix cache | duration s | req/s | "
        "total tok/s | output tok/s | TTFT mean/p50/p99 ms | TPOT mean/p50/p99 ms |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::printf(
        "| %d | %d | %d | %d | %d | %s | %.2f | %.2f | %.1f | %.1f | %.1f / %.1f / %.1f | %.1f / "
        "%.1f / %.1f |\n",
        o.requests, o.input_len, o.output_len, concurrency, o.shared_prefix,
        o.engine.no_prefix_cache ? "off" : "on", duration, o.requests / duration,
        (in_tokens + double(out_tokens)) / duration, double(out_tokens) / duration, a.mean * 1e3,
        a.p50 * 1e3, a.p99 * 1e3, b.mean * 1e3, b.p50 * 1e3, b.p99 * 1e3);
    std::printf("\nprefix-cache hit tokens: %llu, preemptions: %llu, steps: %llu\n",
                (unsigned long long)ps.hit_tokens,
                (unsigned long long)engine.scheduler().n_preemptions(),
                (unsigned long long)engine.stats().steps);
    const EngineStats& es = engine.stats();
    if (g.sampling.grammar) {
      const auto& gs = engine.grammar_stats();
      std::printf(
          "grammar: %llu masks, %.1f ms in masks (%.1f us each; %.1f ms building the mask cache, "
          "%zu "
          "entries), %llu tokens needed no mask\n",
          (unsigned long long)gs.masks, gs.mask_seconds * 1e3,
          gs.masks ? gs.mask_seconds / double(gs.masks) * 1e6 : 0.0,
          g.sampling.grammar->cache->build_seconds() * 1e3, g.sampling.grammar->cache->n_entries(),
          (unsigned long long)gs.fast_accepts);
    }
    if (o.engine.spec != "none") {
      std::printf(
          "speculative (%s): %llu draft tokens, %.1f%% accepted, %.2f tokens per "
          "verifying step, %llu steps without drafts (compute-bound)\n",
          o.engine.spec.c_str(), (unsigned long long)es.spec_draft_tokens,
          100 * es.spec_acceptance_rate(), es.spec_mean_accepted_length(),
          (unsigned long long)es.spec_skipped_steps);
    }
    if (const StepRoofline* r = engine.roofline()) {
      const RooflineStats& st = r->stats();
      std::printf(
          "forward passes vs the roofline: %llu memory-bound steps at %.1f%% (MBU), %llu "
          "compute-bound steps at %.1f%% (MFU)\n",
          (unsigned long long)st.memory_bound_steps, 100 * st.mbu(),
          (unsigned long long)st.compute_bound_steps, 100 * st.mfu());
      if (r->cost().comm.any()) {
        const CommSpec& cs = r->cost().comm;
        const double steps = double(st.memory_bound_steps + st.compute_bound_steps);
        std::printf(
            "communication (--tp %d --pp %d; link %.2f GB/s, %.1f us a message): %.3f ms a step "
            "measured (waits for slower ranks included), %.3f ms predicted, %.1f KB sent by "
            "rank 0\n",
            cs.tp, cs.pp, cs.link_bytes_per_s / 1e9, cs.link_latency_s * 1e6,
            steps > 0 ? st.comm_seconds / steps * 1e3 : 0,
            steps > 0 ? st.comm_predicted / steps * 1e3 : 0,
            steps > 0 ? st.comm_bytes / steps / 1e3 : 0);
      }
    }
  }
  return {};
}

}  // namespace

void register_bench_throughput(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<ThroughputOptions>();
  CLI::App* cmd =
      bench->add_subcommand("throughput", "Offline serving throughput through the engine");
  cmd->add_option("model", o->model, "GGUF file or hf://OWNER/REPO/FILE.gguf")->required();
  cmd->add_option("--requests", o->requests, "Requests")->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "Prompt tokens per request")->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "Generated tokens per request")
      ->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "Requests in flight (0: all)")
      ->capture_default_str();
  cmd->add_option("--shared-prefix", o->shared_prefix,
                  "Leading prompt tokens shared by every request")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the random prompts")->capture_default_str();
  cmd->add_option(
      "--json-schema", o->json_schema,
      "Constrain every output to this JSON Schema file (structured output; a schema that cannot "
      "end within --output-len keeps the token counts equal)");
  cmd->add_option("--temp", o->temp, "Sampling temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->top_k,
                  "Top-k (0: off; with a schema, top-k takes the full-mask path)")
      ->capture_default_str();
  cmd->add_option("--output-format", o->output_format, "md or json")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  add_engine_options(cmd, o->engine);
  cmd->callback([o, &exit_code] {
    if (auto code = take_rank("bench throughput", o->model, engine_options(*o))) {
      exit_code = *code;
      return;
    }
    Status st = run_throughput(*o);
    if (!st.ok()) exit_code = report_error("bench throughput", st.message());
  });
}

}  // namespace sluice::cli
