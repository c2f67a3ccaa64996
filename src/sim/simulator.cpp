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

Result<ServiceReport> simulate_service(const ServiceConfig& config, const Tokenizer& tokenizer,
                                       std::vector<WorkItem> work, RoutePicker& picker,
                                       RoutePicker* decode_picker) {
  const auto wall0 = std::chrono::steady_clock::now();
  const bool pd = config.prefill_replicas > 0 || config.decode_replicas > 0;
  if (pd && (config.prefill_replicas < 1 || config.decode_replicas < 1)) {
    return make_error("sim: disaggregated serving needs prefill and decode replicas (got ",
                      config.prefill_replicas, " and ", config.decode_replicas, ")");
  }
  if (pd && !decode_picker) return make_error("sim: disaggregated serving needs a decode router");
  if (pd && !(config.kv_link_bytes_per_s > 0)) {
    return make_error("sim: disaggregated serving needs the KV link's bandwidth");
  }
  const int n_first = pd ? config.prefill_replicas : config.replicas;
  const int n_reps = pd ? config.prefill_replicas + config.decode_replicas : config.replicas;
  if (n_first < 1) return make_error("sim: replicas must be >= 1, got ", n_first);
  if (config.engine.spec.mode != SpecMode::kNone) {
    return make_error("sim: speculative decoding is not simulated");
  }
  std::vector<Replica> reps(static_cast<size_t>(n_reps));
  for (size_t i = 0; i < reps.size(); ++i) {
    Replica& r = reps[i];
    r.executor = std::make_unique<SimulatedExecutor>(config.executor, r.clock);
    if (config.on_step) {
      r.executor->set_observer(
          [&config, &r, i](const Batch& b) { config.on_step(int(i), b, r.clock.now()); });
    }
    EngineConfig ec = config.engine;
    ec.clock = &r.clock;
    ec.cost_model.reset();
    SLUICE_ASSIGN_OR_RETURN(r.engine, Engine::create(tokenizer, *r.executor, ec));
    r.report.kv_blocks_total = r.engine->kv().n_blocks();
    r.report.role = !pd ? "both" : int(i) < n_first ? "prefill" : "decode";
  }

  std::vector<size_t> order(work.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return work[a].arrival_s < work[b].arrival_s; });
  if (config.tie_gap_s > 0) {
    for (size_t i = 1; i < order.size(); ++i) {
      WorkItem& prev = work[order[i - 1]];
      WorkItem& cur = work[order[i]];
      if (cur.arrival_s <= prev.arrival_s) cur.arrival_s = prev.arrival_s + config.tie_gap_s;
    }
  }

  // Deliveries: arrivals (stage 0, to the first pool) and, disaggregated, prompts whose K/V has
  // crossed the link (stage 1, to the decode pool); earliest first, then in creation order.
  struct Delivery {
    double t;
    uint64_t seq;
    size_t w;
    int stage;
    bool operator>(const Delivery& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<Delivery, std::vector<Delivery>, std::greater<Delivery>> pending;
  uint64_t seq = 0;
  for (size_t w : order) pending.push({work[w].arrival_s, seq++, w, 0});

  ServiceReport out;
  out.records.resize(work.size());
  std::vector<int64_t> n_prompt(work.size(), 0);
  std::vector<int> stage_of(work.size(), 0);
  std::vector<double> first_token(work.size(), -1);  // disaggregated: from the prefill replica
  std::vector<ReplicaLoad> loads;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const int32_t bs = config.executor.capacity.block_size;
  auto fail = [&](size_t w, double t, std::string why) {
    loadgen::RequestRecord& r = out.records[w];
    r.start_s = work[w].arrival_s;
    r.input_tokens = n_prompt[w];
    r.e2el_s = t - work[w].arrival_s;
    r.error = std::move(why);
  };
  for (;;) {
    // The replica with work whose clock is earliest steps next, unless a delivery comes first.
    int rmin = -1;
    double tmin = kInf;
    for (size_t i = 0; i < reps.size(); ++i) {
      if (reps[i].engine->has_work() && reps[i].clock.now() < tmin) {
        tmin = reps[i].clock.now();
        rmin = int(i);
      }
    }
    const double a = pending.empty() ? kInf : pending.top().t;
    if (rmin < 0 && pending.empty()) break;
    if (a <= tmin) {
      const Delivery d = pending.top();
      pending.pop();
      WorkItem& item = work[d.w];
      const int base = d.stage == 0 ? 0 : n_first;
      const int n_pool = d.stage == 0 ? n_first : n_reps - n_first;
      RoutePicker& pk = d.stage == 0 ? picker : *decode_picker;
      loads.resize(size_t(n_pool));
      for (int i = 0; i < n_pool; ++i) {
        const Engine& e = *reps[size_t(base + i)].engine;
        loads[size_t(i)] = {int64_t(e.scheduler().n_running()), int64_t(e.scheduler().n_waiting()),
                            int64_t(e.kv().n_used_blocks()), int64_t(e.kv().n_blocks())};
      }
      const int pi = pk.pick(item, loads);
      if (pi < 0 || pi >= n_pool) {
        return make_error("sim: router '", pk.name(), "' picked replica ", pi, " of ", n_pool);
      }
      const int ri = base + pi;
      Replica& rep = reps[size_t(ri)];
      // The request arrives at `d.t` even when the replica is mid-step (its clock ahead): it
      // waits for the step boundary, as in a real server.
      const double resume = std::max(rep.clock.now(), d.t);
      rep.clock.set(d.t);
      GenerationParams gp;
      gp.sampling.temperature = 0;
      gp.ignore_eos = true;
      std::vector<int32_t> prompt;
      if (d.stage == 0) {
        n_prompt[d.w] = int64_t(item.prompt.size());
        gp.max_tokens = pd ? 1 : item.output_tokens;
        prompt = pd ? item.prompt : std::move(item.prompt);
      } else {
        // The prompt's K/V arrives from the prefill replica: its full blocks enter this replica's
        // prefix cache; the partial tail and the first token are computed here.
        KvBlockData kv;
        SLUICE_ASSIGN_OR_RETURN(kv, rep.executor->export_blocks({}));
        kv.n_blocks = int32_t(item.prompt.size() / size_t(bs));
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
        continue;
      }
      stage_of[d.w] = d.stage;
      rep.item_of.emplace(*id, d.w);
      ++rep.report.requests;
      rep.report.peak_running =
          std::max(rep.report.peak_running, int64_t(rep.engine->scheduler().n_running()));
      continue;
    }
    Replica& rep = reps[size_t(rmin)];
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
      const bool first_pool = rmin < n_first;
      (first_pool ? picker : *decode_picker).finished(first_pool ? rmin : rmin - n_first, work[w]);
      if (pd && stage_of[w] == 0 && ev.finish == FinishReason::kLength &&
          work[w].output_tokens > 1 && !t->tokens.empty()) {
        // Prefilled: the first token is out; the prompt's K/V crosses the link to a decode
        // replica.
        first_token[w] = t->tokens.front();
        const double bytes = double(work[w].prompt.size()) * config.kv_bytes_per_token;
        pending.push({t->finished + config.kv_link_latency_s + bytes / config.kv_link_bytes_per_s,
                      seq++, w, 1});
        ++out.kv_transfers;
        out.kv_transfer_bytes += bytes;
        continue;
      }
      if (stage_of[w] == 1) {
        std::vector<double> tokens;
        tokens.reserve(t->tokens.size() + 1);
        tokens.push_back(first_token[w]);
        tokens.insert(tokens.end(), t->tokens.begin(), t->tokens.end());
        out.records[w] = record_of(work[w].arrival_s, t->finished, tokens, ev, n_prompt[w]);
      } else {
        out.records[w] = record_of(t->arrival, t->finished, t->tokens, ev, n_prompt[w]);
      }
      out.virtual_s = std::max(out.virtual_s, t->finished);
    }
    if (events.empty() && rep.clock.now() == before) {
      // Nothing could run: the waiting requests never fit this replica's KV cache.
      if (a < kInf) {
        rep.clock.set(a);  // let the deliveries come; maybe nothing changes, checked again
        continue;
      }
      return make_error(
          "sim: replica ", rmin, " is stalled with ", rep.engine->scheduler().n_waiting(),
          " waiting requests that cannot be scheduled (KV cache of ", rep.engine->kv().n_blocks(),
          " blocks of ", bs, " tokens too small for them?)");
    }
  }

  for (size_t i = 0; i < reps.size(); ++i) {
    Replica& rep = reps[i];
    ReplicaReport& r = rep.report;
    const EngineStats& st = rep.engine->stats();
    const PrefixCacheStats& p = rep.engine->kv().prefix_stats();
    r.steps = st.steps;
    r.busy_s = rep.executor->busy_seconds();
    r.prefix_queried_blocks = p.queried_blocks;
    r.prefix_hit_blocks = p.hit_blocks;
    r.prefix_hit_tokens = p.hit_tokens;
    r.prompt_tokens_computed = st.prompt_tokens;
    r.generated_tokens = st.generated_tokens;
    r.preemptions = rep.engine->scheduler().n_preemptions();
    out.steps += r.steps;
    // Disaggregated: a decode replica's "hits" are the imported prompts, not cache reuse.
    if (r.role != "decode") {
      out.prefix_queried_blocks += r.prefix_queried_blocks;
      out.prefix_hit_blocks += r.prefix_hit_blocks;
      out.prefix_hit_tokens += r.prefix_hit_tokens;
    }
    out.replicas.push_back(r);
  }
  for (int64_t n : n_prompt) out.prompt_tokens += uint64_t(n);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return out;
}

}  // namespace sluice::sim
