// Engine::score (the logits at every position, for `sluice perplexity`) over a real CpuExecutor:
// each input's rows are llama.cpp's golden logits, the same bit for bit whether inputs are
// packed into steps or run alone, on attention and on hybrid recurrent models (each input
// starts from a zero state); nothing stays in the KV cache; bad inputs and a callback's error
// stop it cleanly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/engine_test_util.h"
#include "model/golden_util.h"
#include "test_util.h"

namespace sluice {
namespace {

// Every input's rows, in input order, as score() hands them over.
Result<std::vector<std::vector<float>>> score_all(Engine& engine,
                                                  const std::vector<std::vector<int32_t>>& in) {
  std::vector<std::vector<float>> rows;
  const Status st = engine.score(in, [&](size_t i, std::span<const float> r) -> Status {
    if (i != rows.size()) return make_error("input ", i, " out of order");
    rows.emplace_back(r.begin(), r.end());
    return {};
  });
  if (!st.ok()) return Error{st.message()};
  return rows;
}

TEST(EngineScore, RowsAreTheGoldenLogitsPackedOrAlone) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  const std::vector<test::GoldenCase> cases = test::load_golden_cases();
  std::vector<std::vector<int32_t>> inputs;
  std::vector<const test::GoldenCase*> golden;
  for (const test::GoldenCase& c : cases) {
    if (c.name.rfind("stories260K.", 0) != 0 || c.prompt_tokens.size() < 2) continue;
    inputs.push_back(c.prompt_tokens);
    golden.push_back(&c);
  }
  ASSERT_GE(inputs.size(), 3u);
  // Two long windows of a repeated prompt besides the golden prompts.
  std::vector<int32_t> long_input;
  while (long_input.size() < 200) {
    long_input.insert(long_input.end(), inputs[1].begin(), inputs[1].end());
  }
  inputs.push_back(long_input);
  inputs.push_back(std::vector<int32_t>(long_input.begin() + 3, long_input.end()));
  auto l = load(path, test::kGoldenContext, 64);
  ASSERT_TRUE(l);
  EngineConfig cfg;
  cfg.scheduler.max_batch_tokens = 64;  // several steps, up to 3 inputs each
  cfg.scheduler.max_seqs = 3;
  auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  const int32_t n_vocab = l->executor->capacity().n_vocab;
  const uint64_t steps0 = (*engine)->stats().steps;
  auto all = score_all(**engine, inputs);
  ASSERT_TRUE(all.ok()) << all.message();
  ASSERT_EQ(all->size(), inputs.size());
  EXPECT_GT((*engine)->stats().steps - steps0, 2u);
  EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ((*all)[i].size(), inputs[i].size() * size_t(n_vocab));
    auto one = score_all(**engine, {inputs[i]});
    ASSERT_TRUE(one.ok()) << one.message();
    EXPECT_EQ((*all)[i], (*one)[0]) << "input " << i;
  }
  for (size_t i = 0; i < golden.size(); ++i) {
    for (size_t p = 0; p < inputs[i].size(); ++p) {
      EXPECT_LT(
          test::golden_rel_l2((*all)[i].data() + p * size_t(n_vocab), golden[i]->prompt_logits[p]),
          1e-3)
          << golden[i]->name << " position " << p;
    }
  }
  EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
}

TEST(EngineScore, HybridInputsStartFromAZeroState) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  auto l = load(path, 256, 64);
  ASSERT_TRUE(l);
  ASSERT_GT(l->executor->capacity().n_state_slots, 0);
  // The golden prompt (EngineHybrid.Qwen35GoldenContinuation): its last row's argmax is the
  // first greedy token.
  const std::vector<int32_t> prompt = {464, 1310, 2266, 8848, 38648, 3812, 262, 25451, 13};
  std::vector<int32_t> other(prompt.rbegin(), prompt.rend());
  EngineConfig cfg;
  cfg.scheduler.max_seqs = 2;
  auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  const int32_t n_vocab = l->executor->capacity().n_vocab;
  auto alone = score_all(**engine, {prompt});
  ASSERT_TRUE(alone.ok()) << alone.message();
  const float* last = (*alone)[0].data() + (prompt.size() - 1) * size_t(n_vocab);
  EXPECT_EQ(test::argmax(last, n_vocab), 4026);
  auto packed = score_all(**engine, {other, prompt, other, prompt, prompt});
  ASSERT_TRUE(packed.ok()) << packed.message();
  for (size_t i : {size_t(1), size_t(3), size_t(4)}) EXPECT_EQ((*packed)[i], (*alone)[0]) << i;
  EXPECT_EQ((*packed)[0], (*packed)[2]);
  EXPECT_EQ((*engine)->kv().n_used_state_slots(), 0);
  EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
}

TEST(EngineScore, BadInputsAndCallbackErrorsStopCleanly) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 128, 64);
  ASSERT_TRUE(l);
  EngineConfig cfg;
  cfg.scheduler.max_batch_tokens = 32;
  auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  const auto none = [](size_t, std::span<const float>) -> Status { return {}; };
  const std::vector<std::vector<int32_t>> empty = {{1, 2}, {}};
  EXPECT_FALSE((*engine)->score(empty, none).ok());
  const std::vector<std::vector<int32_t>> outside = {{1, 100000}};
  const Status o = (*engine)->score(outside, none);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.message().find("outside the vocabulary"), std::string::npos) << o.message();
  const std::vector<std::vector<int32_t>> too_long = {std::vector<int32_t>(129, 1)};
  EXPECT_FALSE((*engine)->score(too_long, none).ok());
  // The callback fails at the third input: the run stops there, nothing is held.
  const std::vector<std::vector<int32_t>> many(6, std::vector<int32_t>(20, 5));
  size_t seen = 0;
  const Status cb = (*engine)->score(many, [&](size_t i, std::span<const float>) -> Status {
    ++seen;
    return i == 2 ? Status(make_error("stop here")) : Status();
  });
  ASSERT_FALSE(cb.ok());
  EXPECT_EQ(cb.message(), "stop here");
  EXPECT_EQ(seen, 3u);
  EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
  // And the engine still serves requests afterwards.
  const auto out = run_all(**engine, {{1, 5, 6}}, {greedy(3)}, {0});
  EXPECT_EQ(out[0].tokens.size(), 3u);
}

}  // namespace
}  // namespace sluice
