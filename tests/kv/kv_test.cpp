#include <gtest/gtest.h>

#include <numeric>

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
  ASSERT_TRUE(kv.allocate_slots(1, 10));
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  kv.commit_computed(1, prompt, 10);  // blocks 0 and 1 are full -> cached
  kv.free(1);
  EXPECT_EQ(kv.n_free_blocks(), 16);

  auto same = iota_tokens(12);  // shares 8 tokens (2 full blocks) then differs in length
  PrefixHit hit = kv.find_prefix(same);
  EXPECT_EQ(hit.n_tokens, 8);
  ASSERT_TRUE(kv.allocate_slots(2, 12, &hit));
  EXPECT_EQ(kv.block_table(2).size(), 3u);
  EXPECT_EQ(kv.block_table(2)[0], hit.blocks[0]);
  EXPECT_EQ(kv.prefix_stats().hit_tokens, 8u);

  // A prompt that is entirely cached still computes its last token: 8 tokens -> 1 block hit.
  PrefixHit whole = kv.find_prefix(iota_tokens(8));
  EXPECT_EQ(whole.n_tokens, 4);
  // A different salt (another model) never hits.
  KvCacheManager other({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = true, .salt = 9});
  ASSERT_TRUE(other.allocate_slots(1, 8));
  other.commit_computed(1, iota_tokens(8), 8);
  EXPECT_EQ(other.find_prefix(iota_tokens(9)).n_tokens, 8);
  EXPECT_EQ(kv.find_prefix(iota_tokens(9, 100)).n_tokens, 0);
}

TEST(KvCacheManager, SharedBlocksAreRefCountedAndAllocationIsAllOrNothing) {
  KvCacheManager kv({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  auto p = iota_tokens(9);
  ASSERT_TRUE(kv.allocate_slots(1, 9));
  kv.commit_computed(1, p, 9);
  PrefixHit hit = kv.find_prefix(p);
  ASSERT_EQ(hit.blocks.size(), 2u);
  EXPECT_FALSE(kv.allocate_slots(2, 13, &hit));  // 2 shared + 2 new, but only 1 block is free
  EXPECT_FALSE(kv.has(2));
  EXPECT_TRUE(kv.allocate_slots(2, 9, &hit));    // 2 shared + 1 new = exactly the last block
  EXPECT_EQ(kv.ref_count(hit.blocks[0]), 2);
  kv.free(1);
  EXPECT_EQ(kv.ref_count(hit.blocks[0]), 1);
  kv.free(2);
  EXPECT_EQ(kv.n_free_blocks(), 4);
}

TEST(KvCacheManager, DisabledPrefixCacheNeverHits) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  ASSERT_TRUE(kv.allocate_slots(1, 8));
  kv.commit_computed(1, iota_tokens(8), 8);
  kv.free(1);
  EXPECT_EQ(kv.find_prefix(iota_tokens(9)).n_tokens, 0);
}

}  // namespace
}  // namespace sluice
