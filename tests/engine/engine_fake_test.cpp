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
std::vector<std::pair<std::vector<int32_t>, bool>> run(
    const std::vector<Req>& reqs, const EngineConfig& cfg, int32_t n_blocks, int32_t block_size,
    const Tokenizer& tok, EngineStats* stats = nullptr, uint64_t* preempted = nullptr,
    uint64_t* hit_tokens = nullptr, int32_t depth = 1, int32_t* max_in_flight = nullptr) {
  test::FakeExecutor exec(n_blocks, block_size, kVocab, 512);
  exec.set_pipeline_depth(depth);
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
  if (max_in_flight) *max_in_flight = exec.max_in_flight();
  std::vector<std::pair<std::vector<int32_t>, bool>> flat;
  for (auto& v : out) flat.insert(flat.end(), v.begin(), v.end());
  return flat;
}

// Random requests: 2 .. n_req + 1 of them, half sharing a prefix, some groups, some aborted
// (one in `abort_every`, within `abort_window` steps of arriving).
struct WorkloadShape {
  int n_req = 10, max_tokens = 80, arrivals = 30, abort_every = 8, abort_window = 20;
};
std::vector<Req> random_requests(std::mt19937& rng, const WorkloadShape& w) {
  std::vector<Req> reqs;
  const int n_req = 2 + int(rng() % uint32_t(w.n_req));
  std::vector<int32_t> shared;
  for (int i = 0; i < int(rng() % 40); ++i) shared.push_back(3 + int32_t(rng() % (kVocab - 3)));
  for (int i = 0; i < n_req; ++i) {
    Req r;
    r.prompt = rng() % 2 ? shared : std::vector<int32_t>{};
    for (int j = 0; j < 1 + int(rng() % 30); ++j) r.prompt.push_back(3 + int32_t(rng() % 20));
    r.params.sampling.temperature = 0;
    r.params.max_tokens = 1 + int(rng() % uint32_t(w.max_tokens));
    r.params.ignore_eos = rng() % 2;
    r.arrival = int(rng() % uint32_t(w.arrivals));
    r.n = rng() % 5 == 0 ? 2 + int(rng() % 2) : 1;
    if (rng() % uint32_t(w.abort_every) == 0) {
      r.abort_at = r.arrival + int(rng() % uint32_t(w.abort_window));
    }
    reqs.push_back(r);
  }
  return reqs;
}

// The reference: each request alone, no drafts, a roomy cache.
std::vector<std::pair<std::vector<int32_t>, bool>> run_each_alone(const std::vector<Req>& reqs,
                                                                  const Tokenizer& tok) {
  std::vector<std::pair<std::vector<int32_t>, bool>> want;
  for (const Req& r : reqs) {
    Req alone = r;
    alone.arrival = 0;
    alone.abort_at = -1;
    auto o = run({alone}, EngineConfig{}, 256, 16, tok);
    want.insert(want.end(), o.begin(), o.end());
  }
  return want;
}

// A small random cache and scheduler.
struct RandomSetup {
  EngineConfig cfg;
  int32_t block_size = 16, n_blocks = 0;
};
RandomSetup random_setup(std::mt19937& rng) {
  RandomSetup r;
  r.block_size = 1 + int32_t(rng() % 8);
  r.n_blocks = (180 + int32_t(rng() % 200)) / r.block_size + 4;
  r.cfg.scheduler.max_batch_tokens = 4 + int32_t(rng() % 64);
  r.cfg.scheduler.max_seqs = 1 + int32_t(rng() % 12);
  r.cfg.scheduler.prefill_chunk = int32_t(rng() % 20);
  r.cfg.enable_prefix_cache = rng() % 2;
  return r;
}

// Every sample equals its reference; an aborted one, a prefix of it. Counts the aborted.
void expect_outputs(const std::vector<std::pair<std::vector<int32_t>, bool>>& got,
                    const std::vector<std::pair<std::vector<int32_t>, bool>>& want, int trial,
                    uint64_t& aborted) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].second) {
      ++aborted;
      ASSERT_LE(got[i].first.size(), want[i].first.size());
      EXPECT_TRUE(std::equal(got[i].first.begin(), got[i].first.end(), want[i].first.begin()))
          << "trial " << trial << " sample " << i;
    } else {
      EXPECT_EQ(got[i].first, want[i].first) << "trial " << trial << " sample " << i;
    }
  }
}

TEST(EngineFake, RandomWorkloadsEqualPlainAloneWithAndWithoutDrafts) {
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  std::mt19937 rng(2024);
  uint64_t accepted = 0, preemptions = 0, hits = 0, aborted = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::vector<Req> reqs = random_requests(rng, {});
    const auto want = run_each_alone(reqs, tok);
    RandomSetup setup = random_setup(rng);
    EngineConfig& cfg = setup.cfg;
    if (rng() % 3 != 0) {
      cfg.spec.mode = SpecMode::kNgram;
      cfg.spec.n_draft_max = 1 + int32_t(rng() % 10);
      cfg.spec.ngram.n_min = 1 + int32_t(rng() % 2);
      cfg.spec.ngram.n_max = cfg.spec.ngram.n_min + int32_t(rng() % 3);
    }
    EngineStats st;
    uint64_t p = 0, h = 0;
    auto got = run(reqs, cfg, setup.n_blocks, setup.block_size, tok, &st, &p, &h);
    preemptions += p;
    hits += h;
    expect_outputs(got, want, trial, aborted);
    accepted += st.spec_accepted_tokens;
  }
  EXPECT_GT(accepted, 1000u);
  EXPECT_GT(aborted, 5u);
  EXPECT_GT(preemptions, 20u);
  EXPECT_GT(hits, 200u);
}

// Pipelined execution (a pipeline-parallel executor: Executor::pipeline_depth): the engine keeps
// up to `depth` steps in flight, each over requests the others do not hold. The fake refuses a
// batch that reads K/V a batch in flight has not written yet; outputs must equal each request
// run alone, through preemption, prefix hits, groups and aborts of requests in flight.
TEST(EngineFake, PipelinedStepsEqualPlainAlone) {
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  std::mt19937 rng(77);
  uint64_t preemptions = 0, hits = 0, aborted = 0, overlapped = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::vector<Req> reqs = random_requests(rng, {12, 60, 20, 6, 10});
    const auto want = run_each_alone(reqs, tok);
    const RandomSetup setup = random_setup(rng);
    const int32_t depth = 2 + int32_t(rng() % 2);
    uint64_t p = 0, h = 0;
    int32_t most = 0;
    auto got =
        run(reqs, setup.cfg, setup.n_blocks, setup.block_size, tok, nullptr, &p, &h, depth, &most);
    preemptions += p;
    hits += h;
    ASSERT_LE(most, depth);
    overlapped += most > 1;
    expect_outputs(got, want, trial, aborted);
  }
  EXPECT_GT(overlapped, 100u);
  EXPECT_GT(aborted, 5u);
  EXPECT_GT(preemptions, 20u);
  EXPECT_GT(hits, 200u);
}

// Steps take turns over two halves of the running requests: 16 decoding requests on a depth-2
// pipeline run as two steps of 8 in flight, not one of 16.
TEST(EngineFake, PipelinedStepsSplitTheRequestsIntoHalves) {
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  test::FakeExecutor exec(512, 16, kVocab, 512);
  exec.set_pipeline_depth(2);
  auto engine = Engine::create(tok, exec, EngineConfig{});
  ASSERT_TRUE(engine.ok()) << engine.message();
  Engine& e = **engine;
  EXPECT_EQ(e.pipeline_depth(), 2);
  GenerationParams gp;
  gp.sampling.temperature = 0;
  gp.max_tokens = 20;
  gp.ignore_eos = true;
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(e.add_request({5, 6, int32_t(7 + i)}, gp).ok());
  uint64_t tokens = 0;
  while (e.has_work()) {
    auto ev = e.step();
    ASSERT_TRUE(ev.ok()) << ev.message();
    size_t n_with_token = 0;
    for (const EngineEvent& x : *ev) n_with_token += !x.tokens.empty();
    EXPECT_EQ(n_with_token, 8u);  // each step: one half
    tokens += n_with_token;
  }
  EXPECT_EQ(tokens, 16u * 20u);
  EXPECT_EQ(exec.max_in_flight(), 2);
  EXPECT_EQ(e.kv().n_used_blocks(), 0);
}

// A group's leader aborted while the step that completes its prompt is in flight: its heir
// recomputes the prompt, and no sample draws from the aborted leader's row.
TEST(EngineFake, PipelinedLeaderAbortedInFlightHandsOverToItsHeir) {
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  GenerationParams gp;
  gp.sampling.temperature = 0;
  gp.max_tokens = 12;
  gp.ignore_eos = true;
  const std::vector<int32_t> prompt{4, 9, 11, 13};
  Req alone{prompt, gp};
  const std::vector<int32_t> want = run({alone}, EngineConfig{}, 256, 16, tok)[0].first;

  test::FakeExecutor exec(256, 16, kVocab, 512);
  exec.set_pipeline_depth(2);
  auto engine = Engine::create(tok, exec, EngineConfig{});
  ASSERT_TRUE(engine.ok()) << engine.message();
  Engine& e = **engine;
  std::map<RequestId, std::vector<int32_t>> got;
  const auto step = [&] {
    auto ev = e.step();
    ASSERT_TRUE(ev.ok()) << ev.message();
    for (const EngineEvent& x : *ev) {
      got[x.id].insert(got[x.id].end(), x.tokens.begin(), x.tokens.end());
    }
  };
  ASSERT_TRUE(e.add_request({5, 6, 7}, gp).ok());
  ASSERT_TRUE(e.add_request({5, 6, 8}, gp).ok());
  step();  // two steps of one request each; the second is still in flight
  auto group = e.add_request_group(prompt, {gp, gp, gp});
  ASSERT_TRUE(group.ok()) << group.message();
  step();  // the leader's prompt goes in flight beside the first request
  const SchedRequest* leader = e.scheduler().find((*group)[0]);
  ASSERT_TRUE(leader && leader->in_flight);
  e.abort((*group)[0]);
  while (e.has_work()) step();
  EXPECT_TRUE(got[(*group)[0]].empty());
  EXPECT_EQ(got[(*group)[1]], want);
  EXPECT_EQ(got[(*group)[2]], want);
  EXPECT_EQ(e.kv().n_used_blocks(), 0);
}

// Speculative decoding needs each request's latest token to draft: the engine then runs one
// step at a time whatever the executor's depth.
TEST(EngineFake, SpeculationRunsOneStepAtATime) {
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  test::FakeExecutor exec(512, 16, kVocab, 512);
  exec.set_pipeline_depth(2);
  EngineConfig cfg;
  cfg.spec.mode = SpecMode::kNgram;
  auto engine = Engine::create(tok, exec, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  EXPECT_EQ((*engine)->pipeline_depth(), 1);
  GenerationParams gp;
  gp.sampling.temperature = 0;
  gp.max_tokens = 30;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*engine)->add_request({5, 6, int32_t(7 + i)}, gp).ok());
  while ((*engine)->has_work()) ASSERT_TRUE((*engine)->step().ok());
  EXPECT_EQ(exec.max_in_flight(), 0);
  EXPECT_GT((*engine)->stats().spec_accepted_tokens, 0u);
}

}  // namespace
// The measured gate (SpecGate::kMeasured) on a model whose step costs are known exactly (the
// fake advances a virtual clock by fixed + per-token seconds): where a step's price is almost
// all fixed (memory-bound), every draft is verified; where every token costs its full price
// (compute-bound), no draft saves time and the gate drops them once it has measured that.
// Output is the same in every case.
TEST(EngineSpecGate, MeasuredPricesKeepDraftsWhenTokensAreCheapAndDropThemWhenNot) {
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  struct Run {
    std::vector<std::vector<int32_t>> tokens;
    EngineStats stats;
  };
  const auto run = [&](SpecGate gate, double fixed_s, double per_token_s) {
    test::FakeExecutor exec(512, 16, kVocab, 512);
    VirtualClock clock;
    exec.set_virtual_cost(&clock, fixed_s, per_token_s);
    EngineConfig cfg;
    cfg.clock = &clock;
    cfg.spec.mode = SpecMode::kNgram;
    cfg.spec.n_draft_max = 8;
    cfg.spec.gate = gate;
    auto engine = Engine::create(tok, exec, cfg);
    EXPECT_TRUE(engine.ok()) << engine.message();
    GenerationParams gp;
    gp.sampling.temperature = 0;
    gp.max_tokens = 200;
    gp.ignore_eos = true;
    Run r;
    std::map<RequestId, size_t> index;
    for (int i = 0; i < 3; ++i) {
      auto id = (*engine)->add_request({5, 6, int32_t(7 + i)}, gp);
      EXPECT_TRUE(id.ok());
      index[*id] = r.tokens.size();
      r.tokens.emplace_back();
    }
    while ((*engine)->has_work()) {
      auto events = (*engine)->step();
      EXPECT_TRUE(events.ok()) << events.message();
      if (!events.ok()) break;
      for (const EngineEvent& ev : *events) {
        for (int32_t t : ev.tokens) r.tokens[index.at(ev.id)].push_back(t);
      }
    }
    r.stats = (*engine)->stats();
    return r;
  };
  const Run off = run(SpecGate::kOff, 0.01, 1e-4);
  ASSERT_GT(off.stats.spec_draft_tokens, 100u);
  EXPECT_EQ(off.stats.spec_skipped_steps + off.stats.spec_cut_steps, 0u);

  // Memory-bound: 10 ms a step, 0.1 ms a token. Only the first few drafting steps are cut,
  // while the sizes are being measured (kMinSteps each: nothing priced, no drafts; then one
  // size up at a time until two sizes give a line).
  const Run cheap = run(SpecGate::kMeasured, 0.01, 1e-4);
  EXPECT_EQ(cheap.tokens, off.tokens);
  EXPECT_LE(cheap.stats.spec_skipped_steps + cheap.stats.spec_cut_steps, 10u);
  EXPECT_GE(cheap.stats.spec_draft_tokens * 10, off.stats.spec_draft_tokens * 9);

  // Compute-bound: every token 10 ms, nothing fixed. A draft can at best tie with decoding.
  const Run dear = run(SpecGate::kMeasured, 0, 0.01);
  EXPECT_EQ(dear.tokens, off.tokens);
  EXPECT_GT(dear.stats.spec_skipped_steps, 100u);
  EXPECT_LT(dear.stats.spec_draft_tokens * 20, off.stats.spec_draft_tokens);

  // The roofline gate has no roofline here: it lets every draft through.
  const Run roofline = run(SpecGate::kRoofline, 0, 0.01);
  EXPECT_EQ(roofline.stats.spec_draft_tokens, off.stats.spec_draft_tokens);
}

}  // namespace sluice
