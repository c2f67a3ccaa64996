// Draft proposers for speculative decoding: each step, every decoding request may carry k
// guessed tokens that the target model verifies in the same forward pass (engine.h,
// Sampler::verify). A proposer only guesses; exactness comes from verification, so a bad
// guess costs compute, never correctness.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/request_id.h"

namespace sluice {

// Where a draft came from (for the counters; q is one-hot for every kind here).
enum class DraftSource : uint8_t { kNone, kPrompt, kSuffixCache };

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Up to `max_k` (>= 1) tokens guessed to follow `tokens` (request `id`'s prompt and
  // generated tokens so far) into `draft` (cleared first; empty: no guess). Between calls a
  // request's tokens only grow.
  virtual DraftSource propose(RequestId id, std::span<const int32_t> tokens, int32_t max_k,
                              std::vector<int32_t>& draft) = 0;
  // Request `id` ended with sequence `tokens` (prompt + generated); its state is dropped.
  virtual void finish(RequestId id, std::span<const int32_t> tokens) = 0;
};

}  // namespace sluice
