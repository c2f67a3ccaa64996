// The engine on the fake executor (tests/support/fake_executor.h): thousands of random
// workloads in milliseconds. Whatever the batching, chunking, block size, prefix caching,
// preemption, groups, aborts and speculative drafts, every request's greedy output equals the
// request run alone, plainly, and no block leaks.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine.h"
#include "support/fake_executor.h"

namespace sluice {
namespace {

constexpr int32_t kVocab = 64;

struct Req {
  std::vector<int32_t> prompt;
  GenerationParams params;
  int arrival = 0;
  int abort_at = -1;  // step at which it is aborted (-1: never)
  int n = 1;          // samples (a group)
};

// Runs `reqs` on a fresh engine; returns each sample's tokens (requests in order, their samples
// in order) and whether it was aborted.
std::vector<std::pair<std::vector<int32_t>, bool>> run(const std::vector<Req>& reqs,
                                                       const EngineConfig& cfg, int32_t n_blocks,
                                                       int32_t block_size, const Tokenizer& tok,
                                                       EngineStats* stats = nullptr,
                                                       uint64_t* preempted = nullptr,
                                                       uint64_t* hit_tokens = nullptr) {
  test::FakeExecutor exec(n_blocks, block_size, kVocab, 512);
  auto engine = Engine::create(tok, exec, cfg);
  EXPECT_TRUE(engine.ok()) << engine.message();
  Engine& e = **engine;
  std::vector<std::vector<RequestId>> ids(reqs.size());
  std::map<RequestId, std::pair<size_t, size_t>> where;
  std::vector<std::vector<std::pair<std::vector<int32_t>, bool>>> out(reqs.size());
  size_t added = 0;
  for (int step = 0; (added < reqs.size() || e.has_work()) && step < 100000; ++step) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].arrival != step) continue;
      auto r = e.add_request_group(
          reqs[i].prompt, std::vector<GenerationParams>(size_t(reqs[i].n), reqs[i].params));
      EXPECT_TRUE(r.ok()) << r.message();
      ids[i] = *r;
      out[i].resize(ids[i].size());
      for (size_t k = 0; k < ids[i].size(); ++k) where[ids[i][k]] = {i, k};
      ++added;
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].abort_at == step) {
        for (RequestId id : ids[i]) e.abort(id);
      }
    }
    auto events = e.step();
    EXPECT_TRUE(events.ok()) << events.message();
    if (!events.ok()) break;
    for (const EngineEvent& ev : *events) {
      auto [i, k] = where.at(ev.id);
      auto& o = out[i][k];
      o.first.insert(o.first.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finish == FinishReason::kAbort) o.second = true;
    }
  }
  EXPECT_FALSE(e.has_work());
  EXPECT_EQ(e.kv().n_used_blocks(), 0);
  if (stats) *stats = e.stats();
  if (preempted) *preempted = e.scheduler().n_preemptions();
  if (hit_tokens) *hit_tokens = e.kv().prefix_stats().hit_tokens;
  std::vector<std::pair<std::vector<int32_t>, bool>> flat;
  for (auto& v : out) flat.insert(flat.end(), v.begin(), v.end());
  return flat;
}

TEST(EngineFake, RandomWorkloadsEqualPlainAloneWithAndWithoutDrafts) {
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  std::mt19937 rng(2024);
  uint64_t accepted = 0, preemptions = 0, hits = 0, aborted = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::vector<Req> reqs;
    const int n_req = 2 + int(rng() % 10);
    std::vector<int32_t> shared;
    for (int i = 0; i < int(rng() % 40); ++i) shared.push_back(3 + int32_t(rng() % (kVocab - 3)));
    for (int i = 0; i < n_req; ++i) {
      Req r;
      r.prompt = rng() % 2 ? shared : std::vector<int32_t>{};
      for (int j = 0; j < 1 + int(rng() % 30); ++j) r.prompt.push_back(3 + int32_t(rng() % 20));
      r.params.sampling.temperature = 0;
      r.params.max_tokens = 1 + int(rng() % 80);
      r.params.ignore_eos = rng() % 2;
      r.arrival = int(rng() % 30);
      r.n = rng() % 5 == 0 ? 2 + int(rng() % 2) : 1;
      if (rng() % 8 == 0) r.abort_at = r.arrival + int(rng() % 20);
      reqs.push_back(r);
    }
    // Reference: each request alone, no drafts, roomy cache.
    std::vector<std::pair<std::vector<int32_t>, bool>> want;
    for (const Req& r : reqs) {
      Req alone = r;
      alone.arrival = 0;
      alone.abort_at = -1;
      auto o = run({alone}, EngineConfig{}, 256, 16, tok);
      want.insert(want.end(), o.begin(), o.end());
    }
    EngineConfig cfg;
    const int32_t block_size = 1 + int32_t(rng() % 8);
    const int32_t n_blocks = (180 + int32_t(rng() % 200)) / block_size + 4;
    cfg.scheduler.max_batch_tokens = 4 + int32_t(rng() % 64);
    cfg.scheduler.max_seqs = 1 + int32_t(rng() % 12);
    cfg.scheduler.prefill_chunk = int32_t(rng() % 20);
    cfg.enable_prefix_cache = rng() % 2;
    if (rng() % 3 != 0) {
      cfg.spec.mode = SpecMode::kNgram;
      cfg.spec.k = 1 + int32_t(rng() % 10);
      cfg.spec.ngram.n_min = 1 + int32_t(rng() % 2);
      cfg.spec.ngram.n_max = cfg.spec.ngram.n_min + int32_t(rng() % 3);
    }
    EngineStats st;
    uint64_t p = 0, h = 0;
    auto got = run(reqs, cfg, n_blocks, block_size, tok, &st, &p, &h);
    preemptions += p;
    hits += h;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].second) {  // aborted: a prefix of the full output
        ++aborted;
        ASSERT_LE(got[i].first.size(), want[i].first.size());
        EXPECT_TRUE(std::equal(got[i].first.begin(), got[i].first.end(), want[i].first.begin()))
            << "trial " << trial << " sample " << i;
      } else {
        EXPECT_EQ(got[i].first, want[i].first) << "trial " << trial << " sample " << i;
      }
    }
    accepted += st.spec_accepted_tokens;
  }
  EXPECT_GT(accepted, 1000u);
  EXPECT_GT(aborted, 5u);
  EXPECT_GT(preemptions, 20u);
  EXPECT_GT(hits, 200u);
}

}  // namespace
}  // namespace sluice
