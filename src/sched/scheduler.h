// The scheduler: pure bookkeeping, no kernels. Every request has n_tokens (prompt +
// generated) and n_computed (tokens whose K/V are cached); each step gives scheduled
// requests some new tokens to compute. A fresh prompt, a chunk of a long prompt, a
// prefix-cache hit (n_computed jumps ahead) and a decode (1 token) are the same operation.
//
// Per step (schedule()):
//   1. running requests in admission order get min(remaining, budget, prefill_chunk) tokens;
//      when the KV pool is short, the most recently admitted (or, with priorities, the least
//      important) running request is preempted: its blocks are freed and it returns to the
//      front of the waiting queue to be recomputed later — never dropped, never an error;
//   2. then, if nothing was preempted, waiting requests are admitted in order (FCFS, or by
//      priority then arrival) while the token budget, the sequence cap and the pool allow.
//
// Groups (n samples of one prompt, add_group): only the first sample, the group's leader, is
// queued; the others await the fork. The leader is admitted with seats for the whole group
// (max_seqs counts them). When a step computes the prompt's last token, its ScheduledSeq lists
// the awaiting samples in `forks`; on_step_done() forks them: each takes the leader's block
// table (shared blocks, see KvCacheManager::fork) and n_computed, and runs right after the
// leader; the engine samples all of them from the leader's logits row. From then on they are
// independent requests (preempted, aborted, finished alone). Aborting a leader before that
// hands its place, progress and blocks to the next sample of its group.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
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

enum class RequestState {
  kWaiting,
  kRunning,
  kAwaitingFork,  // a sample of a group, not the leader: forks the leader when its prompt is done
  kFinished,
};

// What the scheduler knows of a request.
struct SchedRequest {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t n_computed = 0;
  int32_t priority = 0;
  uint64_t arrival = 0;  // admission order key (monotonic)
  RequestState state = RequestState::kWaiting;
  int32_t n_preemptions = 0;
  // A leader whose prompt is not computed yet: the other samples of its group, in order.
  std::vector<RequestId> awaiting_fork;
  RequestId leader = 0;  // kAwaitingFork: the request whose prompt it waits for
  // Speculative tokens guessed to follow `tokens` (set_draft), verified by the next step that
  // schedules the request; never part of `tokens` unless accepted.
  std::vector<int32_t> draft;
  // Scheduled by a step whose results are not in yet (on_step_done / on_step_failed): not
  // scheduled again, nor preempted, until they are.
  bool in_flight = false;
  int32_t n_tokens() const { return int32_t(tokens.size()); }
};

// One request's share of a step.
struct ScheduledSeq {
  RequestId id = 0;
  int32_t n_computed = 0;    // before this step: new tokens start at this position
  int32_t n_new_tokens = 0;  // tokens to compute now
  // Of n_new_tokens, the draft tokens after the last known token (a speculative verification: the
  // request's last token, then n_draft guesses, logits at every one of them).
  int32_t n_draft = 0;
  // True when this step computes the request's last known token: its logits yield a new token.
  bool samples = false;
  // Samples of its group that fork it after this step and sample from its logits row too
  // (only on the step that completes a leader's prompt).
  std::vector<RequestId> forks;
};

// The result of one schedule() call: what the executor runs next.
struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;       // running order
  std::vector<RequestId> preempted;     // preempted during this call
  std::vector<BlockCopy> copies;        // copy-on-write: apply in order before the forward pass
  std::vector<BlockCopy> state_copies;  // recurrent state slots of forked samples (src -> dst)
  int32_t n_tokens = 0;                 // sum of n_new_tokens
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (state kWaiting). `tokens` must be non-empty; ids must be unique.
  void add_request(RequestId id, std::vector<int32_t> prompt, int32_t priority = 0);
  // Queues `ids.size()` (>= 1) samples of one prompt: ids[0] leads and computes the prompt,
  // the others await the fork (see the top of this file). All run at `priority`.
  void add_group(std::span<const RequestId> ids, std::vector<int32_t> prompt, int32_t priority = 0);
  // Removes a request wherever it is and frees its blocks. Unknown ids are ignored. A leader
  // that still has samples awaiting the fork hands its place and blocks to the first of them.
  void abort(RequestId id);
  // A request ends (stop condition met): same effect as abort, kept distinct for clarity.
  void finish(RequestId id) { abort(id); }

  // Speculative decoding: `draft` guesses the tokens after running request `id`'s last
  // token. The next schedule() verifies as much of it as the token budget and the free KV
  // blocks allow (a draft never preempts anything; without room it is dropped), only while the
  // request has every token but the last computed (and is not a group's leader whose samples
  // fork at this step). Replaces any earlier draft.
  void set_draft(RequestId id, std::span<const int32_t> draft);

  // The next step: at most `max_step_seqs` sequences (running ones first, then admitted ones),
  // none of them in flight. Pipelined execution (Executor::pipeline_depth) schedules a step
  // while earlier ones run; a cap of 1/depth of the work each makes the steps take turns over
  // two (or more) groups of requests.
  SchedulerOutput schedule(int32_t max_step_seqs = std::numeric_limits<int32_t>::max());
  // The executor computed `out`: advance n_computed, publish full blocks to the prefix cache
  // and fork the samples listed in ScheduledSeq::forks (each then runs, or, past max_seqs,
  // waits at the front of the queue to recompute its prompt). `n_accepted[i]` (when given) is
  // how many of out.seqs[i]'s draft tokens the verification accepted: they are appended to its
  // tokens, n_computed counts the last known token and them (rejected tokens are rolled back
  // by the counter alone) and blocks that only rejected tokens wrote are freed.
  void on_step_done(const SchedulerOutput& out, std::span<const int32_t> n_accepted = {});
  // The step `out` failed: its requests are schedulable again, with what they had computed
  // before it (their blocks stay allocated).
  void on_step_failed(const SchedulerOutput& out);
  // Appends a sampled token to a running request.
  void append_token(RequestId id, int32_t token);

  const SchedRequest* find(RequestId id) const;
  // Requests not running: queued, plus samples awaiting their leader's fork.
  size_t n_waiting() const { return waiting_.size() + n_awaiting_fork_; }
  size_t n_running() const { return running_.size(); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  const std::deque<RequestId>& waiting() const { return waiting_; }
  const std::vector<RequestId>& running() const { return running_; }
  uint64_t n_preemptions() const { return n_preemptions_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  int32_t cap_new_tokens(const SchedRequest& r, int32_t budget) const;
  // Index into running_ of the request to preempt next (never one in flight).
  size_t pick_victim() const;
  void preempt(RequestId id);
  void insert_waiting(RequestId id, bool front);
  // Seats (of max_seqs) a running request holds or a waiting one needs: itself plus the
  // samples awaiting its fork (a group larger than max_seqs needs all of them).
  int32_t seats(const SchedRequest& r) const;
  ScheduledSeq make_seq(const SchedRequest& r, int32_t n_new_tokens, int32_t n_draft = 0) const;
  void fork_group(SchedRequest& leader, const std::vector<RequestId>& forks);
  // Aborting leader `r`: the first awaiting sample takes over its place, progress and blocks.
  void promote_heir(SchedRequest& r);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::unordered_map<RequestId, SchedRequest> requests_;
  std::deque<RequestId> waiting_;
  std::vector<RequestId> running_;  // admission order
  uint64_t next_arrival_ = 0;
  uint64_t n_preemptions_ = 0;
  size_t n_awaiting_fork_ = 0;
};

}  // namespace sluice
