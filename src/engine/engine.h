// The engine owns requests and runs the step loop: schedule -> build one ragged Batch ->
// execute -> sample -> append tokens, detokenize, check stops -> events. It is owned by one
// thread (the engine thread); front ends talk to it from that thread or through queues.
//
//   auto engine = Engine::create(tokenizer, executor, {});   // executor: any Executor
//   RequestId id = *engine->add_request(prompt_ids, params);
//   while (engine->has_work()) for (const EngineEvent& e : engine->step()) ...
//
// n samples of one prompt (add_request_group) compute the prompt once: the first request of
// the group prefills it, each sample draws its first token from that one logits row with its
// own sampler, and they share the prompt's KV blocks (copy-on-write of the partial last one).
//
// Speculative decoding's policy (drafts, their length, the cost gate) is the Speculator's
// (speculative/speculator.h); the engine calls its hooks around scheduling and verifies and
// emits the drafts it schedules.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "executor/batch.h"
#include "executor/executor.h"
#include "executor/step_roofline.h"
#include "kv/kv_cache_manager.h"
#include "sample/reasoning_budget.h"
#include "sample/sampler.h"
#include "sample/stop.h"
#include "sched/scheduler.h"
#include "speculative/speculator.h"
#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

// What a request asks for beyond its prompt.
struct GenerationParams {
  SamplingParams sampling;
  int32_t max_tokens = 256;  // new tokens at most; <= 0: until the context is full
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int32_t priority = 0;  // lower runs first when the scheduler uses priorities
  // Control tokens appear in the text as their own text ("[TOOL_CALLS]"): for tool-call parsing.
  // A grammar for such a request must be compiled against make_grammar_vocab(..., true).
  bool render_special = false;
  // Reasoning models: a budget on the thinking (reasoning_budget.h). Inactive by default.
  ReasoningBudgetParams reasoning;
};

enum class FinishReason {
  kNone,
  kStop,     // an end-of-generation token or a stop string
  kLength,   // max_tokens reached
  kContext,  // the context (or the whole KV cache) is full
  kAbort,
  kError,  // this request failed (EngineEvent::error says why); the others go on
};
const char* finish_reason_name(FinishReason r);  // "stop", "length", "context", "abort", "error"

// Per-request timestamps, seconds since the engine started (steady clock).
struct RequestTimes {
  double arrival = 0;
  double scheduled = -1;  // first step that computed any of its tokens
  double first_token = -1;
  double finished = -1;
  std::vector<double> tokens;  // when each generated token was sampled
};

// One request's progress in one step.
struct EngineEvent {
  RequestId id = 0;
  // Emitted this step: none (an abort, a failed request), one, or with speculative decoding up
  // to 1 + the draft's length (its accepted tokens, then the target's own).
  std::vector<int32_t> tokens;
  std::vector<SampleResult> samples;  // logprobs of those tokens (when requested)
  std::string text;                   // newly emitted text (complete UTF-8, stops removed)
  FinishReason finish = FinishReason::kNone;
  int32_t stop_index = -1;  // which stop string matched, if one did
  std::string error;        // FinishReason::kError: what went wrong
  bool finished() const { return finish != FinishReason::kNone; }
};

struct EngineConfig {
  SchedulerConfig scheduler;
  bool enable_prefix_cache = true;
  int32_t n_ctx = 0;  // longest sequence (prompt + generated); 0: the model's context
  // When set, each step's forward pass is timed against the roofline's prediction for that
  // batch (step_roofline.h); stats in Engine::roofline().
  std::optional<StepCostModel> cost_model;
  SpecConfig spec;
  // Recurrent models: a state checkpoint is kept at every this many tokens of a sequence
  // (rounded to blocks); the others roll (each request keeps its latest). docs/kv-cache.md.
  int32_t state_checkpoint_interval = 512;
  // Where the engine's time comes from (request timestamps, busy time, the roofline's measured
  // step times); null: the steady clock since create(). A simulation passes the VirtualClock
  // its executor advances. Not owned; outlives the engine.
  const Clock* clock = nullptr;
};

// Counters since start; the speculative decoding ones (spec_*) are SpecStats, which the
// Speculator counts.
struct EngineStats : SpecStats {
  uint64_t steps = 0;
  // Tokens computed for prompts (excludes prefix-cache hits; a group's shared prompt counts once).
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  double busy_seconds = 0;  // inside step()
  // Recurrent models: verifications that rejected part of a draft and copied the state after
  // the last accepted token back into the sequence's slot.
  uint64_t state_rewinds = 0;
};

// The vocabulary as grammars see it: each of the n_vocab output rows' bytes (a token's text
// as the detokenizer emits it mid-sequence; control tokens none, or their text when
// `render_special`, as GenerationParams::render_special emits them) and the end-of-generation
// tokens as stop tokens. About 50 ms at 128k tokens.
std::shared_ptr<const grammar::TokenVocab> make_grammar_vocab(const Tokenizer& tokenizer,
                                                              int32_t n_vocab,
                                                              bool render_special = false);

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const Tokenizer& tokenizer, Executor& executor,
                                                const EngineConfig& config);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates (prompt non-empty, ids in the vocabulary, fits the context, sampling params)
  // and queues the request.
  Result<RequestId> add_request(std::vector<int32_t> prompt, const GenerationParams& params);
  // Queues params.size() (>= 1) samples of one prompt, one per params (own seed, sampling,
  // stops, max_tokens), validated as add_request; all or none are queued. The prompt is
  // computed once and its KV blocks are shared (see the top of this file); afterwards every
  // sample is an independent request with its own id, events and abort. The group is
  // scheduled at params[0].priority.
  Result<std::vector<RequestId>> add_request_group(std::vector<int32_t> prompt,
                                                   const std::vector<GenerationParams>& params);
  // The prompt tokens a request of `prompt` would take from the prefix cache if it were
  // scheduled now (the scheduler's own lookup rule: KvCacheManager::n_hit_tokens), e.g. the
  // cached_tokens a front end reports before the request runs.
  int32_t expected_cached_tokens(std::span<const int32_t> prompt) const {
    return kv_.n_hit_tokens(prompt);
  }
  // Disaggregated serving: K/V computed elsewhere enters this engine's prefix cache, so a
  // request whose prompt starts with `tokens` computes only the rest. `blocks` holds every full
  // block of `tokens`, in order, as another executor exported them (same layout); the ones not
  // cached here are written into fresh blocks (KvCacheManager::import_prefix), then cached and
  // evictable like a finished request's. Returns the tokens of `tokens` now cached (fewer when
  // the pool is short). Fails, importing nothing, on a layout or count mismatch.
  // `first_block` > 0: `blocks` holds only the full blocks from that one on; the ones before
  // must be cached here already (the caller probed them with kv().n_cached_prefix_tokens and
  // fetched the rest); if one was evicted meanwhile, nothing after it is imported.
  Result<int32_t> import_prefix(std::span<const int32_t> tokens, const KvBlockData& blocks,
                                int32_t first_block = 0);
  // Recurrent models: a state computed elsewhere (another executor's export_states of the
  // checkpoint after the same tokens) becomes the checkpoint after `tokens` (a positive
  // multiple of the block size; their blocks must all be cached here, e.g. by import_prefix
  // just before), so a prefix hit resumes from it. Returns whether it was imported: false
  // when one is saved there already or no checkpoint is free of pins; fails on a layout or
  // size mismatch or uncached blocks, importing nothing.
  Result<bool> import_state(std::span<const int32_t> tokens, const KvBlockData& state);
  // The states of slots `slots` (pinned or newly saved checkpoints: see KvCacheManager).
  Result<KvBlockData> export_states(std::span<const int32_t> slots) const {
    return executor_.export_states(slots);
  }
  // Pins the deepest checkpoint in place whose blocks prefix `tokens`, at most `max_blocks`
  // deep (KvCacheManager::pin_checkpoint); unpin_checkpoint(slot) exactly once.
  KvCacheManager::CheckpointRef pin_checkpoint(std::span<const int32_t> tokens,
                                               int32_t max_blocks) {
    return kv_.pin_checkpoint(tokens, max_blocks);
  }
  void unpin_checkpoint(int32_t slot) { kv_.unpin_checkpoint(slot); }
  // Checkpoints newly in place while recording is on (KvCacheManager::take_newly_checkpointed).
  std::vector<KvCacheManager::SavedCheckpoint> take_newly_checkpointed() {
    return kv_.take_newly_checkpointed();
  }
  // The other side: the K/V of every full block of `tokens`, which must all be in this engine's
  // prefix cache (a request computed them), for import_prefix elsewhere.
  Result<KvBlockData> export_prefix(std::span<const int32_t> tokens) const;
  // The K/V of blocks `ids` (pinned or cached ones: their contents are final).
  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const {
    return executor_.export_blocks(ids);
  }
  // Executor::concurrent_export: export_blocks() of pinned blocks may then run on any thread,
  // while step() runs (it touches nothing but the executor's K/V memory of those blocks).
  bool concurrent_export() const { return executor_.concurrent_export(); }
  // Pins the cached full blocks that prefix `tokens` (KvCacheManager::pin_prefix): they stay
  // until unpin(), whatever else runs. Returns them in order.
  std::vector<BlockId> pin_prefix(std::span<const int32_t> tokens) {
    return kv_.pin_prefix(tokens);
  }
  void unpin(std::span<const BlockId> blocks) { kv_.unpin(blocks); }
  // Blocks that entered the prefix cache since the last call, while recording is on (a disk
  // tier writes them out; KvCacheManager::take_newly_cached). Take them between steps.
  void set_record_cached(bool on) { kv_.set_record_cached(on); }
  std::vector<KvCacheManager::CachedBlock> take_newly_cached() { return kv_.take_newly_cached(); }
  // Embedding models (ModelConfig::pooling not none): each input's pooled final hidden state
  // (or a reranker's scores), one row of the executor's pooled width per input, in order. The
  // inputs run as LogitsMode::kPooled sequences, each whole in one executor step, as many per
  // step as max_batch_tokens, max_seqs and the free KV blocks allow (one input always runs);
  // their blocks are taken for the step and freed after it (nothing enters the prefix cache).
  // Runs at once on the calling (engine) thread, between steps; a step never mixes embeddings
  // and generations. Fails, computing nothing, on an empty input, an id outside the
  // vocabulary, or an input longer than the context or the cache.
  Result<std::vector<std::vector<float>>> embed(std::span<const std::vector<int32_t>> inputs);
  // Scoring text (perplexity, KL divergence): the logits at every position of each input.
  // Each input runs whole as a fresh LogitsMode::kAll sequence (no prefix cache, nothing
  // generated), packed into steps as embed() packs them; with an executor of pipeline_depth() > 1
  // (pipeline stages) that many steps are in flight at once. `on_logits(i, rows)` sees input i's
  // rows ([inputs[i].size(), n_vocab]: row p holds the logits after tokens 0..p), once per input,
  // in input order, on the calling thread; an error it returns stops the run and is returned.
  // Fails, computing nothing, on the inputs embed() refuses.
  Status score(std::span<const std::vector<int32_t>> inputs,
               const std::function<Status(size_t, std::span<const float>)>& on_logits);
  // Ends a request at the next step boundary; its final event has FinishReason::kAbort.
  void abort(RequestId id);
  // Runs one step. Returns the events of every request that progressed or finished.
  Result<std::vector<EngineEvent>> step();

  bool has_work() const {
    return scheduler_.has_work() || !pending_events_.empty() || !in_flight_.empty();
  }
  // Steps the executor runs at once (Executor::pipeline_depth; 1 with speculative decoding,
  // whose drafts need every request's latest token).
  int32_t pipeline_depth() const { return depth_; }
  const RequestTimes* times(RequestId id) const;
  const EngineStats& stats() const { return stats_; }
  // Grammar (structured output) work of the sampling so far.
  const SampleWorkspace::GrammarStats& grammar_stats() const { return sample_ws_.grammar_stats(); }
  // The vocabulary as grammars see it ([n_vocab] output rows: each token's bytes; control
  // tokens none; end-of-generation tokens are the stop tokens). Immutable, built at create():
  // compile grammars for this engine's requests against it (SamplingParams::grammar).
  const std::shared_ptr<const grammar::TokenVocab>& grammar_vocab() const { return grammar_vocab_; }
  // Forward passes against the roofline (null without EngineConfig::cost_model).
  const StepRoofline* roofline() const { return roofline_ ? &*roofline_ : nullptr; }
  const KvCacheManager& kv() const { return kv_; }
  // K and V bytes of one block in the executor's memory (0: not known).
  size_t kv_bytes_per_block() const { return executor_.capacity().bytes_per_block; }
  // Bytes of one sequence's recurrent state in the executor (0: no recurrent layers).
  size_t state_bytes_per_slot() const { return executor_.capacity().state_bytes_per_slot; }
  const Scheduler& scheduler() const { return scheduler_; }
  int32_t n_ctx() const { return n_ctx_; }
  double now() const;  // seconds since the engine started (EngineConfig::clock when set)

 private:
  struct Request {
    GenerationParams params;
    Sampler sampler;
    StreamingDecoder decoder;
    StopMatcher stop;
    ReasoningBudget budget;
    int32_t n_prompt = 0;
    int32_t n_generated = 0;
    RequestTimes times;
  };
  // Tokens a row of logits yields for a scheduled sequence, before they are emitted.
  struct Verified {
    std::vector<SampleResult> samples;  // accepted drafts, then the target's own token
    int32_t n_accepted = 0;
    std::string error;  // the request's sampling failed (its grammar allowed nothing)
  };
  Engine(const Tokenizer& tokenizer, Executor& executor, const EngineConfig& config, int32_t n_ctx,
         KvCacheConfig kv_config, std::unique_ptr<Speculator> speculator);
  // The next token of `r` from `logits`: sampled, or forced by its reasoning budget.
  Result<SampleResult> sample_next(Request& r, std::span<const float> logits);
  // Samples request `id` from `logits`, appends the token and checks every stop condition.
  Status advance(RequestId id, Request& r, const float* logits, EngineEvent& ev);
  // Reports sampled token `s` of request `id` (appending it to the scheduler's tokens when
  // `append`) and checks every stop condition. Returns true when the request finished.
  bool emit(RequestId id, Request& r, const SampleResult& s, bool append, EngineEvent& ev);
  // Gives every decoding request a draft (before scheduling: Speculator::propose).
  Status propose_drafts();
  // Verifies seq's draft on its logits rows [row, row + 1 + n_draft).
  Status verify(const ScheduledSeq& s, Request& r, int32_t row, Verified& v);
  // The step's batch; each draft cut to at most `n_draft_max` tokens (what out itself says).
  void build_batch(const SchedulerOutput& out, Batch& batch,
                   int32_t n_draft_max = std::numeric_limits<int32_t>::max()) const;
  void finish(RequestId id, Request& r, FinishReason why, EngineEvent& ev);
  // Request times and prompt-token counts of a scheduled step (at time t).
  void note_scheduled(const SchedulerOutput& out, double t);
  // Nothing schedulable although work is left: see step().
  void end_unschedulable(std::vector<EngineEvent>& events);
  // A step's logits are in logits_: verify, advance the scheduler, sample, emit.
  Status process_step(const SchedulerOutput& out, std::vector<EngineEvent>& events);
  // The executor failed: the steps in flight are lost; their requests are schedulable again.
  void drop_in_flight();
  // embed() and score(): the checks on their inputs.
  Status check_whole_inputs(std::span<const std::vector<int32_t>> inputs) const;
  // Runs every input whole as a fresh `mode` sequence (see embed()), up to pipeline_depth()
  // steps in flight; on_step(first, logits) gets each step's rows, `first` being the index of
  // the step's first input (the rows' seq_index counts from it).
  Status run_whole(std::span<const std::vector<int32_t>> inputs, LogitsMode mode,
                   const std::function<Status(size_t, const Logits&)>& on_step);

  const Tokenizer& tokenizer_;
  Executor& executor_;
  EngineConfig config_;
  int32_t n_ctx_;
  KvCacheManager kv_;
  Scheduler scheduler_;
  std::unordered_map<RequestId, Request> requests_;
  std::unordered_map<RequestId, RequestTimes> finished_times_;  // kept for reporting
  std::vector<EngineEvent> pending_events_;                     // aborts, reported at the next step
  RequestId next_id_ = 1;
  Batch batch_;
  Batch batch_alt_;  // the same step with drafts cut (Speculator::gate's candidates)
  mutable std::vector<int32_t> seq_tokens_;  // build_batch: a drafted sequence's tokens
  Logits logits_;
  // Pipelined execution: the steps submitted and not collected, oldest first.
  struct InFlight {
    SchedulerOutput out;
    Batch batch;
    double t_submit = 0;
  };
  int32_t depth_ = 1;
  std::deque<InFlight> in_flight_;
  std::vector<InFlight> spare_in_flight_;  // collected, kept for their buffers
  std::vector<bool> forked_;  // process_step: per scheduled sequence, whether its samples forked
  std::unique_ptr<Speculator> speculator_;    // null without speculative decoding
  std::vector<DraftRequest> draft_requests_;  // propose_drafts(): the running requests
  std::vector<Verified> verified_;            // per scheduled sequence of the step
  std::vector<int32_t> n_accepted_;           // per scheduled sequence of the step
  // Speculation on recurrent models: the executor's draft state slots [draft_slot0_,
  // draft_slot0_ + n_draft_slots_) take a verification's per-token states; a sequence that
  // rejected part of its draft has its state copied back from one of them (`src` -> `slot`)
  // at the start of the next step, if it still holds `slot`.
  struct StateRewind {
    RequestId id;
    int32_t slot;
    int32_t src;
  };
  int32_t draft_slot0_ = 0;
  int32_t n_draft_slots_ = 0;
  std::vector<StateRewind> rewinds_;
  std::vector<int32_t> draft_slot_of_;  // per scheduled sequence of the step: its first draft slot
  std::vector<int32_t> draft_trim_;     // propose_drafts: a draft cut to the slots left
  std::shared_ptr<const grammar::TokenVocab> grammar_vocab_;
  SampleWorkspace sample_ws_;  // sampling scratch shared by all requests (engine thread only)
  EngineStats stats_;
  std::optional<StepRoofline> roofline_;
  std::chrono::steady_clock::time_point epoch_;
};

}  // namespace sluice
