// SamplingParams: how one request turns logits into tokens (the OpenAI / vLLM request knobs).
// Plain data; the server fills it from JSON, `validate()` rejects out-of-range values with a
// message naming the field, and a Sampler (sampler.h) applies it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "base/status.h"

namespace sluice::grammar {
struct CompiledGrammar;
}

namespace sluice {

// Largest n_logprobs accepted (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxLogprobs = 20;

// A logit_bias at or below this bans the token outright (its logit becomes -inf), so "-100"
// bans regardless of the model's logit scale (OpenAI: "-100 should result in a ban").
inline constexpr float kBanBias = -100.0f;

struct SamplingParams {
  // 0 = greedy (argmax; ties go to the lowest id). Otherwise logits are divided by it.
  float temperature = 1.0f;
  // Keep the k most likely tokens. 0 or -1 = off (vLLM and llama.cpp spellings); below -1 is
  // an error. k >= vocabulary size is off.
  int32_t top_k = 0;
  // Keep the smallest set of most likely tokens whose probability reaches top_p. 1 = off.
  float top_p = 1.0f;
  // Keep tokens with probability >= min_p * (probability of the most likely token). 0 = off.
  float min_p = 0.0f;

  // CTRL / llama.cpp repetition penalty, 1 = off: for every token among the last
  // `penalty_last_n` tokens of the context (prompt + generated, as vLLM), a positive logit is
  // divided by it and a non-positive one multiplied by it.
  float repetition_penalty = 1.0f;
  // Window of the repetition penalty: the last n context tokens; -1 = the whole context,
  // 0 = no window (repetition penalty off).
  int32_t penalty_last_n = 64;
  // OpenAI presence / frequency penalties over the *generated* tokens only (vLLM semantics):
  // logit -= frequency_penalty * count + presence_penalty * (count > 0). Range [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;

  // Token id -> additive bias, applied first. Values in [-100, 100] or -inf; a bias <= -100
  // (kBanBias) bans the token.
  std::map<int32_t, float> logit_bias;

  // Seed of the request's random stream; same seed + same logits -> same tokens.
  // nullopt = seeded from std::random_device (Sampler::seed() reports the seed used).
  std::optional<uint64_t> seed;

  // Log-probabilities to return (vLLM's `logprobs`):
  //   -1 = none; 0 = the chosen token's only; 1..20 = also the top-n alternatives.
  // They are log-softmax of the logits AFTER logit_bias and penalties, BEFORE temperature and
  // top-k/top-p/min-p truncation: a property of the (steered) model, so temperature-0 requests
  // get informative values and banned tokens read -inf. (vLLM v1's default reports raw model
  // logprobs before bias/penalties; OpenAI's are independent of temperature, like ours.)
  int32_t n_logprobs = -1;

  // Structured output: only tokens the grammar allows (a mask applied after logit_bias and
  // penalties, before everything else; stop tokens only where the grammar may end). Compiled
  // once per schema and shared (grammar/token_mask.h); nullptr = unconstrained.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;

  bool is_greedy() const { return temperature == 0.0f; }

  // OK, or an error naming the first out-of-range field. `n_vocab` > 0 also checks that
  // logit_bias ids are inside the vocabulary.
  Status validate(int32_t n_vocab = 0) const;
};

}  // namespace sluice
