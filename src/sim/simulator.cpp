#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
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

loadgen::RequestRecord record_of(const RequestTimes& t, const EngineEvent& ev, int64_t n_prompt) {
  loadgen::RequestRecord r;
  r.start_s = t.arrival;
  r.input_tokens = n_prompt;
  r.output_tokens = int64_t(t.tokens.size());
  r.usage_reported = true;
  r.e2el_s = t.finished - t.arrival;
  if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kAbort) {
    r.ok = false;
    r.error = ev.error.empty() ? finish_reason_name(ev.finish) : ev.error;
    return r;
  }
  r.ok = true;
  r.ttft_s = t.first_token >= 0 ? t.first_token - t.arrival : 0;
  r.itl_s.reserve(t.tokens.size());
  for (size_t i = 1; i < t.tokens.size(); ++i) r.itl_s.push_back(t.tokens[i] - t.tokens[i - 1]);
  return r;
}

}  // namespace

std::unique_ptr<RoutePicker> make_router_picker(const router::PolicyConfig& config, int replicas) {
  return std::make_unique<RouterPicker>(config, replicas);
}

Result<ServiceReport> simulate_service(const ServiceConfig& config, const Tokenizer& tokenizer,
                                       std::vector<WorkItem> work, RoutePicker& picker) {
  const auto wall0 = std::chrono::steady_clock::now();
  if (config.replicas < 1) return make_error("sim: replicas must be >= 1, got ", config.replicas);
  if (config.engine.spec.mode != SpecMode::kNone) {
    return make_error("sim: speculative decoding is not simulated");
  }
  std::vector<Replica> reps(size_t(config.replicas));
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
  ServiceReport out;
  out.records.resize(work.size());
  std::vector<int64_t> n_prompt(work.size(), 0);
  std::vector<int> replica_of(work.size(), -1);
  std::vector<ReplicaLoad> loads(reps.size());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  size_t next = 0;
  for (;;) {
    // The replica with work whose clock is earliest steps next, unless an arrival comes first.
    int rmin = -1;
    double tmin = kInf;
    for (size_t i = 0; i < reps.size(); ++i) {
      if (reps[i].engine->has_work() && reps[i].clock.now() < tmin) {
        tmin = reps[i].clock.now();
        rmin = int(i);
      }
    }
    const double a = next < order.size() ? work[order[next]].arrival_s : kInf;
    if (rmin < 0 && next == order.size()) break;
    if (a <= tmin) {
      const size_t w = order[next++];
      WorkItem& item = work[w];
      for (size_t i = 0; i < reps.size(); ++i) {
        const Engine& e = *reps[i].engine;
        loads[i] = {int64_t(e.scheduler().n_running()), int64_t(e.scheduler().n_waiting()),
                    int64_t(e.kv().n_used_blocks()), int64_t(e.kv().n_blocks())};
      }
      const int ri = picker.pick(item, loads);
      if (ri < 0 || ri >= int(reps.size())) {
        return make_error("sim: router '", picker.name(), "' picked replica ", ri, " of ",
                          reps.size());
      }
      Replica& rep = reps[size_t(ri)];
      // The request arrives at `a` even when the replica is mid-step (its clock ahead): it waits
      // for the step boundary, as in a real server.
      const double resume = std::max(rep.clock.now(), a);
      rep.clock.set(a);
      GenerationParams gp;
      gp.sampling.temperature = 0;
      gp.max_tokens = item.output_tokens;
      gp.ignore_eos = true;
      n_prompt[w] = int64_t(item.prompt.size());
      Result<RequestId> id = rep.engine->add_request(std::move(item.prompt), gp);
      rep.clock.set(resume);
      if (!id.ok()) {
        loadgen::RequestRecord& r = out.records[w];
        r.start_s = a;
        r.input_tokens = n_prompt[w];
        r.error = id.message();
        picker.finished(ri, item);
        continue;
      }
      item.prompt = {};
      rep.item_of.emplace(*id, w);
      replica_of[w] = ri;
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
      out.records[w] = record_of(*t, ev, n_prompt[w]);
      out.virtual_s = std::max(out.virtual_s, t->finished);
      picker.finished(rmin, work[w]);
    }
    if (events.empty() && rep.clock.now() == before) {
      // Nothing could run: the waiting requests never fit this replica's KV cache.
      if (a < kInf) {
        rep.clock.set(a);  // let the arrivals come; maybe nothing changes, checked again
        continue;
      }
      return make_error(
          "sim: replica ", rmin, " is stalled with ", rep.engine->scheduler().n_waiting(),
          " waiting requests that cannot be scheduled (KV cache of ", rep.engine->kv().n_blocks(),
          " blocks of ", config.executor.capacity.block_size, " tokens too small for them?)");
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
    out.prefix_queried_blocks += r.prefix_queried_blocks;
    out.prefix_hit_blocks += r.prefix_hit_blocks;
    out.prefix_hit_tokens += r.prefix_hit_tokens;
    out.replicas.push_back(r);
  }
  for (int64_t n : n_prompt) out.prompt_tokens += uint64_t(n);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return out;
}

}  // namespace sluice::sim
