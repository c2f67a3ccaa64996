// Token masks against brute force: at every step of random walks through grammars, the mask
// equals "the matcher survives the token's bytes" for every token of the vocabulary.
#include <gtest/gtest.h>

#include <random>

#include "grammar/json_schema.h"
#include "grammar/schema_instances.h"
#include "grammar/token_mask.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace sluice::grammar {
namespace {

// A JSON-value grammar written by hand (the JSON Schema front end has its own tests).
GrammarSpec json_spec() {
  GrammarSpec s;
  auto ws = Expr::alt({Expr::empty(), Expr::lit(" "),
                       Expr::seq({Expr::lit("\n"), Expr::repeat(Expr::lit(" "), 0, 4)})});
  s.rules.push_back({"root", Expr::seq({Expr::ref("ws"), Expr::ref("value"), Expr::ref("ws")})});
  s.rules.push_back({"ws", ws});
  s.rules.push_back(
      {"value",
       Expr::alt({Expr::ref("object"), Expr::ref("array"), Expr::ref("string"), Expr::ref("number"),
                  Expr::lit("true"), Expr::lit("false"), Expr::lit("null")})});
  auto member = Expr::seq(
      {Expr::ref("string"), Expr::ref("ws"), Expr::lit(":"), Expr::ref("ws"), Expr::ref("value")});
  s.rules.push_back(
      {"object", Expr::seq({Expr::lit("{"), Expr::ref("ws"),
                            Expr::opt(Expr::seq(
                                {member, Expr::star(Expr::seq({Expr::ref("ws"), Expr::lit(","),
                                                               Expr::ref("ws"), member}))})),
                            Expr::ref("ws"), Expr::lit("}")})});
  s.rules.push_back(
      {"array", Expr::seq({Expr::lit("["), Expr::ref("ws"),
                           Expr::opt(Expr::seq(
                               {Expr::ref("value"),
                                Expr::star(Expr::seq({Expr::ref("ws"), Expr::lit(","),
                                                      Expr::ref("ws"), Expr::ref("value")}))})),
                           Expr::ref("ws"), Expr::lit("]")})});
  auto ch = Expr::alt(
      {Expr::cls({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}}),
       Expr::seq(
           {Expr::lit("\\"),
            Expr::alt({Expr::cls({{'"', '"'},
                                  {'\\', '\\'},
                                  {'/', '/'},
                                  {'b', 'b'},
                                  {'f', 'f'},
                                  {'n', 'n'},
                                  {'r', 'r'},
                                  {'t', 't'}}),
                       Expr::seq({Expr::lit("u"),
                                  Expr::repeat(Expr::cls({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}), 4,
                                               4)})})})});
  s.rules.push_back({"string", Expr::seq({Expr::lit("\""), Expr::star(ch), Expr::lit("\"")})});
  auto digits = Expr::plus(Expr::cls({{'0', '9'}}));
  s.rules.push_back(
      {"number",
       Expr::seq(
           {Expr::opt(Expr::lit("-")),
            Expr::alt({Expr::lit("0"),
                       Expr::seq({Expr::cls({{'1', '9'}}), Expr::star(Expr::cls({{'0', '9'}}))})}),
            Expr::opt(Expr::seq({Expr::lit("."), digits})),
            Expr::opt(Expr::seq({Expr::cls({{'e', 'e'}, {'E', 'E'}}),
                                 Expr::opt(Expr::cls({{'+', '+'}, {'-', '-'}})), digits}))})});
  return s;
}

// Random tokens over JSON-ish bytes (plus UTF-8 pieces and a split multi-byte character), all
// single bytes, and two stop tokens with no bytes.
std::shared_ptr<const TokenVocab> random_vocab(std::mt19937& rng, int n) {
  const std::vector<std::string> atoms = {
      "{",    "}",    "[",   "]",    "\"",  ":",   ",",    " ",    "\n",       "  ",
      "a",    "b",    "key", "true", "fal", "se",  "null", "0",    "1",        "23",
      ".",    "e",    "-",   "+",    "\\",  "\\n", "u",    "00e9", "\xC3\xA9", "\xE2\x82",
      "\xAC", "\x01", "x",   "\"}",  "\":", "\",", "},",   "\n  ", " \""};
  std::vector<std::string> toks;
  for (int c = 0; c < 256; ++c) toks.push_back(std::string(1, char(c)));
  toks.push_back("");  // a control token with no bytes
  while (int(toks.size()) < n) {
    std::string t;
    int parts = 1 + int(rng() % 3);
    for (int p = 0; p < parts; ++p) t += atoms[rng() % atoms.size()];
    toks.push_back(t);
  }
  toks.push_back("");
  toks.push_back("");
  return std::make_shared<TokenVocab>(
      toks, std::vector<int32_t>{int32_t(toks.size() - 2), int32_t(toks.size() - 1)});
}

// The mask of `m`'s current state against is_allowed() for every token.
void expect_brute_force(TokenMatcher& m, const TokenVocab& vocab, std::vector<uint64_t>& mask,
                        const std::string& where) {
  m.fill_mask(mask);
  for (int32_t t = 0; t < int32_t(vocab.size()); ++t) {
    bool bit = (mask[size_t(t) >> 6] >> (t & 63)) & 1;
    ASSERT_EQ(bit, m.is_allowed(t)) << where << " token " << t << " '" << vocab.bytes(t) << "'";
  }
}

void check_walks(const GrammarSpec& spec, int n_vocab, int walks, int steps, uint32_t seed) {
  std::mt19937 rng(seed);
  auto g = lower(spec);
  ASSERT_TRUE(g.ok()) << g.message();
  auto vocab = random_vocab(rng, n_vocab);
  auto cg = CompiledGrammar::make(*g, vocab);
  std::vector<uint64_t> mask(vocab->n_words());
  for (int w = 0; w < walks; ++w) {
    TokenMatcher m(cg);
    for (int step = 0; step < steps && !m.terminated(); ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(vocab->size()); ++t) {
        bool bit = (mask[size_t(t) >> 6] >> (t & 63)) & 1;
        ASSERT_EQ(bit, m.is_allowed(t))
            << "walk " << w << " step " << step << " token " << t << " '" << vocab->bytes(t) << "'";
        if (bit) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << "walk " << w << " step " << step << ": dead end";
      // Prefer non-stop tokens so walks go deep; stop sometimes where allowed.
      int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      if (step % 7 == 3 && m.n_tokens() >= 2)
        m.rollback(1 + rng() % 2);  // rollback keeps masks right
    }
  }
}

TEST(TokenMask, JsonMatchesBruteForce) {
  check_walks(json_spec(), 600, 12, 60, 1);
}

TEST(TokenMask, NestedRepeatsAndAlternativesMatchBruteForce) {
  GrammarSpec s;
  s.rules.push_back(
      {"root", Expr::seq({Expr::repeat(Expr::ref("item"), 1, 5), Expr::opt(Expr::lit("\n"))})});
  s.rules.push_back(
      {"item",
       Expr::alt({Expr::seq({Expr::lit("\""), Expr::repeat(Expr::cls({{'a', 'z'}}), 0, 3),
                             Expr::lit("\"")}),
                  Expr::seq({Expr::lit("["), Expr::star(Expr::ref("item")), Expr::lit("]")}),
                  Expr::plus(Expr::cls({{'0', '9'}}))})});
  check_walks(s, 400, 12, 40, 2);
}

// Repeats of rules with several alternatives, with lower bounds above one (lowered as chains
// of rules that start with the repeated rule, then inlined) and a repeat at the end.
TEST(TokenMask, RequiredRepeatsOfRulesMatchBruteForce) {
  GrammarSpec s;
  s.rules.push_back(
      {"root", Expr::seq({Expr::lit("\""), Expr::repeat(Expr::ref("ch"), 3, 6), Expr::lit("\""),
                          Expr::opt(Expr::seq(
                              {Expr::lit(":"), Expr::repeat(Expr::ref("key"), 2, kUnbounded)}))})});
  s.rules.push_back(
      {"ch", Expr::alt({Expr::cls({{'a', 'c'}, {'0', '1'}, {0xE9, 0xE9}}),
                        Expr::seq({Expr::lit("\\"), Expr::cls({{'n', 'n'}, {'"', '"'}})})})});
  s.rules.push_back(
      {"key", Expr::alt({Expr::cls({{'0', '9'}}), Expr::seq({Expr::lit("x"), Expr::ref("ch")})})});
  check_walks(s, 500, 16, 30, 4);
}

// `sluice bench grammar`'s schema on the real Llama 3 vocabulary (128256 tokens, byte-level
// BPE: long runs of spaces, quotes glued to words, multi-byte UTF-8 pieces): masks equal
// brute force along tokenized random instances (the path a model takes), compact and pretty,
// and along random allowed tokens.
TEST(TokenMask, RealVocabularyNestedSchemaMatchesBruteForce) {
  SLUICE_REQUIRE_SHARED(path, "testdata/tokenizer/ggml-vocab-llama-bpe.gguf");
  Result<Tokenizer> tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.message();
  // As engine/make_grammar_vocab builds it (grammar tests do not link the engine).
  std::vector<std::string> bytes(size_t(tok->vocab().n_tokens()));
  for (int32_t t = 0; t < tok->vocab().n_tokens(); ++t)
    bytes[size_t(t)] = std::string(tok->piece(t, false));
  const std::vector<TokenId>& eog = tok->vocab().eog_ids();
  auto vocab =
      std::make_shared<TokenVocab>(std::move(bytes), std::vector<int32_t>(eog.begin(), eog.end()));
  const auto schema = nlohmann::ordered_json::parse(nested_bench_schema());
  Result<GrammarSpec> spec = json_schema_to_grammar(schema);
  ASSERT_TRUE(spec.ok()) << spec.message();
  auto g = lower(*spec);
  ASSERT_TRUE(g.ok()) << g.message();
  auto cg = CompiledGrammar::make(*g, vocab);
  std::vector<uint64_t> mask(vocab->n_words());
  std::mt19937_64 rng(3);
  EncodeOptions eo;
  eo.add_special = false;
  // Two instances, each checked at about 20 steps spread over the whole document.
  for (bool pretty : {false, true}) {
    std::optional<nlohmann::ordered_json> v = random_instance(schema, rng);
    ASSERT_TRUE(v.has_value());
    const std::string text = instance_text(*v, pretty);
    Result<std::vector<TokenId>> ids = tok->encode(text, eo);
    ASSERT_TRUE(ids.ok());
    TokenMatcher m(cg);
    const size_t stride = std::max<size_t>(1, ids->size() / 20);
    for (size_t i = 0; i < ids->size(); ++i) {
      if (i % stride == 0) {
        expect_brute_force(m, *vocab, mask, "instance step " + std::to_string(i));
        if (HasFatalFailure()) return;
      }
      ASSERT_TRUE(m.accept_token((*ids)[i])) << text << "\ntoken " << i;
    }
    expect_brute_force(m, *vocab, mask, "instance end");
    if (HasFatalFailure()) return;
    for (int32_t stop : vocab->stop_ids())
      EXPECT_TRUE((mask[size_t(stop) >> 6] >> (stop & 63)) & 1);
  }
  // Random allowed tokens (mostly odd ones: inside strings nearly anything goes).
  TokenMatcher m(cg);
  for (int step = 0; step < 16 && !m.terminated(); ++step) {
    expect_brute_force(m, *vocab, mask, "random step " + std::to_string(step));
    if (HasFatalFailure()) return;
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < int32_t(vocab->size()); ++t)
      if (((mask[size_t(t) >> 6] >> (t & 63)) & 1) && !vocab->is_stop(t)) allowed.push_back(t);
    ASSERT_FALSE(allowed.empty());
    ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
  }
}

TEST(TokenMask, StopTokensOnlyWhereTheGrammarMayEnd) {
  GrammarSpec s;
  s.rules.push_back({"root", Expr::lit("ab")});
  auto g = lower(s);
  ASSERT_TRUE(g.ok());
  auto vocab = std::make_shared<TokenVocab>(std::vector<std::string>{"a", "b", "ab", "", "abc"},
                                            std::vector<int32_t>{3});
  auto cg = CompiledGrammar::make(*g, vocab);
  TokenMatcher m(cg);
  std::vector<uint64_t> mask(1);
  m.fill_mask(mask);
  EXPECT_EQ(mask[0], 0b00101u);  // "a", "ab"
  ASSERT_TRUE(m.accept_token(2));
  m.fill_mask(mask);
  EXPECT_EQ(mask[0], 0b01000u);  // only the stop token
  EXPECT_FALSE(m.accept_token(0));
  ASSERT_TRUE(m.accept_token(3));
  EXPECT_TRUE(m.terminated());
  m.fill_mask(mask);
  EXPECT_EQ(mask[0], 0u);
  m.rollback(1);
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.can_end());
}

}  // namespace
}  // namespace sluice::grammar
