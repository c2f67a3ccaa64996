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
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 8, .prefill_chunk = 40, .use_priority = false},
              kv);
  s.add_request(1, tokens(100));
  auto o1 = step(s);
  ASSERT_EQ(o1.seqs.size(), 1u);
  EXPECT_EQ(o1.seqs[0].n_new_tokens, 40);
  EXPECT_FALSE(o1.seqs[0].samples);
  s.add_request(2, tokens(10, 500));
  auto o2 = step(s);  // request 1: 40 more; request 2: 10 (its whole prompt), budget 64 -> 24 left
  ASSERT_EQ(o2.seqs.size(), 2u);
  EXPECT_EQ(o2.seqs[0].n_new_tokens, 40);
  EXPECT_EQ(o2.seqs[1].n_new_tokens, 10);
  EXPECT_TRUE(o2.seqs[1].samples);
  auto o3 = step(s);  // request 1: last 20 prompt tokens; request 2: one decode token
  ASSERT_EQ(o3.seqs.size(), 2u);
  EXPECT_EQ(o3.seqs[0].n_new_tokens, 20);
  EXPECT_TRUE(o3.seqs[0].samples);
  EXPECT_EQ(o3.seqs[1].n_new_tokens, 1);
  EXPECT_EQ(o3.n_tokens, 21);
}

TEST(Scheduler, SharedPrefixComputesOnlyTheSuffix) {
  KvCacheManager kv({.n_blocks = 200, .block_size = 16, .enable_prefix_cache = true, .salt = 0});
  Scheduler s({.max_batch_tokens = 4096, .max_seqs = 8, .prefill_chunk = 0, .use_priority = false},
              kv);
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
  EXPECT_EQ(o.seqs[0].n_computed, 992);
  EXPECT_EQ(o.seqs[0].n_new_tokens, 1024 - 992);
  EXPECT_EQ(kv.prefix_stats().hit_tokens, 992u);
}

TEST(Scheduler, PreemptsMostRecentWhenBlocksRunOutAndRecomputesLater) {
  // 4 blocks of 4 tokens: two requests of 6-token prompts fit (2 blocks each); decoding needs more.
  KvCacheManager kv({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 8, .prefill_chunk = 0, .use_priority = false},
              kv);
  s.add_request(1, tokens(6));
  s.add_request(2, tokens(6, 100));
  step(s);           // both prefill (2 blocks each), each samples a token -> 7 tokens
  step(s);           // decode position 6: 7 tokens fit in 2 blocks -> 8 tokens
  step(s);           // decode position 7: 8 tokens fit in 2 blocks -> 9 tokens
  auto o = step(s);  // token 9 needs a 3rd block each: request 2 (admitted last) is preempted
  ASSERT_EQ(o.preempted.size(), 1u);
  EXPECT_EQ(o.preempted[0], 2);
  EXPECT_EQ(s.find(2)->n_computed, 0);
  EXPECT_EQ(s.waiting().front(), 2);
  s.finish(1);
  auto o2 = step(s);  // request 2 comes back and recomputes all 9 of its tokens
  ASSERT_EQ(o2.seqs.size(), 1u);
  EXPECT_EQ(o2.seqs[0].id, 2);
  EXPECT_EQ(o2.seqs[0].n_new_tokens, 9);
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

// Thousands of random add/step/abort/finish schedules under memory pressure, with groups of
// samples that fork a shared prompt. A fake KV memory records which token each slot holds:
// copies are applied before a step's writes, as the executor does. After every step: the KV
// of every running request holds exactly its tokens (so copy-on-write, forks and prefix hits
// are right), a block written this step is held by one table only, block ref counts balance
// with the block tables, the budget and sequence cap hold, and every request eventually
// finishes (no starvation under FCFS; a quarter of the trials use random priorities).
TEST(Scheduler, PropertyRandomSchedules) {
  std::mt19937 rng(1234);
  uint64_t total_preemptions = 0, total_hit_tokens = 0, total_cow = 0, total_forked = 0;
  uint64_t total_promotions = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t block_size = 1 + int32_t(rng() % 8);
    const int32_t n_blocks = 8 + int32_t(rng() % 40);
    const bool prefix = rng() % 2;
    KvCacheManager kv(
        {.n_blocks = n_blocks, .block_size = block_size, .enable_prefix_cache = prefix, .salt = 0});
    SchedulerConfig cfg{.max_batch_tokens = 1 + int32_t(rng() % 64),
                        .max_seqs = 1 + int32_t(rng() % 8),
                        .prefill_chunk = int32_t(rng() % 16),
                        .use_priority = trial % 4 == 3};
    Scheduler s(cfg, kv);
    // memory[block][offset]: the token whose K/V the slot holds (-1: never written).
    std::vector<std::vector<int32_t>> memory(size_t(n_blocks),
                                             std::vector<int32_t>(size_t(block_size), -1));
    std::map<RequestId, int> remaining;  // tokens still to generate
    RequestId next_id = 1;
    const int n_requests = 20;
    int steps = 0;
    while ((next_id <= n_requests || s.has_work()) && steps < 20000) {
      ++steps;
      if (next_id <= n_requests && rng() % 3 == 0) {
        // Prompts share prefixes (1..3) so the prefix cache gets hits; all fit in the pool.
        const int max_len = std::max(1, n_blocks * block_size / 2 - 8);
        std::vector<int32_t> p =
            tokens(1 + int(rng() % size_t(std::max(1, max_len))), 1 + int(rng() % 3) * 1000);
        // One request in three is a group of 2..4 samples of the prompt.
        const int n = rng() % 3 == 0 ? 2 + int(rng() % 3) : 1;
        std::vector<RequestId> ids;
        for (int k = 0; k < n; ++k) {
          remaining[next_id] = 1 + int(rng() % 8);
          ids.push_back(next_id++);
        }
        s.add_group(ids, p, cfg.use_priority ? int32_t(rng() % 3) : 0);
      }
      if (!remaining.empty() && rng() % 50 == 0) {  // random abort (leaders, awaiting samples...)
        auto it = std::next(remaining.begin(), long(rng() % remaining.size()));
        const SchedRequest* r = s.find(it->first);
        ASSERT_NE(r, nullptr);
        total_promotions += r->awaiting_fork.empty() ? 0 : 1;
        s.abort(it->first);
        remaining.erase(it);
      }
      SchedulerOutput out = s.schedule();
      ASSERT_LE(out.n_tokens, cfg.max_batch_tokens);
      ASSERT_LE(int32_t(s.n_running()), cfg.max_seqs);
      int32_t sum = 0;
      for (const auto& q : out.seqs) {
        sum += q.n_new_tokens;
        ASSERT_GT(q.n_new_tokens, 0);
        const SchedRequest* r = s.find(q.id);
        ASSERT_NE(r, nullptr);
        ASSERT_EQ(r->state, RequestState::kRunning);
        // Blocks cover every token computed so far plus this step's.
        const std::vector<BlockId>& table = kv.block_table(q.id);
        ASSERT_GE(int64_t(table.size()) * block_size, q.n_computed + q.n_new_tokens);
        if (cfg.prefill_chunk > 0) {
          ASSERT_LE(q.n_new_tokens, cfg.prefill_chunk);
        }
        // Copy-on-write: every block written now belongs to this table alone.
        for (int32_t b = q.n_computed / block_size; b * block_size < q.n_computed + q.n_new_tokens;
             ++b) {
          ASSERT_EQ(kv.ref_count(table[size_t(b)]), 1)
              << "trial " << trial << " writes a shared block";
        }
        // Forks only where a leader's prompt completes.
        if (!q.forks.empty()) {
          ASSERT_TRUE(q.samples);
          ASSERT_EQ(q.n_computed + q.n_new_tokens, r->n_prompt);
          ASSERT_EQ(q.forks, r->awaiting_fork);
        }
      }
      ASSERT_EQ(sum, out.n_tokens);
      // The fake executor: copies in order, then this step's K/V.
      for (const BlockCopy& c : out.copies) memory[size_t(c.dst)] = memory[size_t(c.src)];
      for (const auto& q : out.seqs) {
        const SchedRequest* r = s.find(q.id);
        const std::vector<BlockId>& table = kv.block_table(q.id);
        for (int32_t pos = q.n_computed; pos < q.n_computed + q.n_new_tokens; ++pos) {
          memory[size_t(table[size_t(pos / block_size)])][size_t(pos % block_size)] =
              r->tokens[size_t(pos)];
        }
      }
      s.on_step_done(out);
      for (const auto& q : out.seqs) {
        if (!q.samples) continue;
        std::vector<RequestId> sampled = {q.id};
        sampled.insert(sampled.end(), q.forks.begin(), q.forks.end());
        for (RequestId id : sampled) {
          if (--remaining[id] <= 0) {
            s.finish(id);
            remaining.erase(id);
          } else {
            s.append_token(id, int32_t(rng() % 5000));
          }
        }
      }
      // Every running request's K/V is its own tokens; waiting ones hold no blocks.
      for (RequestId id : s.running()) {
        const SchedRequest* r = s.find(id);
        const std::vector<BlockId>& table = kv.block_table(id);
        for (int32_t pos = 0; pos < r->n_computed; ++pos) {
          ASSERT_EQ(memory[size_t(table[size_t(pos / block_size)])][size_t(pos % block_size)],
                    r->tokens[size_t(pos)])
              << "trial " << trial << " request " << id << " position " << pos;
        }
      }
      for (RequestId id : s.waiting()) {
        ASSERT_FALSE(kv.has(id));
        for (RequestId c : s.find(id)->awaiting_fork) {
          ASSERT_EQ(s.find(c)->state, RequestState::kAwaitingFork);
          ASSERT_EQ(s.find(c)->leader, id);
          ASSERT_FALSE(kv.has(c));
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
      // Every unfinished request is known to the scheduler.
      for (const auto& [id, left] : remaining)
        ASSERT_NE(s.find(id), nullptr) << "request " << id << " lost";
    }
    ASSERT_FALSE(s.has_work()) << "trial " << trial << ": requests starved";
    ASSERT_TRUE(remaining.empty());
    ASSERT_EQ(kv.n_used_blocks(), 0);
    ASSERT_EQ(s.n_waiting(), 0u);
    total_preemptions += s.n_preemptions();
    total_hit_tokens += kv.prefix_stats().hit_tokens;
    total_cow += kv.share_stats().cow_copies;
    total_forked += kv.share_stats().forked_blocks;
  }
  // The schedules did exercise preemption, prefix hits, forks, copy-on-write and hand-overs.
  EXPECT_GT(total_preemptions, 100u);
  EXPECT_GT(total_hit_tokens, 1000u);
  EXPECT_GT(total_forked, 500u);
  EXPECT_GT(total_cow, 100u);
  EXPECT_GT(total_promotions, 5u);
}

// Runs steps with the fake model (token 7) until no work is left; returns the steps taken.
int drain(Scheduler& s, int max_steps = 1000) {
  int n = 0;
  while (s.has_work() && n < max_steps) {
    SchedulerOutput out = s.schedule();
    s.on_step_done(out);
    for (const auto& q : out.seqs) {
      if (!q.samples) continue;
      s.append_token(q.id, 7);
      for (RequestId f : q.forks) s.append_token(f, 7);
    }
    ++n;
  }
  return n;
}

// A group of 3 samples: the leader prefills once, the others fork it at the prompt's end and
// share its blocks; the next step copies the shared partial block for all but the last.
TEST(SchedulerGroups, PromptComputedOnceThenForkedWithCopyOnWrite) {
  KvCacheManager kv({.n_blocks = 32, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 8, .prefill_chunk = 0, .use_priority = false},
              kv);
  const std::vector<RequestId> ids = {1, 2, 3};
  s.add_group(ids, tokens(10));
  EXPECT_EQ(s.n_waiting(), 3u);  // the leader queued, two samples awaiting the fork
  EXPECT_EQ(s.waiting().size(), 1u);
  SchedulerOutput o1 = s.schedule();
  ASSERT_EQ(o1.seqs.size(), 1u);
  EXPECT_EQ(o1.seqs[0].id, 1);
  EXPECT_EQ(o1.seqs[0].n_new_tokens, 10);
  EXPECT_TRUE(o1.seqs[0].samples);
  EXPECT_EQ(o1.seqs[0].forks, (std::vector<RequestId>{2, 3}));
  s.on_step_done(o1);
  EXPECT_EQ(s.running(), (std::vector<RequestId>{1, 2, 3}));
  for (RequestId id : ids) {
    EXPECT_EQ(s.find(id)->n_computed, 10);
    EXPECT_EQ(kv.block_table(id), kv.block_table(1));
    s.append_token(id, 100 + int32_t(id));
  }
  EXPECT_EQ(kv.n_used_blocks(), 3);  // the prompt's 3 blocks, held once
  EXPECT_EQ(kv.ref_count(kv.block_table(1)[2]), 3);

  SchedulerOutput o2 = s.schedule();  // everyone decodes position 10, in the partial block
  ASSERT_EQ(o2.seqs.size(), 3u);
  EXPECT_EQ(o2.n_tokens, 3);
  ASSERT_EQ(o2.copies.size(), 2u);
  EXPECT_EQ(o2.copies[0].dst, kv.block_table(1)[2]);
  EXPECT_EQ(o2.copies[1].dst, kv.block_table(2)[2]);
  EXPECT_EQ(o2.copies[0].src, kv.block_table(3)[2]);  // the last sample keeps the original
  // 2 shared full blocks + 3 private partial ones.
  EXPECT_EQ(kv.n_used_blocks(), 2 + 3);
  EXPECT_EQ(kv.share_stats().cow_copies, 2u);
  s.on_step_done(o2);
  for (RequestId id : ids) s.finish(id);
  EXPECT_EQ(kv.n_used_blocks(), 0);
  EXPECT_FALSE(s.has_work());
}

TEST(SchedulerGroups, PromptOfWholeBlocksForksWithoutCopies) {
  KvCacheManager kv({.n_blocks = 32, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({}, kv);
  const std::vector<RequestId> ids = {1, 2, 3, 4};
  s.add_group(ids, tokens(8));
  step(s);
  for (RequestId id : {2, 3, 4}) s.append_token(id, 7);  // step() samples only the leader
  EXPECT_EQ(kv.n_used_blocks(), 2);
  SchedulerOutput o = s.schedule();
  EXPECT_EQ(o.seqs.size(), 4u);
  EXPECT_TRUE(o.copies.empty());
  EXPECT_EQ(kv.n_used_blocks(), 2 + 4);  // shared prompt + one new block per sample
}

// The leader is aborted halfway through its (chunked) prompt: the next sample takes over its
// place, its computed tokens and its blocks; the others then fork from it.
TEST(SchedulerGroups, AbortedLeaderHandsItsPromptToTheNextSample) {
  KvCacheManager kv({.n_blocks = 32, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 8, .prefill_chunk = 4, .use_priority = false},
              kv);
  s.add_request(9, tokens(3, 500));
  const std::vector<RequestId> ids = {1, 2, 3};
  s.add_group(ids, tokens(10));
  step(s);  // request 9: whole prompt; leader 1: tokens 0..3
  const std::vector<BlockId> table = kv.block_table(1);
  EXPECT_EQ(s.find(1)->n_computed, 4);
  s.abort(1);
  EXPECT_EQ(s.find(1), nullptr);
  const SchedRequest* heir = s.find(2);
  ASSERT_NE(heir, nullptr);
  EXPECT_EQ(heir->state, RequestState::kRunning);
  EXPECT_EQ(heir->n_computed, 4);
  EXPECT_EQ(heir->awaiting_fork, (std::vector<RequestId>{3}));
  EXPECT_EQ(s.find(3)->leader, 2);
  EXPECT_EQ(kv.block_table(2), table);
  EXPECT_EQ(s.running(), (std::vector<RequestId>{9, 2}));
  // Aborting an awaiting sample just drops it.
  s.add_group(std::vector<RequestId>{4, 5}, tokens(6));
  s.abort(5);
  EXPECT_TRUE(s.find(4)->awaiting_fork.empty());
  SchedulerOutput o = s.schedule();
  ASSERT_GE(o.seqs.size(), 2u);
  EXPECT_EQ(o.seqs[1].id, 2);
  EXPECT_EQ(o.seqs[1].n_computed, 4);  // continues where request 1 stopped
  s.on_step_done(o);
  for (const auto& q : o.seqs) {
    if (q.samples) s.append_token(q.id, 7);
  }
  SchedulerOutput o3 = s.schedule();  // tokens 8, 9: the prompt's end, sample 3 forks
  ASSERT_EQ(o3.seqs[1].id, 2);
  EXPECT_TRUE(o3.seqs[1].samples);
  EXPECT_EQ(o3.seqs[1].forks, (std::vector<RequestId>{3}));
  s.on_step_done(o3);
  EXPECT_EQ(kv.block_table(3), kv.block_table(2));
  for (RequestId id : {2, 3, 4, 9}) s.abort(id);
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(kv.n_used_blocks(), 0);
}

// A leader takes seats for its whole group; a group larger than max_seqs forks what fits and
// queues the rest to recompute (the prefix cache then supplies the prompt's full blocks).
TEST(SchedulerGroups, GroupsTakeSeatsForEverySample) {
  KvCacheManager kv({.n_blocks = 64, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 3, .prefill_chunk = 0, .use_priority = false},
              kv);
  s.add_request(1, tokens(5, 100));
  s.add_group(std::vector<RequestId>{2, 3, 4}, tokens(6));
  SchedulerOutput o = step(s);
  ASSERT_EQ(o.seqs.size(), 1u);  // 1 + 3 seats > 3: the group waits
  s.finish(1);
  o = step(s);
  ASSERT_EQ(o.seqs.size(), 1u);
  EXPECT_EQ(o.seqs[0].forks, (std::vector<RequestId>{3, 4}));
  EXPECT_EQ(s.running(), (std::vector<RequestId>{2, 3, 4}));
  for (RequestId id : {2, 3, 4}) s.abort(id);

  s.add_group(std::vector<RequestId>{10, 11, 12, 13, 14}, tokens(9));
  o = step(s);  // admitted alone (a group larger than max_seqs needs them all)
  EXPECT_EQ(o.seqs[0].forks.size(), 4u);
  EXPECT_EQ(s.running(), (std::vector<RequestId>{10, 11, 12}));
  EXPECT_EQ(s.waiting(), (std::deque<RequestId>{13, 14}));
  EXPECT_EQ(s.find(13)->n_computed, 0);
  EXPECT_FALSE(kv.has(13));
  s.append_token(13, 7);
  s.append_token(14, 7);
  s.append_token(11, 7);
  s.append_token(12, 7);
  for (RequestId id : {10, 11, 12}) s.finish(id);
  o = step(s);
  ASSERT_EQ(o.seqs.size(), 2u);
  EXPECT_EQ(o.seqs[0].id, 13);
  EXPECT_EQ(o.seqs[0].n_computed, 8);    // 2 full prompt blocks from the prefix cache
  EXPECT_EQ(o.seqs[0].n_new_tokens, 2);  // the prompt's last token and its sampled token
  drain(s);
  EXPECT_EQ(kv.n_used_blocks(), 0);
}

// Preempting a forked sample frees only its references; it later recomputes prompt + its own
// tokens while its siblings keep their blocks.
TEST(SchedulerGroups, PreemptedSampleRecomputesAndSiblingsKeepTheirBlocks) {
  // 5 blocks of 4: the 6-token prompt takes 2; 3 samples decoding past 8 tokens need 2 more each.
  KvCacheManager kv({.n_blocks = 5, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 8, .prefill_chunk = 0, .use_priority = false},
              kv);
  s.add_group(std::vector<RequestId>{1, 2, 3}, tokens(6));
  uint64_t steps = 0;
  std::map<RequestId, int> generated;
  while (s.has_work() && steps < 200) {
    SchedulerOutput out = s.schedule();
    s.on_step_done(out);
    for (const auto& q : out.seqs) {
      if (!q.samples) continue;
      std::vector<RequestId> sampled = {q.id};
      sampled.insert(sampled.end(), q.forks.begin(), q.forks.end());
      for (RequestId id : sampled) {
        if (++generated[id] == 6) {
          s.finish(id);
        } else {
          s.append_token(id, 7);
        }
      }
    }
    ++steps;
  }
  EXPECT_FALSE(s.has_work());
  EXPECT_GT(s.n_preemptions(), 0u);
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(generated[id], 6);
  EXPECT_EQ(kv.n_used_blocks(), 0);
  EXPECT_GE(kv.share_stats().cow_copies, 1u);
}

TEST(SchedulerGroups, GroupsFollowPriorities) {
  KvCacheManager kv({.n_blocks = 64, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({.max_batch_tokens = 8, .max_seqs = 8, .prefill_chunk = 0, .use_priority = true}, kv);
  s.add_group(std::vector<RequestId>{1, 2}, tokens(8), /*priority=*/5);
  s.add_group(std::vector<RequestId>{3, 4}, tokens(8), /*priority=*/0);
  SchedulerOutput o = step(s);
  ASSERT_EQ(o.seqs.size(), 1u);
  EXPECT_EQ(o.seqs[0].id, 3);
  EXPECT_EQ(o.seqs[0].forks, (std::vector<RequestId>{4}));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A decoding request verifies its draft in one step: n_new_tokens = 1 + k, logits at all of them;
// the accepted part joins its tokens, n_computed rolls back past the rejected part, and the
// blocks only rejected tokens wrote are freed.
TEST(SchedulerSpec, DraftVerifiedThenRolledBackByTheCounter) {
  KvCacheManager kv({.n_blocks = 16, .block_size = 4, .enable_prefix_cache = true, .salt = 0});
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 4, .prefill_chunk = 0, .use_priority = false},
              kv);
  s.add_request(1, tokens(6));
  SchedulerOutput o = s.schedule();
  s.on_step_done(o);
  s.append_token(1, 50);  // 7 tokens, 6 computed: decoding
  const std::vector<int32_t> draft = {51, 52, 53, 54, 55, 56, 57};
  s.set_draft(1, draft);
  o = s.schedule();
  ASSERT_EQ(o.seqs.size(), 1u);
  EXPECT_EQ(o.seqs[0].n_new_tokens, 8);
  EXPECT_EQ(o.seqs[0].n_draft, 7);
  EXPECT_TRUE(o.seqs[0].samples);
  EXPECT_EQ(kv.block_table(1).size(), 4u);  // 14 positions
  const std::vector<int32_t> accepted = {2};
  s.on_step_done(o, accepted);
  const SchedRequest* r = s.find(1);
  EXPECT_EQ(r->n_computed, 9);  // 6 + the last known token + 2 accepted
  EXPECT_EQ(r->n_tokens(), 9);
  EXPECT_EQ(r->tokens[7], 51);
  EXPECT_EQ(r->tokens[8], 52);
  EXPECT_TRUE(r->draft.empty());
  EXPECT_EQ(kv.block_table(1).size(), 3u);  // the block of positions 12..13 is freed
  EXPECT_EQ(kv.n_used_blocks(), 3);
  s.append_token(1, 60);
  // No draft: a plain decode of one token.
  o = s.schedule();
  EXPECT_EQ(o.seqs[0].n_new_tokens, 1);
  EXPECT_EQ(o.seqs[0].n_draft, 0);
  s.on_step_done(o);
  EXPECT_EQ(s.find(1)->n_computed, 10);
}

// A draft takes what the budget leaves and never preempts: without free blocks it is dropped.
TEST(SchedulerSpec, DraftFitsTheBudgetAndNeverPreempts) {
  KvCacheManager kv({.n_blocks = 4, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({.max_batch_tokens = 5, .max_seqs = 4, .prefill_chunk = 0, .use_priority = false},
              kv);
  s.add_request(1, tokens(4));
  s.add_request(2, tokens(3, 100));
  SchedulerOutput o = s.schedule();  // 4 + 1 of the second prompt (budget 5)
  s.on_step_done(o);
  s.append_token(1, 9);
  o = s.schedule();  // request 1 decodes, request 2 finishes its prompt
  s.on_step_done(o);
  s.append_token(1, 9);
  s.append_token(2, 9);
  // Budget 5: request 1 takes 1 + 4 of its 10-token draft, nothing is left for request 2.
  const std::vector<int32_t> draft(10, 3);
  s.set_draft(1, draft);
  o = s.schedule();
  ASSERT_EQ(o.seqs.size(), 1u);
  EXPECT_EQ(o.seqs[0].n_draft, 4);
  EXPECT_EQ(o.n_tokens, 5);
  s.on_step_done(o, std::vector<int32_t>{0});
  EXPECT_EQ(kv.n_used_blocks(), 3);  // request 1: 6 computed -> 2 blocks; request 2: 1 block
}

TEST(SchedulerSpec, DraftWithoutFreeBlocksIsDroppedNotPreempting) {
  KvCacheManager kv({.n_blocks = 5, .block_size = 4, .enable_prefix_cache = false, .salt = 0});
  Scheduler s({.max_batch_tokens = 16, .max_seqs = 4, .prefill_chunk = 0, .use_priority = false},
              kv);
  s.add_request(1, tokens(4));
  s.add_request(2, tokens(9, 100));
  SchedulerOutput o = s.schedule();
  s.on_step_done(o);
  s.append_token(1, 9);
  s.append_token(2, 9);
  EXPECT_EQ(kv.n_free_blocks(), 1);
  // Request 1's 6-token draft needs 2 more blocks, 1 is free: dropped; both decode one token.
  s.set_draft(1, std::vector<int32_t>(6, 3));
  o = s.schedule();
  ASSERT_EQ(o.seqs.size(), 2u);
  EXPECT_EQ(o.seqs[0].n_draft, 0);
  EXPECT_EQ(o.seqs[0].n_new_tokens, 1);
  EXPECT_EQ(o.seqs[1].n_new_tokens, 1);
  EXPECT_TRUE(o.preempted.empty());
  EXPECT_EQ(s.n_preemptions(), 0u);
}

// Random drafts with random acceptance over random schedules (chunked prefill, prefix cache,
// preemption, groups): K/V always matches the accepted tokens, blocks balance, nothing leaks,
// and the prefix cache never serves a block that holds a rejected token.
TEST(SchedulerSpec, PropertyRandomDraftsAndRollbacks) {
  std::mt19937 rng(99);
  uint64_t total_drafted = 0, total_accepted = 0, total_preempt = 0, total_hits = 0;
  const auto truth = [](int32_t t) { return (t * 31 + 7) % 4999 + 1; };  // the "model"
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t block_size = 1 + int32_t(rng() % 6);
    const int32_t n_blocks = 10 + int32_t(rng() % 40);
    KvCacheManager kv(
        {.n_blocks = n_blocks, .block_size = block_size, .enable_prefix_cache = true, .salt = 0});
    SchedulerConfig cfg{.max_batch_tokens = 2 + int32_t(rng() % 48),
                        .max_seqs = 1 + int32_t(rng() % 6),
                        .prefill_chunk = int32_t(rng() % 12),
                        .use_priority = false};
    Scheduler s(cfg, kv);
    std::vector<std::vector<int32_t>> memory(size_t(n_blocks),
                                             std::vector<int32_t>(size_t(block_size), -1));
    std::map<RequestId, int> remaining;
    std::vector<std::vector<int32_t>> rejected_probes;  // accepted prefix + a rejected token
    std::vector<int32_t> probe_ok_len;
    RequestId next_id = 1;
    int steps = 0;
    while ((next_id <= 16 || s.has_work()) && steps < 20000) {
      ++steps;
      if (next_id <= 16 && rng() % 3 == 0) {
        const int max_len = std::max(1, n_blocks * block_size / 3 - 8);
        std::vector<int32_t> p =
            tokens(1 + int(rng() % size_t(max_len)), 1 + int(rng() % 2) * 1000);
        const int n = rng() % 4 == 0 ? 2 : 1;
        std::vector<RequestId> ids;
        // Every request fits the pool alone, with its last draft.
        const int cap = std::min(24, n_blocks * block_size - int(p.size()) - 9);
        for (int k = 0; k < n; ++k) {
          remaining[next_id] = 1 + int(rng() % size_t(std::max(1, cap)));
          ids.push_back(next_id++);
        }
        s.add_group(ids, p);
      }
      // Drafts for decoding requests: a correct run of random length, then wrong tokens.
      std::map<RequestId, std::vector<int32_t>> drafts;
      for (RequestId id : s.running()) {
        const SchedRequest* r = s.find(id);
        if (r->n_computed + 1 != r->n_tokens() || rng() % 4 == 0) continue;
        std::vector<int32_t> d;
        const int k = 1 + int(rng() % 8);
        const int good = int(rng() % size_t(k + 1));
        int32_t last = r->tokens.back();
        for (int j = 0; j < k; ++j) {
          last = j < good ? truth(last) : 5000 + int32_t(rng() % 100);
          d.push_back(last);
        }
        s.set_draft(id, d);
        drafts[id] = d;
      }
      SchedulerOutput out = s.schedule();
      ASSERT_LE(out.n_tokens, cfg.max_batch_tokens);
      for (const auto& q : out.seqs) {
        const SchedRequest* r = s.find(q.id);
        ASSERT_LE(q.n_draft, int32_t(r->draft.size()));
        if (q.n_draft > 0) {
          ASSERT_EQ(q.n_computed + 1, r->n_tokens());
          ASSERT_TRUE(q.samples);
        }
        const std::vector<BlockId>& table = kv.block_table(q.id);
        ASSERT_GE(int64_t(table.size()) * block_size, q.n_computed + q.n_new_tokens);
        for (int32_t b = q.n_computed / block_size; b * block_size < q.n_computed + q.n_new_tokens;
             ++b) {
          ASSERT_EQ(kv.ref_count(table[size_t(b)]), 1);
        }
      }
      for (const BlockCopy& c : out.copies) memory[size_t(c.dst)] = memory[size_t(c.src)];
      std::vector<int32_t> accepted(out.seqs.size(), 0);
      for (size_t i = 0; i < out.seqs.size(); ++i) {
        const auto& q = out.seqs[i];
        const SchedRequest* r = s.find(q.id);
        const std::vector<BlockId>& table = kv.block_table(q.id);
        for (int32_t j = 0; j < q.n_new_tokens; ++j) {
          const int32_t pos = q.n_computed + j;
          const int32_t tok =
              pos < r->n_tokens() ? r->tokens[size_t(pos)] : r->draft[size_t(pos - r->n_tokens())];
          memory[size_t(table[size_t(pos / block_size)])][size_t(pos % block_size)] = tok;
        }
        // Greedy verification against the "model".
        int32_t last = r->tokens.back();
        for (int32_t j = 0; j < q.n_draft && r->draft[size_t(j)] == truth(last); ++j) {
          last = r->draft[size_t(j)];
          ++accepted[i];
        }
        total_drafted += uint64_t(q.n_draft);
        total_accepted += uint64_t(accepted[i]);
        if (accepted[i] < q.n_draft) {
          std::vector<int32_t> probe = r->tokens;
          probe.insert(probe.end(), r->draft.begin(), r->draft.begin() + q.n_draft);
          probe.push_back(1);
          rejected_probes.push_back(probe);
          probe_ok_len.push_back(r->n_tokens() + accepted[i]);
        }
      }
      s.on_step_done(out, accepted);
      for (size_t i = 0; i < out.seqs.size(); ++i) {
        const auto& q = out.seqs[i];
        if (!q.samples) continue;
        std::vector<RequestId> sampled = {q.id};
        sampled.insert(sampled.end(), q.forks.begin(), q.forks.end());
        for (RequestId id : sampled) {
          remaining[id] -= 1 + accepted[i];
          if (remaining[id] <= 0) {
            s.finish(id);
            remaining.erase(id);
          } else {
            s.append_token(id, truth(s.find(id)->tokens.back()));
          }
        }
      }
      for (const auto& q : out.seqs) {
        if (const SchedRequest* r = s.find(q.id)) {
          ASSERT_TRUE(r->draft.empty());
        }
      }
      for (RequestId id : s.running()) {
        const SchedRequest* r = s.find(id);
        ASSERT_LE(int64_t(kv.block_table(id).size()) * block_size,
                  int64_t(std::max(r->n_computed, 1)) + block_size - 1)
            << "blocks beyond the computed tokens are held";
        const std::vector<BlockId>& table = kv.block_table(id);
        for (int32_t pos = 0; pos < r->n_computed; ++pos) {
          ASSERT_EQ(memory[size_t(table[size_t(pos / block_size)])][size_t(pos % block_size)],
                    r->tokens[size_t(pos)])
              << "trial " << trial << " request " << id << " position " << pos;
        }
      }
      std::map<BlockId, int> holders;
      for (RequestId id : s.running()) {
        for (BlockId b : kv.block_table(id)) ++holders[b];
      }
      for (BlockId b = 0; b < n_blocks; ++b) {
        ASSERT_EQ(kv.ref_count(b), holders.count(b) ? holders[b] : 0) << "block " << b;
      }
    }
    ASSERT_FALSE(s.has_work()) << "trial " << trial;
    ASSERT_EQ(kv.n_used_blocks(), 0);
    // Cached blocks (still in the pool) never cover a rejected token.
    for (size_t i = 0; i < rejected_probes.size(); ++i) {
      ASSERT_LE(kv.find_prefix(rejected_probes[i]).n_tokens, probe_ok_len[i]) << "trial " << trial;
    }
    total_preempt += s.n_preemptions();
    total_hits += kv.prefix_stats().hit_tokens;
  }
  EXPECT_GT(total_drafted, 2000u);
  EXPECT_GT(total_accepted, 500u);
  EXPECT_LT(total_accepted, total_drafted);
  EXPECT_GT(total_preempt, 50u);
  EXPECT_GT(total_hits, 500u);
}

}  // namespace
}  // namespace sluice
