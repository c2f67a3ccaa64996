#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <queue>
#include <unordered_map>

namespace sluice::sim {

namespace {

class RouterPicker final : public RoutePicker {
 public:
  RouterPicker(const router::PolicyConfig& config, int replicas)
      : router_(config, replicas), in_flight_(size_t(replicas), 0) {}
  int pick(const WorkItem& item, const std::vector<ReplicaLoad>& loads) override {
    backends_.resize(loads.size());
    for (size_t i = 0; i < loads.size(); ++i) {
      backends_[i].eligible = true;
      backends_[i].in_flight = in_flight_[i];
      backends_[i].running = loads[i].running;
      backends_[i].waiting = loads[i].waiting;
    }
    const std::string_view key = key_of(item);
    const router::RouteDecision d = router_.choose(key, backends_);
    if (d.backend >= 0) {
      router_.insert(d.backend, key);
      ++in_flight_[size_t(d.backend)];
    }
    return d.backend;
  }
  void finished(int replica, const WorkItem&) override { --in_flight_[size_t(replica)]; }
  std::string name() const override { return router::policy_name(router_.config().policy); }

 private:
  static std::string_view key_of(const WorkItem& item) {
    return {reinterpret_cast<const char*>(item.prompt.data()),
            item.prompt.size() * sizeof(int32_t)};
  }
  router::Router router_;
  std::vector<int64_t> in_flight_;
  std::vector<router::BackendLoad> backends_;
};

struct Replica {
  VirtualClock clock;
  std::unique_ptr<SimulatedExecutor> executor;
  std::unique_ptr<Engine> engine;
  std::unordered_map<RequestId, size_t> item_of;  // in-flight request -> work index
  ReplicaReport report;
};

// The record of a request whose tokens were sampled at `tokens` (absolute virtual times).
loadgen::RequestRecord record_of(double arrival, double finished, const std::vector<double>& tokens,
                                 const EngineEvent& ev, int64_t n_prompt) {
  loadgen::RequestRecord r;
  r.start_s = arrival;
  r.input_tokens = n_prompt;
  r.output_tokens = int64_t(tokens.size());
  r.usage_reported = true;
  r.e2el_s = finished - arrival;
  if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kAbort) {
    r.ok = false;
    r.error = ev.error.empty() ? finish_reason_name(ev.finish) : ev.error;
    return r;
  }
  r.ok = true;
  r.ttft_s = tokens.empty() ? 0 : tokens.front() - arrival;
  r.itl_s.reserve(tokens.size());
  for (size_t i = 1; i < tokens.size(); ++i) r.itl_s.push_back(tokens[i] - tokens[i - 1]);
  return r;
}

}  // namespace

std::unique_ptr<RoutePicker> make_router_picker(const router::PolicyConfig& config, int replicas) {
  return std::make_unique<RouterPicker>(config, replicas);
}

namespace {

// One simulated service: replicas (one pool, or a prefill and a decode pool), the deliveries
// still to come, and what the requests did. run() is the event loop; deliver() routes a request
// to a replica (a decode replica imports its prompt's K/V first); step() runs one replica's step
// and hands prefilled prompts over the K/V link (prefill_done()).
class ServiceRun {
 public:
  ServiceRun(const ServiceConfig& config, std::vector<WorkItem> work, RoutePicker& picker,
             RoutePicker* decode_picker)
      : config_(config),
        work_(std::move(work)),
        picker_(picker),
        decode_picker_(decode_picker),
        pd_(config.prefill_replicas > 0 || config.decode_replicas > 0),
        n_first_(pd_ ? config.prefill_replicas : config.replicas),
        n_reps_(pd_ ? config.prefill_replicas + config.decode_replicas : config.replicas),
        block_size_(config.executor.capacity.block_size) {}

  Status check() const {
    if (pd_ && (config_.prefill_replicas < 1 || config_.decode_replicas < 1)) {
      return make_error("sim: disaggregated serving needs prefill and decode replicas (got ",
                        config_.prefill_replicas, " and ", config_.decode_replicas, ")");
    }
    if (pd_ && !decode_picker_)
      return make_error("sim: disaggregated serving needs a decode router");
    if (pd_ && !(config_.kv_link_bytes_per_s > 0)) {
      return make_error("sim: disaggregated serving needs the KV link's bandwidth");
    }
    if (n_first_ < 1) return make_error("sim: replicas must be >= 1, got ", n_first_);
    if (config_.engine.spec.mode != SpecMode::kNone) {
      return make_error("sim: speculative decoding is not simulated");
    }
    return {};
  }

  Status build_replicas(const Tokenizer& tokenizer) {
    reps_.resize(static_cast<size_t>(n_reps_));
    for (size_t i = 0; i < reps_.size(); ++i) {
      Replica& r = reps_[i];
      r.executor = std::make_unique<SimulatedExecutor>(config_.executor, r.clock);
      if (config_.on_step) {
        r.executor->set_observer(
            [this, &r, i](const Batch& b) { config_.on_step(int(i), b, r.clock.now()); });
      }
      EngineConfig ec = config_.engine;
      ec.clock = &r.clock;
      ec.cost_model.reset();
      SLUICE_ASSIGN_OR_RETURN(r.engine, Engine::create(tokenizer, *r.executor, ec));
      r.report.kv_blocks_total = r.engine->kv().n_blocks();
      r.report.role = !pd_ ? "both" : int(i) < n_first_ ? "prefill" : "decode";
    }
    return {};
  }

  // Arrivals in time order (ties spread by tie_gap_s), as stage-0 deliveries.
  void schedule_arrivals() {
    std::vector<size_t> order(work_.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return work_[a].arrival_s < work_[b].arrival_s; });
    if (config_.tie_gap_s > 0) {
      for (size_t i = 1; i < order.size(); ++i) {
        WorkItem& prev = work_[order[i - 1]];
        WorkItem& cur = work_[order[i]];
        if (cur.arrival_s <= prev.arrival_s) cur.arrival_s = prev.arrival_s + config_.tie_gap_s;
      }
    }
    out_.records.resize(work_.size());
    n_prompt_.assign(work_.size(), 0);
    stage_of_.assign(work_.size(), 0);
    first_token_.assign(work_.size(), -1);
    for (size_t w : order) pending_.push({work_[w].arrival_s, seq_++, w, 0});
  }

  // The replica with work whose clock is earliest steps next, unless a delivery comes first.
  Status run() {
    for (;;) {
      int rmin = -1;
      double tmin = kInf;
      for (size_t i = 0; i < reps_.size(); ++i) {
        if (reps_[i].engine->has_work() && reps_[i].clock.now() < tmin) {
          tmin = reps_[i].clock.now();
          rmin = int(i);
        }
      }
      const double next_delivery = pending_.empty() ? kInf : pending_.top().t;
      if (rmin < 0 && pending_.empty()) return {};
      if (next_delivery <= tmin) {
        const Delivery d = pending_.top();
        pending_.pop();
        SLUICE_RETURN_IF_ERROR(deliver(d));
        continue;
      }
      SLUICE_RETURN_IF_ERROR(step(rmin, next_delivery));
    }
  }

  ServiceReport report() {
    for (size_t i = 0; i < reps_.size(); ++i) {
      Replica& rep = reps_[i];
      ReplicaReport& r = rep.report;
      const EngineStats& st = rep.engine->stats();
      r.steps = st.steps;
      r.busy_s = rep.executor->busy_seconds();
      r.prefix = rep.engine->kv().prefix_stats();
      r.prompt_tokens_computed = st.prompt_tokens;
      r.generated_tokens = st.generated_tokens;
      r.preemptions = rep.engine->scheduler().n_preemptions();
      out_.steps += r.steps;
      // Disaggregated: a decode replica's "hits" are the imported prompts, not cache reuse.
      if (r.role != "decode") out_.prefix += r.prefix;
      out_.replicas.push_back(r);
    }
    for (int64_t n : n_prompt_) out_.prompt_tokens += uint64_t(n);
    return std::move(out_);
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // Arrivals (stage 0, to the first pool) and, disaggregated, prompts whose K/V has crossed the
  // link (stage 1, to the decode pool); earliest first, then in creation order.
  struct Delivery {
    double t;
    uint64_t seq;
    size_t w;
    int stage;
    bool operator>(const Delivery& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  void fail(size_t w, double t, std::string why) {
    loadgen::RequestRecord& r = out_.records[w];
    r.start_s = work_[w].arrival_s;
    r.input_tokens = n_prompt_[w];
    r.e2el_s = t - work_[w].arrival_s;
    r.error = std::move(why);
  }

  Status deliver(const Delivery& d) {
    WorkItem& item = work_[d.w];
    const int base = d.stage == 0 ? 0 : n_first_;
    const int n_pool = d.stage == 0 ? n_first_ : n_reps_ - n_first_;
    RoutePicker& pk = d.stage == 0 ? picker_ : *decode_picker_;
    loads_.resize(size_t(n_pool));
    for (int i = 0; i < n_pool; ++i) {
      const Engine& e = *reps_[size_t(base + i)].engine;
      loads_[size_t(i)] = {int64_t(e.scheduler().n_running()), int64_t(e.scheduler().n_waiting()),
                           int64_t(e.kv().n_used_blocks()), int64_t(e.kv().n_blocks())};
    }
    const int pi = pk.pick(item, loads_);
    if (pi < 0 || pi >= n_pool) {
      return make_error("sim: router '", pk.name(), "' picked replica ", pi, " of ", n_pool);
    }
    Replica& rep = reps_[size_t(base + pi)];
    // The request arrives at `d.t` even when the replica is mid-step (its clock ahead): it
    // waits for the step boundary, as in a real server.
    const double resume = std::max(rep.clock.now(), d.t);
    rep.clock.set(d.t);
    GenerationParams gp;
    gp.sampling.temperature = 0;
    gp.ignore_eos = true;
    std::vector<int32_t> prompt;
    if (d.stage == 0) {
      n_prompt_[d.w] = int64_t(item.prompt.size());
      gp.max_tokens = pd_ ? 1 : item.output_tokens;
      prompt = pd_ ? item.prompt : std::move(item.prompt);
    } else {
      // The prompt's K/V arrives from the prefill replica: its full blocks enter this replica's
      // prefix cache; the partial tail and the first token are computed here.
      KvBlockData kv;
      SLUICE_ASSIGN_OR_RETURN(kv, rep.executor->export_blocks({}));
      kv.n_blocks = int32_t(item.prompt.size() / size_t(block_size_));
      Result<int32_t> imported = rep.engine->import_prefix(item.prompt, kv);
      if (!imported.ok()) return make_error("sim: KV import: ", imported.message());
      prompt = std::move(item.prompt);
      prompt.push_back(SimulatedExecutor::kOutputToken);
      gp.max_tokens = item.output_tokens - 1;
    }
    Result<RequestId> id = rep.engine->add_request(std::move(prompt), gp);
    rep.clock.set(resume);
    if (!id.ok()) {
      fail(d.w, d.t, id.message());
      pk.finished(pi, item);
      return {};
    }
    stage_of_[d.w] = d.stage;
    rep.item_of.emplace(*id, d.w);
    ++rep.report.requests;
    rep.report.peak_running =
        std::max(rep.report.peak_running, int64_t(rep.engine->scheduler().n_running()));
    return {};
  }

  // Disaggregated: request w's prompt is computed and its first token out; its K/V crosses the
  // link to a decode replica (a stage-1 delivery).
  void prefill_done(size_t w, const RequestTimes& t) {
    first_token_[w] = t.tokens.front();
    const double bytes = double(work_[w].prompt.size()) * config_.kv_bytes_per_token;
    pending_.push({t.finished + config_.kv_link_latency_s + bytes / config_.kv_link_bytes_per_s,
                   seq_++, w, 1});
    ++out_.kv_transfers;
    out_.kv_transfer_bytes += bytes;
  }

  // One step of replica `ri`; `next_delivery`: when the next request arrives anywhere.
  Status step(int ri, double next_delivery) {
    Replica& rep = reps_[size_t(ri)];
    const double before = rep.clock.now();
    SLUICE_ASSIGN_OR_RETURN(std::vector<EngineEvent> events, rep.engine->step());
    rep.report.peak_running =
        std::max(rep.report.peak_running, int64_t(rep.engine->scheduler().n_running()));
    for (const EngineEvent& ev : events) {
      if (!ev.finished()) continue;
      auto it = rep.item_of.find(ev.id);
      if (it == rep.item_of.end()) continue;
      const size_t w = it->second;
      rep.item_of.erase(it);
      const RequestTimes* t = rep.engine->times(ev.id);
      if (!t) return make_error("sim: no timestamps for finished request ", ev.id);
      const bool first_pool = ri < n_first_;
      (first_pool ? picker_ : *decode_picker_).finished(first_pool ? ri : ri - n_first_, work_[w]);
      if (pd_ && stage_of_[w] == 0 && ev.finish == FinishReason::kLength &&
          work_[w].output_tokens > 1 && !t->tokens.empty()) {
        prefill_done(w, *t);
        continue;
      }
      if (stage_of_[w] == 1) {
        std::vector<double> tokens;
        tokens.reserve(t->tokens.size() + 1);
        tokens.push_back(first_token_[w]);
        tokens.insert(tokens.end(), t->tokens.begin(), t->tokens.end());
        out_.records[w] = record_of(work_[w].arrival_s, t->finished, tokens, ev, n_prompt_[w]);
      } else {
        out_.records[w] = record_of(t->arrival, t->finished, t->tokens, ev, n_prompt_[w]);
      }
      out_.virtual_s = std::max(out_.virtual_s, t->finished);
    }
    if (events.empty() && rep.clock.now() == before) {
      // Nothing could run: the waiting requests never fit this replica's KV cache.
      if (next_delivery < kInf) {
        rep.clock.set(next_delivery);  // let the deliveries come; maybe nothing changes
        return {};
      }
      return make_error(
          "sim: replica ", ri, " is stalled with ", rep.engine->scheduler().n_waiting(),
          " waiting requests that cannot be scheduled (KV cache of ", rep.engine->kv().n_blocks(),
          " blocks of ", block_size_, " tokens too small for them?)");
    }
    return {};
  }

  const ServiceConfig& config_;
  std::vector<WorkItem> work_;
  RoutePicker& picker_;
  RoutePicker* decode_picker_;
  const bool pd_;
  const int n_first_;  // replicas of the first pool (all, or the prefill ones)
  const int n_reps_;
  const int32_t block_size_;
  std::vector<Replica> reps_;
  std::priority_queue<Delivery, std::vector<Delivery>, std::greater<Delivery>> pending_;
  uint64_t seq_ = 0;
  ServiceReport out_;
  std::vector<int64_t> n_prompt_;
  std::vector<int> stage_of_;
  std::vector<double> first_token_;  // disaggregated: from the prefill replica
  std::vector<ReplicaLoad> loads_;
};

}  // namespace

Result<ServiceReport> simulate_service(const ServiceConfig& config, const Tokenizer& tokenizer,
                                       std::vector<WorkItem> work, RoutePicker& picker,
                                       RoutePicker* decode_picker) {
  const auto wall0 = std::chrono::steady_clock::now();
  ServiceRun run(config, std::move(work), picker, decode_picker);
  SLUICE_RETURN_IF_ERROR(run.check());
  SLUICE_RETURN_IF_ERROR(run.build_replicas(tokenizer));
  run.schedule_arrivals();
  SLUICE_RETURN_IF_ERROR(run.run());
  ServiceReport out = run.report();
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return out;
}

}  // namespace sluice::sim
