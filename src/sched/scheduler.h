// The scheduler: pure bookkeeping, no kernels. Every request has num_tokens (prompt +
// generated) and num_computed (tokens whose K/V are cached); each step gives scheduled
// requests some new tokens to compute. A fresh prompt, a chunk of a long prompt, a
// prefix-cache hit (num_computed jumps ahead) and a decode (1 token) are the same operation.
//
// Per step (schedule()):
//   1. running requests in admission order get min(remaining, budget, prefill_chunk) tokens;
//      when the KV pool is short, the most recently admitted (or, with priorities, the least
//      important) running request is preempted: its blocks are freed and it returns to the
//      front of the waiting queue to be recomputed later — never dropped, never an error;
//   2. then, if nothing was preempted, waiting requests are admitted in order (FCFS, or by
//      priority then arrival) while the token budget, the sequence cap and the pool allow.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace sluice {

struct SchedulerConfig {
  int32_t max_batch_tokens = 2048;  // tokens computed per step, all requests together
  int32_t max_seqs = 64;            // requests running at once
  int32_t prefill_chunk = 512;      // most new tokens one request gets per step (0: no cap)
  bool use_priority = false;        // false: FCFS; true: lower `priority` value first
};

enum class RequestState { kWaiting, kRunning, kFinished };

// What the scheduler knows of a request.
struct SchedRequest {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t num_computed = 0;
  int32_t priority = 0;
  uint64_t arrival = 0;  // admission order key (monotonic)
  RequestState state = RequestState::kWaiting;
  int32_t n_preemptions = 0;
  int32_t num_tokens() const { return int32_t(tokens.size()); }
};

// One request's share of a step.
struct ScheduledSeq {
  RequestId id = 0;
  int32_t num_computed = 0;  // before this step: new tokens start at this position
  int32_t n_new = 0;         // tokens to compute now
  // True when this step computes the request's last known token: its logits yield a new token.
  bool samples = false;
};

// The result of one schedule() call: what the executor runs next.
struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;      // running order
  std::vector<RequestId> preempted;    // preempted during this call
  int32_t n_tokens = 0;                // sum of n_new
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (state kWaiting). `tokens` must be non-empty; ids must be unique.
  void add_request(RequestId id, std::vector<int32_t> prompt, int32_t priority = 0);
  // Removes a request wherever it is and frees its blocks. Unknown ids are ignored.
  void abort(RequestId id);
  // A request ends (stop condition met): same effect as abort, kept distinct for clarity.
  void finish(RequestId id) { abort(id); }

  SchedulerOutput schedule();
  // The executor computed `out`: advance num_computed and publish full blocks to the prefix cache.
  void on_step_done(const SchedulerOutput& out);
  // Appends a sampled token to a running request.
  void append_token(RequestId id, int32_t token);

  const SchedRequest* find(RequestId id) const;
  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  const std::deque<RequestId>& waiting() const { return waiting_; }
  const std::vector<RequestId>& running() const { return running_; }
  uint64_t n_preemptions() const { return n_preemptions_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  int32_t cap_new_tokens(const SchedRequest& r, int32_t budget) const;
  // Index into running_ of the request to preempt next.
  size_t pick_victim() const;
  void preempt(RequestId id);
  void insert_waiting(RequestId id, bool front);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::unordered_map<RequestId, SchedRequest> requests_;
  std::deque<RequestId> waiting_;
  std::vector<RequestId> running_;  // admission order
  uint64_t next_arrival_ = 0;
  uint64_t n_preemptions_ = 0;
};

}  // namespace sluice
