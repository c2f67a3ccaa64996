// regex_to_expr: the trees it builds, the errors it gives, and (the main check) that the
// language of lower(regex_to_expr(p)) equals std::regex's (ECMAScript) on many short strings,
// for full-match and search mode.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/regex.h"

namespace sluice::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Expr parse_ok(std::string_view pattern, RegexOptions opts = {}) {
  auto r = regex_to_expr(pattern, opts);
  EXPECT_TRUE(r.ok()) << "pattern '" << pattern << "': " << r.message();
  return r.ok() ? std::move(r).value() : Expr::empty();
}

std::shared_ptr<const Grammar> compile(std::string_view pattern, bool search) {
  RegexOptions opts;
  opts.search = search;
  auto e = regex_to_expr(pattern, opts);
  if (!e.ok()) {
    ADD_FAILURE() << "pattern '" << pattern << "': " << e.message();
    return nullptr;
  }
  GrammarSpec spec;
  spec.rules.emplace_back("root", std::move(e).value());
  auto g = lower(spec);
  if (!g.ok()) {
    ADD_FAILURE() << "lower('" << pattern << "'): " << g.message();
    return nullptr;
  }
  return *g;
}

bool full(std::string_view pattern, std::string_view text) {
  auto g = compile(pattern, false);
  return g && matches(g, text);
}
bool search(std::string_view pattern, std::string_view text) {
  auto g = compile(pattern, true);
  return g && matches(g, text);
}

const Ranges kAllButSurrogates = {{0, 0xD7FF}, {0xE000, kMaxCodepoint}};

// ---- trees ----

TEST(GrammarRegex, LiteralsMergeUntilAQuantifier) {
  Expr e = parse_ok("abc");
  EXPECT_EQ(e.kind, Expr::Kind::kLiteral);
  EXPECT_EQ(e.text, "abc");

  e = parse_ok("abc*");
  ASSERT_EQ(e.kind, Expr::Kind::kSeq);
  ASSERT_EQ(e.kids.size(), 2u);
  EXPECT_EQ(e.kids[0].text, "ab");
  EXPECT_EQ(e.kids[1].kind, Expr::Kind::kRepeat);
  EXPECT_EQ(e.kids[1].kids[0].text, "c");
  EXPECT_EQ(e.kids[1].min, 0);
  EXPECT_EQ(e.kids[1].max, kUnbounded);
}

TEST(GrammarRegex, NonAsciiCharacterIsOneAtom) {
  Expr e = parse_ok("\xC3\xA9+");  // é+
  ASSERT_EQ(e.kind, Expr::Kind::kRepeat);
  EXPECT_EQ(e.kids[0].text, "\xC3\xA9");
  EXPECT_EQ(e.min, 1);

  EXPECT_EQ(parse_ok("\\u00e9").text, "\xC3\xA9");
  EXPECT_EQ(parse_ok("\\u{1F600}").text, "\xF0\x9F\x98\x80");
  EXPECT_EQ(parse_ok("\\uD83D\\uDE00").text, "\xF0\x9F\x98\x80");  // a surrogate pair
  EXPECT_EQ(parse_ok("\\x41\\0").text, std::string("A\0", 2));
}

TEST(GrammarRegex, QuantifierForms) {
  struct Case {
    const char* pattern;
    int32_t min, max;
  };
  for (const Case& c : {Case{"a*", 0, kUnbounded}, Case{"a+", 1, kUnbounded}, Case{"a?", 0, 1},
                        Case{"a{3}", 3, 3}, Case{"a{2,}", 2, kUnbounded}, Case{"a{2,5}", 2, 5},
                        Case{"a{2,5}?", 2, 5}, Case{"a*?", 0, kUnbounded}, Case{"a??", 0, 1}}) {
    Expr e = parse_ok(c.pattern);
    ASSERT_EQ(e.kind, Expr::Kind::kRepeat) << c.pattern;
    EXPECT_EQ(e.min, c.min) << c.pattern;
    EXPECT_EQ(e.max, c.max) << c.pattern;
  }
  EXPECT_EQ(parse_ok("a{1}").kind, Expr::Kind::kLiteral);
  EXPECT_EQ(parse_ok("a{0}").kind, Expr::Kind::kEmpty);
}

TEST(GrammarRegex, ClassesAreExplicitRanges) {
  Expr d = parse_ok("\\d");
  EXPECT_EQ(d.kind, Expr::Kind::kClass);
  EXPECT_FALSE(d.negated);
  EXPECT_EQ(d.ranges, (Ranges{{'0', '9'}}));

  // Negation is computed, never left as a flag; surrogates never appear.
  const Ranges not_digit = {{0, '0' - 1}, {'9' + 1, 0xD7FF}, {0xE000, kMaxCodepoint}};
  for (const char* p : {"\\D", "[^\\d]", "[\\D]", "[^0-9]", "[^0-5\\d6-9]"}) {
    Expr e = parse_ok(p);
    EXPECT_FALSE(e.negated) << p;
    EXPECT_EQ(e.ranges, not_digit) << p;
  }
  EXPECT_EQ(parse_ok("[^\\D]").ranges, (Ranges{{'0', '9'}}));
  EXPECT_EQ(parse_ok("[\\s\\S]").ranges, kAllButSurrogates);
  EXPECT_EQ(parse_ok("[^]").ranges, kAllButSurrogates);
  EXPECT_EQ(parse_ok("[\\w]").ranges, (Ranges{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}));
  EXPECT_EQ(parse_ok("[ca-bd]").ranges, (Ranges{{'a', 'd'}}));  // sorted and merged
  EXPECT_EQ(parse_ok("[a-]").ranges, (Ranges{{'-', '-'}, {'a', 'a'}}));
  EXPECT_EQ(parse_ok("[\\b]").ranges, (Ranges{{8, 8}}));  // backspace inside a class
  EXPECT_EQ(parse_ok("[\\u0000-\\uFFFF]").ranges, (Ranges{{0, 0xD7FF}, {0xE000, 0xFFFF}}));
  EXPECT_EQ(parse_ok(".").ranges,
            (Ranges{{0, 9}, {11, 12}, {14, 0xD7FF}, {0xE000, kMaxCodepoint}}));

  // \s is ECMAScript's list: 6 ASCII + 11 ranges beyond.
  const Ranges space = {{9, 13},          {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                        {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                        {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  EXPECT_EQ(parse_ok("\\s").ranges, space);
  EXPECT_EQ(parse_ok("[^\\S]").ranges, space);
}

TEST(GrammarRegex, SearchModeAddsDotStarOnUnanchoredSides) {
  RegexOptions s;
  s.search = true;
  auto is_any_star = [](const Expr& e) {
    return e.kind == Expr::Kind::kRepeat && e.min == 0 && e.max == kUnbounded &&
           e.kids[0].kind == Expr::Kind::kClass && e.kids[0].ranges == Ranges{{0, kMaxCodepoint}};
  };
  Expr e = parse_ok("ab", s);
  ASSERT_EQ(e.kind, Expr::Kind::kSeq);
  ASSERT_EQ(e.kids.size(), 3u);
  EXPECT_TRUE(is_any_star(e.kids[0]));
  EXPECT_EQ(e.kids[1].text, "ab");
  EXPECT_TRUE(is_any_star(e.kids[2]));

  e = parse_ok("^ab", s);
  ASSERT_EQ(e.kind, Expr::Kind::kSeq);
  ASSERT_EQ(e.kids.size(), 2u);
  EXPECT_EQ(e.kids[0].text, "ab");

  e = parse_ok("^ab$", s);
  EXPECT_EQ(e.kind, Expr::Kind::kLiteral);
  EXPECT_TRUE(is_any_star(parse_ok("", s)));
  EXPECT_EQ(parse_ok("^$", s).kind, Expr::Kind::kEmpty);

  // Full-match mode: anchors are no-ops.
  EXPECT_EQ(parse_ok("^ab$").text, "ab");
}

TEST(GrammarRegex, NamedAndNonCapturingGroupsAreTransparent) {
  EXPECT_EQ(parse_ok("(?<year>\\d)").ranges, (Ranges{{'0', '9'}}));
  EXPECT_EQ(parse_ok("(?:ab)").text, "ab");
  EXPECT_EQ(parse_ok("((((a))))").text, "a");
}

// ---- errors ----

TEST(GrammarRegex, UnsupportedConstructsNameThemselvesAndTheirOffset) {
  struct Case {
    const char* pattern;
    const char* message;
  };
  const Case cases[] = {
      {"ab(?=c)", "regex: unsupported lookahead '(?=' at offset 2"},
      {"(?!c)", "regex: unsupported lookahead '(?!' at offset 0"},
      {"a(?<=b)", "regex: unsupported lookbehind '(?<=' at offset 1"},
      {"a(?<!b)", "regex: unsupported lookbehind '(?<!' at offset 1"},
      {"(?i)a",
       "unsupported group syntax '(?i' (inline flags and modifiers are not supported) at "
       "offset 0"},
      {"(a)\\1", "regex: unsupported backreference '\\1' at offset 3"},
      {"(?<n>a)\\k<n>", "unsupported named backreference '\\k' at offset 7"},
      {"\\bfoo", "unsupported word boundary '\\b' at offset 0"},
      {"a\\B", "unsupported word boundary '\\B' at offset 1"},
      {"\\p{L}", "unsupported Unicode property escape '\\p' at offset 0"},
      {"\\cA", "unsupported control escape '\\c' at offset 0"},
      {"\\q", "unknown escape '\\q' at offset 0"},
      {"\\01", "octal escapes"},
      {"a^b",
       "anchor '^' is only supported at the start of the pattern or of a top-level "
       "alternative at offset 1"},
      {"a$b",
       "anchor '$' is only supported at the end of the pattern or of a top-level "
       "alternative at offset 1"},
      {"(^a)", "anchor '^' is only supported at the start"},
      {"(a$)", "anchor '$' is only supported at the end"},
      {"(a|^b)", "anchor '^' is only supported at the start"},
      {"^^a", "anchor '^' is only supported at the start"},
      {"a$*", "anchor '$' is only supported at the end"},
      {"*a", "nothing to repeat before '*' at offset 0"},
      {"a|+", "nothing to repeat before '+' at offset 2"},
      {"a**", "nothing to repeat: '*' follows the quantifier at offset 1 at offset 2"},
      {"a{2}{3}", "nothing to repeat: '{' follows the quantifier at offset 1"},
      {"a{", "malformed quantifier '{' (write \\{ for a literal brace) at offset 1"},
      {"a{,3}", "malformed quantifier '{'"},
      {"a{1,2", "malformed quantifier '{'"},
      {"{", "nothing to repeat before '{'"},
      {"a{3,2}", "quantifier {3,2} has min > max at offset 1"},
      {"a{10001}", "repeat count 10001 is above the limit 10000 at offset 2"},
      {"a{99999999999999999999}", "is above the limit 10000"},
      {"(ab", "unclosed group '(' at offset 0"},
      {"ab)", "unmatched ')' at offset 2"},
      {"[ab", "unclosed class '[' at offset 0"},
      {"[z-a]", "class range out of order at offset 1"},
      {"[\\d-z]", "class escape (\\d \\w \\s ...) used as a range bound at offset 1"},
      {"[]", "class matches no character at offset 0"},
      {"[^\\s\\S]", "class matches no character"},
      {"\\x4g", "'\\x' needs 2 hex digits at offset 0"},
      {"\\u12", "'\\u' needs 4 hex digits"},
      {"\\uD800", "is a lone surrogate"},
      {"\\u{110000}", "above U+10FFFF"},
      {"\\u{}", "malformed '\\u{...}' escape"},
      {"(?<1a>x)", "invalid group name"},
      {"ab\\", "trailing backslash at offset 2"},
      {"a\xC3", "regex: invalid UTF-8 at offset 1"},
      {"\xE9t\xE9", "regex: invalid UTF-8 at offset 0"},
  };
  for (const Case& c : cases) {
    auto r = regex_to_expr(c.pattern);
    ASSERT_FALSE(r.ok()) << c.pattern;
    EXPECT_NE(r.message().find(c.message), std::string::npos)
        << "pattern '" << c.pattern << "' gave: " << r.message();
  }
}

TEST(GrammarRegex, MaxRepeatOption) {
  RegexOptions o;
  o.max_repeat = 20;
  EXPECT_TRUE(regex_to_expr("a{20}", o).ok());
  auto r = regex_to_expr("a{3,21}", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("repeat count 21 is above the limit 20 at offset 4"),
            std::string::npos)
      << r.message();
}

TEST(GrammarRegex, NestingDepthIsBounded) {
  const std::string ok = std::string(256, '(') + "a" + std::string(256, ')');
  EXPECT_TRUE(regex_to_expr(ok).ok());
  const std::string deep = std::string(257, '(') + "a" + std::string(257, ')');
  auto r = regex_to_expr(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("groups nested deeper than 256 at offset 256"), std::string::npos)
      << r.message();
  // Far deeper input still ends in an error, not a stack overflow.
  EXPECT_FALSE(regex_to_expr(std::string(100'000, '(')).ok());
}

// ---- languages against std::regex ----

// ASCII-only patterns whose ECMAScript meaning std::regex (which works on bytes) agrees with.
const char* const kPatterns[] = {
    "",
    "a",
    "ab",
    "a|b",
    "ab|",
    "|a",
    "a*",
    "a+b",
    "a?b?",
    "a*?b",
    "a{2}",
    "a{1,3}",
    "a{2,}",
    "(ab)*",
    "(a|b)*b",
    "(?:a|01)+",
    "[ab]",
    "[^ab]",
    "[a-b0]",
    "[-a]",
    "[a-]",
    "[\\-_]",
    ".",
    ".*",
    "a.b",
    "\\d+",
    "\\D",
    "\\w*",
    "\\W",
    "\\s",
    "\\S+",
    "[\\d_]",
    "[^\\d]",
    "[\\D]",
    "[^\\D]",
    "[\\s\\S]",
    "[^\\w\\s]",
    "\\x61",
    "\\u0062",
    "\\n",
    "[\\n]",
    "^a",
    "a$",
    "^ab$",
    "^a|b$",
    "^(a|b)",
    "(a|b)$",
    "a|^b|c$",
    "(a*)*",
    "(a|b?)+",
    "((a)|b)*",
    "a{0}",
    "a{0,0}b",
    "(ab){1,2}?",
    "[_\\W]",
    "a\\-b",
    "(|a)b",
    "^$",
    "^",
    "$",
    "a{2,3}b{0,2}",
    "(a|ab)(c|bcd)",
    "\\d{2,}-?",
    "[^\\n]*\\n",
    "(\\s|a)+$",
    "[\\w-]+",
};

// Every string of length <= 3 over `alphabet`, then random ones of length 4..8.
std::vector<std::string> sample_texts(std::string_view alphabet, size_t n_random, uint32_t seed) {
  std::vector<std::string> out = {""};
  for (size_t len = 1, begin = 0; len <= 3; ++len) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : alphabet) out.push_back(out[i] + c);
    }
    begin = end;
  }
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n_random; ++i) {
    std::string s(4 + rng() % 5, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    out.push_back(std::move(s));
  }
  return out;
}

// `s` with control characters escaped, for failure messages.
std::string shown(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (uint8_t(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

TEST(GrammarRegex, SameLanguageAsStdRegex) {
  const std::vector<std::string> texts = sample_texts("ab01_ -\n", 400, 12345);
  int checked = 0;
  for (const char* p : kPatterns) {
    const std::regex re(p, std::regex::ECMAScript);
    auto g_full = compile(p, false);
    auto g_search = compile(p, true);
    ASSERT_TRUE(g_full && g_search) << p;
    int mismatches = 0;
    for (const std::string& t : texts) {
      const bool want_full = std::regex_match(t, re);
      const bool want_search = std::regex_search(t, re);
      if (matches(g_full, t) != want_full && ++mismatches <= 3) {
        ADD_FAILURE() << "full '" << p << "' on '" << shown(t) << "': std::regex says "
                      << want_full;
      }
      if (matches(g_search, t) != want_search && ++mismatches <= 3) {
        ADD_FAILURE() << "search '" << p << "' on '" << shown(t) << "': std::regex says "
                      << want_search;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 50'000);
}

// ---- beyond ASCII (std::regex cannot judge these: it sees bytes) ----

TEST(GrammarRegex, CodePointSemantics) {
  const std::string e_acute = "\xC3\xA9", euro = "\xE2\x82\xAC", smile = "\xF0\x9F\x98\x80";
  EXPECT_TRUE(full(".", e_acute));
  EXPECT_TRUE(full(".", smile));
  EXPECT_FALSE(full(".", "\n"));
  EXPECT_FALSE(full(".", "\r"));
  EXPECT_TRUE(full(".", "\xE2\x80\xA8"));  // U+2028: only \n and \r are excluded (see regex.h)
  EXPECT_FALSE(full("..", e_acute));       // one code point, not two bytes
  EXPECT_TRUE(full("[^a]", euro));
  EXPECT_TRUE(full("\\D\\W\\S", e_acute + euro + smile));
  EXPECT_TRUE(full("\\s+", "\xC2\xA0\xE3\x80\x80\xEF\xBB\xBF\xE2\x80\xA9"));  // A0 3000 FEFF 2029
  EXPECT_FALSE(full("\\s", "\xC2\x85"));      // U+0085 (NEL) is not ECMAScript whitespace
  EXPECT_FALSE(full("\\S", "\xE1\x9A\x80"));  // U+1680
  EXPECT_TRUE(full(e_acute + "+", e_acute + e_acute));
  EXPECT_FALSE(full(e_acute + "+", e_acute + "\xC3"));
  EXPECT_TRUE(full("[\\u00e0-\\u00ff]{2}", e_acute + "\xC3\xBF"));
  EXPECT_TRUE(full("[" + e_acute + euro + "]", euro));
  EXPECT_FALSE(full("[^" + e_acute + euro + "]", euro));
  EXPECT_TRUE(full("\\u{1F600}|x", smile));
  EXPECT_TRUE(full("[\\uD83D\\uDE00-\\uD83D\\uDE4F]", smile));
  // Invalid UTF-8 text never matches, not even .* or [^a].
  EXPECT_FALSE(full(".*", "\xFF"));
  EXPECT_FALSE(full("[^a]", "\xC3"));
  EXPECT_FALSE(full("[\\s\\S]", "\xED\xA0\x80"));  // an encoded surrogate
}

TEST(GrammarRegex, SearchModeIsJsonSchemaPattern) {
  // JSON Schema "pattern" is unanchored: these are schemas' typical patterns.
  EXPECT_TRUE(search("\\d", "abc1def"));
  EXPECT_FALSE(search("\\d", "abcdef"));
  EXPECT_TRUE(search("^[a-z]+$", "hello"));
  EXPECT_FALSE(search("^[a-z]+$", "hello world"));
  EXPECT_TRUE(search("^\\d{3}-\\d{4}$", "555-1234"));
  EXPECT_FALSE(search("^\\d{3}-\\d{4}$", "555-12345"));
  EXPECT_TRUE(search("^\\S+@\\S+\\.\\S+$", "a.b@example.com"));
  EXPECT_TRUE(search("foo", "x\nfoo\ny"));  // the added .* crosses newlines
  EXPECT_TRUE(search("^a|b$", "a\xC3\xA9"));
  EXPECT_TRUE(search("^a|b$",
                     "\xC3\xA9"
                     "b"));
  EXPECT_FALSE(search("^a|b$", "ba"));
}

}  // namespace
}  // namespace sluice::grammar
