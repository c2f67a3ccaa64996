// Sampler: one request's logits row -> next token, per SamplingParams.
//
// Pipeline (llama.cpp / vLLM order):
//
//   logits --copy--> logit_bias --> repetition penalty --> frequency/presence penalty
//      |                                                          |
//      |                                   logprobs are taken here (log-softmax)
//      v                                                          v
//   temperature == 0 ? argmax (lowest id on ties)
//                    : top-k -> temperature -> softmax -> top-p -> min-p -> draw
//
// The Sampler is per request and small: params, the random stream, and the penalty history
// (O(distinct penalized tokens)), so a step costs O(n_vocab), never O(context):
//   * `create(params, prompt)` loads the prompt into the repetition window;
//   * `sample(logits, workspace)` picks a token and does NOT record it;
//   * `accept(token)` records a token appended to the sequence (normally the one just
//     sampled; the engine calls it for every generated token, including forced ones).
// The vocabulary-sized scratch lives in a SampleWorkspace, one per sampling thread, reused
// across requests: after its first call at a vocabulary size, sample() allocates nothing.
//
// Cost per call at n_vocab = 128k (sample_bench): a copy and two vectorized scans of the
// logits; with top_k set a heap selection that skips 64-token blocks below the k-th best, then
// work on k candidates only; without top_k a vectorized exp per token (min-p alone: only for
// tokens that can pass), and top-p by a radix selection on the weights instead of a full sort.
// logprobs add one vectorized exp pass.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "grammar/token_mask.h"
#include "sample/rng.h"
#include "sample/sample_math.h"
#include "sample/sampling_params.h"
#include "sample/token_counts.h"

namespace sluice {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

// What sample() returns: the token, and its logprob and the top alternatives when requested
// (SamplingParams::n_logprobs). Fixed-size storage, so returning it never allocates.
struct SampleResult {
  int32_t token = -1;
  // Log-probability of `token` (SamplingParams::n_logprobs >= 0), else 0.
  float logprob = 0.0f;
  // The n_logprobs most likely tokens, most likely first (ties: lower id first); fewer when
  // fewer tokens have a finite logprob.
  std::array<TokenLogprob, kMaxLogprobs> top{};
  int32_t n_top = 0;

  std::span<const TokenLogprob> top_logprobs() const {
    return {top.data(), static_cast<size_t>(n_top)};
  }
};

class Sampler;

// What Sampler::verify() returns: the token at this position and whether it is the draft.
struct VerifyResult {
  SampleResult sample;  // the draft when accepted, else the replacement drawn from the residual
  bool accepted = false;
};

// Scratch of Sampler::sample(): vocabulary-sized buffers (about 28 bytes per vocabulary entry
// at most, 3.5 MiB at 128k) reused across calls and requests. Exists so that this memory is
// paid once per sampling thread instead of once per running request. Not thread-safe: one
// call at a time.
class SampleWorkspace {
 public:
  SampleWorkspace() = default;
  SampleWorkspace(SampleWorkspace&&) = default;
  SampleWorkspace& operator=(SampleWorkspace&&) = default;
  SampleWorkspace(const SampleWorkspace&) = delete;
  SampleWorkspace& operator=(const SampleWorkspace&) = delete;

  // The last sample() call's logits after logit_bias and penalties ([n_vocab]; what logprobs
  // are computed from). Invalidated by the next call.
  std::span<const float> logits() const { return logits_; }

  // Grammar work done through this workspace (for /metrics).
  struct GrammarStats {
    uint64_t masks = 0;         // full masks computed
    double mask_seconds = 0;    // time computing them
    uint64_t fast_accepts = 0;  // tokens sampled unmasked and found allowed (no mask needed)
  };
  const GrammarStats& grammar_stats() const { return grammar_stats_; }

 private:
  friend class Sampler;

  // What Sampler::verify() returns: the token at this position and whether it is the draft.
  struct VerifyResult {
    SampleResult sample;  // the draft when accepted, else the replacement drawn from the residual
    bool accepted = false;
  };

  // A token under consideration. `w` is a logit before softmax, a softmax weight
  // exp((l - l_max) / T) in [0, 1] (the best token exactly 1) after.
  struct Candidate {
    float w;
    int32_t id;
  };

  std::vector<float> logits_;       // [n_vocab] after bias and penalties
  float l_max_ = 0.0f;              // max of logits_
  std::vector<float> w_;            // [n_vocab] softmax weights, best = 1
  std::vector<double> block_sums_;  // [ceil(n_vocab / kSumBlock)] sums of w_ per block
  std::vector<Candidate> cand_;     // [<= n_vocab] the candidate set
  std::vector<Candidate> tail_;     // top-p radix selection: the bucket holding the cut
  std::vector<double> hist_;        // top-p radix selection: weight per bucket
  std::vector<Candidate> top_;      // logprobs: the n best
  std::vector<uint64_t> mask_;      // [ceil(n_vocab / 64)] grammar mask, bit per token
  GrammarStats grammar_stats_;
};

class Sampler {
 public:
  // Validates `params` (SamplingParams::validate). `prompt_tokens` are the context before
  // the first generated token; they count for the repetition penalty only.
  static Result<Sampler> create(const SamplingParams& params,
                                std::span<const int32_t> prompt_tokens = {});

  Sampler(Sampler&&) = default;
  Sampler& operator=(Sampler&&) = default;
  Sampler(const Sampler&) = delete;  // a copy would duplicate the random stream
  Sampler& operator=(const Sampler&) = delete;

  // Picks the next token from one row of logits ([n_vocab], any finite values or -inf).
  // Errors: empty row, a NaN/+inf logit (model bug), a logit_bias id >= n_vocab, or every
  // token banned. Advances the random stream by one draw unless greedy.
  Result<SampleResult> sample(std::span<const float> logits, SampleWorkspace& ws);
  // The same with a workspace owned by this Sampler (allocated on first use: for tools and
  // tests; an engine running many requests passes its per-thread workspace instead).
  Result<SampleResult> sample(std::span<const float> logits);

  // Speculative verification of one draft token at this position (Leviathan et al. 2023,
  // Chen et al. 2023). p is this sampler's distribution over `logits` after every processor
  // (bias, penalties, temperature, top-k/p, min-p); q is the proposer's distribution ([n_vocab],
  // or empty for a one-hot q at `draft`, as n-gram drafts are). Accepts `draft` with
  // probability min(1, p(draft) / q(draft)); otherwise draws from norm(max(0, p - q)). The
  // token returned is therefore distributed exactly as p. Greedy: p is one-hot at the argmax,
  // so the draft is accepted iff it is the argmax, and the argmax is returned either way.
  // Does not record the token (call accept()). One draw when the draft is accepted, two when
  // it is rejected (none when greedy).
  Result<VerifyResult> verify(std::span<const float> logits, int32_t draft,
                              std::span<const float> q, SampleWorkspace& ws);

  // The distribution sample() draws from, over the whole vocabulary, into `p` ([n_vocab],
  // sums to 1; greedy: one-hot at the argmax). For a draft model's proposals (q of verify()).
  // Does not advance the random stream.
  Status distribution(std::span<const float> logits, SampleWorkspace& ws, std::vector<float>& p);
  // One draw from `p` (a distribution() result): advances the random stream by one draw.
  int32_t draw(std::span<const float> p);

  // Records `token` as generated (appended to the sequence). Ids < 0 are ignored; ids beyond
  // the vocabulary are kept but never penalized. With a grammar, also advances it (a token the
  // grammar refuses, e.g. one forced by the caller, marks the grammar violated).
  void accept(int32_t token);

  // Structured output (SamplingParams::grammar). Without a grammar: false / the whole draft.
  bool has_grammar() const { return grammar_ != nullptr; }
  // The grammar is complete and allows nothing more (its stop token was accepted).
  bool grammar_terminated() const { return grammar_ && grammar_->terminated(); }
  // The grammar is complete here: nothing but a stop token may follow.
  bool grammar_complete() const;
  bool grammar_violated() const { return grammar_violated_; }
  // How many leading tokens of `draft` the grammar allows in sequence from here (speculative
  // drafts past that point would be rejected anyway). Leaves the grammar state unchanged.
  int32_t grammar_allowed_prefix(std::span<const int32_t> draft);

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }  // the seed actually used (drawn if params had none)
  int32_t n_generated() const { return n_generated_; }
  // Processed logits of the last sample(logits) call on the owned workspace (see
  // SampleWorkspace::logits); empty before one.
  std::span<const float> last_logits() const {
    return own_ws_ ? own_ws_->logits() : std::span<const float>();
  }

 private:
  using Candidate = SampleWorkspace::Candidate;

  Sampler(const SamplingParams& params, uint64_t seed);

  void push_context(int32_t token);                          // into the repetition window
  bool apply_bias_and_penalties(SampleWorkspace& ws) const;  // false: nothing to apply
  // Checks `logits` and writes the processed logits (bias, penalties, and the grammar mask
  // when `masked`) and their max into ws.
  Status prepare(std::span<const float> logits, SampleWorkspace& ws, bool masked = true);
  // The grammar mask applied to ws.logits_ (-inf where the grammar refuses).
  Status apply_grammar(SampleWorkspace& ws);
  // Picks a token from prepared ws (argmax or a draw).
  int32_t pick(SampleWorkspace& ws);
  static int32_t argmax(const SampleWorkspace& ws);
  // The non-greedy distribution as softmax weights: true when ws.cand_ holds every token that
  // can be drawn (after top-k/p, min-p); false when it is the whole vocabulary in ws.w_ with
  // block sums and total *z.
  bool weigh(SampleWorkspace& ws, double* z) const;
  void gather_min_p(SampleWorkspace& ws) const;
  void gather_after_softmax(SampleWorkspace& ws, float bound) const;
  void fill_logprobs(SampleWorkspace& ws, SampleResult& r) const;
  int32_t draw_candidates(std::span<const Candidate> cand);
  int32_t draw_vocab(const SampleWorkspace& ws, double z);

  // The k best finite logits into `out`, best first (ties: lower id first).
  static void select_top(std::span<const float> logits, int32_t k, std::vector<Candidate>& out);
  // Top-p cut of candidates sorted best first / in any order (radix selection).
  static void truncate_top_p_sorted(std::vector<Candidate>& cand, double target);
  static void truncate_top_p_radix(SampleWorkspace& ws, double target);

  SamplingParams params_;
  std::vector<std::pair<int32_t, float>> bias_;  // params_.logit_bias, flattened
  uint64_t seed_ = 0;
  Xoshiro256 rng_;

  // Penalty history.
  bool track_repetition_ = false;
  bool track_generated_ = false;
  TokenCounts window_counts_;    // counts over the repetition window of the context
  std::vector<int32_t> window_;  // [penalty_last_n] ring of context ids (when > 0)
  size_t window_head_ = 0;       // next slot to overwrite once full
  size_t window_fill_ = 0;
  TokenCounts generated_counts_;  // counts over generated tokens
  int32_t n_generated_ = 0;

  std::unique_ptr<SampleWorkspace> own_ws_;  // for sample(logits) only

  std::unique_ptr<grammar::TokenMatcher> grammar_;  // SamplingParams::grammar's state
  bool grammar_violated_ = false;
};

}  // namespace sluice
