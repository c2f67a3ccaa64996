// Scheduler tests with a fake executor: budgets, chunked prefill, prefix hits, preemption,
// and a property test over thousands of random schedules.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "sched/scheduler.h"

namespace sluice {
namespace {

std::vector<int32_t> tokens(int n, int start = 1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Runs one step with a fake model that always samples token 7; returns the output.
SchedulerOutput step(Scheduler& s) {
  SchedulerOutput out = s.schedule();
  s.on_step_done(out);
  for (const auto& q : out.seqs) {
    if (q.samples) s.append_token(q.id, 7);
  }
  return out;
}

TEST(Scheduler, ChunkedPrefillThenDecodeInOneRaggedStep) {
  KvCacheManager kv({.n_blocks = 64, .block_size = 16, .enable_prefix_cache = true, .salt = 0});
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 8, .prefill_chunk = 40, .use_priority = false}, kv);
  s.add_request(1, tokens(100));
  auto o1 = step(s);
  ASSERT_EQ(o1.seqs.size(), 1u);
  EXPECT_EQ(o1.seqs[0].n_new, 40);
  EXPECT_FALSE(o1.seqs[0].samples);
  s.add_request(2, tokens(10, 500));
  auto o2 = step(s);  // request 1: 40 more; request 2: 10 (its whole prompt), budget 64 -> 24 left
  ASSERT_EQ(o2.seqs.size(), 2u);
  EXPECT_EQ(o2.seqs[0].n_new, 40);
  EXPECT_EQ(o2.seqs[1].n_new, 10);
  EXPECT_TRUE(o2.seqs[1].samples);
  auto o3 = step(s);  // request 1: last 20 prompt tokens; request 2: one decode token
  ASSERT_EQ(o3.seqs.size(), 2u);
  EXPECT_EQ(o3.seqs[0].n_new, 20);
  EXPECT_TRUE(o3.seqs[0].samples);
  EXPECT_EQ(o3.seqs[1].n_new, 1);
  EXPECT_EQ(o3.n_tokens, 21);
}

TEST(Scheduler, SharedPrefixComputesOnlyTheSuffix) {
  KvCacheManager kv({.n_blocks = 200, .block_size = 16, .enable_prefix_cache = true, .salt = 0});
  Scheduler s({.max_batch_tokens = 4096, .max_seqs = 8, .prefill_chunk = 0, .use_priority = false}, kv);
  std::vector<int32_t> prefix = tokens(1000);
  s.add_request(1, prefix);
  step(s);
  s.finish(1);
  std::vector<int32_t> p2 = prefix;
  for (int i = 0; i < 24; ++i) p2.push_back(9000 + i);
  s.add_request(2, p2);
  auto o = step(s);
  ASSERT_EQ(o.seqs.size(), 1u);
  // 1000 tokens = 62 full blocks (992 tokens) cached; 32 tokens computed.
  EXPECT_EQ(o.seqs[0].num_computed, 992);
  EXPECT_EQ(o.seqs[0].n_new, 1024 - 992);
  EXPECT_EQ(kv.prefix_stats().hit_tokens, 992u);
}

TEST(Scheduler, PreemptsMostRecentWhenBlocksRunOutAndRecomputesLater) {
  // 4 blocks of 4 tokens: two requests of 6-token prompts fit (2 blocks each); decoding needs more.
  KvCacheManager kv({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 8, .prefill_chunk = 0, .use_priority = false}, kv);
  s.add_request(1, tokens(6));
  s.add_request(2, tokens(6, 100));
  step(s);  // both prefill (2 blocks each), each samples a token -> 7 tokens
  step(s);  // decode position 6: 7 tokens fit in 2 blocks -> 8 tokens
  step(s);  // decode position 7: 8 tokens fit in 2 blocks -> 9 tokens
  auto o = step(s);  // token 9 needs a 3rd block each: request 2 (admitted last) is preempted
  ASSERT_EQ(o.preempted.size(), 1u);
  EXPECT_EQ(o.preempted[0], 2);
  EXPECT_EQ(s.find(2)->num_computed, 0);
  EXPECT_EQ(s.waiting().front(), 2);
  s.finish(1);
  auto o2 = step(s);  // request 2 comes back and recomputes all 9 of its tokens
  ASSERT_EQ(o2.seqs.size(), 1u);
  EXPECT_EQ(o2.seqs[0].id, 2);
  EXPECT_EQ(o2.seqs[0].n_new, 9);
  EXPECT_EQ(s.find(2)->n_preemptions, 1);
}

TEST(Scheduler, PriorityAdmitsAndPreemptsByPriority) {
  KvCacheManager kv({.n_blocks = 64, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({.max_batch_tokens = 8, .max_seqs = 8, .prefill_chunk = 0, .use_priority = true}, kv);
  s.add_request(1, tokens(8), /*priority=*/5);
  s.add_request(2, tokens(8), /*priority=*/0);
  auto o = step(s);
  ASSERT_EQ(o.seqs.size(), 1u);
  EXPECT_EQ(o.seqs[0].id, 2);
}

TEST(Scheduler, AbortFreesBlocks) {
  KvCacheManager kv({.n_blocks = 8, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({}, kv);
  s.add_request(1, tokens(10));
  step(s);
  EXPECT_GT(kv.n_used_blocks(), 0);
  s.abort(1);
  s.abort(42);  // unknown: ignored
  EXPECT_EQ(kv.n_used_blocks(), 0);
  EXPECT_FALSE(s.has_work());
}

// Thousands of random add/step/abort/finish schedules under memory pressure. After every step:
// block ref counts balance with the block tables, the budget and sequence cap hold, and every
// request eventually finishes (no starvation under FCFS).
TEST(Scheduler, PropertyRandomSchedules) {
  std::mt19937 rng(1234);
  uint64_t total_preemptions = 0, total_hit_tokens = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t block_size = 1 + int32_t(rng() % 8);
    const int32_t n_blocks = 8 + int32_t(rng() % 40);
    const bool prefix = rng() % 2;
    KvCacheManager kv({.n_blocks = n_blocks, .block_size = block_size,
                       .enable_prefix_cache = prefix, .salt = 0});
    SchedulerConfig cfg{.max_batch_tokens = 1 + int32_t(rng() % 64), .max_seqs = 1 + int32_t(rng() % 8),
                        .prefill_chunk = int32_t(rng() % 16), .use_priority = false};
    Scheduler s(cfg, kv);
    std::map<RequestId, int> remaining;  // tokens still to generate
    RequestId next_id = 1;
    const int n_requests = 20;
    int steps = 0;
    while ((next_id <= n_requests || s.has_work()) && steps < 20000) {
      ++steps;
      if (next_id <= n_requests && rng() % 3 == 0) {
        // Prompts share prefixes (1..3) so the prefix cache gets hits; all fit in the pool.
        const int max_len = std::max(1, n_blocks * block_size / 2 - 8);
        std::vector<int32_t> p = tokens(1 + int(rng() % size_t(std::max(1, max_len))),
                                        1 + int(rng() % 3) * 1000);
        remaining[next_id] = 1 + int(rng() % 8);
        s.add_request(next_id++, p);
      }
      if (!remaining.empty() && rng() % 50 == 0) {  // random abort
        auto it = std::next(remaining.begin(), long(rng() % remaining.size()));
        s.abort(it->first);
        remaining.erase(it);
      }
      SchedulerOutput out = s.schedule();
      ASSERT_LE(out.n_tokens, cfg.max_batch_tokens);
      ASSERT_LE(int32_t(s.n_running()), cfg.max_seqs);
      int32_t sum = 0;
      for (const auto& q : out.seqs) {
        sum += q.n_new;
        ASSERT_GT(q.n_new, 0);
        const SchedRequest* r = s.find(q.id);
        ASSERT_NE(r, nullptr);
        // Blocks cover every token computed so far plus this step's.
        ASSERT_GE(int64_t(kv.block_table(q.id).size()) * block_size, q.num_computed + q.n_new);
        if (cfg.prefill_chunk > 0) {
          ASSERT_LE(q.n_new, cfg.prefill_chunk);
        }
      }
      ASSERT_EQ(sum, out.n_tokens);
      s.on_step_done(out);
      for (const auto& q : out.seqs) {
        if (!q.samples) continue;
        if (--remaining[q.id] <= 0) {
          s.finish(q.id);
          remaining.erase(q.id);
        } else {
          s.append_token(q.id, int32_t(rng() % 5000));
        }
      }
      // Ref counts balance: each block's count equals the number of tables holding it.
      std::map<BlockId, int> holders;
      for (RequestId id : s.running()) {
        for (BlockId b : kv.block_table(id)) ++holders[b];
      }
      for (BlockId b = 0; b < n_blocks; ++b) {
        ASSERT_EQ(kv.ref_count(b), holders.count(b) ? holders[b] : 0) << "block " << b;
      }
      ASSERT_EQ(kv.n_used_blocks(), int32_t(holders.size()));
    }
    ASSERT_FALSE(s.has_work()) << "trial " << trial << ": requests starved";
    ASSERT_TRUE(remaining.empty());
    ASSERT_EQ(kv.n_used_blocks(), 0);
    total_preemptions += s.n_preemptions();
    total_hit_tokens += kv.prefix_stats().hit_tokens;
  }
  // The schedules did exercise preemption and prefix hits.
  EXPECT_GT(total_preemptions, 100u);
  EXPECT_GT(total_hit_tokens, 1000u);
}

}  // namespace
}  // namespace sluice
