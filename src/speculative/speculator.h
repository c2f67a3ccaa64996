// Speculative decoding's policy in one place (docs/speculative.md): which requests draft and
// how long, the proposer that guesses, the grammar cut of its guesses, and the cost gate that
// cuts a step's drafts where they would cost more time than they save. The engine keeps what
// needs its requests: verification (Sampler::verify) and emission. It calls, per step:
//
//   propose(requests, scheduler)   before Scheduler::schedule: each decoding request's draft,
//                                  handed to the scheduler (Scheduler::set_draft)
//   gate(out, roofline, build)     after it: the step's drafts cut to the best length
//   on_verified(id, ...)           after verifying one sequence's draft: its acceptance
//   on_step_done(out, n, seconds)  after the step ran: what it cost (the measured gate)
//   finish(id, tokens)             when a request ends: its state is dropped
//
// Everything runs on the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/request_id.h"
#include "base/status.h"
#include "executor/batch.h"
#include "executor/executor.h"
#include "executor/step_roofline.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"
#include "speculative/ngram.h"
#include "speculative/proposer.h"
#include "speculative/step_cost.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

// Speculative decoding (docs/speculative.md): each decoding request carries up to n_draft_max
// guessed tokens that one forward pass verifies exactly (Sampler::verify); accepted ones cost a
// fraction of a step each, rejected ones are rolled back by n_computed alone.
enum class SpecMode : uint8_t { kNone, kNgram, kDraft };
Result<SpecMode> parse_spec_mode(std::string_view name);  // "none" | "ngram" | "draft"
const char* spec_mode_name(SpecMode m);

// How a step's drafts are priced before it runs (Speculator::gate), which cuts them where
// they would cost more time than they save:
//   kMeasured  by what this run's steps have cost (MeasuredStepCost), roofline or not
//              (sluice run|serve|bench);
//   kRoofline  by the roofline alone, no gate without one; what is drafted does not depend on
//              the host's timing (the engine's default, and the tests');
//   kOff       every draft verified.
enum class SpecGate : uint8_t { kOff, kRoofline, kMeasured };
Result<SpecGate> parse_spec_gate(std::string_view name);  // "off" | "roofline" | "measured"

struct SpecConfig {
  SpecMode mode = SpecMode::kNone;
  // Longest draft per request and step (--spec-k; llama.cpp's --draft-max defaults to 16 too).
  int32_t n_draft_max = 16;
  NgramConfig ngram;
  // kDraft: the draft model's executor (same vocabulary and block size as the target's; its KV
  // cache is the draft proposer's alone). Not owned.
  Executor* draft = nullptr;
  // The draft model's tokenizer, checked token by token against the target's (recommended;
  // without it only the vocabulary sizes are compared).
  const Tokenizer* draft_tokenizer = nullptr;
  // Per request, draft i is proposed while the estimated chance that it is accepted,
  // acceptance^i, stays >= min_gain (acceptance: the request's recent per-token rate).
  double min_gain = 0.1;
  SpecGate gate = SpecGate::kRoofline;
};

// Counters since start (the engine's EngineStats carries them; /metrics sluice_spec_*).
struct SpecStats {
  uint64_t spec_verify_seqs = 0;   // sequence-steps that verified a draft
  uint64_t spec_draft_tokens = 0;  // draft tokens verified
  uint64_t spec_accepted_tokens = 0;
  uint64_t spec_emitted_tokens = 0;  // tokens those sequence-steps produced (accepted + 1 each)
  uint64_t spec_skipped_steps = 0;   // steps whose drafts the cost model dropped (compute-bound)
  uint64_t spec_cut_steps = 0;       // steps whose drafts the cost model shortened
  double spec_propose_seconds = 0;   // inside the proposer (a draft model's forward passes)
  uint64_t spec_grammar_cut_tokens = 0;  // draft tokens dropped because the grammar refused them
  // Mean tokens per verifying sequence-step (accepted + the target's own token).
  double spec_mean_accepted_length() const {
    return spec_verify_seqs ? double(spec_emitted_tokens) / double(spec_verify_seqs) : 0.0;
  }
  double spec_acceptance_rate() const {
    return spec_draft_tokens ? double(spec_accepted_tokens) / double(spec_draft_tokens) : 0.0;
  }
};

// A running request as the engine sees it, for propose(): what the scheduler does not know.
struct DraftRequest {
  RequestId id = 0;
  const SamplingParams* params = nullptr;  // a draft model samples like the request
  Sampler* sampler = nullptr;              // its grammar cuts the draft (grammar_allowed_prefix)
  // Tokens it may still emit (max_tokens less those generated; no limit: the largest int32).
  int32_t n_emit_max = std::numeric_limits<int32_t>::max();
};

class Speculator {
 public:
  // The step's batch with every draft cut to at most `n_draft_max` tokens (gate() prices it).
  // The reference must stay valid until the next call.
  using BatchBuilder = std::function<const Batch&(int32_t n_draft_max)>;

  // Checks `config` against the target (its tokenizer and executor capacity: a draft model
  // must have the same vocabulary and KV block size) and makes its proposer. Null when
  // config.mode is kNone. `clock` (the engine's; null: the steady clock) times the proposer.
  static Result<std::unique_ptr<Speculator>> create(const SpecConfig& config,
                                                    const Tokenizer& tokenizer,
                                                    const ExecutorCapacity& target, int32_t n_ctx,
                                                    const Clock* clock);
  Speculator(const Speculator&) = delete;
  Speculator& operator=(const Speculator&) = delete;

  // Before scheduling: a draft for each of `requests` (the running ones, in order) whose
  // every token but the last is computed, cut where its grammar refuses it, set on the
  // scheduler (an empty one for the others).
  Status propose(std::span<const DraftRequest> requests, Scheduler& scheduler, SpecStats& stats);
  // After scheduling: cuts the drafts of `out` to the length whose price yields the most
  // expected tokens per second (0: they would cost more time than they save). The price:
  // SpecConfig::gate, by `roofline` (null: none) over the batches `build` makes, or by
  // measured step times. Returns whether it cut any (out changed: rebuild the step's batch).
  bool gate(SchedulerOutput& out, StepRoofline* roofline, const BatchBuilder& build,
            SpecStats& stats);
  // q of request `id`'s draft as proposed ([n_draft, n_vocab] rows; empty: one-hot drafts).
  std::span<const float> draft_q(RequestId id) const;
  // Request `id` verified `n_draft` draft tokens, accepted `n_accepted` of them and emitted
  // `n_emitted` tokens (the accepted ones and the target's own, fewer when it failed).
  void on_verified(RequestId id, int32_t n_draft, int32_t n_accepted, int32_t n_emitted,
                   SpecStats& stats);
  // The step `out` (n_tokens new tokens) took `seconds`, drafting, scheduling and sampling
  // included: the measured gate's prices.
  void on_step_done(const SchedulerOutput& out, int32_t n_tokens, double seconds);
  // Request `id` ended with `tokens` (null: the scheduler no longer has them); its state is
  // dropped and the proposer learns its sequence (the n-gram suffix cache).
  void finish(RequestId id, const std::vector<int32_t>* tokens);

  const SpecConfig& config() const { return config_; }

 private:
  struct State {
    // Decayed counts of accepted and rejected draft tokens (on_verified).
    double accepts = 0;
    double rejects = 0;
    std::vector<int32_t> draft;  // this step's proposal
    std::vector<float> q;        // its q rows ([draft.size(), n_vocab]; empty: one-hot)
  };
  Speculator(const SpecConfig& config, std::unique_ptr<Proposer> proposer, int32_t n_vocab,
             int32_t n_ctx, const Clock* clock);
  double now() const;
  // The request's per-token acceptance estimate, from its decayed counts (on_verified) with
  // one accepted draft token as the prior and none rejected:
  //
  //   acceptance = (accepts + 1) / (accepts + rejects + 1)
  //
  // Both the draft length and the gate use it. Optimistic on purpose: acceptance is learnt
  // only from drafts that are verified, and these two decide what is verified. An estimate
  // that starts low is never corrected where a step's price needs more (the gate cuts the very
  // drafts that would show it wrong); one that starts at 1 is corrected by the first
  // rejection (nothing accepted, one rejection: 1/2).
  static double acceptance(const State& st);
  // The longest draft request `r` (its scheduler state `sr`) proposes now: draft token i is
  // worth proposing while acceptance^i >= SpecConfig::min_gain, within SpecConfig::n_draft_max,
  // max_tokens and the context.
  int32_t n_draft_max(const State& st, const DraftRequest& r, const SchedRequest& sr) const;
  // gate(): the seconds the step `out` is expected to take with every draft cut to at most
  // `n_draft_max` tokens (nullopt: no price yet).
  std::optional<double> step_price(const SchedulerOutput& out, int32_t n_draft_max,
                                   StepRoofline* roofline, const BatchBuilder& build) const;

  SpecConfig config_;
  std::unique_ptr<Proposer> proposer_;
  int32_t n_vocab_;
  int32_t n_ctx_;
  const Clock* clock_;
  std::unordered_map<RequestId, State> states_;
  std::vector<DraftSlot> slots_;  // propose(): this step's
  std::vector<double> alpha_;     // gate(): acceptance estimate per scheduled sequence
  MeasuredStepCost measured_;     // what steps have cost, by size
  static constexpr int32_t kGateProbeEvery = 32;  // steps skipped by the measured gate per probe
  int32_t skips_since_probe_ = 0;
};

}  // namespace sluice
