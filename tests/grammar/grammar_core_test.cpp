// lower() and the byte-level matcher: classes over UTF-8, repeats, recursion, rollback.
#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar.h"

namespace sluice::grammar {
namespace {

std::shared_ptr<const Grammar> must_lower(GrammarSpec spec) {
  auto g = lower(spec);
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? *g : nullptr;
}

std::shared_ptr<const Grammar> lowered_rule(Expr e) {
  GrammarSpec s;
  s.rules.push_back({"root", std::move(e)});
  return must_lower(std::move(s));
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | cp >> 6);
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | cp >> 12);
    s += char(0x80 | (cp >> 6 & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | cp >> 18);
    s += char(0x80 | (cp >> 12 & 0x3F));
    s += char(0x80 | (cp >> 6 & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

TEST(GrammarCore, LiteralSequenceAndAlternation) {
  auto g = lowered_rule(Expr::seq({Expr::lit("ab"), Expr::alt({Expr::lit("c"), Expr::lit("de")})}));
  EXPECT_TRUE(matches(g, "abc"));
  EXPECT_TRUE(matches(g, "abde"));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_FALSE(matches(g, "abd"));
  EXPECT_FALSE(matches(g, "abcd"));
  EXPECT_FALSE(matches(g, ""));
}

// Every code point class is exactly the set of UTF-8 encodings of its members: checked on
// random ranges against membership, at range edges, encoding-length edges and surrogates.
TEST(GrammarCore, CodepointClassesAreExactOverUtf8) {
  std::mt19937 rng(7);
  const uint32_t edges[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  for (int round = 0; round < 60; ++round) {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    int n = 1 + int(rng() % 3);
    for (int i = 0; i < n; ++i) {
      uint32_t a = round % 2 ? edges[rng() % 10] : rng() % 0x110000, b = rng() % 0x110000;
      if (round % 3 == 0) b = a + rng() % 300;
      b = std::min(b, kMaxCodepoint);
      ranges.push_back({std::min(a, b), std::max(a, b)});
    }
    bool neg = round % 4 == 1;
    auto g = lowered_rule(Expr::cls(ranges, neg));
    ASSERT_TRUE(g);
    auto member = [&](uint32_t cp) {
      bool in = false;
      for (auto [lo, hi] : ranges) in |= cp >= lo && cp <= hi;
      return (cp < 0xD800 || cp > 0xDFFF) && in != neg;
    };
    std::vector<uint32_t> probes;
    for (auto [lo, hi] : ranges)
      for (uint32_t d : {0u, 1u})
        for (uint32_t v : {lo - d, lo + d, hi - d, hi + d})
          if (v <= kMaxCodepoint) probes.push_back(v);
    for (uint32_t e : edges) probes.push_back(e);
    for (int i = 0; i < 300; ++i) probes.push_back(rng() % 0x110000);
    for (uint32_t cp : probes) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      EXPECT_EQ(matches(g, utf8(cp)), member(cp)) << "cp " << cp << " round " << round;
    }
  }
  // Not UTF-8: overlong forms, lone continuation bytes, surrogates encoded, beyond U+10FFFF.
  auto any = lowered_rule(Expr::any_char());
  for (const char* bad :
       {"\xC0\x80", "\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE0\x80\x80", "\xF8"})
    EXPECT_FALSE(matches(any, bad)) << bad;
}

TEST(GrammarCore, ByteClasses) {
  auto g = lowered_rule(Expr::plus(Expr::byte_cls({{0x80, 0xFF}})));
  EXPECT_TRUE(matches(g, "\x80\xFF\x90"));
  EXPECT_FALSE(matches(g, "a"));
  auto neg = lowered_rule(Expr::byte_cls({{0, 0x7F}}, true));
  EXPECT_TRUE(matches(neg, "\xC3"));
  EXPECT_FALSE(matches(neg, "a"));
}

TEST(GrammarCore, RepeatBounds) {
  auto g = lowered_rule(Expr::repeat(Expr::lit("ab"), 2, 4));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "abab"));
  EXPECT_TRUE(matches(g, "ababab"));
  EXPECT_TRUE(matches(g, "abababab"));
  EXPECT_FALSE(matches(g, "ababababab"));
  auto star = lowered_rule(
      Expr::seq({Expr::lit("<"), Expr::star(Expr::cls({{'a', 'z'}})), Expr::lit(">")}));
  EXPECT_TRUE(matches(star, "<>"));
  EXPECT_TRUE(matches(star, "<abc>"));
  EXPECT_FALSE(matches(star, "<aBc>"));
  // A repeat of something that can be empty still terminates.
  auto nested = lowered_rule(Expr::star(Expr::opt(Expr::lit("x"))));
  EXPECT_TRUE(matches(nested, ""));
  EXPECT_TRUE(matches(nested, "xxx"));
  auto nested2 = lowered_rule(Expr::star(Expr::star(Expr::lit("x"))));
  EXPECT_TRUE(matches(nested2, "xxxx"));
}

// Nested repeats of something that can be empty (gbnf_fuzz found `"x" [ ]?+++...+` taking
// exponential time in the closure): lowered as repeats of the non-empty part, they stay cheap.
TEST(GrammarCore, NestedRepeatsOfNullableStayLinear) {
  Expr e = Expr::opt(Expr::lit(" "));
  for (int i = 0; i < 40; ++i) e = Expr::plus(std::move(e));
  auto g = lowered_rule(Expr::seq({Expr::lit("x"), e, Expr::lit("y")}));
  ASSERT_TRUE(g);
  Matcher m(g);
  ASSERT_TRUE(m.accept("x   "));
  EXPECT_TRUE(m.accept("y"));
  EXPECT_LT(m.store().size(),
            100000u);  // polynomial in the nesting (45k at 40 levels), was 2^levels
  GrammarSpec s;       // the same through a nullable rule
  s.rules.push_back(
      {"root", Expr::seq({Expr::lit("x"), Expr::star(Expr::ref("w")), Expr::lit("y")})});
  s.rules.push_back({"w", Expr::seq({Expr::opt(Expr::lit(" ")), Expr::star(Expr::ref("w2"))})});
  s.rules.push_back({"w2", Expr::star(Expr::plus(Expr::opt(Expr::lit("\n"))))});
  auto g2 = must_lower(s);
  EXPECT_TRUE(matches(g2, "x \n\n y"));
  EXPECT_TRUE(matches(g2, "xy"));
  EXPECT_FALSE(matches(g2, "x z y"));
}

// Right recursion and loops are tail calls: a long sentence keeps the stack shallow.
TEST(GrammarCore, LongLoopsStayShallow) {
  auto g = lowered_rule(Expr::star(Expr::cls({{'a', 'z'}})));
  Matcher m(g);
  std::string text(100'000, 'q');
  ASSERT_TRUE(m.accept(text));
  EXPECT_TRUE(m.can_end());
  EXPECT_LT(m.store().size(), 100u);
}

TEST(GrammarCore, RecursionAndErrors) {
  GrammarSpec s;
  s.rules.push_back({"root", Expr::ref("paren")});
  s.rules.push_back(
      {"paren", Expr::alt({Expr::empty(), Expr::seq({Expr::lit("("), Expr::ref("paren"),
                                                     Expr::lit(")"), Expr::ref("paren")})})});
  auto g = must_lower(s);
  EXPECT_TRUE(matches(g, "(()())()"));
  EXPECT_TRUE(matches(g, ""));
  EXPECT_FALSE(matches(g, "(()"));
  EXPECT_FALSE(matches(g, "())"));

  GrammarSpec left;
  left.rules.push_back(
      {"root", Expr::alt({Expr::seq({Expr::ref("root"), Expr::lit("a")}), Expr::lit("b")})});
  auto r = lower(left);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("left-recursive"), std::string::npos) << r.message();

  GrammarSpec undef;
  undef.rules.push_back({"root", Expr::ref("nope")});
  EXPECT_NE(lower(undef).message().find("undefined rule 'nope'"), std::string::npos);
  GrammarSpec noroot;
  noroot.rules.push_back({"start", Expr::lit("a")});
  EXPECT_NE(lower(noroot).message().find("no rule named 'root'"), std::string::npos);
  GrammarSpec big;
  big.rules.push_back({"root", Expr::repeat(Expr::lit("a"), 0, 1'000'000)});
  EXPECT_FALSE(lower(big).ok());
  GrammarSpec inverted;
  inverted.rules.push_back({"root", Expr::repeat(Expr::lit("a"), 3, 2)});
  EXPECT_FALSE(lower(inverted).ok());
}

TEST(GrammarCore, RollbackRestoresState) {
  auto g = lowered_rule(Expr::seq({Expr::lit("{"), Expr::star(Expr::lit("ab")), Expr::lit("}")}));
  Matcher m(g);
  ASSERT_TRUE(m.accept("{"));
  ASSERT_TRUE(m.accept("ab"));
  ASSERT_TRUE(m.accept("a"));
  EXPECT_FALSE(m.accept("}"));  // rejected: no change
  EXPECT_EQ(m.n_steps(), 3u);
  m.rollback(1);
  EXPECT_TRUE(m.can_accept("}"));
  ASSERT_TRUE(m.accept("}"));
  EXPECT_TRUE(m.can_end());
  m.rollback(3);
  EXPECT_EQ(m.n_steps(), 0u);
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept("{}"));
}

}  // namespace
}  // namespace sluice::grammar
