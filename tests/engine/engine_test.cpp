// End-to-end through the engine: real models reproduce their golden continuations, and a
// request's greedy output does not depend on what else runs with it (batching, chunk size,
// prefix-cache hits, preemption).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "executor/cpu_executor.h"
#include "model/convert.h"
#include "model/model.h"
#include "model/model_test_util.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(EngineGolden, EverySharedModelReproducesItsGreedyContinuation) {
  const std::string dir = test::shared_dir();
  if (dir.empty()) SLUICE_SHARED_MISSING("../shared");
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/testdata/models")) {
    if (e.path().extension() != ".json") continue;
    ++n;
    std::ifstream f(e.path());
    auto j = nlohmann::json::parse(f);
    const std::string stem = e.path().filename().string();
    const std::string model_path =
        dir + "/testdata/models/" + stem.substr(0, stem.find('.')) + ".gguf";
    auto l = load(model_path, 512, 64);
    ASSERT_TRUE(l);
    // The prompt tokenizes exactly as the reference did (BOS added as the model says).
    auto ids = l->tokenizer.encode(j["prompt"].get<std::string>());
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, j["prompt_tokens"].get<std::vector<int32_t>>()) << stem;
    const auto want_tokens = j["greedy_tokens"].get<std::vector<int32_t>>();
    auto engine = Engine::create(l->tokenizer, *l->executor, {});
    ASSERT_TRUE(engine.ok());
    auto out = run_all(**engine, {*ids}, {greedy(int(want_tokens.size()))}, {0});
    EXPECT_EQ(out[0].tokens, want_tokens) << stem;
    // The streamed continuation follows the prompt, so it keeps its leading space.
    EXPECT_EQ(out[0].text, j["greedy_text"].get<std::string>()) << stem;
  }
  EXPECT_GE(n, 5);
}

// 32 requests with random arrival times, three prefill chunk sizes, a KV cache small enough to
// force preemption, and shared prefixes: each output equals the request run alone.
TEST(EngineBatching, OutputIndependentOfBatchChunkingPrefixAndPreemption) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto alone = load(path, 512, 64);
  ASSERT_TRUE(alone);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  story_prompts(alone->tokenizer, rng, 32, 20, 30, prompts, params);
  const std::vector<Output> reference = run_each_alone(*alone, prompts, params);
  for (int chunk : {1, 7, 64}) {
    for (bool prefix : {true, false}) {
      // 24 blocks of 16 tokens: far less than 32 requests need at once -> preemption.
      auto l = load(path, 512, 24);
      ASSERT_TRUE(l);
      EngineConfig cfg;
      cfg.scheduler.prefill_chunk = chunk;
      cfg.scheduler.max_batch_tokens = 96;
      cfg.scheduler.max_seqs = 32;
      cfg.enable_prefix_cache = prefix;
      auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
      ASSERT_TRUE(engine.ok());
      std::vector<int> arrivals;
      for (size_t i = 0; i < prompts.size(); ++i) arrivals.push_back(int(rng() % 40));
      auto got = run_all(**engine, prompts, params, arrivals);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(got[i].tokens, reference[i].tokens) << "request " << i << " chunk " << chunk;
        EXPECT_EQ(got[i].text, reference[i].text);
      }
      EXPECT_GT((*engine)->scheduler().n_preemptions(), 0u) << "chunk " << chunk;
      if (prefix) {
        EXPECT_GT((*engine)->kv().prefix_stats().hit_tokens, 0u);
      }
      EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
    }
  }
}

TEST(EngineStops, StopStringsMaxTokensAbortAndValidation) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  auto engine = Engine::create(l->tokenizer, *l->executor, {});
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  auto ids = l->tokenizer.encode("Once upon a time");
  // Golden: ", there was a little girl named Lily. She loved ..."
  GenerationParams stop = greedy(100);
  stop.stop = {"girl named"};
  auto out = run_all(e, {*ids}, {stop}, {0});
  EXPECT_EQ(out[0].text, ", there was a little ");
  EXPECT_EQ(out[0].finish, FinishReason::kStop);
  auto len = run_all(e, {*ids}, {greedy(3)}, {0});
  EXPECT_EQ(len[0].tokens.size(), 3u);
  EXPECT_EQ(len[0].finish, FinishReason::kLength);

  auto id = e.add_request(*ids, greedy(50));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(e.step().ok());
  e.abort(*id);
  auto ev = e.step();
  ASSERT_TRUE(ev.ok());
  ASSERT_FALSE(ev->empty());
  EXPECT_EQ(ev->front().finish, FinishReason::kAbort);
  EXPECT_EQ(e.kv().n_used_blocks(), 0);
  EXPECT_FALSE(e.has_work());

  EXPECT_FALSE(e.add_request({}, greedy(1)).ok());
  EXPECT_FALSE(e.add_request({1, 99999}, greedy(1)).ok());
  EXPECT_FALSE(e.add_request(std::vector<int32_t>(600, 5), greedy(1)).ok());  // > n_ctx
  GenerationParams bad = greedy(1);
  bad.sampling.top_p = 2;
  EXPECT_FALSE(e.add_request(*ids, bad).ok());
}

TEST(EngineContext, GenerationStopsWhenTheContextIsFull) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 40, 8);
  ASSERT_TRUE(l);
  auto engine = Engine::create(l->tokenizer, *l->executor, {});
  auto ids = l->tokenizer.encode("Once upon a time");
  GenerationParams g = greedy(-1);
  g.ignore_eos = true;
  auto out = run_all(**engine, {*ids}, {g}, {0});
  EXPECT_EQ(out[0].finish, FinishReason::kContext);
  EXPECT_EQ(ids->size() + out[0].tokens.size(), 40u);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A request sharing a 1000-token prefix with an earlier finished one computes only its suffix,
// and a second chat turn (previous prompt + reply + new message) reuses the whole conversation.
TEST(EnginePrefixCache, SharedPrefixComputesOnlyTheSuffixAndMultiTurnReusesAll) {
  test::TempDir dir;
  SynthParams sp;
  sp.preset = find_preset("tiny");
  sp.ftype = FileType::MOSTLY_Q8_0;
  sp.out_path = dir.path("tiny.gguf");
  ASSERT_TRUE(synthesize_model(sp).ok());
  auto l = load(sp.out_path, 2048, 256);
  ASSERT_TRUE(l);
  auto engine = Engine::create(l->tokenizer, *l->executor, {});
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  std::mt19937 rng(3);
  std::vector<int32_t> prefix;
  for (int i = 0; i < 1000; ++i) prefix.push_back(3 + int32_t(rng() % 256));  // byte tokens
  std::vector<int32_t> a = prefix, b = prefix;
  for (int i = 0; i < 40; ++i) {
    a.push_back(3 + int32_t(rng() % 256));
    b.push_back(3 + int32_t(rng() % 256));
  }
  auto first = run_all(e, {a}, {greedy(8)}, {0});
  const uint64_t computed_before = e.stats().prompt_tokens;
  EXPECT_EQ(computed_before, a.size());
  auto second = run_all(e, {b}, {greedy(8)}, {0});
  // 1000 shared tokens = 62 full blocks of 16 (992 tokens) come from the cache.
  EXPECT_EQ(e.kv().prefix_stats().hit_tokens, 992u);
  EXPECT_EQ(e.stats().prompt_tokens - computed_before, b.size() - 992);

  // Turn 2 = turn 1's prompt + its reply + a new message: everything computed before is reused.
  std::vector<int32_t> turn2 = b;
  turn2.insert(turn2.end(), second[0].tokens.begin(), second[0].tokens.end());
  for (int i = 0; i < 10; ++i) turn2.push_back(3 + int32_t(rng() % 256));
  const uint64_t hits_before = e.kv().prefix_stats().hit_tokens;
  run_all(e, {turn2}, {greedy(4)}, {0});
  // K/V exist for b + all but the last generated token: 1040 + 7 = 1047 -> 65 full blocks.
  EXPECT_EQ(e.kv().prefix_stats().hit_tokens - hits_before, 65u * 16);
  // And the outputs are the same as without the cache.
  EngineConfig off;
  off.enable_prefix_cache = false;
  auto l2 = load(sp.out_path, 2048, 256);
  auto cold = Engine::create(l2->tokenizer, *l2->executor, off);
  EXPECT_EQ(run_all(**cold, {b}, {greedy(8)}, {0})[0].tokens, second[0].tokens);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// n samples of one prompt (Engine::add_request_group): the prompt is computed once, its KV
// blocks are shared and the partial last one is copied on write.

struct GroupResult {
  std::vector<Output> outputs;  // per sample
  std::vector<RequestId> ids;
  int steps = 0;
};

// Adds one group and runs the engine until it is done. `after_step` sees the engine after
// every step.
GroupResult run_group(
    Engine& e, const std::vector<int32_t>& prompt, const std::vector<GenerationParams>& params,
    const std::function<void(Engine&, const std::vector<RequestId>&)>& after_step = {}) {
  GroupResult g;
  auto ids = e.add_request_group(prompt, params);
  EXPECT_TRUE(ids.ok()) << ids.message();
  if (!ids.ok()) return g;
  g.ids = *ids;
  g.outputs.resize(params.size());
  std::map<RequestId, size_t> index;
  for (size_t i = 0; i < g.ids.size(); ++i) index[g.ids[i]] = i;
  while (e.has_work() && g.steps < 100000) {
    auto events = e.step();
    EXPECT_TRUE(events.ok()) << events.message();
    if (!events.ok()) break;
    ++g.steps;
    for (const EngineEvent& ev : *events) {
      Output& o = g.outputs[index.at(ev.id)];
      o.tokens.insert(o.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      o.text += ev.text;
      if (ev.finished()) o.finish = ev.finish;
    }
    if (after_step) after_step(e, g.ids);
  }
  return g;
}

// While every sample of a group runs with no preemption, the blocks in use are exactly the
// prompt's full blocks once plus each sample's private blocks, and the samples' tables share
// those full blocks. Returns false when the state is not the steady one being checked.
bool expect_group_blocks(const Engine& e, const std::vector<RequestId>& ids, int32_t n_prompt) {
  const int32_t bs = e.kv().block_size();
  const int32_t shared_full = n_prompt / bs;
  std::vector<const SchedRequest*> rs;
  for (RequestId id : ids) {
    const SchedRequest* r = e.scheduler().find(id);
    if (!r || r->state != RequestState::kRunning || r->n_preemptions > 0) return false;
    rs.push_back(r);
  }
  int32_t expected = 0;
  bool any_wrote = false;
  for (const SchedRequest* r : rs) any_wrote |= r->n_computed > n_prompt;
  if (!any_wrote) {
    // Just forked: the whole prompt, partial block included, is held once.
    expected = (n_prompt + bs - 1) / bs;
  } else {
    expected = shared_full;
    for (const SchedRequest* r : rs) expected += (r->n_computed + bs - 1) / bs - shared_full;
  }
  EXPECT_EQ(e.kv().n_used_blocks(), expected) << "prompt " << n_prompt;
  const std::vector<BlockId>& first = e.kv().block_table(ids[0]);
  std::set<BlockId> all;
  for (const SchedRequest* r : rs) {
    const std::vector<BlockId>& t = e.kv().block_table(r->id);
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + shared_full, t.begin()));
    all.insert(t.begin(), t.end());
  }
  EXPECT_EQ(int32_t(all.size()), expected);
  return true;
}

// Greedy samples of one prompt equal the request run alone; the prompt is computed once;
// n - 1 copies when the prompt ends inside a block, none when it ends on a block boundary.
void check_greedy_group(Loaded& l, const std::vector<int32_t>& tokens, int max_tokens,
                        const std::vector<size_t>& lengths) {
  const int n = 4;
  for (size_t len : lengths) {
    ASSERT_LE(len, tokens.size());
    const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + std::ptrdiff_t(len));
    GenerationParams g = greedy(max_tokens);
    g.ignore_eos = true;
    Output alone;
    {
      auto engine = Engine::create(l.tokenizer, *l.executor, {});
      ASSERT_TRUE(engine.ok());
      alone = run_all(**engine, {prompt}, {g}, {0})[0];
      ASSERT_EQ(int(alone.tokens.size()), max_tokens);
    }
    auto engine = Engine::create(l.tokenizer, *l.executor, {});
    ASSERT_TRUE(engine.ok());
    int checked = 0;
    GroupResult r = run_group(**engine, prompt, std::vector<GenerationParams>(n, g),
                              [&](Engine& e, const std::vector<RequestId>& ids) {
                                checked += expect_group_blocks(e, ids, int32_t(len)) ? 1 : 0;
                              });
    ASSERT_EQ(r.outputs.size(), size_t(n));
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(r.outputs[size_t(i)].tokens, alone.tokens) << "sample " << i << " prompt " << len;
      EXPECT_EQ(r.outputs[size_t(i)].text, alone.text);
      EXPECT_EQ(r.outputs[size_t(i)].finish, FinishReason::kLength);
    }
    const Engine& e = **engine;
    EXPECT_GE(checked, max_tokens - 1) << "prompt " << len;
    EXPECT_EQ(e.stats().prompt_tokens, len);
    EXPECT_EQ(e.stats().generated_tokens, uint64_t(n * max_tokens));
    const int32_t bs = e.kv().block_size();
    EXPECT_EQ(e.kv().share_stats().cow_copies, len % size_t(bs) != 0 ? uint64_t(n - 1) : 0u)
        << "prompt " << len;
    EXPECT_EQ(e.kv().share_stats().forks, uint64_t(n - 1));
    EXPECT_EQ(e.kv().share_stats().forked_blocks,
              uint64_t(n - 1) * ((len + size_t(bs) - 1) / size_t(bs)));
    EXPECT_EQ(e.scheduler().n_preemptions(), 0u);
    EXPECT_EQ(e.kv().n_used_blocks(), 0);
  }
}

// Tiny KV caches force preemption of forked samples (with and without the prefix cache, at
// several chunk sizes): the outputs still equal the request run alone.
void check_group_under_preemption(const std::string& model_path, const std::vector<int32_t>& tokens,
                                  const std::vector<size_t>& lengths, int n_blocks,
                                  int max_tokens) {
  const int n = 4;
  auto ref = load(model_path, 512, 64);
  ASSERT_TRUE(ref);
  uint64_t preemptions = 0;
  for (size_t len : lengths) {
    const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + std::ptrdiff_t(len));
    GenerationParams g = greedy(max_tokens);
    g.ignore_eos = true;
    auto alone_engine = Engine::create(ref->tokenizer, *ref->executor, {});
    const Output alone = run_all(**alone_engine, {prompt}, {g}, {0})[0];
    for (int chunk : {0, 5}) {
      for (bool prefix : {true, false}) {
        auto l = load(model_path, 512, n_blocks);
        ASSERT_TRUE(l);
        EngineConfig cfg;
        cfg.scheduler.prefill_chunk = chunk;
        cfg.enable_prefix_cache = prefix;
        auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
        ASSERT_TRUE(engine.ok());
        GroupResult r = run_group(**engine, prompt, std::vector<GenerationParams>(n, g));
        for (int i = 0; i < n; ++i) {
          EXPECT_EQ(r.outputs[size_t(i)].tokens, alone.tokens)
              << "sample " << i << " prompt " << len << " chunk " << chunk << " prefix " << prefix;
        }
        preemptions += (*engine)->scheduler().n_preemptions();
        EXPECT_LE((*engine)->kv().share_stats().cow_copies, uint64_t(n - 1));
        EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
      }
    }
  }
  EXPECT_GT(preemptions, 0u);
}

// Sampled (temperature 1) samples with their own seeds: each equals the request run alone with
// that seed, they differ from each other, and the same seeds repeat the same texts.
void check_seeded_group(Loaded& l, const std::vector<int32_t>& prompt, int max_tokens) {
  std::vector<GenerationParams> params;
  for (uint64_t seed : {11u, 22u, 33u, 44u}) {
    GenerationParams g;
    g.sampling.temperature = 1.0f;
    g.sampling.seed = seed;
    g.max_tokens = max_tokens;
    g.ignore_eos = true;
    params.push_back(g);
  }
  auto engine = Engine::create(l.tokenizer, *l.executor, {});
  ASSERT_TRUE(engine.ok());
  GroupResult a = run_group(**engine, prompt, params);
  GroupResult b = run_group(**engine, prompt, params);
  std::set<std::vector<int32_t>> distinct;
  for (size_t i = 0; i < params.size(); ++i) {
    const Output alone = run_all(**engine, {prompt}, {params[i]}, {0})[0];
    EXPECT_EQ(a.outputs[i].tokens, alone.tokens) << "seed " << *params[i].sampling.seed;
    EXPECT_EQ(a.outputs[i].text, alone.text);
    EXPECT_EQ(b.outputs[i].tokens, a.outputs[i].tokens);
    distinct.insert(a.outputs[i].tokens);
  }
  EXPECT_GE(distinct.size(), 3u);
}

std::vector<int32_t> story_tokens(const Tokenizer& tok) {
  auto ids = tok.encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her dog. One day, she saw a big red ball under a tree. She ran to the ball and "
      "picked it up. Her dog barked and wagged his tail.");
  EXPECT_TRUE(ids.ok());
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(EngineGroups, GreedySamplesEqualTheRequestAloneAndComputeThePromptOnce) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  const std::vector<int32_t> toks = story_tokens(l->tokenizer);
  ASSERT_GE(toks.size(), 48u);
  // Block size 16: 16, 32 end on a block boundary; 1, 7, 21, 45 inside a block.
  check_greedy_group(*l, toks, 20, {1, 7, 16, 21, 32, 45});
}

TEST(EngineGroups, GreedySamplesSurvivePreemptionWithTinyKvCaches) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  // 4 samples x (21 + 40) tokens need 1 shared + 4 x 3 blocks of 16; 7 blocks force preemption.
  check_group_under_preemption(path, story_tokens(l->tokenizer), {21, 32}, 7, 40);
}

TEST(EngineGroups, SeededSamplesEqualTheRequestAloneWithThatSeed) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  const std::vector<int32_t> toks = story_tokens(l->tokenizer);
  check_seeded_group(*l, std::vector<int32_t>(toks.begin(), toks.begin() + 21), 24);
}

std::string synth_model(test::TempDir& dir, const char* name) {
  SynthParams sp;
  sp.preset = find_preset("tiny");
  sp.ftype = FileType::MOSTLY_Q8_0;
  sp.out_path = dir.path(name);
  EXPECT_TRUE(synthesize_model(sp).ok());
  return sp.out_path;
}

std::vector<int32_t> byte_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + int32_t(rng() % 256));  // byte tokens
  return t;
}

TEST(EngineGroups, SyntheticModelGroupsWithF16AndF32KvAndPreemption) {
  test::TempDir dir;
  const std::string path = synth_model(dir, "tiny.gguf");
  const std::vector<int32_t> toks = byte_tokens(80, 5);
  for (KvType kv : {KvType::kF16, KvType::kF32}) {
    auto l = load(path, 512, 64, 16, kv);
    ASSERT_TRUE(l);
    check_greedy_group(*l, toks, 12, {5, 16, 37, 64});
    check_seeded_group(*l, std::vector<int32_t>(toks.begin(), toks.begin() + 37), 12);
  }
  check_group_under_preemption(path, toks, {37, 48}, 8, 30);
}

// The leader is aborted while its prompt is half computed: another sample takes over and all
// remaining samples still produce the output of the request alone. Aborting a forked sample
// leaves its siblings untouched; finishing the leader first (max_tokens 1) does too.
TEST(EngineGroups, AbortedLeaderAbortedSampleAndEarlyFinish) {
  test::TempDir dir;
  const std::string path = synth_model(dir, "tiny.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  const std::vector<int32_t> prompt = byte_tokens(40, 9);
  GenerationParams g = greedy(10);
  g.ignore_eos = true;
  Output alone;
  {
    auto engine = Engine::create(l->tokenizer, *l->executor, {});
    alone = run_all(**engine, {prompt}, {g}, {0})[0];
  }
  EngineConfig cfg;
  cfg.scheduler.prefill_chunk = 8;  // the prompt takes 5 steps
  auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  auto ids = e.add_request_group(prompt, std::vector<GenerationParams>(4, g));
  ASSERT_TRUE(ids.ok());
  std::map<RequestId, Output> out;
  auto collect = [&](const std::vector<EngineEvent>& events) {
    for (const EngineEvent& ev : events) {
      Output& o = out[ev.id];
      o.tokens.insert(o.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.finished()) o.finish = ev.finish;
    }
  };
  for (int i = 0; i < 2; ++i) collect(*e.step());
  EXPECT_EQ(e.stats().prompt_tokens, 16u);
  e.abort((*ids)[0]);
  for (int i = 0; i < 3; ++i) collect(*e.step());  // the heir finishes the prompt
  EXPECT_EQ(e.stats().prompt_tokens, 40u);         // continued, not recomputed
  e.abort((*ids)[2]);                              // a forked sample
  while (e.has_work()) collect(*e.step());
  EXPECT_EQ(out[(*ids)[0]].finish, FinishReason::kAbort);
  EXPECT_TRUE(out[(*ids)[0]].tokens.empty());
  EXPECT_EQ(out[(*ids)[2]].finish, FinishReason::kAbort);
  for (size_t k : {1u, 3u}) {
    EXPECT_EQ(out[(*ids)[k]].tokens, alone.tokens) << "sample " << k;
    EXPECT_EQ(out[(*ids)[k]].finish, FinishReason::kLength);
  }
  EXPECT_EQ(e.stats().prompt_tokens, 40u);
  EXPECT_EQ(e.kv().n_used_blocks(), 0);

  // The leader finishes at its first token; the others go on with the prompt's blocks.
  std::vector<GenerationParams> params(3, g);
  params[0].max_tokens = 1;
  GroupResult r = run_group(e, prompt, params);
  EXPECT_EQ(r.outputs[0].tokens,
            std::vector<int32_t>(alone.tokens.begin(), alone.tokens.begin() + 1));
  EXPECT_EQ(r.outputs[1].tokens, alone.tokens);
  EXPECT_EQ(r.outputs[2].tokens, alone.tokens);
  EXPECT_EQ(e.kv().n_used_blocks(), 0);

  // Validation: all or nothing.
  EXPECT_FALSE(e.add_request_group(prompt, {}).ok());
  std::vector<GenerationParams> bad(2, g);
  bad[1].sampling.top_p = 2;
  EXPECT_FALSE(e.add_request_group(prompt, bad).ok());
  EXPECT_FALSE(e.has_work());
}

// The CPU executor with its sliding windows hidden: the engine keeps every block of every K/V
// group (the oracle).
class KeepAllBlocks final : public Executor {
 public:
  explicit KeepAllBlocks(Executor& e) : e_(e) {}
  ExecutorCapacity capacity() const override {
    ExecutorCapacity c = e_.capacity();
    for (int32_t& w : c.kv_group_windows) w = 0;
    return c;
  }
  Status execute(const Batch& b, Logits& out) override { return e_.execute(b, out); }
  Status copy_blocks(std::span<const BlockCopy> c) override { return e_.copy_blocks(c); }
  Result<KvBlockData> export_blocks(std::span<const int32_t> ids) const override {
    return e_.export_blocks(ids);
  }
  Status import_blocks(std::span<const int32_t> ids, const KvBlockData& d) override {
    return e_.import_blocks(ids, d);
  }

 private:
  Executor& e_;
};

// The blocks a sequence of `context` tokens holds after a step whose first new token was at
// first_pos, computed from the windows alone: per group, every block of the context (global)
// or those from the one holding position first_pos - window + 1 on (windowed).
int32_t expected_blocks_held(const std::vector<int32_t>& windows, int32_t context,
                             int32_t first_pos, int32_t bs) {
  int32_t n = 0;
  for (int32_t w : windows) {
    const int32_t total = (context + bs - 1) / bs;
    n += w <= 0 ? total : total - std::max(0, first_pos - w + 1) / bs;
  }
  return n;
}

// A sliding-window case's model: ../shared's `shared_file` when given (missing: a failure under
// CI=true, else "" and the case is left out), else a Q8_0 synthetic model of `variant`.
std::string window_case_model(test::TempDir& dir, const char* variant, const char* shared_file) {
  if (!shared_file) {
    const std::string path = dir.path(std::string(variant) + ".gguf");
    test::write_synthetic_model(variant, FileType::MOSTLY_Q8_0, path);
    return path;
  }
  const std::string path = test::shared_path(shared_file);
  if (path.empty() && test::in_ci()) {
    ADD_FAILURE() << "../shared/" << shared_file
                  << " is missing (CI=true: tests may not skip for missing data)";
  }
  return path;
}

// Windowed models (blocks of 4): every layer windowed (tiny-phi3: window 4, tiny-mistral: 6),
// even layers windowed (tiny-gemma2: 5; two K/V groups), five windowed layers and a global one
// (tiny-gemma3: 5; six groups): the engine releases each sequence's windowed blocks older than
// the window while it runs; the llama.cpp-golden gemma4 (window 8 on four K/V-storing layers,
// one global, five layers reading their K/V: five groups). A mixture of experts (tiny-mixtral)
// keeps every block. With shared
// prefixes (prefix-cache hits), chunked prefill and preemption (24 to 72 blocks for 12 requests
// of up to 94 tokens) every output equals the request alone with every block kept, and a long
// decode holds exactly the blocks the windows say.
TEST(EngineSlidingWindow, ReleasedBlocksChangeNoOutput) {
  test::TempDir dir;
  struct Case {
    const char* variant;
    std::vector<int32_t> windows;       // of the K/V groups
    const char* shared_file = nullptr;  // a model of ../shared instead of a synthetic one
  };
  for (const Case& cs :
       {Case{"tiny-phi3", {4}}, Case{"tiny-mistral", {6}}, Case{"tiny-mixtral", {0}},
        Case{"tiny-gemma2", {5, 0}}, Case{"tiny-gemma3", {5, 5, 5, 5, 5, 0}},
        Case{"gemma4", {8, 8, 8, 8, 0}, "testdata/models/arch/gemma4.gguf"}}) {
    SCOPED_TRACE(cs.variant);
    const std::string path = window_case_model(dir, cs.variant, cs.shared_file);
    if (path.empty()) continue;  // ../shared missing outside CI: the synthetic cases still run
    std::vector<std::vector<int32_t>> prompts;
    std::vector<GenerationParams> params;
    const std::vector<int32_t> shared = byte_tokens(24, 3);
    for (int i = 0; i < 12; ++i) {
      std::vector<int32_t> p = byte_tokens(10 + 4 * i, 100 + uint32_t(i));
      if (i % 2 == 0) p.insert(p.begin(), shared.begin(), shared.end());
      prompts.push_back(p);
      params.push_back(greedy(16));
    }
    auto big = load(path, 256, 512, 4);
    ASSERT_TRUE(big);
    ASSERT_EQ(big->executor->capacity().kv_group_windows, cs.windows);
    const int32_t n_groups = int32_t(cs.windows.size());
    std::vector<Output> reference;
    for (size_t i = 0; i < prompts.size(); ++i) {
      KeepAllBlocks keep(*big->executor);
      auto engine = Engine::create(big->tokenizer, keep, {});
      ASSERT_TRUE(engine.ok());
      reference.push_back(run_all(**engine, {prompts[i]}, {params[i]}, {0})[0]);
    }
    for (int chunk : {3, 64}) {
      auto l = load(path, 256, 24 * n_groups, 4);
      ASSERT_TRUE(l);
      EngineConfig cfg;
      cfg.scheduler.prefill_chunk = chunk;
      cfg.scheduler.max_batch_tokens = 96;
      cfg.scheduler.max_seqs = 12;
      auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
      ASSERT_TRUE(engine.ok());
      std::vector<int> arrivals;
      for (int i = 0; i < 12; ++i) arrivals.push_back(i % 4);
      const auto got = run_all(**engine, prompts, params, arrivals);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(got[i].tokens, reference[i].tokens) << "request " << i << " chunk " << chunk;
      }
      EXPECT_GT((*engine)->kv().prefix_stats().hit_tokens, 0u) << "chunk " << chunk;
      EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
    }
    // One long request: after each decode step it holds what the windows say, no more.
    auto engine = Engine::create(big->tokenizer, *big->executor, {});
    ASSERT_TRUE(engine.ok());
    const std::vector<int32_t> prompt = byte_tokens(61, 9);
    auto id = (*engine)->add_request(prompt, greedy(40));
    ASSERT_TRUE(id.ok());
    int32_t checked = 0;
    while ((*engine)->has_work()) {
      bool done = false;
      auto events = (*engine)->step();
      ASSERT_TRUE(events.ok()) << events.message();
      for (const EngineEvent& ev : *events) done |= ev.finished();
      if (done) break;
      // Step k (from 0) computed the prompt (k 0), then position prompt + k - 1.
      const int32_t context = int32_t(prompt.size()) + checked;
      const int32_t first_pos = checked++ == 0 ? 0 : context - 1;
      EXPECT_EQ((*engine)->kv().n_held(*id),
                expected_blocks_held(cs.windows, context, first_pos, 4))
          << "context " << context;
      EXPECT_EQ((*engine)->kv().n_used_blocks(), (*engine)->kv().n_held(*id));
    }
    EXPECT_GT(checked, 30);
  }
}

// The windowed layers' attention stays within the window however long the context grows
// (issue 43, docs/kv-cache.md): one long request on tiny gemma3 (window 5, five windowed layers
// and a global one), tiny gpt-oss (window 32, sinks) and the llama.cpp-golden gemma4 (window 8,
// shared-K/V layers counted with their kind). After each step, every windowed layer's call
// attended min(position + 1, window) keys per new token, and every global layer's position + 1
// (CpuExecutor::attention_times: the keys of what each call hands the kernels, not a time),
// so the windowed count stays at the window while the global one grows with the context.
TEST(EngineSlidingWindow, WindowedLayersAttendAtMostTheirWindowAsTheContextGrows) {
  test::TempDir dir;
  struct Case {
    const char* variant;
    const char* shared_file = nullptr;  // a model of ../shared instead of a synthetic one
  };
  for (const Case& cs : {Case{"tiny-gemma3"}, Case{"tiny-gpt-oss"},
                         Case{"gemma4", "testdata/models/arch/gemma4.gguf"}}) {
    SCOPED_TRACE(cs.variant);
    const std::string path = window_case_model(dir, cs.variant, cs.shared_file);
    if (path.empty()) continue;  // ../shared missing outside CI: the synthetic cases still run
    auto l = load(path, 512, 1024, 4);
    ASSERT_TRUE(l);
    const ModelConfig& c = l->executor->config();
    const KvCacheLayout layout = c.kv_cache_layout();
    int64_t n_windowed = 0, n_global = 0;
    int32_t window = 0;
    for (int il = 0; il < c.n_layer; ++il) {
      if (layout.layer_group[size_t(il)] < 0) continue;  // no attention
      if (c.layer_window(il) > 0) {
        ++n_windowed;
        window = c.layer_window(il);
      } else {
        ++n_global;
      }
    }
    ASSERT_GT(n_windowed, 0);
    ASSERT_GT(n_global, 0);
    auto engine = Engine::create(l->tokenizer, *l->executor, {});
    ASSERT_TRUE(engine.ok());
    const std::vector<int32_t> prompt = byte_tokens(20, 9);
    GenerationParams params = greedy(6 * window);
    params.ignore_eos = true;
    ASSERT_TRUE((*engine)->add_request(prompt, params).ok());
    int32_t context = 0;  // positions computed
    int steps = 0;
    while ((*engine)->has_work()) {
      const AttentionTimes before = l->executor->attention_times();
      auto events = (*engine)->step();
      ASSERT_TRUE(events.ok()) << events.message();
      const AttentionTimes& after = l->executor->attention_times();
      // One attention call per layer per step, each of its kind.
      ASSERT_EQ(after.windowed.calls - before.windowed.calls, n_windowed) << "step " << steps;
      ASSERT_EQ(after.global.calls - before.global.calls, n_global) << "step " << steps;
      // Step 0 computed the prompt, each later one the next position.
      const int32_t first = context;
      context += steps++ == 0 ? int32_t(prompt.size()) : 1;
      int64_t want_windowed = 0, want_global = 0;
      for (int32_t pos = first; pos < context; ++pos) {
        want_windowed += std::min(pos + 1, window);
        want_global += pos + 1;
      }
      const int64_t windowed = after.windowed.keys - before.windowed.keys;
      const int64_t global = after.global.keys - before.global.keys;
      EXPECT_EQ(windowed, want_windowed * n_windowed) << "context " << context;
      EXPECT_EQ(global, want_global * n_global) << "context " << context;
      if (first > 0) {
        EXPECT_LE(windowed, int64_t(window) * n_windowed) << "context " << context;
      }
    }
    // The context went well past the window: flat windowed counts, growing global ones.
    EXPECT_EQ(context, int32_t(prompt.size()) + 6 * window - 1);
    EXPECT_GT(context, 5 * window);
  }
}

}  // namespace
}  // namespace sluice
