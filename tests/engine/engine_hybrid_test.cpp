// Hybrid recurrent models (qwen35: Gated DeltaNet + attention layers) through the engine: a
// sequence's recurrent state lives in a state slot its request holds like its K/V blocks.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_test_util.h"
#include "test_util.h"

namespace sluice {
namespace {

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = int32_t(rng() % uint32_t(n_vocab));
  return t;
}

// The golden continuation through the engine (a prompt in one step, then decode).
TEST(EngineHybrid, Qwen35GoldenContinuation) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  auto l = load(path, 256, 64);
  ASSERT_TRUE(l);
  ASSERT_GT(l->executor->capacity().n_state_slots, 0);
  const std::vector<int32_t> prompt = {464, 1310, 2266, 8848, 38648, 3812, 262, 25451, 13};
  const std::vector<int32_t> want = {4026,  211,   40690, 5233,  19749, 43679, 4356,  40411,
                                     4782,  21735, 36173, 43293, 7901,  34951, 8205,  20083,
                                     31872, 46468, 48712, 37563, 36634, 39263, 39263, 489};
  auto engine = Engine::create(l->tokenizer, *l->executor, {});
  ASSERT_TRUE(engine.ok()) << engine.message();
  const auto out = run_all(**engine, {prompt}, {greedy(24)}, {0});
  EXPECT_EQ(out[0].tokens, want);
  EXPECT_EQ((*engine)->kv().n_used_state_slots(), 0);
}

// 16 requests (some sharing prefixes, some with n = 3 samples that fork the prompt's state)
// with random arrivals, three prefill chunk sizes and a K/V cache small enough to preempt:
// every greedy output equals the request run alone. The state slot of a sequence resumes
// across chunks, is zeroed when a preempted request starts over (or restored from a state
// checkpoint on a prefix hit), and is copied to each forked sample.
TEST(EngineHybrid, StateSurvivesChunkingPreemptionAndForks) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  auto alone = load(path, 256, 64);
  ASSERT_TRUE(alone);
  const int n_vocab = alone->executor->capacity().n_vocab;
  std::mt19937 rng(11);
  const std::vector<int32_t> shared = random_tokens(rng, 20, n_vocab);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> p = random_tokens(rng, 5 + int(rng() % 30), n_vocab);
    if (i % 3 == 0) p.insert(p.begin(), shared.begin(), shared.end());
    prompts.push_back(p);
    params.push_back(greedy(6 + int(rng() % 20)));
  }
  const std::vector<Output> reference = run_each_alone(*alone, prompts, params);
  for (int chunk : {1, 7, 64}) {
    SCOPED_TRACE(chunk);
    // 12 blocks of 16 for up to 16 requests of up to 75 tokens: preemption.
    auto l = load(path, 256, 12);
    ASSERT_TRUE(l);
    EngineConfig cfg;
    cfg.scheduler.prefill_chunk = chunk;
    cfg.scheduler.max_batch_tokens = 64;
    cfg.scheduler.max_seqs = 16;
    auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
    ASSERT_TRUE(engine.ok()) << engine.message();
    std::vector<int> arrivals;
    for (size_t i = 0; i < prompts.size(); ++i) arrivals.push_back(int(rng() % 30));
    const auto got = run_all(**engine, prompts, params, arrivals);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, reference[i].tokens) << "request " << i;
    }
    EXPECT_GT((*engine)->scheduler().n_preemptions(), 0u);
    EXPECT_EQ((*engine)->kv().n_used_state_slots(), 0);
    EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
    // Shared prefixes (and preempted requests' own prompts) resume from state checkpoints.
    EXPECT_GT((*engine)->kv().prefix_stats().hit_tokens, 0u);
    EXPECT_GT((*engine)->kv().checkpoint_stats().restored, 0u);
  }
  // Samples of one prompt: each greedy sample equals the request alone.
  auto l = load(path, 256, 64);
  ASSERT_TRUE(l);
  auto engine = Engine::create(l->tokenizer, *l->executor, {});
  ASSERT_TRUE(engine.ok());
  auto ids = (*engine)->add_request_group(prompts[1], {params[1], params[1], params[1]});
  ASSERT_TRUE(ids.ok()) << ids.message();
  std::map<RequestId, std::vector<int32_t>> tokens;
  while ((*engine)->has_work()) {
    auto ev = (*engine)->step();
    ASSERT_TRUE(ev.ok()) << ev.message();
    for (const EngineEvent& e : *ev) {
      tokens[e.id].insert(tokens[e.id].end(), e.tokens.begin(), e.tokens.end());
    }
  }
  ASSERT_EQ(tokens.size(), 3u);
  for (const auto& [id, t] : tokens) EXPECT_EQ(t, reference[1].tokens) << "sample " << id;
  EXPECT_GT((*engine)->kv().share_stats().forks, 0u);
}

// Multi-turn chats: each turn's prompt is the previous turn's prompt, its answer and a new
// message. With the prefix cache every turn resumes from the state checkpoint at the last block
// boundary of the previous turn (the K/V blocks up to it, the recurrent state there) and its
// greedy output equals the run without the cache; under chunked prefill and a small cache too.
TEST(EngineHybrid, MultiTurnChatsHitEachTurnExactly) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  std::mt19937 rng(5);
  for (int conv = 0; conv < 6; ++conv) {
    SCOPED_TRACE(conv);
    const int n_turns = 1 + int(rng() % 8);
    const int chunk = conv % 2 == 0 ? 7 : 64;
    auto with = load(path, 512, conv % 3 == 2 ? 20 : 128);
    auto without = load(path, 512, 128);
    ASSERT_TRUE(with && without);
    EngineConfig cfg;
    cfg.scheduler.prefill_chunk = chunk;
    cfg.state_checkpoint_interval = 32;
    auto cached = Engine::create(with->tokenizer, *with->executor, cfg);
    cfg.enable_prefix_cache = false;
    auto plain = Engine::create(without->tokenizer, *without->executor, cfg);
    ASSERT_TRUE(cached.ok() && plain.ok());
    const int n_vocab = with->executor->capacity().n_vocab;
    std::vector<int32_t> history;
    for (int turn = 0; turn < n_turns; ++turn) {
      const std::vector<int32_t> msg = random_tokens(rng, 3 + int(rng() % 25), n_vocab);
      const int32_t shared = int32_t(history.size());  // the previous turn's prompt + answer
      history.insert(history.end(), msg.begin(), msg.end());
      if (history.size() > 400) break;
      const GenerationParams g = greedy(4 + int(rng() % 16));
      const uint64_t hits_before = (*cached)->kv().prefix_stats().hit_tokens;
      const auto a = run_all(**cached, {history}, {g}, {0});
      const auto b = run_all(**plain, {history}, {g}, {0});
      EXPECT_EQ(a[0].tokens, b[0].tokens) << "turn " << turn;
      const uint64_t hit = (*cached)->kv().prefix_stats().hit_tokens - hits_before;
      // The previous turn computed all but its last sampled token; its last block boundary
      // below that holds a checkpoint (unless a tiny cache evicted its blocks).
      if (turn > 0 && conv % 3 != 2) {
        EXPECT_GE(int64_t(hit), int64_t((shared - 1) / 16 * 16)) << "turn " << turn;
      }
      history.insert(history.end(), a[0].tokens.begin(), a[0].tokens.end());
    }
    EXPECT_EQ((*cached)->kv().n_used_state_slots(), 0);
  }
}

// Speculation on hybrids needs the executor's draft state slots (a rejected draft's state is
// copied back from one), and an attention draft model: refused otherwise, saying why.
TEST(EngineHybrid, SpeculationWithoutDraftStateSlotsIsRefused) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  auto l = load(path, 256, 64);
  ASSERT_TRUE(l);
  EngineConfig cfg;
  cfg.spec.mode = SpecMode::kNgram;
  auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.message().find("draft state slots"), std::string::npos) << engine.message();
  // A recurrent draft model.
  auto target = load(path, 256, 64, 16, KvType::kF16, 8);
  auto draft = load(path, 256, 64);
  ASSERT_TRUE(target && draft);
  cfg.spec.mode = SpecMode::kDraft;
  cfg.spec.draft = draft->executor.get();
  cfg.spec.draft_tokenizer = &draft->tokenizer;
  auto refused = Engine::create(target->tokenizer, *target->executor, cfg);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("draft model with recurrent layers"), std::string::npos)
      << refused.message();
}

}  // namespace
}  // namespace sluice
