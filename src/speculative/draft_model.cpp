#include "speculative/draft_model.h"

#include <algorithm>

namespace sluice {

DraftModelProposer::DraftModelProposer(Executor& draft)
    : exec_(draft),
      n_vocab_(draft.capacity().n_vocab),
      kv_(KvCacheConfig{draft.capacity().n_blocks, draft.capacity().block_size, false, 0,
                        draft.capacity().kv_group_windows}) {
  batch_.block_size = draft.capacity().block_size;
  batch_.n_kv_groups = kv_.n_groups();
}

Result<std::unique_ptr<Sampler>> DraftModelProposer::make_sampler(const DraftSlot& slot) const {
  SamplingParams p = slot.params ? *slot.params : SamplingParams{};
  if (!slot.params) p.temperature = 0;
  // A stream of its own (the draft's draws must not shift the request's); penalties are kept
  // from the prompt only, which changes q, never correctness (q is reported as drawn).
  if (p.seed) p.seed = *p.seed ^ 0x9e3779b97f4a7c15ull;
  p.n_logprobs = -1;
  // The draft's own sampler starts at its first proposal, not where the request's grammar
  // stands: unconstrained (the engine cuts drafts at the first token the grammar refuses).
  p.grammar = nullptr;
  SLUICE_ASSIGN_OR_RETURN(Sampler s, Sampler::create(p, slot.tokens));
  return std::make_unique<Sampler>(std::move(s));
}

Status DraftModelProposer::propose(std::span<DraftSlot> slots) {
  ++stats_.calls;
  active_.clear();
  batch_.clear();
  bool evicted = false;  // idle requests' draft K/V already given back in this call
  for (size_t i = 0; i < slots.size(); ++i) {
    DraftSlot& slot = slots[i];
    slot.draft->clear();
    if (slot.q) slot.q->clear();
    slot.source = DraftSource::kNone;
    const int32_t len = int32_t(slot.tokens.size());
    if (slot.n_draft_max < 1 || len < 1) continue;
    Seq& s = seqs_[slot.id];
    if (!s.sampler) {
      SLUICE_ASSIGN_OR_RETURN(s.sampler, make_sampler(slot));
    }
    // Keep the K/V of the longest common prefix, and recompute at least the last token.
    size_t common = 0;
    const size_t lim = std::min(s.seen.size(), size_t(len - 1));
    while (common < lim && s.seen[common] == slot.tokens[common]) ++common;
    s.seen.resize(common);
    kv_.truncate(slot.id, int32_t(common));
    const int32_t computed = int32_t(common);
    // Positions [computed, len) now, then len .. len + n_draft_max - 2 for the guesses fed back.
    const int32_t n_new_tokens = len - computed + slot.n_draft_max - 1;
    bool ok = kv_.allocate_slots(slot.id, computed, n_new_tokens);
    if (!ok && !evicted) {
      // Make room (once per call: O(slots + requests)): requests not proposed for now give
      // their draft K/V back.
      evicted = true;
      in_call_.clear();
      for (const DraftSlot& o : slots) in_call_.insert(o.id);
      for (auto& [id, seq] : seqs_) {
        if (in_call_.count(id) || !kv_.has(id)) continue;
        kv_.free(id);
        seq.seen.clear();
      }
      ok = kv_.allocate_slots(slot.id, computed, n_new_tokens);
    }
    if (!ok) {
      ++stats_.dropped;
      continue;
    }
    batch_.add_sequence(slot.tokens.subspan(size_t(computed)), computed, kv_.block_tables(slot.id),
                        LogitsMode::kLast);
    s.seen.assign(slot.tokens.begin(), slot.tokens.end());
    active_.push_back(i);
  }
  // Step 1 catches up and guesses the first token; steps 2..n_draft_max feed each guess back.
  for (int32_t step = 0; !active_.empty(); ++step) {
    if (step > 0) {
      batch_.clear();
      for (size_t i : active_) {
        const Seq& s = seqs_.at(slots[i].id);
        const int32_t last = slots[i].draft->back();
        batch_.add_sequence(std::span<const int32_t>(&last, 1), int32_t(s.seen.size()),
                            kv_.block_tables(slots[i].id), LogitsMode::kLast);
      }
    }
    SLUICE_RETURN_IF_ERROR(exec_.execute(batch_, logits_));
    ++stats_.forward_passes;
    stats_.tokens_computed += uint64_t(batch_.n_tokens());
    size_t kept = 0;
    for (size_t a = 0; a < active_.size(); ++a) {
      DraftSlot& slot = slots[active_[a]];
      Seq& s = seqs_.at(slot.id);
      if (step > 0) s.seen.push_back(slot.draft->back());  // its K/V was just written
      std::span<const float> row(logits_.row(int32_t(a)), size_t(n_vocab_));
      int32_t token;
      if (slot.params && !slot.params->is_greedy()) {
        SLUICE_RETURN_IF_ERROR(s.sampler->distribution(row, ws_, dist_));
        token = s.sampler->draw(dist_);
        if (slot.q) slot.q->insert(slot.q->end(), dist_.begin(), dist_.end());
      } else {
        // Greedy: q is one-hot at the guess, which verify() assumes for an empty q.
        SLUICE_ASSIGN_OR_RETURN(SampleResult r, s.sampler->sample(row, ws_));
        token = r.token;
      }
      slot.draft->push_back(token);
      slot.source = DraftSource::kDraftModel;
      if (int32_t(slot.draft->size()) < slot.n_draft_max) active_[kept++] = active_[a];
    }
    active_.resize(kept);
  }
  return {};
}

void DraftModelProposer::finish(RequestId id, std::span<const int32_t>) {
  kv_.free(id);
  seqs_.erase(id);
}

}  // namespace sluice
