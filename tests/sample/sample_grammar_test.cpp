// The grammar mask as a sampler stage: greedy and sampled tokens stay inside the grammar, the
// masked distribution is p restricted to the allowed tokens (fast path and full mask alike),
// speculative verification never accepts a refused draft, stop tokens only at the end.
#include <gtest/gtest.h>

#include <cmath>

#include "grammar/grammar.h"
#include "sample/sampler.h"

namespace sluice {
namespace {

using grammar::Expr;

// Vocabulary: 0 "y", 1 "es", 2 "n", 3 "o", 4 "yes", 5 "x", 6 "" (stop), 7 "no".
std::shared_ptr<const grammar::CompiledGrammar> yes_no() {
  grammar::GrammarSpec s;
  s.rules.push_back({"root", Expr::alt({Expr::lit("yes"), Expr::lit("no")})});
  auto g = grammar::lower(s);
  EXPECT_TRUE(g.ok());
  auto vocab = std::make_shared<grammar::TokenVocab>(
      std::vector<std::string>{"y", "es", "n", "o", "yes", "x", "", "no"}, std::vector<int32_t>{6});
  return grammar::CompiledGrammar::make(*g, vocab);
}

SamplingParams with_grammar(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = 42;
  p.grammar = yes_no();
  return p;
}

TEST(SampleGrammar, GreedyStaysInsideTheGrammar) {
  auto s = Sampler::create(with_grammar(0));
  ASSERT_TRUE(s.ok());
  SampleWorkspace ws;
  // "x" (5) and the stop token (6) are the model's favourites; the grammar refuses both.
  std::vector<float> logits = {1, 0, 2, 0, 0.5f, 9, 8, 1.5f};
  auto r = s->sample(logits, ws);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->token, 2);  // "n": best allowed
  s->accept(r->token);
  r = s->sample(logits, ws);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 3);  // "o"
  s->accept(r->token);
  EXPECT_FALSE(s->grammar_terminated());
  EXPECT_TRUE(s->grammar_complete());
  r = s->sample(logits, ws);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 6);  // only the stop token now
  s->accept(r->token);
  EXPECT_TRUE(s->grammar_terminated());
  EXPECT_FALSE(s->sample(logits, ws).ok());  // nothing may follow
  EXPECT_GE(ws.grammar_stats().masks, 2u);
}

// Sampled first tokens: the frequencies match p restricted to {y, n, yes, no} (both the
// unmasked-first fast path of plain temperature sampling and the always-masked top-k path).
TEST(SampleGrammar, SampledDistributionIsTheMaskedOne) {
  std::vector<float> logits = {0.3f, 0.1f, -0.2f, 0.0f, 0.7f, 1.2f, 0.9f, 0.2f};
  std::vector<int32_t> allowed = {0, 2, 4, 7};
  double z = 0;
  for (int32_t t : allowed) z += std::exp(logits[size_t(t)]);
  for (int32_t top_k : {0, 6}) {
    SamplingParams p = with_grammar(1.0f);
    p.top_k = top_k;  // 6 > |allowed|: the cut happens after the mask, same distribution
    std::vector<int> count(logits.size());
    const int n = 20000;
    SampleWorkspace ws;
    for (int i = 0; i < n; ++i) {
      p.seed = uint64_t(i);
      auto s = Sampler::create(p);
      ASSERT_TRUE(s.ok());
      auto r = s->sample(logits, ws);
      ASSERT_TRUE(r.ok());
      ++count[size_t(r->token)];
    }
    for (int32_t t = 0; t < int32_t(logits.size()); ++t) {
      bool in = std::find(allowed.begin(), allowed.end(), t) != allowed.end();
      double expect = in ? std::exp(logits[size_t(t)]) / z : 0.0;
      double sd = std::sqrt(expect * (1 - expect) / n);
      EXPECT_NEAR(count[size_t(t)] / double(n), expect, 5 * sd + 1e-9)
          << "token " << t << " top_k " << top_k;
    }
    if (top_k == 0) {
      EXPECT_GT(ws.grammar_stats().fast_accepts, 0u);
    }
  }
}

TEST(SampleGrammar, VerifyRejectsDraftsTheGrammarRefuses) {
  auto s = Sampler::create(with_grammar(1.0f));
  ASSERT_TRUE(s.ok());
  SampleWorkspace ws;
  std::vector<float> logits = {0, 0, 0, 0, 0, 20, 0, 0};  // the model wants "x"
  for (int i = 0; i < 50; ++i) {
    auto v = s->verify(logits, /*draft=*/5, {}, ws);
    ASSERT_TRUE(v.ok()) << v.message();
    EXPECT_FALSE(v->accepted);
    EXPECT_TRUE(v->sample.token == 0 || v->sample.token == 2 || v->sample.token == 4 ||
                v->sample.token == 7)
        << v->sample.token;
  }
  const std::vector<int32_t> draft = {0, 1, 6, 5};  // "y" "es" <stop> "x"
  EXPECT_EQ(s->grammar_allowed_prefix(draft), 3);
  EXPECT_EQ(s->grammar_allowed_prefix(std::vector<int32_t>{5}), 0);
  s->accept(4);  // "yes": the state moved; the prefix check above left it alone
  EXPECT_TRUE(s->grammar_complete());
}

TEST(SampleGrammar, ForcedTokenMarksTheGrammarViolated) {
  auto s = Sampler::create(with_grammar(0));
  ASSERT_TRUE(s.ok());
  s->accept(5);
  EXPECT_TRUE(s->grammar_violated());
}

TEST(SampleGrammar, VocabularySizeMismatchIsAnError) {
  auto s = Sampler::create(with_grammar(0));
  ASSERT_TRUE(s.ok());
  std::vector<float> logits(20, 0.0f);
  auto r = s->sample(logits);
  // The fast path may accept before masking; a full mask must refuse the mismatch.
  logits[5] = 10;
  r = s->sample(logits);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace sluice
