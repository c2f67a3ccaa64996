#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace sluice::server {

using http::ConnectionStats;
namespace {

// Latency buckets: from a tiny model's sub-millisecond steps to minutes-long generations.
std::vector<double> latency_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,      2.5,   5,      10,    20,   40,    80,   160, 320,  640};
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void scalar(std::string& out, const std::string& name, const char* type, const std::string& help,
            double v) {
  header(out, name, type, help);
  out += name + " " + number(v) + "\n";
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics()
    : ttft_(latency_buckets()),
      itl_(latency_buckets()),
      e2e_(latency_buckets()),
      queue_(latency_buckets()),
      step_(latency_buckets()) {}

void ServerMetrics::observe_finished(const RequestTimes& t, FinishReason why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[finish_reason_name(why)];
  if (t.scheduled >= 0) queue_.observe(t.scheduled - t.arrival);
  if (t.first_token >= 0) ttft_.observe(t.first_token - t.arrival);
  for (size_t i = 1; i < t.tokens.size(); ++i) itl_.observe(t.tokens[i] - t.tokens[i - 1]);
  if (t.finished >= 0) e2e_.observe(t.finished - t.arrival);
}

void ServerMetrics::observe_step(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  step_.observe(seconds);
}

void ServerMetrics::set_engine(const EngineSnapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_ = s;
}

void ServerMetrics::count_finish(const std::string& reason, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_[reason] += n;
}

void ServerMetrics::count_http(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[{route, status}];
}

void ServerMetrics::count_prompt_tokens(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += n;
}

void ServerMetrics::set_queue_depth(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_depth_ = n;
}

void ServerMetrics::set_ready(bool ready) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_ = ready;
}

EngineSnapshot ServerMetrics::engine() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_;
}

void ServerMetrics::set_grammar_caches(
    std::vector<std::shared_ptr<const grammar::GrammarCache>> caches) {
  std::lock_guard<std::mutex> lock(mu_);
  grammar_caches_ = std::move(caches);
}

std::string ServerMetrics::render(const ConnectionStats& conn) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  out.reserve(16 << 10);
  scalar(out, "sluice_ready", "gauge", "1 once the model is loaded and requests are accepted.",
         ready_ ? 1 : 0);

  header(out, "sluice_http_requests_total", "counter", "HTTP responses by route and status code.");
  for (const auto& [key, n] : http_) {
    out += "sluice_http_requests_total{route=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  }
  header(out, "sluice_requests_finished_total", "counter",
         "Generations (one per choice) by how they ended: stop, length, context, abort (client "
         "gone or shutdown), error.");
  for (const auto& [reason, n] : finished_) {
    out += "sluice_requests_finished_total{finish_reason=\"" + reason + "\"} " + std::to_string(n) +
           "\n";
  }

  ttft_.render(out, "sluice_time_to_first_token_seconds", "Arrival at the engine to first token.");
  itl_.render(out, "sluice_inter_token_latency_seconds",
              "Time between consecutive tokens of a request.");
  e2e_.render(out, "sluice_e2e_request_latency_seconds",
              "Arrival at the engine to the last token.");
  queue_.render(out, "sluice_request_queue_time_seconds",
                "Arrival at the engine to first scheduled.");
  step_.render(out, "sluice_engine_step_seconds",
               "Wall time of one engine step (schedule, execute, sample).");

  const EngineSnapshot& e = engine_;
  scalar(out, "sluice_num_requests_waiting", "gauge", "Requests waiting for the scheduler.",
         double(e.waiting));
  scalar(out, "sluice_num_requests_running", "gauge", "Requests in the running batch.",
         double(e.running));
  scalar(out, "sluice_server_queue_depth", "gauge",
         "Generations admitted by the server but never scheduled yet (bounded by --max-queue).",
         double(queue_depth_));
  scalar(out, "sluice_kv_blocks_used", "gauge", "KV blocks referenced by requests.",
         double(e.kv_blocks_used));
  scalar(out, "sluice_kv_blocks_total", "gauge", "KV blocks in the cache.",
         double(e.kv_blocks_total));
  scalar(out, "sluice_kv_bytes_used", "gauge",
         "K/V bytes in the blocks requests reference (windowed layers hold only their window).",
         double(e.kv_blocks_used) * double(e.kv_bytes_per_block));
  scalar(out, "sluice_kv_bytes_total", "gauge", "K/V bytes of the cache.",
         double(e.kv_blocks_total) * double(e.kv_bytes_per_block));
  if (e.state_slots_total > 0) {
    scalar(out, "sluice_recurrent_state_bytes_used", "gauge",
           "Recurrent-layer state of the running sequences (one fixed-size state each).",
           double(e.state_slots_used) * double(e.state_bytes_per_slot));
    scalar(
        out, "sluice_recurrent_state_bytes_total", "gauge",
        "Recurrent-layer state slots reserved (max_seqs of them, and the checkpoints).",
        double(e.state_slots_total + e.state_checkpoints_total) * double(e.state_bytes_per_slot));
    scalar(out, "sluice_state_checkpoints_used", "gauge",
           "Saved recurrent states a prefix hit can resume from (docs/kv-cache.md).",
           double(e.state_checkpoints_used));
    scalar(out, "sluice_state_checkpoints_saved_total", "counter",
           "Recurrent states saved at block boundaries.", double(e.checkpoints.saved));
    scalar(out, "sluice_state_checkpoints_restored_total", "counter",
           "Prefix hits that resumed a recurrent state from a checkpoint.",
           double(e.checkpoints.restored));
  }
  scalar(out, "sluice_kv_cache_usage_ratio", "gauge", "kv_blocks_used / kv_blocks_total.",
         e.kv_blocks_total > 0 ? double(e.kv_blocks_used) / double(e.kv_blocks_total) : 0.0);
  scalar(out, "sluice_prefix_cache_queries_total", "counter",
         "Full prompt blocks looked up in the prefix cache.", double(e.prefix.queried_blocks));
  scalar(out, "sluice_prefix_cache_hits_total", "counter",
         "Prompt blocks found in the prefix cache.", double(e.prefix.hit_blocks));
  scalar(out, "sluice_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens not recomputed thanks to the prefix cache.", double(e.prefix.hit_tokens));
  scalar(out, "sluice_prefix_cache_hit_ratio", "gauge",
         "prefix_cache_hits_total / prefix_cache_queries_total.", e.prefix.hit_ratio());
  scalar(out, "sluice_kv_forked_blocks_total", "counter",
         "KV blocks shared by the samples of one prompt (n > 1) instead of computed again.",
         double(e.sharing.forked_blocks));
  scalar(out, "sluice_kv_cow_copies_total", "counter",
         "Shared KV blocks copied before a write (copy-on-write).", double(e.sharing.cow_copies));
  scalar(out, "sluice_prompt_tokens_total", "counter", "Prompt tokens of admitted generations.",
         double(prompt_tokens_));
  scalar(out, "sluice_prompt_tokens_computed_total", "counter",
         "Prompt tokens computed (prefix-cache hits excluded).", double(e.stats.prompt_tokens));
  scalar(out, "sluice_generation_tokens_total", "counter", "Tokens generated.",
         double(e.stats.generated_tokens));
  scalar(out, "sluice_engine_steps_total", "counter", "Engine steps run.", double(e.stats.steps));
  scalar(out, "sluice_engine_busy_seconds_total", "counter", "Time spent inside engine steps.",
         e.stats.busy_seconds);
  scalar(out, "sluice_preemptions_total", "counter", "Requests preempted for KV memory.",
         double(e.preemptions));
  scalar(out, "sluice_spec_verify_steps_total", "counter",
         "Sequence-steps that verified a speculative draft (--spec).",
         double(e.stats.spec_verify_seqs));
  scalar(out, "sluice_spec_draft_tokens_total", "counter", "Draft tokens verified.",
         double(e.stats.spec_draft_tokens));
  scalar(out, "sluice_spec_accepted_tokens_total", "counter", "Draft tokens accepted.",
         double(e.stats.spec_accepted_tokens));
  scalar(out, "sluice_spec_emitted_tokens_total", "counter",
         "Tokens emitted by verifying sequence-steps (accepted drafts + the target's own).",
         double(e.stats.spec_emitted_tokens));
  scalar(out, "sluice_spec_acceptance_ratio", "gauge",
         "spec_accepted_tokens_total / spec_draft_tokens_total.", e.stats.spec_acceptance_rate());
  scalar(out, "sluice_spec_mean_accepted_length", "gauge",
         "Tokens per verifying sequence-step (accepted drafts + the target's own token).",
         e.stats.spec_mean_accepted_length());
  scalar(out, "sluice_spec_skipped_steps_total", "counter",
         "Steps whose drafts the roofline cost model dropped (compute-bound batches).",
         double(e.stats.spec_skipped_steps));
  scalar(out, "sluice_spec_cut_steps_total", "counter",
         "Steps whose drafts the roofline cost model shortened (the longest drafts cost more than "
         "they were expected to return).",
         double(e.stats.spec_cut_steps));
  scalar(out, "sluice_spec_grammar_cut_tokens_total", "counter",
         "Draft tokens dropped before verification because the request's grammar refused them.",
         double(e.stats.spec_grammar_cut_tokens));
  grammar::GrammarCacheStats gs;
  for (const auto& c : grammar_caches_) {
    const grammar::GrammarCacheStats one = c->stats();
    gs.hits += one.hits;
    gs.misses += one.misses;
    gs.errors += one.errors;
    gs.compile_seconds += one.compile_seconds;
    gs.compile_seconds_max = std::max(gs.compile_seconds_max, one.compile_seconds_max);
    gs.entries += one.entries;
  }
  scalar(out, "sluice_grammar_compiles_total", "counter",
         "Grammars compiled (schemas, GBNF, regex, tool calls): cache misses, failures included.",
         double(gs.misses));
  scalar(out, "sluice_grammar_compile_errors_total", "counter",
         "Grammar compiles that failed (400s).", double(gs.errors));
  scalar(out, "sluice_grammar_cache_hits_total", "counter",
         "Requests whose grammar was already compiled.", double(gs.hits));
  scalar(out, "sluice_grammar_compile_seconds_total", "counter", "Time compiling grammars.",
         gs.compile_seconds);
  scalar(out, "sluice_grammar_compile_seconds_max", "gauge", "The slowest grammar compile.",
         gs.compile_seconds_max);
  scalar(out, "sluice_grammar_masks_total", "counter",
         "Token masks computed for constrained requests.", double(e.grammar.masks));
  scalar(out, "sluice_grammar_mask_seconds_total", "counter",
         "Time computing token masks (mean per mask: divide by sluice_grammar_masks_total).",
         e.grammar.mask_seconds);
  scalar(out, "sluice_grammar_fast_accepts_total", "counter",
         "Constrained tokens sampled without a mask (the unmasked choice was allowed).",
         double(e.grammar.fast_accepts));
  if (e.has_roofline) {
    const RooflineStats& r = e.roofline;
    header(out, "sluice_engine_forward_seconds_total", "counter",
           "Measured forward-pass time by the bound the roofline predicts for the batch "
           "(memory: decode-heavy, compute: prefill-heavy).");
    out += "sluice_engine_forward_seconds_total{bound=\"memory\"} " +
           std::to_string(r.memory_bound_seconds) + "\n";
    out += "sluice_engine_forward_seconds_total{bound=\"compute\"} " +
           std::to_string(r.compute_bound_seconds) + "\n";
    header(out, "sluice_engine_roofline_seconds_total", "counter",
           "The roofline's time for the same forward passes (bytes / measured bandwidth or "
           "FLOPs / measured peak).");
    out += "sluice_engine_roofline_seconds_total{bound=\"memory\"} " +
           std::to_string(r.memory_bound_predicted) + "\n";
    out += "sluice_engine_roofline_seconds_total{bound=\"compute\"} " +
           std::to_string(r.compute_bound_predicted) + "\n";
    scalar(out, "sluice_engine_mbu", "gauge",
           "Memory-bound steps' bytes / the read bandwidth below / their measured time (model "
           "bandwidth utilization; <= 1: a step that streams faster raises the bandwidth).",
           r.mbu());
    header(out, "sluice_engine_read_bandwidth_bytes_per_second", "gauge",
           "The read bandwidth sluice_engine_mbu divides by; origin: the probe (`sluice bench "
           "--roofline`) and when, or the step that raised it.");
    out += "sluice_engine_read_bandwidth_bytes_per_second{origin=\"" + label_value(r.read_origin) +
           "\"} " + number(r.read_bytes_per_s) + "\n";
    scalar(out, "sluice_engine_read_bandwidth_raises_total", "counter",
           "Steps that streamed faster than the read bandwidth and raised it.",
           double(r.read_raises));
    scalar(out, "sluice_engine_mfu", "gauge",
           "Roofline time / measured time over compute-bound steps (model FLOPs utilization).",
           r.mfu());
    scalar(out, "sluice_engine_last_step_roofline_ratio", "gauge",
           "Roofline time / measured time of the latest forward pass.",
           r.last_seconds > 0 ? r.last_predicted / r.last_seconds : 0);
    header(out, "sluice_comm_seconds_total", "counter",
           "Tensor/pipeline parallel: seconds rank 0 spent in messages between ranks (waits for "
           "slower ranks included), and the link model's prediction for the same steps.");
    out += "sluice_comm_seconds_total{kind=\"measured\"} " + std::to_string(r.comm_seconds) + "\n";
    out +=
        "sluice_comm_seconds_total{kind=\"predicted\"} " + std::to_string(r.comm_predicted) + "\n";
    scalar(out, "sluice_comm_bytes_total", "counter",
           "Tensor/pipeline parallel: bytes rank 0 sent to other ranks.", r.comm_bytes);
  }

  scalar(out, "sluice_http_connection_threads", "gauge", "Connection threads alive.",
         double(conn.threads.load()));
  scalar(out, "sluice_http_connections_active", "gauge", "Connections being served.",
         double(conn.busy.load()));
  scalar(out, "sluice_http_connections_queued", "gauge",
         "Accepted connections waiting for a thread.", double(conn.queued.load()));
  scalar(out, "sluice_http_connections_total", "counter", "Connections accepted.",
         double(conn.accepted.load()));
  return out;
}

}  // namespace sluice::server
