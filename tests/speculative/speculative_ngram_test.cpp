// N-gram drafts: the request's own text, the suffix cache of finished requests, which one wins,
// eviction, and a brute-force reference over random token streams.
#include <gtest/gtest.h>

#include <random>

#include "speculative/ngram.h"

namespace sluice {
namespace {

std::vector<int32_t> draft_of(NgramProposer& p, RequestId id, const std::vector<int32_t>& toks,
                              int32_t k, DraftSource* src = nullptr) {
  std::vector<int32_t> d;
  DraftSource s = p.propose_one(id, toks, k, d);
  if (src) *src = s;
  return d;
}

TEST(SpecNgram, PromptLookupProposesWhatFollowedTheLastOccurrence) {
  NgramProposer p({.n_min = 2, .n_max = 3, .cache_tokens = 0});
  std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 9, 9, 2, 3};
  DraftSource src;
  EXPECT_EQ(draft_of(p, 1, t, 3, &src), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(src, DraftSource::kPrompt);
  // k caps the draft; the continuation may run up to the end of the tokens.
  EXPECT_EQ(draft_of(p, 1, t, 1), (std::vector<int32_t>{4}));
  t = {7, 8, 7, 8};
  EXPECT_EQ(draft_of(p, 2, t, 5), (std::vector<int32_t>{7, 8}));
  // No earlier occurrence, or too short: no draft.
  EXPECT_TRUE(draft_of(p, 3, {1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(draft_of(p, 4, {5}, 4).empty());
  EXPECT_TRUE(draft_of(p, 5, {5, 5, 5}, 0).empty());
}

TEST(SpecNgram, IncrementalIndexingFollowsGrowingTokens) {
  NgramProposer p({.n_min = 2, .n_max = 2, .cache_tokens = 0});
  std::vector<int32_t> t = {1, 2, 3};
  EXPECT_TRUE(draft_of(p, 1, t, 4).empty());
  for (int32_t x : {1, 2}) t.push_back(x);  // ... 1 2 3 1 2
  EXPECT_EQ(draft_of(p, 1, t, 4), (std::vector<int32_t>{3, 1, 2}));
  t.push_back(7);  // ... 1 2 7; "2 7" is new
  EXPECT_TRUE(draft_of(p, 1, t, 4).empty());
  for (int32_t x : {1, 2}) t.push_back(x);  // the latest "1 2" is now followed by 7
  EXPECT_EQ(draft_of(p, 1, t, 2), (std::vector<int32_t>{7, 1}));
}

TEST(SpecNgram, SuffixCacheServesRepeatedRequestsAndLongerMatchesWin) {
  NgramProposer p({.n_min = 2, .n_max = 4, .cache_tokens = 1000});
  const std::vector<int32_t> first = {10, 11, 12, 13, 20, 21, 22, 23, 24, 25};
  p.finish(1, first);
  EXPECT_EQ(p.stats().cached_seqs, 1);
  DraftSource src;
  // The same prompt again: the cache proposes the first request's output.
  EXPECT_EQ(draft_of(p, 2, {10, 11, 12, 13}, 4, &src), (std::vector<int32_t>{20, 21, 22, 23}));
  EXPECT_EQ(src, DraftSource::kSuffixCache);
  // Equal matches: the cache wins (its sequences are whole earlier generations) ...
  EXPECT_EQ(draft_of(p, 3, {12, 13, 99, 5, 12, 13}, 2, &src), (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(src, DraftSource::kSuffixCache);
  // ... a longer match in the request's own text wins.
  EXPECT_EQ(draft_of(p, 4, {8, 11, 12, 13, 77, 9, 8, 11, 12, 13}, 2, &src),
            (std::vector<int32_t>{77, 9}));
  EXPECT_EQ(src, DraftSource::kPrompt);
  EXPECT_EQ(p.stats().cache_hits, 2u);
  EXPECT_EQ(p.stats().prompt_hits, 1u);
}

TEST(SpecNgram, CacheEvictsOldestWithinItsBudget) {
  NgramProposer p({.n_min = 2, .n_max = 2, .cache_tokens = 10});
  p.finish(1, std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  p.finish(2,
           std::vector<int32_t>{7, 8, 9, 10, 11, 12});  // 12 tokens > 10: the first sequence goes
  EXPECT_EQ(p.stats().cached_seqs, 1);
  EXPECT_EQ(p.stats().cached_tokens, 6);
  EXPECT_TRUE(draft_of(p, 3, {1, 2}, 3).empty());
  EXPECT_EQ(draft_of(p, 4, {7, 8}, 3), (std::vector<int32_t>{9, 10, 11}));
}

// Against a brute-force search: the draft always continues an earlier occurrence of the
// request's last n tokens (n in [n_min, n_max]) at the longest n that has one.
TEST(SpecNgram, MatchesBruteForceOnRandomStreams) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t n_min = 1 + int32_t(rng() % 3);
    const int32_t n_max = n_min + int32_t(rng() % 3);
    NgramProposer p({.n_min = n_min, .n_max = n_max, .cache_tokens = 0});
    std::vector<int32_t> t;
    const int vocab = 2 + int(rng() % 6);
    for (int step = 0; step < 200; ++step) {
      t.push_back(int32_t(rng() % size_t(vocab)));
      const int32_t k = 1 + int32_t(rng() % 5);
      std::vector<int32_t> got = draft_of(p, 1, t, k);
      const int32_t len = int32_t(t.size());
      int32_t best_n = 0;
      for (int32_t n = std::min(n_max, len); n >= n_min && best_n == 0; --n) {
        for (int32_t e = len - 1; e >= n; --e) {
          if (std::equal(t.begin() + (e - n), t.begin() + e, t.end() - n)) {
            best_n = n;
            break;
          }
        }
      }
      if (best_n == 0) {
        ASSERT_TRUE(got.empty()) << "trial " << trial << " step " << step;
        continue;
      }
      ASSERT_FALSE(got.empty()) << "trial " << trial << " step " << step;
      ASSERT_LE(int32_t(got.size()), k);
      // Some earlier occurrence of the last best_n tokens is followed by `got`.
      bool found = false;
      for (int32_t e = best_n; e <= len - 1 && !found; ++e) {
        if (!std::equal(t.begin() + (e - best_n), t.begin() + e, t.end() - best_n)) continue;
        const int32_t m = std::min(k, len - e);
        found = m == int32_t(got.size()) && std::equal(got.begin(), got.end(), t.begin() + e);
      }
      ASSERT_TRUE(found) << "trial " << trial << " step " << step;
    }
  }
}

}  // namespace
}  // namespace sluice
