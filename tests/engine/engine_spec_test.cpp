// Speculative decoding end to end: greedy output is identical with and without drafts (alone,
// batched, chunked, preempted, with groups and aborts), a repeated request is served from the
// suffix cache, stops inside an accepted run cut it, and sampled output keeps its distribution;
// the cost gate, each request's own draft length, and the grammar's cut of drafts.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "grammar/grammar.h"
#include "model/convert.h"
#include "model/presets.h"
#include "support/fake_executor.h"
#include "test_util.h"

namespace sluice {
namespace {

EngineConfig spec_config(int k = 8) {
  EngineConfig c;
  c.spec.mode = SpecMode::kNgram;
  c.spec.n_draft_max = k;
  return c;
}

TEST(EngineSpec, GreedyGoldensUnchangedWithNgramDrafts) {
  const std::string dir = test::shared_dir();
  if (dir.empty()) SLUICE_SHARED_MISSING("../shared");
  int n = 0;
  uint64_t accepted = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/testdata/models")) {
    if (e.path().extension() != ".json") continue;
    ++n;
    std::ifstream f(e.path());
    const nlohmann::json j = nlohmann::json::parse(f);
    const std::string stem = e.path().filename().string();
    auto l = load(dir + "/testdata/models/" + stem.substr(0, stem.find('.')) + ".gguf", 512, 64);
    ASSERT_TRUE(l);
    const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
    const auto want = j["greedy_tokens"].get<std::vector<int32_t>>();
    for (int k : {1, 3, 8}) {
      auto engine = Engine::create(l->tokenizer, *l->executor, spec_config(k));
      ASSERT_TRUE(engine.ok()) << engine.message();
      auto out = run_all(**engine, {prompt}, {greedy(int(want.size()))}, {0});
      EXPECT_EQ(out[0].tokens, want) << stem << " k " << k;
      EXPECT_EQ(out[0].text, j["greedy_text"].get<std::string>()) << stem;
      accepted += (*engine)->stats().spec_accepted_tokens;
      EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
    }
  }
  EXPECT_GE(n, 5);
  EXPECT_GT(accepted, 0u) << "no draft was ever accepted: the test proves nothing";
}

// Random arrivals, three chunk sizes, a KV cache that forces preemption, prefix caching, and
// drafts: every output equals the request run alone without speculation.
TEST(EngineSpec, BatchedChunkedPreemptedOutputsEqualPlainDecoding) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto alone = load(path, 512, 64);
  ASSERT_TRUE(alone);
  std::mt19937 rng(17);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  story_prompts(alone->tokenizer, rng, 24, 30, 60, prompts, params);
  const std::vector<Output> reference = run_each_alone(*alone, prompts, params);
  for (int chunk : {1, 7, 64}) {
    auto l = load(path, 512, 24);
    ASSERT_TRUE(l);
    EngineConfig cfg = spec_config(chunk == 7 ? 3 : 8);
    cfg.scheduler.prefill_chunk = chunk;
    cfg.scheduler.max_batch_tokens = 96;
    cfg.scheduler.max_seqs = 24;
    auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
    ASSERT_TRUE(engine.ok());
    std::vector<int> arrivals;
    for (size_t i = 0; i < prompts.size(); ++i) arrivals.push_back(int(rng() % 40));
    auto got = run_all(**engine, prompts, params, arrivals);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, reference[i].tokens) << "request " << i << " chunk " << chunk;
      EXPECT_EQ(got[i].text, reference[i].text);
      EXPECT_EQ(got[i].finish, reference[i].finish);
    }
    const EngineStats& st = (*engine)->stats();
    EXPECT_GT((*engine)->scheduler().n_preemptions(), 0u) << "chunk " << chunk;
    EXPECT_GT(st.spec_accepted_tokens, 0u);
    EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);
    EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
  }
}

// The same request twice: the second is drafted from the first one's output in the suffix
// cache, accepts nearly everything, and produces the same tokens in far fewer steps.
TEST(EngineSpec, RepeatedRequestIsDraftedFromTheSuffixCache) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  auto engine = Engine::create(l->tokenizer, *l->executor, spec_config(8));
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  auto ids = l->tokenizer.encode("Once upon a time, there was a girl");
  ASSERT_TRUE(ids.ok());
  GenerationParams g = greedy(120);
  g.ignore_eos = true;
  const auto first = run_all(e, {*ids}, {g}, {0});
  const uint64_t steps_first = e.stats().steps;
  const uint64_t accepted_first = e.stats().spec_accepted_tokens;
  const auto second = run_all(e, {*ids}, {g}, {0});
  const uint64_t steps_second = e.stats().steps - steps_first;
  EXPECT_EQ(second[0].tokens, first[0].tokens);
  EXPECT_EQ(second[0].tokens.size(), 120u);
  EXPECT_GE(e.stats().spec_accepted_tokens - accepted_first, 100u);
  EXPECT_LE(steps_second * 4, steps_first) << steps_first << " vs " << steps_second;
}

// max_tokens, stop strings and EOS that fall inside an accepted run cut it there: output,
// text and finish reason equal plain decoding.
TEST(EngineSpec, StopsInsideAnAcceptedRunCutIt) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  auto ids = l->tokenizer.encode("Once upon a time");
  ASSERT_TRUE(ids.ok());
  GenerationParams warm = greedy(200);
  auto plain_engine = Engine::create(l->tokenizer, *l->executor, {});
  const auto full = run_all(**plain_engine, {*ids}, {warm}, {0})[0];
  ASSERT_GT(full.text.size(), 60u);
  std::vector<GenerationParams> cases;
  for (int m : {1, 2, 5, 13, 37}) cases.push_back(greedy(m));
  for (size_t at : {size_t(20), size_t(45)}) {  // a stop string from the middle of the text
    GenerationParams g = greedy(200);
    g.stop = {full.text.substr(at, 5)};
    cases.push_back(g);
  }
  for (const GenerationParams& g : cases) {
    auto spec = Engine::create(l->tokenizer, *l->executor, spec_config(8));
    ASSERT_TRUE(spec.ok());
    run_all(**spec, {*ids}, {warm}, {0});  // the suffix cache now drafts the whole answer
    const auto got = run_all(**spec, {*ids}, {g}, {0})[0];
    auto plain = Engine::create(l->tokenizer, *l->executor, {});
    const auto want = run_all(**plain, {*ids}, {g}, {0})[0];
    EXPECT_EQ(got.tokens, want.tokens) << "max_tokens " << g.max_tokens;
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(got.finish, want.finish);
    EXPECT_EQ((*spec)->kv().n_used_blocks(), 0);
  }
}

// n samples of one prompt, aborts in the middle of drafted decoding: greedy samples equal the
// plain request; nothing leaks.
TEST(EngineSpec, GroupsAndAborts) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  auto ids = l->tokenizer.encode("Lily and Ben went to the park");
  ASSERT_TRUE(ids.ok());
  auto plain = Engine::create(l->tokenizer, *l->executor, {});
  const auto want = run_all(**plain, {*ids}, {greedy(60)}, {0})[0];
  auto spec = Engine::create(l->tokenizer, *l->executor, spec_config(6));
  ASSERT_TRUE(spec.ok());
  Engine& e = **spec;
  auto group = e.add_request_group(*ids, std::vector<GenerationParams>(3, greedy(60)));
  ASSERT_TRUE(group.ok());
  auto victim = e.add_request(*ids, greedy(60));
  ASSERT_TRUE(victim.ok());
  std::map<RequestId, std::vector<int32_t>> got;
  int steps = 0;
  while (e.has_work() && steps++ < 1000) {
    if (steps == 6) e.abort(*victim);
    auto events = e.step();
    ASSERT_TRUE(events.ok()) << events.message();
    for (const EngineEvent& ev : *events) {
      got[ev.id].insert(got[ev.id].end(), ev.tokens.begin(), ev.tokens.end());
    }
  }
  for (RequestId id : *group) EXPECT_EQ(got[id], want.tokens) << "sample " << id;
  EXPECT_LT(got[*victim].size(), want.tokens.size());
  EXPECT_EQ(e.kv().n_used_blocks(), 0);
}

// Runs kRuns seeded temperature-1 requests of `prompt` (a few at a time, so later ones find
// earlier outputs in the suffix cache) and counts the token at each position.
constexpr int kRuns = 600;
constexpr int kLen = 12;
std::vector<std::map<int32_t, int>> sample_counts(Engine& engine,
                                                  const std::vector<int32_t>& prompt,
                                                  uint64_t seed0, int top_k = 0) {
  std::vector<std::map<int32_t, int>> counts(kLen);
  std::vector<std::vector<int32_t>> prompts(kRuns, prompt);
  std::vector<GenerationParams> params(kRuns);
  std::vector<int> arrivals(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    params[size_t(i)].sampling.temperature = 1.0f;
    params[size_t(i)].sampling.top_k = top_k;
    params[size_t(i)].sampling.seed = seed0 + uint64_t(i);
    params[size_t(i)].max_tokens = kLen;
    params[size_t(i)].ignore_eos = true;
    arrivals[size_t(i)] = i / 8;
  }
  auto out = run_all(engine, prompts, params, arrivals);
  for (const Output& o : out) {
    EXPECT_EQ(o.tokens.size(), size_t(kLen));
    for (size_t p = 0; p < o.tokens.size() && p < size_t(kLen); ++p) ++counts[p][o.tokens[p]];
  }
  return counts;
}

// Two-sample chi-square per position (p = 0.001, Wilson-Hilferty) over tokens seen >= 10
// times in total (the rest pooled); returns the positions tested.
int expect_same_frequencies(const std::vector<std::map<int32_t, int>>& a,
                            const std::vector<std::map<int32_t, int>>& b) {
  int tested = 0;
  for (size_t p = 1; p < a.size(); ++p) {
    std::map<int32_t, std::pair<int, int>> both;
    for (auto [t, c] : a[p]) both[t].first += c;
    for (auto [t, c] : b[p]) both[t].second += c;
    std::vector<std::pair<double, double>> bins;
    std::pair<double, double> rest{0, 0};
    for (auto [t, c] : both) {
      if (c.first + c.second >= 10) {
        bins.push_back({double(c.first), double(c.second)});
      } else {
        rest.first += c.first;
        rest.second += c.second;
      }
    }
    if (rest.first + rest.second > 0) bins.push_back(rest);
    if (bins.size() < 2) continue;
    double chi2 = 0;
    for (auto [x, y] : bins) chi2 += (x - y) * (x - y) / (x + y);  // equal sample sizes
    const double df = double(bins.size() - 1);
    const double z = 3.09, h = 2.0 / (9.0 * df);
    const double crit = df * std::pow(1.0 - h + z * std::sqrt(h), 3.0);
    EXPECT_LT(chi2, crit) << "position " << p << " df " << df;
    ++tested;
  }
  return tested;
}

// Seeded sampling at temperature 1: the token frequencies at each position with n-gram drafts
// match those without, while drafts are being accepted.
TEST(EngineSpec, SampledTokenFrequenciesMatchPlainSampling) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 256);
  ASSERT_TRUE(l);
  auto ids = l->tokenizer.encode("Once upon a time");
  ASSERT_TRUE(ids.ok());
  auto plain = Engine::create(l->tokenizer, *l->executor, {});
  auto spec = Engine::create(l->tokenizer, *l->executor, spec_config(4));
  ASSERT_TRUE(plain.ok() && spec.ok());
  const auto want = sample_counts(**plain, *ids, 0);
  const auto got = sample_counts(**spec, *ids, 1000);
  EXPECT_GT((*spec)->stats().spec_accepted_tokens, uint64_t(kRuns));
  EXPECT_GE(expect_same_frequencies(want, got), 8);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

MachineRoofline machine(double gbps, double gflops) {
  MachineRoofline m;
  m.cpu = "test";
  m.threads = 2;
  m.read_gbps_1t = m.read_gbps = gbps;
  m.peak_gflops_f32 = m.peak_gops_int8 = gflops;
  return m;
}

// The roofline decides how much of a draft a step verifies: on a memory-bound machine the whole
// draft, on a compute-bound one (every token costs its full price) none; output is the same.
TEST(EngineSpec, CostModelKeepsDraftsWhenMemoryBoundAndDropsThemWhenComputeBound) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  auto ids = l->tokenizer.encode("Once upon a time");
  ASSERT_TRUE(ids.ok());
  GenerationParams g = greedy(150);
  g.ignore_eos = true;
  auto plain = Engine::create(l->tokenizer, *l->executor, {});
  const auto want = run_all(**plain, {*ids}, {g}, {0})[0];
  auto ungated = Engine::create(l->tokenizer, *l->executor, spec_config(8));
  run_all(**ungated, {*ids}, {g}, {0});
  const uint64_t drafted_ungated = (*ungated)->stats().spec_draft_tokens;
  ASSERT_GT(drafted_ungated, 20u);
  uint64_t drafted[2] = {0, 0}, skipped[2] = {0, 0};
  for (int bound = 0; bound < 2; ++bound) {
    EngineConfig cfg = spec_config(8);
    cfg.cost_model = make_step_cost_model(
        l->model, bound == 0 ? machine(0.001, 1e6) : machine(1e6, 0.001), KvType::kF16);
    auto e = Engine::create(l->tokenizer, *l->executor, cfg);
    ASSERT_TRUE(e.ok());
    const auto got = run_all(**e, {*ids}, {g}, {0})[0];
    EXPECT_EQ(got.tokens, want.tokens);
    drafted[bound] = (*e)->stats().spec_draft_tokens;
    skipped[bound] = (*e)->stats().spec_skipped_steps;
  }
  EXPECT_EQ(drafted[0], drafted_ungated) << "memory-bound: every draft verified";
  EXPECT_EQ(skipped[0], 0u);
  EXPECT_EQ(drafted[1], 0u) << "compute-bound: no draft is worth its cost";
  EXPECT_GT(skipped[1], 10u);
}

// The measured gate prices by what steps cost, roofline or not: a roofline that calls draft
// tokens free (memory-bound) on a model where every token costs its full price (the fake on a
// virtual clock: 10 ms a token, nothing fixed) keeps every draft under the roofline gate; the
// measured gate drops them. Output is the same.
TEST(EngineSpec, MeasuredGatePricesByStepTimesWhereTheRooflineCallsDraftsFree) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 512, 64);
  ASSERT_TRUE(l);
  constexpr int32_t kVocab = 64;
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  const auto run = [&](SpecGate gate, EngineStats& st) {
    test::FakeExecutor exec(512, 16, kVocab, 512);
    VirtualClock clock;
    exec.set_virtual_cost(&clock, 0, 0.01);
    EngineConfig cfg = spec_config(8);
    cfg.clock = &clock;
    cfg.spec.gate = gate;
    cfg.cost_model = make_step_cost_model(l->model, machine(0.001, 1e6), KvType::kF16);
    auto e = Engine::create(tok, exec, cfg);
    EXPECT_TRUE(e.ok()) << e.message();
    GenerationParams g = greedy(200);
    g.ignore_eos = true;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 3; ++i) prompts.push_back({5, 6, int32_t(7 + i)});
    const auto out = run_all(**e, prompts, {g, g, g}, {0, 0, 0});
    st = (*e)->stats();
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& o : out) tokens.push_back(o.tokens);
    return tokens;
  };
  EngineStats roof, measured;
  const auto want = run(SpecGate::kRoofline, roof);
  const auto got = run(SpecGate::kMeasured, measured);
  EXPECT_EQ(got, want);
  ASSERT_GT(roof.spec_draft_tokens, 100u);
  EXPECT_EQ(roof.spec_skipped_steps + roof.spec_cut_steps, 0u) << "the roofline alone: all kept";
  EXPECT_GT(measured.spec_skipped_steps, 100u);
  EXPECT_LT(measured.spec_draft_tokens * 10, roof.spec_draft_tokens);
}

// Each request's draft length follows its own acceptance. On the fake (whose greedy output is
// mostly a 7-token cycle), a greedy request's n-gram drafts are nearly all accepted and stay
// long; a request sampled at temperature 5 (nearly uniform: a drafted token has 1-7% of the
// mass) starts as long (nothing is known yet), is rejected, and drafts one token at a time.
TEST(EngineSpec, DraftLengthFollowsEachRequestsAcceptance) {
  constexpr int32_t kVocab = 64;
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  test::FakeExecutor exec(512, 16, kVocab, 512);
  EngineConfig cfg = spec_config(8);
  cfg.spec.ngram.n_min = 1;         // the sampled request finds a match for nearly any token
  cfg.spec.ngram.cache_tokens = 0;  // each request drafts from its own tokens only
  auto engine = Engine::create(tok, exec, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  Engine& e = **engine;
  GenerationParams kept = greedy(300);
  kept.ignore_eos = true;
  GenerationParams rejected = kept;
  rejected.sampling.temperature = 5;
  rejected.sampling.seed = 7;
  const RequestId a = *e.add_request({5, 6, 7}, kept);
  const RequestId b = *e.add_request({5, 6, 8}, rejected);
  // Each step's draft lengths, per request (a sequence is known by its first KV block).
  std::map<int32_t, RequestId> by_block;
  std::map<RequestId, std::vector<int32_t>> drafts;
  while (e.has_work()) {
    auto events = e.step();
    ASSERT_TRUE(events.ok()) << events.message();
    const Batch& batch = exec.last_batch();
    const auto first_block = [&](const BatchSequence& s) {
      return batch.block_tables[size_t(s.block_table_start)];
    };
    if (by_block.empty()) {  // the first step: both prompts, in the order they came
      ASSERT_EQ(batch.seqs.size(), 2u);
      by_block[first_block(batch.seqs[0])] = a;
      by_block[first_block(batch.seqs[1])] = b;
      ASSERT_EQ(by_block.size(), 2u);
    }
    for (const BatchSequence& s : batch.seqs) {
      if (s.logits == LogitsMode::kAll)
        drafts[by_block.at(first_block(s))].push_back(s.n_new_tokens - 1);
    }
  }
  const std::vector<int32_t>& da = drafts[a];
  const std::vector<int32_t>& db = drafts[b];
  ASSERT_GE(da.size(), 20u);
  ASSERT_GE(db.size(), 40u);
  // The accepted request: after its first drafts (the cycle's start, rejected now and then),
  // nearly all are 6 tokens or more (what the 7-token cycle offers; fewer where the output
  // sits on the cycle's fixed point or max_tokens is near), and some the full 8.
  int32_t long_a = 0;
  for (size_t i = 10; i < da.size(); ++i) long_a += da[i] >= 6;
  EXPECT_GE(long_a * 4, int32_t(da.size() - 10) * 3) << ::testing::PrintToString(da);
  EXPECT_EQ(*std::max_element(da.begin(), da.end()), 8);
  // The rejected one: a long first draft, then one token at a time.
  EXPECT_GE(db.front(), 4) << ::testing::PrintToString(db);
  for (size_t i = 4; i < db.size(); ++i) EXPECT_EQ(db[i], 1) << "draft " << i;
  EXPECT_EQ(e.kv().n_used_blocks(), 0);
}

// The engine cuts a draft where the request's grammar refuses a token, before it is verified.
// The grammar allows 30 to 60 of the words w10 .. w29; the prompt follows each of them with
// w40, so the first n-gram drafts, looked up in the prompt, start with w40 and are cut (to
// nothing); later ones, from the output's own repeats, are verified. Output equals plain
// decoding under the same grammar.
TEST(EngineSpec, GrammarCutsTheDraftTokensItRefuses) {
  constexpr int32_t kVocab = 64;
  const Tokenizer tok = test::fake_tokenizer(kVocab);
  // root ::= (" w1" [0-9] | " w2" [0-9]){30,60}
  grammar::GrammarSpec spec;
  using grammar::Expr;
  spec.rules.push_back(
      {"root", Expr::repeat(Expr::alt({Expr::seq({Expr::lit(" w1"), Expr::cls({{'0', '9'}})}),
                                       Expr::seq({Expr::lit(" w2"), Expr::cls({{'0', '9'}})})}),
                            30, 60)});
  auto g = grammar::lower(spec);
  ASSERT_TRUE(g.ok()) << g.message();
  std::vector<int32_t> prompt;
  for (int32_t t = 10; t < 30; ++t) prompt.insert(prompt.end(), {t, 40});
  const auto run = [&](const EngineConfig& cfg, EngineStats& st) {
    test::FakeExecutor exec(512, 16, kVocab, 512);
    auto e = Engine::create(tok, exec, cfg);
    EXPECT_TRUE(e.ok()) << e.message();
    GenerationParams p = greedy(60);
    p.sampling.grammar = grammar::CompiledGrammar::make(*g, (*e)->grammar_vocab());
    const auto out = run_all(**e, {prompt}, {p}, {0});
    st = (*e)->stats();
    return out[0];
  };
  EngineStats plain_stats, spec_stats;
  const Output want = run({}, plain_stats);
  EngineConfig cfg = spec_config(8);
  cfg.spec.ngram.n_min = 1;
  const Output got = run(cfg, spec_stats);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.finish, want.finish);
  ASSERT_GE(got.tokens.size(), 30u);
  // Words of the grammar, and at the end perhaps the end-of-generation token (</s>, 2).
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    const int32_t t = got.tokens[i];
    EXPECT_TRUE((t >= 10 && t < 30) || (t == 2 && i + 1 == got.tokens.size())) << i << ": " << t;
  }
  EXPECT_GT(spec_stats.spec_grammar_cut_tokens, 0u) << "the grammar cut no draft";
  EXPECT_GT(spec_stats.spec_draft_tokens, 0u) << "no draft was verified after the cuts";
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

EngineConfig draft_config(Executor& draft, int k = 6, const Tokenizer* tok = nullptr) {
  EngineConfig c;
  c.spec.mode = SpecMode::kDraft;
  c.spec.n_draft_max = k;
  c.spec.draft = &draft;
  c.spec.draft_tokenizer = tok;
  return c;
}

// A draft model: the target itself (accepts nearly everything) and an F16 copy (disagrees
// now and then): greedy output equals plain decoding, alone and batched with chunked prefill
// and preemption; blocks balance in both caches.
TEST(EngineSpec, DraftModelGreedyOutputEqualsPlainDecoding) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  test::TempDir dir;
  QuantizeParams qp;
  qp.in_path = path;
  qp.out_path = dir.path("stories-f16.gguf");
  qp.ftype = FileType::MOSTLY_F16;
  ASSERT_TRUE(quantize_model(qp).ok());
  auto alone = load(path, 512, 64);
  ASSERT_TRUE(alone);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  std::mt19937 rng(23);
  for (const char* text : {"Once upon a time", "The little dog", "Lily and Ben", "Tom had a"}) {
    auto ids = alone->tokenizer.encode(text);
    ASSERT_TRUE(ids.ok());
    for (int rep = 0; rep < 3; ++rep) {
      prompts.push_back(*ids);
      GenerationParams g = greedy(40 + int(rng() % 60));
      g.ignore_eos = true;
      params.push_back(g);
    }
  }
  std::vector<Output> reference;
  {
    auto engine = Engine::create(alone->tokenizer, *alone->executor, {});
    for (size_t i = 0; i < prompts.size(); ++i) {
      reference.push_back(run_all(**engine, {prompts[i]}, {params[i]}, {0})[0]);
    }
  }
  for (const std::string& draft_path : {path, qp.out_path}) {
    auto draft = load(draft_path, 512, 96);
    ASSERT_TRUE(draft);
    // Alone.
    {
      auto target = load(path, 512, 64);
      auto engine = Engine::create(target->tokenizer, *target->executor,
                                   draft_config(*draft->executor, 6, &draft->tokenizer));
      ASSERT_TRUE(engine.ok()) << engine.message();
      for (size_t i = 0; i < prompts.size(); i += 3) {
        EXPECT_EQ(run_all(**engine, {prompts[i]}, {params[i]}, {0})[0].tokens, reference[i].tokens)
            << draft_path << " request " << i;
      }
      const EngineStats& st = (*engine)->stats();
      EXPECT_GT(st.spec_accepted_tokens, 0u);
      if (draft_path == path) {
        EXPECT_GT(st.spec_acceptance_rate(), 0.95) << "the target as its own draft";
      }
    }
    // Batched, chunked, preempted (a 20-block target cache for 12 requests).
    auto target = load(path, 512, 20);
    EngineConfig cfg = draft_config(*draft->executor, 4);
    cfg.scheduler.prefill_chunk = 3;
    cfg.scheduler.max_batch_tokens = 48;
    cfg.scheduler.max_seqs = 12;
    auto engine = Engine::create(target->tokenizer, *target->executor, cfg);
    ASSERT_TRUE(engine.ok());
    std::vector<int> arrivals;
    for (size_t i = 0; i < prompts.size(); ++i) arrivals.push_back(int(rng() % 20));
    auto got = run_all(**engine, prompts, params, arrivals);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, reference[i].tokens) << draft_path << " batched request " << i;
    }
    EXPECT_GT((*engine)->scheduler().n_preemptions(), 0u);
    EXPECT_GT((*engine)->stats().spec_accepted_tokens, 0u);
    EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
  }
}

// Sampling with a draft model: q is the draft's real distribution, so token frequencies match
// plain sampling.
TEST(EngineSpec, DraftModelSampledFrequenciesMatchPlainSampling) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto target = load(path, 512, 256);
  auto draft = load(path, 512, 256);
  ASSERT_TRUE(target && draft);
  auto ids = target->tokenizer.encode("Once upon a time");
  ASSERT_TRUE(ids.ok());
  auto plain = Engine::create(target->tokenizer, *target->executor, {});
  auto spec =
      Engine::create(target->tokenizer, *target->executor, draft_config(*draft->executor, 3));
  ASSERT_TRUE(plain.ok() && spec.ok());
  const auto want = sample_counts(**plain, *ids, 0);
  const auto got = sample_counts(**spec, *ids, 5000);
  // The target as its own draft at temperature 1: p == q, nearly every draft is accepted.
  EXPECT_GT((*spec)->stats().spec_acceptance_rate(), 0.9);
  EXPECT_GE(expect_same_frequencies(want, got), 8);
}

// A draft model with another vocabulary is refused.
TEST(EngineSpec, DraftModelWithAnotherVocabularyIsRefused) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  test::TempDir dir;
  SynthParams sp;
  sp.preset = find_preset("tiny");
  sp.ftype = FileType::MOSTLY_Q8_0;
  sp.out_path = dir.path("tiny.gguf");
  ASSERT_TRUE(synthesize_model(sp).ok());
  auto target = load(path, 512, 64);
  auto other = load(sp.out_path, 512, 64);
  ASSERT_TRUE(target && other);
  EngineConfig cfg = draft_config(*other->executor);
  cfg.spec.draft_tokenizer = &other->tokenizer;
  auto e = Engine::create(target->tokenizer, *target->executor, cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("vocabulary"), std::string::npos) << e.message();
  EngineConfig missing;
  missing.spec.mode = SpecMode::kDraft;
  EXPECT_FALSE(Engine::create(target->tokenizer, *target->executor, missing).ok());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Prompts whose segments repeat (so n-gram drafts find matches), of random tokens.
void repeating_prompts(std::mt19937& rng, int n_vocab, int n, std::vector<std::vector<int32_t>>& p,
                       std::vector<GenerationParams>& params) {
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> seg(size_t(4 + rng() % 6)), prompt;
    for (int32_t& t : seg) t = int32_t(rng() % uint32_t(n_vocab));
    for (int r = 0; r < 3; ++r) {
      prompt.insert(prompt.end(), seg.begin(), seg.end());
      prompt.push_back(int32_t(rng() % uint32_t(n_vocab)));
    }
    p.push_back(prompt);
    GenerationParams g = greedy(20 + int(rng() % 30));
    g.ignore_eos = true;
    params.push_back(g);
  }
}

// Hybrid models (qwen35: Gated DeltaNet layers with a recurrent state): a verification keeps
// the state after each draft token and a rejected draft copies the one after the last accepted
// token back. Greedy output with n-gram drafts equals plain decoding alone and batched with
// chunked prefill, prefix-cache checkpoints and preemption, with drafts accepted; every state
// slot is given back. (The draft-model test below is the one whose drafts are mostly rejected.)
TEST(EngineSpec, HybridGreedyOutputEqualsPlainDecodingWithNgramDrafts) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  auto alone = load(path, 512, 64);
  ASSERT_TRUE(alone);
  std::mt19937 rng(31);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  repeating_prompts(rng, alone->executor->capacity().n_vocab, 10, prompts, params);
  const std::vector<Output> reference = run_each_alone(*alone, prompts, params);
  uint64_t accepted = 0, drafted = 0;
  for (int k : {1, 3, 8}) {
    SCOPED_TRACE(k);
    auto l = load(path, 512, 64, 16, KvType::kF16, k);
    ASSERT_TRUE(l);
    auto engine = Engine::create(l->tokenizer, *l->executor, spec_config(k));
    ASSERT_TRUE(engine.ok()) << engine.message();
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(run_all(**engine, {prompts[i]}, {params[i]}, {0})[0].tokens, reference[i].tokens)
          << "request " << i;
    }
    accepted += (*engine)->stats().spec_accepted_tokens;
    drafted += (*engine)->stats().spec_draft_tokens;
  }
  // Batched (one step's drafts share 6 draft state slots), chunked, preempted.
  auto l = load(path, 512, 14, 16, KvType::kF16, 6);
  ASSERT_TRUE(l);
  EngineConfig cfg = spec_config(4);
  cfg.scheduler.prefill_chunk = 7;
  cfg.scheduler.max_batch_tokens = 48;
  cfg.scheduler.max_seqs = 10;
  auto engine = Engine::create(l->tokenizer, *l->executor, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  std::vector<int> arrivals;
  for (size_t i = 0; i < prompts.size(); ++i) arrivals.push_back(int(rng() % 20));
  const auto got = run_all(**engine, prompts, params, arrivals);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, reference[i].tokens) << "batched request " << i;
  }
  EXPECT_GT((*engine)->scheduler().n_preemptions(), 0u);
  accepted += (*engine)->stats().spec_accepted_tokens;
  drafted += (*engine)->stats().spec_draft_tokens;
  EXPECT_EQ((*engine)->kv().n_used_state_slots(), 0);
  EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
  EXPECT_GT(accepted, 0u) << "no draft was ever accepted: the test proves nothing";
  EXPECT_GE(drafted, accepted);
}

// Seeded sampling at temperature 1 on a hybrid: the token frequencies with n-gram drafts (each
// verification keeping the state after every draft token, a rejection rolling it back) match
// plain sampling. The tiny random model's distribution is nearly flat over its vocabulary, so
// top-k 3 keeps the test's bins full and lets drafts from earlier samples be accepted.
TEST(EngineSpec, HybridSampledTokenFrequenciesMatchPlainSampling) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  auto l = load(path, 512, 256, 16, KvType::kF16, 4);
  ASSERT_TRUE(l);
  auto ids = l->tokenizer.encode("Once upon a time");
  ASSERT_TRUE(ids.ok());
  auto plain = Engine::create(l->tokenizer, *l->executor, {});
  auto spec = Engine::create(l->tokenizer, *l->executor, spec_config(4));
  ASSERT_TRUE(plain.ok() && spec.ok()) << spec.message();
  const auto want = sample_counts(**plain, *ids, 0, 3);
  const auto got = sample_counts(**spec, *ids, 1000, 3);
  // Hundreds of drafts accepted (371 of 7200 sampled tokens when written) and rejected.
  EXPECT_GT((*spec)->stats().spec_accepted_tokens, uint64_t(kRuns / 4));
  EXPECT_GT((*spec)->stats().state_rewinds, 0u);
  EXPECT_GE(expect_same_frequencies(want, got), 8);
}

// A hybrid target with an attention draft model of its vocabulary (qwen35moe and qwen2moe
// share deepseek-coder's): greedy output equals plain decoding, alone and batched.
TEST(EngineSpec, HybridTargetWithDraftModelEqualsPlainDecoding) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35moe.gguf");
  SLUICE_REQUIRE_SHARED(draft_path, "testdata/models/arch/qwen2moe.gguf");
  auto alone = load(path, 512, 64);
  ASSERT_TRUE(alone);
  std::mt19937 rng(37);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params;
  repeating_prompts(rng, alone->executor->capacity().n_vocab, 6, prompts, params);
  const std::vector<Output> reference = run_each_alone(*alone, prompts, params);
  auto draft = load(draft_path, 512, 96);
  auto target = load(path, 512, 64, 16, KvType::kF16, 5);
  ASSERT_TRUE(draft && target);
  EngineConfig cfg = draft_config(*draft->executor, 5, &draft->tokenizer);
  cfg.scheduler.prefill_chunk = 7;
  cfg.scheduler.max_seqs = 6;
  auto engine = Engine::create(target->tokenizer, *target->executor, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  std::vector<int> arrivals;
  for (size_t i = 0; i < prompts.size(); ++i) arrivals.push_back(int(rng() % 10));
  const auto got = run_all(**engine, prompts, params, arrivals);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, reference[i].tokens) << "request " << i;
  }
  // A random draft model guesses badly: most verifications roll the state back.
  EXPECT_GT((*engine)->stats().spec_draft_tokens, 0u);
  EXPECT_GT((*engine)->stats().state_rewinds, 0u);
  EXPECT_EQ((*engine)->kv().n_used_state_slots(), 0);
}

}  // namespace
}  // namespace sluice
