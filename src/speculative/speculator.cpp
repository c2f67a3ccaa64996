#include "speculative/speculator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "speculative/draft_model.h"

namespace sluice {

Result<SpecMode> parse_spec_mode(std::string_view name) {
  if (name == "none" || name.empty()) return SpecMode::kNone;
  if (name == "ngram") return SpecMode::kNgram;
  if (name == "draft") return SpecMode::kDraft;
  return make_error("unknown speculative decoding mode '", std::string(name),
                    "' (expected none, ngram or draft)");
}

Result<SpecGate> parse_spec_gate(std::string_view name) {
  if (name == "off") return SpecGate::kOff;
  if (name == "roofline") return SpecGate::kRoofline;
  if (name == "measured") return SpecGate::kMeasured;
  return make_error("unknown speculation gate '", std::string(name),
                    "' (expected measured, roofline or off)");
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::kNone:
      return "none";
    case SpecMode::kNgram:
      return "ngram";
    case SpecMode::kDraft:
      return "draft";
  }
  return "none";
}

Result<std::unique_ptr<Speculator>> Speculator::create(const SpecConfig& config,
                                                       const Tokenizer& tokenizer,
                                                       const ExecutorCapacity& target,
                                                       int32_t n_ctx, const Clock* clock) {
  if (config.mode == SpecMode::kNone) return std::unique_ptr<Speculator>();
  if (config.n_draft_max < 1 || config.n_draft_max > 64) {
    return make_error("speculative draft length must be in [1, 64] (got ", config.n_draft_max, ")");
  }
  if (config.mode == SpecMode::kDraft) {
    if (!config.draft) return make_error("--spec draft needs a draft model (--model-draft)");
    const ExecutorCapacity dc = config.draft->capacity();
    if (dc.n_vocab != target.n_vocab) {
      return make_error("the draft model's vocabulary has ", dc.n_vocab, " tokens, the target's ",
                        target.n_vocab, ": they must be identical");
    }
    if (const Tokenizer* dt = config.draft_tokenizer) {
      const Vocab& a = tokenizer.vocab();
      const Vocab& b = dt->vocab();
      if (a.n_tokens() != b.n_tokens()) {
        return make_error("the draft model's vocabulary has ", b.n_tokens(),
                          " tokens, the target's ", a.n_tokens(), ": they must be identical");
      }
      for (int32_t t = 0; t < a.n_tokens(); ++t) {
        if (a.text(t) != b.text(t)) {
          return make_error("the draft model's vocabulary differs from the target's at token ", t,
                            " ('", b.text(t), "' vs '", a.text(t), "')");
        }
      }
    }
    if (dc.block_size != target.block_size) {
      return make_error("the draft executor's KV block size differs from the target's");
    }
  }
  const NgramConfig& g = config.ngram;
  if (g.n_min < 1 || g.n_max < g.n_min || g.n_max > 64) {
    return make_error("n-gram sizes must satisfy 1 <= min <= max <= 64 (got ", g.n_min, ", ",
                      g.n_max, ")");
  }
  std::unique_ptr<Proposer> proposer;
  if (config.mode == SpecMode::kNgram) {
    proposer = std::make_unique<NgramProposer>(config.ngram);
  } else {
    proposer = std::make_unique<DraftModelProposer>(*config.draft);
  }
  return std::unique_ptr<Speculator>(
      new Speculator(config, std::move(proposer), target.n_vocab, n_ctx, clock));
}

Speculator::Speculator(const SpecConfig& config, std::unique_ptr<Proposer> proposer,
                       int32_t n_vocab, int32_t n_ctx, const Clock* clock)
    : config_(config),
      proposer_(std::move(proposer)),
      n_vocab_(n_vocab),
      n_ctx_(n_ctx),
      clock_(clock) {}

double Speculator::now() const {
  if (clock_) return clock_->now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Speculator::acceptance(const State& st) {
  return (st.accepts + 1.0) / (st.accepts + st.rejects + 1.0);
}

int32_t Speculator::n_draft_max(const State& st, const DraftRequest& r,
                                const SchedRequest& sr) const {
  int32_t n = config_.n_draft_max;
  const double alpha = acceptance(st);
  if (alpha < 1.0) {
    // alpha^i >= min_gain for i <= log(min_gain) / log(alpha); compared as a double: alpha
    // can be as close to 1 as the decayed rejections are small.
    const double worth = std::floor(std::log(config_.min_gain) / std::log(alpha));
    if (worth < double(n)) n = int32_t(worth);
  }
  n = std::max(n, 1);
  // Every token emitted must fit max_tokens (the last emitted one is the target's own) and
  // every computed position the context.
  n = std::min(n, r.n_emit_max - 1);
  n = std::min(n, n_ctx_ - sr.n_tokens());
  return n;
}

Status Speculator::propose(std::span<const DraftRequest> requests, Scheduler& scheduler,
                           SpecStats& stats) {
  slots_.clear();
  for (const DraftRequest& r : requests) {
    const SchedRequest* sr = scheduler.find(r.id);
    if (!sr) continue;
    State& st = states_[r.id];
    st.draft.clear();
    st.q.clear();
    // Every token but the last computed, and not a group's leader about to fork.
    if (sr->n_computed + 1 != sr->n_tokens() || !sr->awaiting_fork.empty()) {
      scheduler.set_draft(r.id, {});
      continue;
    }
    const int32_t n = n_draft_max(st, r, *sr);
    if (n <= 0) {
      scheduler.set_draft(r.id, {});
      continue;
    }
    DraftSlot slot;
    slot.id = r.id;
    slot.tokens = sr->tokens;
    slot.n_draft_max = n;
    slot.params = r.params;
    slot.draft = &st.draft;
    slot.q = &st.q;
    slots_.push_back(slot);
  }
  if (!slots_.empty()) {
    const double t0 = now();
    SLUICE_RETURN_IF_ERROR(proposer_->propose(slots_));
    stats.spec_propose_seconds += now() - t0;
  }
  size_t next = 0;  // slots_ are in the order of `requests`
  for (const DraftSlot& slot : slots_) {
    while (requests[next].id != slot.id) ++next;
    // A draft token the grammar refuses would be rejected: cut the draft there.
    Sampler& sampler = *requests[next].sampler;
    if (sampler.has_grammar() && !slot.draft->empty()) {
      const size_t keep = size_t(sampler.grammar_allowed_prefix(*slot.draft));
      if (keep < slot.draft->size()) {
        stats.spec_grammar_cut_tokens += uint64_t(slot.draft->size() - keep);
        slot.draft->resize(keep);
        if (!slot.q->empty()) slot.q->resize(keep * size_t(n_vocab_));
      }
    }
    scheduler.set_draft(slot.id, *slot.draft);
  }
  return {};
}

std::span<const float> Speculator::draft_q(RequestId id) const {
  auto it = states_.find(id);
  if (it == states_.end()) return {};
  return it->second.q;
}

bool Speculator::gate(SchedulerOutput& out, StepRoofline* roofline, const BatchBuilder& build,
                      SpecStats& stats) {
  int32_t longest = 0;
  for (const ScheduledSeq& s : out.seqs) longest = std::max(longest, s.n_draft);
  const bool measured = config_.gate == SpecGate::kMeasured;
  if (longest == 0 || config_.gate == SpecGate::kOff || (!roofline && !measured)) return false;
  // The step is priced with every draft cut to at most L (n_draft_max) tokens, for L = 0 and
  // powers of two up to the longest draft; the L with the most expected tokens per second
  // wins. Draft token i of a request adds acceptance^i expected tokens. Memory-bound steps keep
  // long drafts (extra tokens are nearly free); compute-bound ones (large batches, tiny models) cut
  // them, to 0 when they would cost more time than they save. The price (step_price): what steps of
  // that size have cost on this run (MeasuredStepCost), or the roofline's. Sizes with no
  // measured price yet are explored one at a time.
  int32_t n_sampling = 0;
  alpha_.clear();
  for (const ScheduledSeq& s : out.seqs) {
    n_sampling += s.samples ? 1 : 0;
    // (A sequence without state has no draft: its estimate is not used.)
    auto it = states_.find(s.id);
    alpha_.push_back(it == states_.end() ? 1.0 : acceptance(it->second));
  }
  double best_rate = -1;
  int32_t best = longest, last_priced = -1;  // n_draft_max: the best so far, the last priced
  for (int32_t n_draft_max = 0;;
       n_draft_max = n_draft_max == 0 ? 1 : std::min(2 * n_draft_max, longest)) {
    double expected = n_sampling;
    for (size_t i = 0; i < out.seqs.size(); ++i) {
      double p = 1.0;
      const int32_t n_draft = std::min(out.seqs[i].n_draft, n_draft_max);
      for (int32_t j = 0; j < n_draft; ++j) expected += (p *= alpha_[i]);
    }
    const std::optional<double> seconds = step_price(out, n_draft_max, roofline, build);
    if (!seconds) {
      // No price for this size yet: run it (and so measure it) when the sizes priced so far
      // gained with size, or none is priced; else the best priced one.
      if (last_priced < 0 || best == last_priced) best = n_draft_max;
      break;
    }
    last_priced = n_draft_max;
    const double rate = expected / *seconds;
    if (rate > best_rate * (1 + 1e-9)) {
      best_rate = rate;
      best = n_draft_max;
    }
    if (n_draft_max >= longest) break;
  }
  // Now and then a step the gate would run without drafts verifies one draft token per
  // request anyway, so the prices of the sizes it skips and the requests' acceptance stay
  // current: a slow measurement (a busy moment) would otherwise keep drafts off for good.
  if (best == 0 && measured && ++skips_since_probe_ >= kGateProbeEvery) {
    best = 1;
    skips_since_probe_ = 0;
  }
  if (best >= longest) return false;
  ++(best == 0 ? stats.spec_skipped_steps : stats.spec_cut_steps);
  for (ScheduledSeq& s : out.seqs) {
    const int32_t cut = std::max(0, s.n_draft - best);
    s.n_new_tokens -= cut;
    s.n_draft -= cut;
    out.n_tokens -= cut;
  }
  return true;
}

std::optional<double> Speculator::step_price(const SchedulerOutput& out, int32_t n_draft_max,
                                             StepRoofline* roofline,
                                             const BatchBuilder& build) const {
  if (config_.gate == SpecGate::kMeasured) {
    // The batch's tokens: every sequence's known ones and its draft cut to n_draft_max.
    int64_t n_tokens = 0;
    for (const ScheduledSeq& s : out.seqs) {
      n_tokens += s.n_new_tokens - s.n_draft + std::min(s.n_draft, n_draft_max);
    }
    return measured_.seconds(n_tokens);
  }
  if (roofline) return roofline->predict(build(n_draft_max));
  return std::nullopt;
}

void Speculator::on_verified(RequestId id, int32_t n_draft, int32_t n_accepted, int32_t n_emitted,
                             SpecStats& stats) {
  State& st = states_[id];
  // The counts decay per draft token verified (0.97: about the last 30 tokens), not per
  // verification, so that a run of short drafts, each accepted whole, is as much evidence as
  // one long one: decayed per verification, the counts of a request whose drafts the gate
  // cuts to one token would stay small, its estimate low, and the gate would keep cutting.
  constexpr double kDecayPerToken = 0.97;
  const double decay = std::pow(kDecayPerToken, double(n_draft));
  st.accepts = st.accepts * decay + n_accepted;
  st.rejects = st.rejects * decay + (n_accepted < n_draft ? 1.0 : 0.0);
  ++stats.spec_verify_seqs;
  stats.spec_draft_tokens += uint64_t(n_draft);
  stats.spec_accepted_tokens += uint64_t(n_accepted);
  stats.spec_emitted_tokens += uint64_t(n_emitted);
}

namespace {
// Whether a step computes more than each sequence's last known token (and its drafts): a
// prompt chunk, or a prompt recomputed after preemption.
bool has_prompt_tokens(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.seqs) {
    if (!s.samples || s.n_new_tokens - s.n_draft != 1) return true;
  }
  return false;
}
}  // namespace

void Speculator::on_step_done(const SchedulerOutput& out, int32_t n_tokens, double seconds) {
  if (config_.gate == SpecGate::kMeasured && !has_prompt_tokens(out)) {
    // The whole step, drafting, scheduling and sampling included: what a draft token costs.
    // Steps of decoding sequences only: the gate prices drafts on top of those, and a
    // prompt's tokens cost less (one row of logits, no sampling) and come cold.
    measured_.record(n_tokens, seconds);
  }
}

void Speculator::finish(RequestId id, const std::vector<int32_t>* tokens) {
  if (tokens) proposer_->finish(id, *tokens);
  states_.erase(id);
}

}  // namespace sluice
