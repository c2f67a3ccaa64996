// N-gram lookup drafts: the request's own text (prompt lookup decoding) and a bounded cache of
// recent requests' whole sequences (the idea of SuffixDecoding: repeated and agentic requests
// re-generate what was generated before).
//
// The draft for a request whose tokens end in ...a b c d is the continuation of the longest
// earlier occurrence of its last n tokens (n_max >= n >= n_min):
//
//   own tokens:    x a b c d y z ... a b c d | ?      -> draft [y z ...]   (earlier, own text)
//   suffix cache:  ... p q a b c d e f g             -> draft [e f g]      (another request)
//
// Both sources are looked up by a hash of the n-gram (verified token by token); the match is
// then measured backwards (up to kMaxMatch tokens), and the longer match wins (ties: the
// cache, whose sequences are whole earlier generations). Costs per call: O(n_max - n_min + 1)
// hash lookups and the new tokens' indexing; memory: one map entry per n per indexed token.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "speculative/proposer.h"

namespace sluice {

struct NgramConfig {
  int32_t n_min = 2;  // shortest suffix looked up (>= 1)
  int32_t n_max = 4;  // longest (>= n_min)
  // Tokens of finished requests kept for cross-request lookup (oldest dropped first);
  // 0 disables the suffix cache.
  int64_t cache_tokens = 1 << 20;
  // Sequences longer than this are cached by their last cache_max_seq tokens only.
  int32_t cache_max_seq = 1 << 16;
};

struct NgramStats {
  uint64_t lookups = 0;
  uint64_t prompt_hits = 0;  // drafts from the request's own tokens
  uint64_t cache_hits = 0;   // drafts from the suffix cache
  int64_t cached_tokens = 0;
  int64_t cached_seqs = 0;
};

class NgramProposer final : public Proposer {
 public:
  // Longest match measured when comparing sources.
  static constexpr int32_t kMaxMatch = 256;

  explicit NgramProposer(const NgramConfig& config);

  Status propose(std::span<DraftSlot> slots) override;
  void finish(RequestId id, std::span<const int32_t> tokens) override;
  // One request's draft (what propose() does per slot).
  DraftSource propose_one(RequestId id, std::span<const int32_t> tokens, int32_t n_draft_max,
                          std::vector<int32_t>& draft);

  const NgramStats& stats() const { return stats_; }
  const NgramConfig& config() const { return config_; }

 private:
  // The latest occurrence of an n-gram that has a continuation: it ends (exclusive) at `end`
  // of sequence `seq` (a cache serial; own sequences use their own map).
  struct CacheHit {
    uint64_t seq = 0;
    int32_t end = 0;
  };
  struct Live {
    int32_t indexed = 0;  // n-grams ending (exclusive) at 1 .. indexed are in `ends`
    std::unordered_map<uint64_t, int32_t> ends;
  };
  struct Cached {
    uint64_t serial = 0;
    std::vector<int32_t> tokens;
  };

  uint64_t key(std::span<const int32_t> gram) const;
  // Calls f(key, end) for every n-gram of `toks` ending (exclusive) at `end`.
  template <class F>
  void for_each_gram(std::span<const int32_t> toks, int32_t end, F&& f) const;
  void evict_oldest();
  const Cached* find_cached(uint64_t serial) const;

  NgramConfig config_;
  std::unordered_map<RequestId, Live> live_;
  std::deque<Cached> cache_;  // oldest first; serials increase
  uint64_t next_serial_ = 1;
  std::unordered_map<uint64_t, CacheHit> cache_ends_;
  NgramStats stats_;
};

}  // namespace sluice
