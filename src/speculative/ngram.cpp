#include "speculative/ngram.h"

#include <algorithm>
#include <cassert>

namespace sluice {
namespace {

// Tokens before `a_end` and `b_end` that agree, counted backwards, at most `cap`.
int32_t match_back(std::span<const int32_t> a, int32_t a_end, std::span<const int32_t> b,
                   int32_t b_end, int32_t cap) {
  int32_t n = 0;
  while (n < cap && n < a_end && n < b_end &&
         a[size_t(a_end - 1 - n)] == b[size_t(b_end - 1 - n)]) {
    ++n;
  }
  return n;
}

}  // namespace

NgramProposer::NgramProposer(const NgramConfig& config) : config_(config) {
  config_.n_min = std::max(config_.n_min, 1);
  config_.n_max = std::max(config_.n_max, config_.n_min);
}

uint64_t NgramProposer::key(std::span<const int32_t> gram) const {
  // FNV-1a over the ids, then a finalizer; the length is part of the key.
  uint64_t h = 0xcbf29ce484222325ull ^ gram.size();
  for (int32_t t : gram) {
    h ^= uint32_t(t);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

template <class F>
void NgramProposer::for_each_gram(std::span<const int32_t> toks, int32_t end, F&& f) const {
  for (int32_t n = config_.n_min; n <= config_.n_max && n <= end; ++n) {
    f(key(toks.subspan(size_t(end - n), size_t(n))), end);
  }
}

const NgramProposer::Cached* NgramProposer::find_cached(uint64_t serial) const {
  if (cache_.empty() || serial < cache_.front().serial) return nullptr;
  const size_t i = size_t(serial - cache_.front().serial);
  return i < cache_.size() ? &cache_[i] : nullptr;
}

Status NgramProposer::propose(std::span<DraftSlot> slots) {
  for (DraftSlot& s : slots) {
    s.source = propose_one(s.id, s.tokens, s.n_draft_max, *s.draft);
    if (s.q) s.q->clear();
  }
  return {};
}

DraftSource NgramProposer::propose_one(RequestId id, std::span<const int32_t> tokens,
                                       int32_t n_draft_max, std::vector<int32_t>& draft) {
  draft.clear();
  ++stats_.lookups;
  const int32_t len = int32_t(tokens.size());
  if (n_draft_max <= 0 || len < config_.n_min) return DraftSource::kNone;

  // Index the n-grams that gained a continuation since the last call (ends <= len - 1).
  Live& live = live_[id];
  for (int32_t e = std::max(live.indexed + 1, config_.n_min); e <= len - 1; ++e) {
    for_each_gram(tokens, e, [&](uint64_t k, int32_t end) { live.ends[k] = end; });
  }
  live.indexed = std::max(live.indexed, len - 1);

  // Longest n first; the first n that hits in either source decides.
  for (int32_t n = std::min(config_.n_max, len); n >= config_.n_min; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(size_t(len - n), size_t(n));
    const uint64_t k = key(suffix);
    int32_t own_match = 0, own_end = 0;
    if (auto it = live.ends.find(k); it != live.ends.end()) {
      own_end = it->second;
      own_match = match_back(tokens, own_end, tokens, len, kMaxMatch);
      if (own_match < n) own_match = 0;  // a hash collision
    }
    int32_t cache_match = 0, cache_end = 0;
    const Cached* cached = nullptr;
    if (auto it = cache_ends_.find(k); it != cache_ends_.end()) {
      cached = find_cached(it->second.seq);
      if (cached) {
        cache_end = it->second.end;
        cache_match = match_back(cached->tokens, cache_end, tokens, len, kMaxMatch);
        if (cache_match < n) cache_match = 0;
      }
    }
    if (own_match == 0 && cache_match == 0) continue;
    std::span<const int32_t> src;
    int32_t from;
    DraftSource source;
    if (cache_match >= own_match) {
      src = cached->tokens;
      from = cache_end;
      source = DraftSource::kSuffixCache;
      ++stats_.cache_hits;
    } else {
      src = tokens;
      from = own_end;
      source = DraftSource::kPrompt;
      ++stats_.prompt_hits;
    }
    const int32_t to = std::min(int32_t(src.size()), from + n_draft_max);
    draft.assign(src.begin() + from, src.begin() + to);
    return draft.empty() ? DraftSource::kNone : source;
  }
  return DraftSource::kNone;
}

void NgramProposer::finish(RequestId id, std::span<const int32_t> tokens) {
  live_.erase(id);
  if (config_.cache_tokens <= 0 || int32_t(tokens.size()) <= config_.n_min) return;
  if (int64_t(tokens.size()) > config_.cache_max_seq) {
    tokens = tokens.last(size_t(config_.cache_max_seq));
  }
  Cached c;
  c.serial = next_serial_++;
  c.tokens.assign(tokens.begin(), tokens.end());
  const int32_t len = int32_t(c.tokens.size());
  for (int32_t e = config_.n_min; e <= len - 1; ++e) {
    for_each_gram(c.tokens, e, [&](uint64_t k, int32_t end) { cache_ends_[k] = {c.serial, end}; });
  }
  stats_.cached_tokens += len;
  ++stats_.cached_seqs;
  cache_.push_back(std::move(c));
  while (stats_.cached_tokens > config_.cache_tokens && cache_.size() > 1) evict_oldest();
}

void NgramProposer::evict_oldest() {
  const Cached& old = cache_.front();
  const int32_t len = int32_t(old.tokens.size());
  for (int32_t e = config_.n_min; e <= len - 1; ++e) {
    for_each_gram(old.tokens, e, [&](uint64_t k, int32_t) {
      auto it = cache_ends_.find(k);
      if (it != cache_ends_.end() && it->second.seq == old.serial) cache_ends_.erase(it);
    });
  }
  stats_.cached_tokens -= len;
  --stats_.cached_seqs;
  cache_.pop_front();
}

}  // namespace sluice
