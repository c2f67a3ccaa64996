// End-to-end through the engine: real models reproduce their golden continuations, and a
// request's greedy output does not depend on what else runs with it (batching, chunk size,
// prefix-cache hits, preemption).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/engine.h"
#include "model/convert.h"
#include "model/model.h"
#include "test_util.h"

namespace sluice {
namespace {

struct Loaded {
  Model model;
  Tokenizer tokenizer;
  std::unique_ptr<CpuExecutor> executor;
};

std::unique_ptr<Loaded> load(const std::string& path, int n_ctx, int n_blocks, int block_size = 16) {
  auto m = Model::load(path, {.n_ctx = n_ctx, .allow_context_beyond_trained = true});
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return nullptr;
  auto t = Tokenizer::from_gguf(m->file());
  EXPECT_TRUE(t.ok()) << t.message();
  if (!t.ok()) return nullptr;
  auto l = std::make_unique<Loaded>(Loaded{std::move(*m), std::move(*t), nullptr});
  CpuExecutorOptions eo;
  eo.n_threads = 2;
  eo.n_blocks = n_blocks;
  eo.block_size = block_size;
  auto e = CpuExecutor::create(l->model, eo);
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return nullptr;
  l->executor = std::move(*e);
  return l;
}

GenerationParams greedy(int max_tokens) {
  GenerationParams g;
  g.sampling.temperature = 0;
  g.max_tokens = max_tokens;
  return g;
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
};

// Runs the engine until every request finished; `arrivals[i]` is the step request i joins.
std::vector<Output> run_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                            const std::vector<GenerationParams>& params,
                            const std::vector<int>& arrivals) {
  std::vector<Output> out(prompts.size());
  std::map<RequestId, size_t> index;
  size_t added = 0;
  for (int step = 0; added < prompts.size() || engine.has_work(); ++step) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (arrivals[i] == step) {
        auto id = engine.add_request(prompts[i], params[i]);
        EXPECT_TRUE(id.ok()) << id.message();
        index[*id] = i;
        ++added;
      }
    }
    auto events = engine.step();
    EXPECT_TRUE(events.ok()) << events.message();
    if (!events.ok()) break;
    for (const EngineEvent& ev : *events) {
      Output& o = out[index.at(ev.id)];
      o.tokens.insert(o.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      o.text += ev.text;
      if (ev.finished()) o.finish = ev.finish;
    }
    if (step > 100000) break;
  }
  return out;
}

TEST(EngineGolden, EverySharedModelReproducesItsGreedyContinuation) {
  const std::string dir = test::shared_dir();
  if (dir.empty()) GTEST_SKIP() << "../shared not present";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/testdata/models")) {
    if (e.path().extension() != ".json") continue;
    ++n;
    std::ifstream f(e.path());
    auto j = nlohmann::json::parse(f);
    const std::string stem = e.path().filename().string();
    const std::string model_path = dir + "/testdata/models/" + stem.substr(0, stem.find('.')) + ".gguf";
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
  const std::vector<std::string> starts = {"Once upon a time", "The little dog", "Lily and Ben"};
  for (int i = 0; i < 32; ++i) {
    std::string text = starts[size_t(i) % starts.size()];
    for (int k = 0; k < int(rng() % 6); ++k) text += " and the cat";
    auto ids = alone->tokenizer.encode(text);
    ASSERT_TRUE(ids.ok());
    prompts.push_back(*ids);
    params.push_back(greedy(20 + int(rng() % 30)));
  }
  std::vector<Output> reference;
  {
    auto engine = Engine::create(alone->tokenizer, *alone->executor, {});
    for (size_t i = 0; i < prompts.size(); ++i) {
      reference.push_back(run_all(**engine, {prompts[i]}, {params[i]}, {0})[0]);
    }
  }
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
