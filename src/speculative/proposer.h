// Draft proposers for speculative decoding: each step, every decoding request may carry up to
// n_draft_max guessed tokens that the target model verifies in the same forward pass (engine.h,
// Sampler::verify). A proposer only guesses; exactness comes from verification, so a bad
// guess costs compute, never correctness — provided a proposer that reports q reports the
// distribution its guess was really drawn from.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/request_id.h"
#include "base/status.h"
#include "sample/sampling_params.h"

namespace sluice {

// Where a draft came from.
enum class DraftSource : uint8_t { kNone, kPrompt, kSuffixCache, kDraftModel };

// One request's part of a propose() call.
struct DraftSlot {
  RequestId id = 0;
  std::span<const int32_t> tokens;         // the request's prompt and generated tokens so far
  int32_t n_draft_max = 0;                 // longest draft wanted (>= 1)
  const SamplingParams* params = nullptr;  // the request's sampling (draft models sample alike)
  // Out: up to n_draft_max tokens (cleared first; empty: no guess) ...
  std::vector<int32_t>* draft = nullptr;
  // ... and, for proposers that sample, q: [draft.size(), n_vocab] the distribution each token
  // was drawn from. Left empty for one-hot drafts (n-gram lookups).
  std::vector<float>* q = nullptr;
  DraftSource source = DraftSource::kNone;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Fills every slot (one call per step for all decoding requests, so that a draft model runs
  // them as one batch). Between calls a request's tokens only grow, except as rollback() says.
  virtual Status propose(std::span<DraftSlot> slots) = 0;
  // After verification: request `id`'s tokens [0, n_valid) are what the proposer saw or
  // guessed; anything it computed past them is stale.
  virtual void rollback(RequestId /*id*/, int32_t /*n_valid*/) {}
  // Request `id` ended with sequence `tokens` (prompt + generated); its state is dropped.
  virtual void finish(RequestId id, std::span<const int32_t> tokens) = 0;
};

}  // namespace sluice
