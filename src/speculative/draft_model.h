// Drafts from a smaller model with the same vocabulary (--spec draft --model-draft FILE): each
// step it catches up on the tokens it has not seen (the prompt, the target's accepted and
// corrected tokens) for every decoding request in one ragged batch, then decodes n_draft_max - 1
// more single-token steps, all requests together, sampling each guess with the request's own
// sampling parameters and reporting the distribution it drew from (q) for exact verification.
//
// Its K/V lives in the draft executor's own cache, in blocks of the same size as the target's,
// managed here by a KvCacheManager of its own (no prefix cache). The draft's positions past
// the tokens the target accepted are simply recomputed on the next call (the proposer keeps
// the tokens it computed and compares them with the request's tokens).
#pragma once

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "executor/executor.h"
#include "kv/kv_cache_manager.h"
#include "sample/sampler.h"
#include "speculative/proposer.h"

namespace sluice {

struct DraftModelStats {
  uint64_t calls = 0;
  uint64_t forward_passes = 0;
  uint64_t tokens_computed = 0;  // catch-up + draft tokens
  uint64_t dropped = 0;          // slots left without a draft (the draft's KV cache was full)
};

class DraftModelProposer final : public Proposer {
 public:
  // `draft` runs the draft model; this proposer owns its whole KV cache.
  explicit DraftModelProposer(Executor& draft);

  Status propose(std::span<DraftSlot> slots) override;
  void finish(RequestId id, std::span<const int32_t> tokens) override;

  const DraftModelStats& stats() const { return stats_; }
  const KvCacheManager& kv() const { return kv_; }

 private:
  struct Seq {
    std::vector<int32_t> seen;  // tokens whose K/V the draft's cache holds, in order
    std::unique_ptr<Sampler> sampler;
  };
  // Sampling like the request, on a stream of its own; penalties see the prompt only.
  Result<std::unique_ptr<Sampler>> make_sampler(const DraftSlot& slot) const;

  Executor& exec_;
  int32_t n_vocab_;
  KvCacheManager kv_;
  std::unordered_map<RequestId, Seq> seqs_;
  Batch batch_;
  Logits logits_;
  SampleWorkspace ws_;
  std::vector<float> dist_;
  std::vector<size_t> active_;
  std::unordered_set<RequestId> in_call_;  // propose(): the slots' ids, when making room
  DraftModelStats stats_;
};

}  // namespace sluice
