// `sluice sim`: a serving deployment simulated on virtual hardware. Every replica is the
// production Engine (scheduler, KV manager, prefix cache, sampler) over a SimulatedExecutor
// whose VirtualClock the steps advance; a discrete-event loop delivers the workload's arrivals
// at their times, routes each to a replica (the router's policies) and always steps the
// replica whose clock is earliest, so replicas run concurrently in virtual time.
//
// What is modelled and what is not (docs/sim.md): compute, memory traffic, communication and a
// calibrated per-step overhead; queues, batching, chunked prefill, preemption and prefix hits
// exactly as the engine does them. Not modelled: HTTP and tokenization time outside the engine
// step, speculative decoding, network between router and replicas.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "executor/sim_executor.h"
#include "loadgen/metrics.h"
#include "router/policy.h"

namespace sluice::sim {

// One request of the workload: when it arrives, its prompt (token ids of the simulated
// vocabulary) and how many tokens it generates.
struct WorkItem {
  double arrival_s = 0;
  std::vector<int32_t> prompt;
  int32_t output_tokens = 1;
};

// What a routing policy sees of one replica when a request arrives.
struct ReplicaLoad {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
};

// Chooses a replica for each arrival (router/ policies behind an adapter; tests use their own).
class RoutePicker {
 public:
  virtual ~RoutePicker() = default;
  // The replica (index into loads) for `item`.
  virtual int pick(const WorkItem& item, const std::vector<ReplicaLoad>& loads) = 0;
  // A request of replica `replica` finished (for policies that count their own in-flight load).
  virtual void finished(int /*replica*/, const WorkItem& /*item*/) {}
  virtual std::string name() const = 0;
};
// The policies of `sluice router` (router/policy.h: cache_aware, least_load, round_robin), the
// same code deciding on virtual replicas. The routing key is the prompt's token ids as bytes;
// the load of a replica is max(requests routed there and not finished, its running + waiting).
std::unique_ptr<RoutePicker> make_router_picker(const router::PolicyConfig& config, int replicas);

struct ServiceConfig {
  int replicas = 1;
  // Disaggregated prefill/decode (both > 0; `replicas` is then ignored): a request goes to a
  // prefill replica for its prompt and first token; its prompt's K/V (kv_bytes_per_token each)
  // then crosses the link (latency + bytes / bandwidth) to a decode replica, which imports it
  // into its prefix cache (Engine::import_prefix), computes the partial last block and the first
  // token's K/V, and generates the rest.
  int prefill_replicas = 0;
  int decode_replicas = 0;
  double kv_link_bytes_per_s = 0;
  double kv_link_latency_s = 0;
  double kv_bytes_per_token = 0;
  SimExecutorConfig executor;  // every replica's (its capacity sizes the KV cache)
  // The engine of each replica; its clock is set by the simulator. Speculative decoding is not
  // simulated (refused).
  EngineConfig engine;
  // Requests whose arrival times are equal reach a replica this far apart, in order: a front end
  // receives them one by one (bench serve's dispatcher sends tied requests ~0.1 ms apart, and a
  // trace's millisecond timestamps tie often), so an idle engine starts a step on the first
  // before the rest arrive. 0: all at once.
  double tie_gap_s = 0;
  // Observes every step: (replica, its batch, the virtual time the step starts).
  std::function<void(int, const Batch&, double)> on_step;
};

struct ReplicaReport {
  std::string role = "both";  // "prefill" | "decode" when disaggregated
  int64_t requests = 0;
  uint64_t steps = 0;
  double busy_s = 0;        // virtual seconds inside steps
  PrefixCacheStats prefix;  // its engine's (KvCacheManager::prefix_stats)
  uint64_t prompt_tokens_computed = 0;
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;
  int64_t kv_blocks_total = 0;
  int64_t peak_running = 0;
};

struct ServiceReport {
  // One per work item, in the order given (start_s = arrival; times in virtual seconds).
  std::vector<loadgen::RequestRecord> records;
  std::vector<ReplicaReport> replicas;
  double virtual_s = 0;  // last finish
  double wall_s = 0;     // the simulation's own run time
  uint64_t steps = 0;
  // Summed over replicas.
  PrefixCacheStats prefix;
  uint64_t prompt_tokens = 0;  // of all requests
  // Disaggregated: prompts whose K/V crossed the link, and its bytes.
  uint64_t kv_transfers = 0;
  double kv_transfer_bytes = 0;
};

// Runs `work` (any order; arrivals are sorted) to completion. Deterministic: the same inputs give
// the same report (wall_s aside). `tokenizer` is the simulated vocabulary
// (make_synthetic_tokenizer(executor.capacity.n_vocab)). `picker` routes arrivals (to the
// prefill replicas when disaggregated); `decode_picker` the prefilled requests to the decode
// replicas (required then). Pickers see loads and return indices within their own pool.
Result<ServiceReport> simulate_service(const ServiceConfig& config, const Tokenizer& tokenizer,
                                       std::vector<WorkItem> work, RoutePicker& picker,
                                       RoutePicker* decode_picker = nullptr);

}  // namespace sluice::sim
