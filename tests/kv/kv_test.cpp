#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "kv/kv_cache_manager.h"

namespace sluice {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(BlockPool, AllocateReleaseRefCountsAndLruOrder) {
  BlockPool pool(4, 16);
  EXPECT_EQ(pool.n_free(), 4);
  auto a = pool.allocate(2);
  EXPECT_EQ(a, (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(pool.n_free(), 2);
  pool.retain(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.release(a);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.n_free(), 3);
  // Free queue is now 2, 3, 1: allocation takes the least recently freed first.
  auto b = pool.allocate(3);
  EXPECT_EQ(b, (std::vector<BlockId>{2, 3, 1}));
  EXPECT_FALSE(pool.can_allocate(1));
}

TEST(BlockPool, CachedBlocksSurviveFreeAndAreEvictedLru) {
  BlockPool pool(2, 2);
  auto a = pool.allocate(2);
  std::vector<int32_t> t0 = {1, 2}, t1 = {3, 4};
  pool.cache(a[0], 100, t0);
  pool.cache(a[1], 200, t1);
  pool.release(std::vector<BlockId>{a[1], a[0]});  // tail first
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_EQ(pool.find_cached(100, t0), a[0]);
  EXPECT_FALSE(pool.find_cached(100, t1).has_value());  // same hash, other tokens: no hit
  // Reusing one block evicts the least recently freed (a[1]), keeping a[0] cached.
  auto c = pool.allocate(1);
  EXPECT_EQ(c[0], a[1]);
  EXPECT_FALSE(pool.find_cached(200, t1).has_value());
  EXPECT_TRUE(pool.find_cached(100, t0).has_value());
  EXPECT_EQ(pool.stats().evictions, 1u);
  // A hit on a free cached block takes it out of the free queue.
  pool.retain(a[0]);
  EXPECT_EQ(pool.n_free(), 0);
}

TEST(KvCacheManager, PrefixHitSkipsComputedBlocksAndLeavesOneToken) {
  KvCacheManager kv({.n_blocks = 16, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  auto prompt = iota_tokens(10);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 10));
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  kv.commit_computed(1, prompt, 10);  // blocks 0 and 1 are full -> cached
  kv.free(1);
  EXPECT_EQ(kv.n_free_blocks(), 16);

  auto same = iota_tokens(12);  // shares 8 tokens (2 full blocks) then differs in length
  PrefixHit hit = kv.find_prefix(same);
  EXPECT_EQ(hit.n_tokens, 8);
  ASSERT_TRUE(kv.allocate_slots(2, hit.n_tokens, 12 - hit.n_tokens, &hit));
  EXPECT_EQ(kv.block_table(2).size(), 3u);
  EXPECT_EQ(kv.block_table(2)[0], hit.blocks[0]);
  EXPECT_EQ(kv.prefix_stats().hit_tokens, 8u);

  // A prompt that is entirely cached still computes its last token: 8 tokens -> 1 block hit.
  PrefixHit whole = kv.find_prefix(iota_tokens(8));
  EXPECT_EQ(whole.n_tokens, 4);
  // A different salt (another model) never hits.
  KvCacheManager other({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = true, .salt = 9});
  ASSERT_TRUE(other.allocate_slots(1, 0, 8));
  other.commit_computed(1, iota_tokens(8), 8);
  EXPECT_EQ(other.find_prefix(iota_tokens(9)).n_tokens, 8);
  EXPECT_EQ(kv.find_prefix(iota_tokens(9, 100)).n_tokens, 0);
}

TEST(KvCacheManager, SharedBlocksAreRefCountedAndAllocationIsAllOrNothing) {
  KvCacheManager kv({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  auto p = iota_tokens(9);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 9));
  kv.commit_computed(1, p, 9);
  PrefixHit hit = kv.find_prefix(p);
  ASSERT_EQ(hit.blocks.size(), 2u);
  EXPECT_FALSE(kv.allocate_slots(2, hit.n_tokens, 13 - hit.n_tokens,
                                 &hit));  // 2 shared + 2 new, but only 1 block is free
  EXPECT_FALSE(kv.has(2));
  EXPECT_TRUE(kv.allocate_slots(2, hit.n_tokens, 9 - hit.n_tokens,
                                &hit));  // 2 shared + 1 new = exactly the last block
  EXPECT_EQ(kv.ref_count(hit.blocks[0]), 2);
  kv.free(1);
  EXPECT_EQ(kv.ref_count(hit.blocks[0]), 1);
  kv.free(2);
  EXPECT_EQ(kv.n_free_blocks(), 4);
}

TEST(KvCacheManager, DisabledPrefixCacheNeverHits) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  ASSERT_TRUE(kv.allocate_slots(1, 0, 8));
  kv.commit_computed(1, iota_tokens(8), 8);
  kv.free(1);
  EXPECT_EQ(kv.find_prefix(iota_tokens(9)).n_tokens, 0);
}

// n samples of one prompt: a fork shares every block; the first writes into the shared partial
// block copy it (copy-on-write) and the last holder writes in place.
TEST(KvCacheManager, ForkSharesBlocksAndCopiesTheSharedPartialBlockOnWrite) {
  KvCacheManager kv({.n_blocks = 16, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  auto prompt = iota_tokens(10);  // blocks: [0..3] [4..7] [8 9 _ _]
  ASSERT_TRUE(kv.allocate_slots(1, 0, 10));
  kv.commit_computed(1, prompt, 10);
  const std::vector<BlockId> parent = kv.block_table(1);
  ASSERT_EQ(parent.size(), 3u);
  kv.fork(1, 2);
  kv.fork(1, 3);
  EXPECT_EQ(kv.block_table(2), parent);
  EXPECT_EQ(kv.block_table(3), parent);
  for (BlockId b : parent) EXPECT_EQ(kv.ref_count(b), 3);
  EXPECT_EQ(kv.n_used_blocks(), 3);  // the prompt is held once
  EXPECT_EQ(kv.share_stats().forks, 2u);
  EXPECT_EQ(kv.share_stats().forked_blocks, 6u);
  EXPECT_TRUE(kv.take_copies().empty());

  // Each sample decodes position 10 (in the partial block 2).
  ASSERT_TRUE(kv.allocate_slots(1, 10, 1));
  ASSERT_TRUE(kv.allocate_slots(2, 10, 1));
  ASSERT_TRUE(kv.allocate_slots(3, 10, 1));
  const std::vector<BlockCopy> copies = kv.take_copies();
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0], (BlockCopy{parent[2], kv.block_table(1)[2]}));
  EXPECT_EQ(copies[1], (BlockCopy{parent[2], kv.block_table(2)[2]}));
  EXPECT_TRUE(kv.take_copies().empty());
  EXPECT_EQ(kv.block_table(3)[2], parent[2]);  // the last holder writes in place
  EXPECT_EQ(kv.ref_count(parent[2]), 1);
  EXPECT_EQ(kv.ref_count(kv.block_table(1)[2]), 1);
  EXPECT_EQ(kv.ref_count(parent[0]), 3);  // full blocks stay shared
  EXPECT_EQ(kv.share_stats().cow_copies, 2u);
  EXPECT_EQ(kv.n_used_blocks(), 2 + 3);  // 2 shared full blocks + 3 private partial ones
  // A second write into the now private block copies nothing.
  ASSERT_TRUE(kv.allocate_slots(1, 11, 1));
  EXPECT_TRUE(kv.take_copies().empty());

  // The forked full blocks keep their hashes: sample 2's block 2, once full, extends the chain.
  std::vector<int32_t> t2 = prompt;
  t2.push_back(100);
  t2.push_back(101);
  ASSERT_TRUE(kv.allocate_slots(2, 11, 1));
  kv.commit_computed(2, t2, 12);
  std::vector<int32_t> longer = t2;
  longer.push_back(5);
  PrefixHit hit = kv.find_prefix(longer);
  ASSERT_EQ(hit.blocks.size(), 3u);
  EXPECT_EQ(hit.blocks[0], parent[0]);
  EXPECT_EQ(hit.blocks[2], kv.block_table(2)[2]);
  // Sample 3's partial block (same positions, other tokens) was never hashed.
  std::vector<int32_t> t3 = prompt;
  t3.push_back(7);
  t3.push_back(7);
  t3.push_back(7);
  EXPECT_EQ(kv.find_prefix(t3).n_tokens, 8);

  kv.free(1);
  kv.free(2);
  kv.free(3);
  EXPECT_EQ(kv.n_used_blocks(), 0);
}

TEST(KvCacheManager, ForkOfFullBlocksNeedsNoCopyAndCopyOnWriteIsAllOrNothing) {
  KvCacheManager kv({.n_blocks = 3, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  ASSERT_TRUE(kv.allocate_slots(1, 0, 8));  // two full blocks
  kv.fork(1, 2);
  ASSERT_TRUE(kv.allocate_slots(2, 8, 1));  // a fresh third block, nothing shared is written
  EXPECT_TRUE(kv.take_copies().empty());
  EXPECT_EQ(kv.n_free_blocks(), 0);
  kv.free(2);

  KvCacheManager small({.n_blocks = 3, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  ASSERT_TRUE(small.allocate_slots(1, 0, 10));  // all 3 blocks, the last partial
  small.fork(1, 2);
  const std::vector<BlockId> before = small.block_table(2);
  EXPECT_FALSE(small.allocate_slots(2, 10, 1));  // needs a block for the copy: none free
  EXPECT_EQ(small.block_table(2), before);
  EXPECT_TRUE(small.take_copies().empty());
  EXPECT_EQ(small.share_stats().cow_copies, 0u);
  small.free(1);  // now sample 2 holds the partial block alone: it writes in place
  ASSERT_TRUE(small.allocate_slots(2, 10, 1));
  EXPECT_TRUE(small.take_copies().empty());
  EXPECT_EQ(small.block_table(2), before);
  small.free(2);

  // A write spanning the shared partial block and the next one copies one and allocates one.
  KvCacheManager wide({.n_blocks = 5, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  ASSERT_TRUE(wide.allocate_slots(1, 0, 10));
  wide.fork(1, 2);
  ASSERT_TRUE(wide.allocate_slots(2, 10, 3));  // positions 10..12
  EXPECT_EQ(wide.take_copies().size(), 1u);
  EXPECT_EQ(wide.block_table(2).size(), 4u);
  EXPECT_EQ(wide.n_free_blocks(), 0);
  EXPECT_FALSE(wide.allocate_slots(1, 10, 3));  // its partial block is private now: 1 new block
  EXPECT_TRUE(wide.allocate_slots(1, 10, 2));   // positions 10, 11: in place
  EXPECT_TRUE(wide.take_copies().empty());
}

TEST(KvCacheManager, MoveTableHandsBlocksOver) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  ASSERT_TRUE(kv.allocate_slots(1, 0, 6));
  const std::vector<BlockId> t = kv.block_table(1);
  kv.move_table(1, 7);
  EXPECT_FALSE(kv.has(1));
  EXPECT_EQ(kv.block_table(7), t);
  EXPECT_EQ(kv.ref_count(t[0]), 1);
  EXPECT_EQ(kv.n_used_blocks(), 2);
  kv.free(7);
  EXPECT_EQ(kv.n_used_blocks(), 0);
}

// A sliding window on every layer (window 6, blocks of 4): a step whose first new token is at
// position p releases the blocks wholly before p - 5. The table keeps its length (stale leading
// entries), free/fork/truncate never touch released blocks again, and released full blocks stay
// in the prefix cache until reused.
TEST(KvCacheManager, SlidingWindowReleasesBlocksOutsideTheWindow) {
  KvCacheManager kv({.n_blocks = 8,
                     .block_size = 4,
                     .enable_prefix_cache = true,
                     .salt = 0,
                     .group_windows = {6}});
  const auto tokens = iota_tokens(40);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 10));  // prompt of 10: blocks 0..2, nothing released yet
  kv.commit_computed(1, tokens, 10);
  EXPECT_EQ(kv.n_released(1), 0);
  EXPECT_EQ(kv.n_held(1), 3);
  // Decode at position 10 sees 5..10: block 0 (0..3) is out, block 1 (4..7) still in.
  ASSERT_TRUE(kv.allocate_slots(1, 10, 1));
  kv.commit_computed(1, tokens, 11);
  EXPECT_EQ(kv.n_released(1), 1);
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_EQ(kv.n_free_blocks(), 6);
  // Decode through position 25: it sees 20..25, so blocks 0..4 (0..19) are released; a sequence
  // of 26 tokens holds 2 blocks of 8 cached positions.
  for (int p = 11; p < 26; ++p) {
    ASSERT_TRUE(kv.allocate_slots(1, p, 1)) << p;
    kv.commit_computed(1, tokens, p + 1);
  }
  EXPECT_EQ(kv.n_released(1), 5);
  EXPECT_EQ(kv.n_held(1), 2);
  EXPECT_EQ(kv.block_table(1).size(), 7u);
  EXPECT_EQ(kv.n_free_blocks(), 6);
  // A fork shares only the held blocks; freeing both returns every block exactly once.
  kv.fork(1, 2);
  EXPECT_EQ(kv.n_held(2), 2);
  EXPECT_EQ(kv.n_released(2), 5);
  EXPECT_EQ(kv.ref_count(kv.block_table(1)[6]), 2);
  // The released full blocks are still cached: a prompt sharing 12 tokens hits 3 blocks.
  PrefixHit hit = kv.find_prefix(iota_tokens(13));
  EXPECT_EQ(hit.n_tokens, 12);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.n_free_blocks(), 8);
  EXPECT_EQ(kv.n_used_blocks(), 0);
  // Without a window nothing is released.
  KvCacheManager all({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  ASSERT_TRUE(all.allocate_slots(1, 0, 20));
  ASSERT_TRUE(all.allocate_slots(1, 20, 1));
  EXPECT_EQ(all.n_released(1), 0);
  EXPECT_EQ(all.n_held(1), 6);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(KvCacheManager, ImportPrefixCachesMissingFullBlocksOnly) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  // Block 0 of the prompt is already cached here (an earlier request).
  ASSERT_TRUE(kv.allocate_slots(1, 0, 4));
  kv.commit_computed(1, iota_tokens(4), 4);
  kv.free(1);
  const auto prompt = iota_tokens(14);  // 3 full blocks + 2 tokens
  const auto got = kv.import_prefix(prompt);
  ASSERT_EQ(got.size(), 2u);  // blocks 1 and 2; the partial tail is not imported
  EXPECT_EQ(got[0].index, 1);
  EXPECT_EQ(got[1].index, 2);
  EXPECT_EQ(kv.n_cached_prefix_tokens(prompt), 12);
  const std::vector<BlockId> ids = kv.cached_prefix_blocks(prompt);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], got[0].id);
  EXPECT_EQ(ids[2], got[1].id);
  // Imported blocks are evictable, held by nobody.
  EXPECT_EQ(kv.n_free_blocks(), 8);
  for (BlockId id : ids) EXPECT_EQ(kv.ref_count(id), 0);
  // A request with that prompt hits all 3 blocks (one token left to compute... 14 - 12 = 2).
  EXPECT_EQ(kv.find_prefix(prompt).n_tokens, 12);
  // Importing again allocates nothing.
  EXPECT_TRUE(kv.import_prefix(prompt).empty());
}

TEST(KvCacheManager, ImportPrefixStopsWhenThePoolIsShortAndNeverEvictsItself) {
  KvCacheManager kv({.n_blocks = 3, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  ASSERT_TRUE(kv.allocate_slots(1, 0, 4));                 // one block held by a running request
  const auto got = kv.import_prefix(iota_tokens(20, 50));  // 5 full blocks, 2 free
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(kv.n_cached_prefix_tokens(iota_tokens(20, 50)), 8);
  // Off: nothing.
  KvCacheManager off({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  EXPECT_TRUE(off.import_prefix(iota_tokens(8)).empty());
}

TEST(KvCacheManager, ImportPrefixFromAFirstBlockNeedsTheBlocksBeforeItCached) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  const auto prompt = iota_tokens(16);  // 4 full blocks
  // Nothing cached: an import from block 2 cannot chain onto blocks 0 and 1.
  EXPECT_TRUE(kv.import_prefix(prompt, 2).empty());
  EXPECT_EQ(kv.n_cached_prefix_tokens(prompt), 0);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 8));
  kv.commit_computed(1, prompt, 8);
  kv.free(1);
  const auto got = kv.import_prefix(prompt, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].index, 2);
  EXPECT_EQ(got[1].index, 3);
  EXPECT_EQ(kv.n_cached_prefix_tokens(prompt), 16);
}

TEST(KvCacheManager, PrefixHashesAreTheChainTheCacheFilesBlocksUnder) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = true, .salt = 3});
  const auto prompt = iota_tokens(11);
  const std::vector<BlockHash> h = kv.prefix_hashes(prompt);
  ASSERT_EQ(h.size(), 2u);  // full blocks only
  EXPECT_NE(h[0], h[1]);
  kv.set_record_cached(true);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 11));
  kv.commit_computed(1, prompt, 11);
  const auto cached = kv.take_newly_cached();
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_EQ(cached[0].hash, h[0]);
  EXPECT_EQ(cached[1].hash, h[1]);
  EXPECT_EQ(cached[1].tokens, std::vector<int32_t>(prompt.begin() + 4, prompt.begin() + 8));
  EXPECT_EQ(cached[0].id, kv.block_table(1)[0]);
  EXPECT_TRUE(kv.take_newly_cached().empty());  // taken once
  // A different salt (another model) gives other identities; a shared prefix the same first.
  KvCacheManager other({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = true, .salt = 4});
  EXPECT_NE(other.prefix_hashes(prompt)[0], h[0]);
  auto longer = iota_tokens(16);
  EXPECT_EQ(kv.prefix_hashes(longer)[1], h[1]);
  // Imports are recorded too; recording off records nothing.
  kv.free(1);
  EXPECT_EQ(kv.import_prefix(iota_tokens(8, 100)).size(), 2u);
  EXPECT_EQ(kv.take_newly_cached().size(), 2u);
  kv.set_record_cached(false);
  EXPECT_EQ(kv.import_prefix(iota_tokens(8, 200)).size(), 2u);
  EXPECT_TRUE(kv.take_newly_cached().empty());
}

TEST(KvCacheManager, PinnedBlocksSurviveAnyPressureUntilUnpinned) {
  KvCacheManager kv({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  const auto prompt = iota_tokens(9);  // 2 full blocks
  ASSERT_TRUE(kv.allocate_slots(1, 0, 9));
  kv.commit_computed(1, prompt, 9);
  kv.free(1);
  const std::vector<BlockId> pinned = kv.pin_prefix(prompt);
  ASSERT_EQ(pinned.size(), 2u);
  EXPECT_EQ(kv.n_pinned_blocks(), 2);
  EXPECT_EQ(kv.n_free_blocks(), 2);
  // Another request takes every block it can: the pinned two are not among them.
  EXPECT_FALSE(kv.allocate_slots(2, 0, 16));
  ASSERT_TRUE(kv.allocate_slots(2, 0, 8));
  for (BlockId b : kv.block_table(2)) EXPECT_TRUE(b != pinned[0] && b != pinned[1]);
  EXPECT_EQ(kv.n_cached_prefix_tokens(prompt), 8);
  kv.free(2);
  kv.unpin(pinned);
  EXPECT_EQ(kv.n_pinned_blocks(), 0);
  EXPECT_EQ(kv.n_free_blocks(), 4);
  EXPECT_EQ(kv.n_cached_prefix_tokens(prompt), 8);  // still cached, now evictable
  ASSERT_TRUE(kv.allocate_slots(3, 0, 16));         // and evicted under pressure
  EXPECT_EQ(kv.n_cached_prefix_tokens(prompt), 0);
  // Nothing cached: nothing pinned.
  EXPECT_TRUE(kv.pin_prefix(iota_tokens(8, 77)).empty());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// K/V groups of different windows (3, global, 9; blocks of 4) over one small pool, driven at
// random: requests from a few shared prefixes, chunked prefill, decode, preemption when the pool
// is short, finishing. A shadow of every block's contents (which group wrote which token) checks
// after each allocation that every position a group reads next holds this request's token in
// that group: prefix hits, copy-on-write, released and evicted windowed blocks never serve a
// wrong row. At the end every block is free again.
TEST(KvCacheManager, GroupsOfDifferentWindowsReadOnlyTheirOwnTokens) {
  const std::vector<int32_t> windows = {3, 0, 9};
  const int32_t bs = 4, G = 3;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    KvCacheManager kv({.n_blocks = 60,
                       .block_size = bs,
                       .enable_prefix_cache = true,
                       .salt = 0,
                       .group_windows = windows});
    ASSERT_EQ(kv.n_groups(), G);
    // shadow[block * bs + offset] = (group, token) last written there.
    std::vector<std::pair<int32_t, int32_t>> shadow(size_t(60 * bs), {-1, -1});
    struct Req {
      std::vector<int32_t> tokens;
      int32_t n_computed = 0;
      int32_t target = 0;
    };
    std::map<RequestId, Req> live;
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 3; ++i) prefixes.push_back(iota_tokens(8 + int(rng() % 20), 1000 * i));
    RequestId next_id = 1;
    int hits = 0, released_seen = 0;
    for (int op = 0; op < 400; ++op) {
      if (live.size() < 4 && rng() % 3 == 0) {
        Req r;
        r.tokens = prefixes[rng() % prefixes.size()];
        r.tokens.resize(r.tokens.size() - rng() % 5);
        for (int k = int(rng() % 9); k > 0; --k) r.tokens.push_back(int32_t(rng() % 50));
        r.target = int32_t(r.tokens.size()) + 1 + int32_t(rng() % 20);
        const RequestId id = next_id++;
        PrefixHit hit = kv.find_prefix(r.tokens);
        ASSERT_EQ(hit.blocks.size(), size_t(G) * size_t(hit.n_tokens / bs));
        r.n_computed = hit.n_tokens;
        hits += hit.n_tokens > 0;
        const int32_t n_new =
            std::min<int32_t>(int32_t(r.tokens.size()) - r.n_computed, 1 + int32_t(rng() % 7));
        if (!kv.allocate_slots(id, r.n_computed, n_new, &hit)) continue;
        live[id] = r;
        continue;
      }
      if (live.empty()) continue;
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const RequestId id = it->first;
      Req& r = it->second;
      // The step: a chunk of the prompt or one decode token (a request just admitted allocates
      // its first chunk again, which changes nothing).
      const bool decoding = r.n_computed >= int32_t(r.tokens.size());
      if (decoding) r.tokens.push_back(int32_t(rng() % 50));
      const int32_t n_new =
          std::min<int32_t>(int32_t(r.tokens.size()) - r.n_computed, 1 + int32_t(rng() % 7));
      if (!kv.allocate_slots(id, r.n_computed, n_new)) {
        if (decoding) r.tokens.pop_back();
        kv.free(id);  // preempted: recomputed from scratch (or a prefix hit) later
        live.erase(it);
        continue;
      }
      const auto& tables = kv.block_tables(id);
      ASSERT_EQ(int32_t(tables.size()), G);
      for (int32_t g = 0; g < G; ++g) {
        for (int32_t p = r.n_computed; p < r.n_computed + n_new; ++p) {
          shadow[size_t(tables[size_t(g)][size_t(p / bs)] * bs + p % bs)] = {g,
                                                                             r.tokens[size_t(p)]};
        }
      }
      for (int32_t g = 0; g < G; ++g) {
        const int32_t w = windows[size_t(g)];
        const int32_t from = w > 0 ? std::max(0, r.n_computed - w + 1) : 0;
        for (int32_t p = from; p < r.n_computed + n_new; ++p) {
          const BlockId b = tables[size_t(g)][size_t(p / bs)];
          ASSERT_GE(b, 0);
          ASSERT_LT(b, 60);
          ASSERT_EQ(shadow[size_t(b * bs + p % bs)], std::make_pair(g, r.tokens[size_t(p)]))
              << "request " << id << " group " << g << " position " << p;
        }
        // Every entry, released ones too, is a valid block id.
        for (BlockId b : tables[size_t(g)]) ASSERT_TRUE(b >= 0 && b < 60);
      }
      released_seen = std::max(released_seen, kv.n_released(id));
      r.n_computed += n_new;
      kv.commit_computed(id, r.tokens, r.n_computed);
      if (r.n_computed >= r.target) {
        kv.free(id);
        live.erase(it);
      }
    }
    for (const auto& [id, r] : live) kv.free(id);
    EXPECT_EQ(kv.n_used_blocks(), 0);
    EXPECT_GT(hits, 0);
    EXPECT_GT(released_seen, 0);
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// 32 blocks of 4 tokens, 2 state slots and 2 checkpoints, one kept every `interval` blocks.
KvCacheConfig checkpointed_cache(int32_t interval) {
  return {.n_blocks = 32,
          .block_size = 4,
          .enable_prefix_cache = true,
          .salt = 0,
          .group_windows = {},
          .n_state_slots = 2,
          .n_state_checkpoints = 2,
          .checkpoint_interval_blocks = interval};
}

// Recurrent state checkpoints (blocks of 4, one kept every 4 blocks): a hit needs the K/V
// blocks and a checkpoint at its end; a request keeps one rolling checkpoint; the least
// recently used goes first when the pool is full; a hit queues the restore into the new
// request's state slot.
TEST(KvCacheManager, StateCheckpointsRollKeepAndRestore) {
  KvCacheManager kv(checkpointed_cache(4));
  const auto tokens = iota_tokens(40);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 8));
  EXPECT_EQ(kv.state_slot(1), 0);  // the lowest free slot first
  kv.commit_computed(1, tokens, 8);
  kv.save_state(1, 8, false);  // 2 blocks: rolling
  EXPECT_EQ(kv.n_used_checkpoints(), 1);
  auto copies = kv.take_state_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, kv.state_slot(1));
  EXPECT_GE(copies[0].dst, 2);  // checkpoints follow the 2 sequence slots
  kv.save_state(1, 7, true);    // not a block boundary: nothing
  EXPECT_TRUE(kv.take_state_copies().empty());
  ASSERT_TRUE(kv.allocate_slots(1, 8, 8));
  kv.commit_computed(1, tokens, 16);
  kv.save_state(1, 16, false);  // 4 blocks: kept; the rolling one at 2 blocks goes
  EXPECT_EQ(kv.n_used_checkpoints(), 1);
  EXPECT_EQ(kv.checkpoint_stats().evicted, 1u);
  kv.take_state_copies();
  // A prompt sharing 17 tokens hits 16 with the checkpoint there; one sharing only 12 finds no
  // checkpoint at or below 3 blocks: no hit.
  PrefixHit hit = kv.find_prefix(iota_tokens(17));
  EXPECT_EQ(hit.n_tokens, 16);
  EXPECT_GE(hit.state_checkpoint, 2);
  std::vector<int32_t> short_prompt = iota_tokens(12);
  short_prompt.push_back(99);
  EXPECT_EQ(kv.find_prefix(short_prompt).n_tokens, 0);
  EXPECT_EQ(kv.n_cached_prefix_tokens(iota_tokens(30)), 16);
  // The hit's request resumes from the checkpoint.
  ASSERT_TRUE(kv.allocate_slots(2, 16, 1, &hit));
  copies = kv.take_state_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, hit.state_checkpoint);
  EXPECT_EQ(copies[0].dst, kv.state_slot(2));
  EXPECT_EQ(kv.checkpoint_stats().restored, 1u);
  // No third state slot: admission waits.
  EXPECT_FALSE(kv.allocate_slots(3, 0, 1));
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.n_used_state_slots(), 0);
  EXPECT_EQ(kv.n_used_blocks(), 0);
}

// n_hit_tokens is find_prefix's answer without its side effects, for any prompt: on a hybrid
// (a checkpoint needed at the hit's end) the rule the server used before it existed, cached full
// blocks capped to leave one token, claims 16 tokens for a 32-token prompt whose only
// checkpoint is at 32: the scheduler takes none.
TEST(KvCacheManager, HitTokensProbeAgreesWithTheLookup) {
  KvCacheManager kv(checkpointed_cache(1));
  const auto tokens = iota_tokens(40);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 32));
  kv.commit_computed(1, tokens, 32);
  kv.save_state(1, 32, false);  // the only checkpoint: after 8 blocks
  kv.take_state_copies();
  kv.free(1);
  for (size_t n = 0; n <= tokens.size(); ++n) {
    const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + long(n));
    const uint64_t lookups = kv.prefix_stats().lookups;
    const int32_t probed = kv.n_hit_tokens(prompt);
    EXPECT_EQ(kv.prefix_stats().lookups, lookups) << "a probe counts no lookup";
    EXPECT_EQ(probed, kv.find_prefix(prompt).n_tokens) << n << " tokens";
    EXPECT_EQ(probed, n > 32 ? 32 : 0) << n << " tokens";
  }
  const std::vector<int32_t> p32(tokens.begin(), tokens.begin() + 32);
  EXPECT_EQ(kv.n_cached_prefix_tokens(p32), 32);  // what a transfer could move
  EXPECT_EQ(kv.n_hit_tokens(p32), 0);
}

// Moving checkpoints (K/V transfer, disk tier): only a checkpoint whose copy went into a step is
// pinned or reported; a pinned one is neither evicted nor replaced; an imported one is a hit.
TEST(KvCacheManager, StateCheckpointsPinImportAndRecord) {
  KvCacheManager kv(checkpointed_cache(1));  // every boundary kept
  kv.set_record_cached(true);
  const auto tokens = iota_tokens(40);
  ASSERT_TRUE(kv.allocate_slots(1, 0, 8));
  kv.commit_computed(1, tokens, 8);
  kv.save_state(1, 8, false);
  // Saved, its copy not yet handed to a step: not in place.
  EXPECT_EQ(kv.pin_checkpoint(tokens, 10).slot, -1);
  EXPECT_TRUE(kv.take_newly_checkpointed().empty());
  ASSERT_EQ(kv.take_state_copies().size(), 1u);
  const auto fresh = kv.take_newly_checkpointed();
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(fresh[0].key, kv.prefix_hashes(iota_tokens(8)).back());
  EXPECT_TRUE(kv.take_newly_checkpointed().empty());
  // Pinned: at most max_blocks deep, on the shared prefix only.
  EXPECT_EQ(kv.pin_checkpoint(tokens, 1).slot, -1);
  const KvCacheManager::CheckpointRef pin = kv.pin_checkpoint(tokens, 10);
  EXPECT_EQ(pin.n_blocks, 2);
  EXPECT_EQ(pin.slot, fresh[0].slot);
  // Two more boundaries with one checkpoint free: the pinned one stays, the other rolls over.
  ASSERT_TRUE(kv.allocate_slots(1, 8, 8));
  kv.commit_computed(1, tokens, 16);
  kv.save_state(1, 12, false);
  kv.save_state(1, 16, false);
  kv.take_state_copies();
  EXPECT_EQ(kv.find_prefix(iota_tokens(17)).n_tokens, 16);
  EXPECT_EQ(kv.find_prefix(iota_tokens(9)).n_tokens, 8);  // the pinned one, still a hit
  const auto recorded = kv.take_newly_checkpointed();
  ASSERT_EQ(recorded.size(), 1u);  // the one at 12 was evicted before its step
  EXPECT_EQ(recorded[0].key, kv.prefix_hashes(iota_tokens(16)).back());
  kv.unpin_checkpoint(pin.slot);
  kv.free(1);
  // An import: a checkpoint there already is refused; a new one after cached blocks is a hit.
  EXPECT_EQ(kv.import_checkpoint(iota_tokens(8)), -1);
  std::vector<int32_t> other = iota_tokens(12);
  other[0] = 77;
  ASSERT_EQ(kv.import_prefix(other).size(), 3u);
  EXPECT_EQ(kv.find_prefix(other).n_tokens, 0);  // blocks without a state: no hit
  const int32_t slot = kv.import_checkpoint(std::span<const int32_t>(other).first(8));
  EXPECT_GE(slot, 2);
  EXPECT_EQ(kv.import_checkpoint(std::span<const int32_t>(other).first(6)), -1);  // not whole
  other.push_back(5);
  const PrefixHit hit = kv.find_prefix(other);
  EXPECT_EQ(hit.n_tokens, 8);
  EXPECT_EQ(hit.state_checkpoint, slot);
  kv.forget_checkpoint(slot);
  EXPECT_EQ(kv.find_prefix(other).n_tokens, 0);
}

}  // namespace
}  // namespace sluice
