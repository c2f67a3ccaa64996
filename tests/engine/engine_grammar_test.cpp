// Structured output in the engine: every sampled output of a real tiny model is a sentence of
// the request's grammar and ends there, with and without speculative drafts (greedy output
// identical); a request whose grammar fails ends alone with an error.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "grammar/grammar.h"
#include "test_util.h"

namespace sluice {
namespace {

using grammar::Expr;

// root ::= "[" (num ("," " "? num){0,5})? "]"   num ::= "-"? [0-9]{1,3}
std::shared_ptr<const grammar::Grammar> list_grammar() {
  grammar::GrammarSpec s;
  auto num = Expr::seq({Expr::opt(Expr::lit("-")), Expr::repeat(Expr::cls({{'0', '9'}}), 1, 3)});
  s.rules.push_back({"num", num});
  s.rules.push_back(
      {"root", Expr::seq({Expr::lit("["),
                          Expr::opt(Expr::seq(
                              {Expr::ref("num"),
                               Expr::repeat(Expr::seq({Expr::lit(","), Expr::opt(Expr::lit(" ")),
                                                       Expr::ref("num")}),
                                            0, 5)})),
                          Expr::lit("]")})});
  auto g = grammar::lower(s);
  EXPECT_TRUE(g.ok()) << g.message();
  return *g;
}

TEST(EngineGrammar, SampledOutputsAreSentencesOfTheGrammar) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 256, 64);
  ASSERT_TRUE(l);
  for (SpecMode mode : {SpecMode::kNone, SpecMode::kNgram}) {
    EngineConfig c;
    c.spec.mode = mode;
    c.spec.n_draft_max = 4;
    auto engine = Engine::create(l->tokenizer, *l->executor, c);
    ASSERT_TRUE(engine.ok()) << engine.message();
    auto g = list_grammar();
    auto cg = grammar::CompiledGrammar::make(g, (*engine)->grammar_vocab());
    auto prompt = l->tokenizer.encode("Once upon a time");
    ASSERT_TRUE(prompt.ok());
    std::vector<std::vector<int32_t>> prompts;
    std::vector<GenerationParams> params;
    std::vector<int> arrivals;
    for (int i = 0; i < 24; ++i) {
      GenerationParams p;
      p.sampling.temperature = i % 4 == 0 ? 0.0f : 1.0f;
      p.sampling.top_k = i % 3 == 1 ? 40 : 0;
      p.sampling.seed = uint64_t(i);
      p.sampling.grammar = cg;
      p.max_tokens = 200;
      prompts.push_back(*prompt);
      params.push_back(p);
      arrivals.push_back(i % 5);
    }
    auto out = run_all(**engine, prompts, params, arrivals);
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].finish, FinishReason::kStop) << i << ": " << out[i].text;
      std::string toks;
      for (int32_t t : out[i].tokens)
        toks += std::to_string(t) + "'" + std::string((*engine)->grammar_vocab()->bytes(t)) + "' ";
      EXPECT_TRUE(grammar::matches(g, out[i].text)) << i << ": '" << out[i].text << "' " << toks;
    }
    EXPECT_GT((*engine)->grammar_stats().masks, 0u);
    EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
  }
}

TEST(EngineGrammar, GreedyOutputIdenticalWithDrafts) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 256, 64);
  ASSERT_TRUE(l);
  // A grammar the model's own greedy text mostly follows: words and spaces, then a period.
  grammar::GrammarSpec s;
  s.rules.push_back(
      {"root",
       Expr::seq(
           {Expr::repeat(Expr::seq({Expr::lit(" "), Expr::plus(Expr::cls({{'a', 'z'}}))}), 1, 30),
            Expr::lit(".")})});
  auto g = grammar::lower(s);
  ASSERT_TRUE(g.ok());
  std::vector<std::string> texts;
  for (SpecMode mode : {SpecMode::kNone, SpecMode::kNgram}) {
    EngineConfig c;
    c.spec.mode = mode;
    auto engine = Engine::create(l->tokenizer, *l->executor, c);
    ASSERT_TRUE(engine.ok());
    auto cg = grammar::CompiledGrammar::make(*g, (*engine)->grammar_vocab());
    auto prompt = l->tokenizer.encode("Once upon a time, there was a little girl. The little girl");
    ASSERT_TRUE(prompt.ok());
    GenerationParams p = greedy(120);
    p.sampling.grammar = cg;
    auto out = run_all(**engine, {*prompt, *prompt}, {p, p}, {0, 3});
    EXPECT_EQ(out[0].text, out[1].text);
    EXPECT_TRUE(grammar::matches(*g, out[0].text)) << out[0].text;
    texts.push_back(out[0].text);
    if (mode == SpecMode::kNgram) {
      EXPECT_GT((*engine)->stats().spec_draft_tokens, 0u) << "no drafts were verified";
    }
  }
  EXPECT_EQ(texts[0], texts[1]);
}

TEST(EngineGrammar, IgnoreEosStillEndsWhereTheGrammarEnds) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 256, 64);
  ASSERT_TRUE(l);
  auto engine = Engine::create(l->tokenizer, *l->executor, {});
  ASSERT_TRUE(engine.ok());
  auto cg = grammar::CompiledGrammar::make(list_grammar(), (*engine)->grammar_vocab());
  GenerationParams p = greedy(300);
  p.ignore_eos = true;
  p.sampling.grammar = cg;
  auto out = run_all(**engine, {{1, 400, 401}}, {p}, {0});
  EXPECT_EQ(out[0].finish, FinishReason::kStop);
  EXPECT_TRUE(grammar::matches(list_grammar(), out[0].text)) << out[0].text;
}

TEST(EngineGrammar, AFailingGrammarEndsOnlyItsRequest) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto l = load(path, 256, 64);
  ASSERT_TRUE(l);
  auto engine = Engine::create(l->tokenizer, *l->executor, {});
  ASSERT_TRUE(engine.ok());
  // Compiled for a 10-token vocabulary with no bytes: the mask cannot fit these logits.
  auto bad_vocab =
      std::make_shared<grammar::TokenVocab>(std::vector<std::string>(10), std::vector<int32_t>{});
  auto bad = grammar::CompiledGrammar::make(list_grammar(), bad_vocab);
  GenerationParams p = greedy(20);
  p.sampling.grammar = bad;
  auto out = run_all(**engine, {{1, 400}, {1, 400}}, {p, greedy(20)}, {0, 0});
  EXPECT_EQ(out[0].finish, FinishReason::kError);
  EXPECT_EQ(out[1].finish, FinishReason::kLength);
  EXPECT_EQ(out[1].tokens.size(), 20u);
}

}  // namespace
}  // namespace sluice
