// parse_gbnf / to_gbnf: real-world-shaped grammars (our own texts in the style of llama.cpp's
// grammars/ directory) accept and reject the sentences they should, errors carry line:col,
// and printing round-trips.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/grammar.h"
#include "grammar/regex.h"

namespace sluice::grammar {
namespace {

// Structural equality of two trees, with the path to the first difference.
testing::AssertionResult same_tree(const Expr& a, const Expr& b, const std::string& path) {
  auto fail = [&](const char* what) {
    return testing::AssertionFailure() << what << " differs at " << path;
  };
  if (a.kind != b.kind) return fail("kind");
  if (a.text != b.text) return fail("text");
  if (a.ranges != b.ranges) return fail("ranges");
  if (a.negated != b.negated) return fail("negated");
  if (a.min != b.min || a.max != b.max) return fail("repeat bounds");
  if (a.kids.size() != b.kids.size()) return fail("number of kids");
  for (size_t i = 0; i < a.kids.size(); ++i) {
    auto r = same_tree(a.kids[i], b.kids[i], path + "/" + std::to_string(i));
    if (!r) return r;
  }
  return testing::AssertionSuccess();
}

testing::AssertionResult same_spec(const GrammarSpec& a, const GrammarSpec& b) {
  if (a.root != b.root) return testing::AssertionFailure() << "root differs";
  if (a.rules.size() != b.rules.size()) return testing::AssertionFailure() << "rule count";
  for (size_t i = 0; i < a.rules.size(); ++i) {
    if (a.rules[i].first != b.rules[i].first) {
      return testing::AssertionFailure() << "rule name " << a.rules[i].first;
    }
    auto r = same_tree(a.rules[i].second, b.rules[i].second, a.rules[i].first);
    if (!r) return r;
  }
  return testing::AssertionSuccess();
}

GrammarSpec parse_ok(std::string_view src) {
  auto r = parse_gbnf(src);
  EXPECT_TRUE(r.ok()) << r.message() << "\n" << src;
  return r.ok() ? std::move(r).value() : GrammarSpec{};
}

std::shared_ptr<const Grammar> compile(std::string_view src) {
  auto spec = parse_gbnf(src);
  if (!spec.ok()) {
    ADD_FAILURE() << spec.message();
    return nullptr;
  }
  auto g = lower(*spec);
  if (!g.ok()) {
    ADD_FAILURE() << "lower: " << g.message();
    return nullptr;
  }
  return *g;
}

// ---- grammars in the shapes people write (our own texts) ----

const char* const kJson = R"gbnf(# JSON values, whitespace-tolerant.
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws

# Optional space: at most one newline and some indentation.
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

const char* const kArithmetic = R"gbnf(root  ::= (line "\n")+
line  ::= expr ws "=" ws num
expr  ::= term (ws [-+*/] ws term)*
term  ::= ident | num | "(" ws expr ws ")"
ident ::= [a-z] [a-z0-9_]*
num   ::= [0-9]+
ws    ::= [ \t]*
)gbnf";

const char* const kList = R"gbnf(root ::= item+

# One line each; no line break characters inside an item.
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
)gbnf";

const char* const kChess = R"gbnf(# Numbered moves: "1. e4 e5 2. Nf3 Nc6"
root   ::= "1. " move " " move "\n" ([1-9] [0-9]? ". " move " " move "\n")*
move   ::= (pawn | nonpawn | castle) [+#]?
pawn   ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBRQ])?
nonpawn::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
castle ::= "O-O" "-O"?
)gbnf";

// Unicode, every escape form and every repeat form.
const char* const kForms = R"gbnf(root ::= greek{2,3} sep emoji{,2} tail
greek ::= [α-ω]
sep ::= "\x2d" | "\u2014" | "\t"
emoji ::= "\U0001F600" | "😀"
tail ::= ("\\" | "\"" | "[" | "\]" | "\[")* "!"{1,} "?"{2} "."
)gbnf";

TEST(GrammarGbnf, JsonAcceptsAndRejects) {
  auto g = compile(kJson);
  ASSERT_TRUE(g);
  for (const char* ok : {"{}", "{ }", R"({"a": 1})", R"({"a": [1, 2.5, -3e10, true, null]})",
                         R"({"k\"ey": "v\u00e9\n", "b": {"c": []}})", "{\n  \"x\": \"\xC3\xA9\"\n}",
                         R"({"n": -0.5E+12})"}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad : {"", "[]", R"({"a" 1})", R"({"a": [1,]})", R"({"a": "x)", R"({"a": 01})",
                          R"({"a": tru})", R"({"a": "\q"})", "{\"a\": \"\x01\"}", R"({'a': 1})"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
}

TEST(GrammarGbnf, ArithmeticAcceptsAndRejects) {
  auto g = compile(kArithmetic);
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "1+2=3\n"));
  EXPECT_TRUE(matches(g, "(a * (b_2 - 3)) / x = 42\nq=0\n"));
  EXPECT_FALSE(matches(g, "1+2=3"));   // no final newline
  EXPECT_FALSE(matches(g, "1+=3\n"));  // missing operand
  EXPECT_FALSE(matches(g, "(1=1\n"));  // unbalanced
  EXPECT_FALSE(matches(g, "A=1\n"));   // idents are lowercase
}

TEST(GrammarGbnf, ListAndChess) {
  auto list = compile(kList);
  ASSERT_TRUE(list);
  EXPECT_TRUE(matches(list, "- milk\n- \xC3\xA9ggs & ham\n"));
  EXPECT_FALSE(matches(list, "- \n"));
  EXPECT_FALSE(matches(list, "- a\rb\n"));
  EXPECT_FALSE(matches(list,
                       "- a\xE2\x80\xA8"
                       "b\n"));  // U+2028
  EXPECT_FALSE(matches(list,
                       "- a\xC2\x85"
                       "b\n"));  // U+0085
  EXPECT_FALSE(matches(list, "-a\n"));

  auto chess = compile(kChess);
  ASSERT_TRUE(chess);
  EXPECT_TRUE(matches(chess, "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n"));
  EXPECT_TRUE(matches(chess, "1. O-O-O exd8=Q+\n"));
  EXPECT_FALSE(matches(chess, "1. e9 e5\n"));
  EXPECT_FALSE(matches(chess, "1. e4\n"));
}

TEST(GrammarGbnf, EscapesAndRepeatForms) {
  auto g = compile(kForms);
  ASSERT_TRUE(g);
  const std::string ab = "\xCE\xB1\xCE\xB2";  // αβ
  const std::string smile = "\xF0\x9F\x98\x80";
  EXPECT_TRUE(matches(g, ab + "-!??."));
  EXPECT_TRUE(matches(g, ab + "\xCE\xB3\xE2\x80\x94" + smile + smile + "\\\"[][!!!??."));
  EXPECT_TRUE(matches(g, ab + "\t" + smile + "!??."));
  EXPECT_FALSE(matches(g, "\xCE\xB1-!??."));    // greek{2,3}: one is too few
  EXPECT_FALSE(matches(g, ab + ab + "-!??."));  // four too many
  EXPECT_FALSE(matches(g, ab + "-" + smile + smile + smile + "!??."));  // emoji{,2}
  EXPECT_FALSE(matches(g, ab + "-??."));                                // "!"{1,}
  EXPECT_FALSE(matches(g, ab + "-!?."));                                // "?"{2}
}

// ---- trees ----

TEST(GrammarGbnf, TreeShapes) {
  GrammarSpec s = parse_ok(R"(root ::= "a" [b-d]* | x ("y" | "") .
x ::= [^\n\]-] "\x41\u00e9"{2,} "")");
  ASSERT_EQ(s.rules.size(), 2u);
  EXPECT_EQ(s.root, "root");
  const Expr& root = s.rules[0].second;
  ASSERT_EQ(root.kind, Expr::Kind::kAlt);
  ASSERT_EQ(root.kids.size(), 2u);
  const Expr& a = root.kids[0];
  ASSERT_EQ(a.kind, Expr::Kind::kSeq);
  EXPECT_EQ(a.kids[0].text, "a");
  EXPECT_EQ(a.kids[1].kind, Expr::Kind::kRepeat);
  EXPECT_EQ(a.kids[1].kids[0].ranges, (std::vector<std::pair<uint32_t, uint32_t>>{{'b', 'd'}}));
  const Expr& b = root.kids[1];
  ASSERT_EQ(b.kids.size(), 3u);
  EXPECT_EQ(b.kids[0].kind, Expr::Kind::kRef);
  EXPECT_EQ(b.kids[0].text, "x");
  ASSERT_EQ(b.kids[1].kind, Expr::Kind::kAlt);
  EXPECT_EQ(b.kids[1].kids[1].kind, Expr::Kind::kEmpty);  // ""
  EXPECT_TRUE(same_tree(b.kids[2], Expr::any_char(), "."));

  const Expr& x = s.rules[1].second;
  ASSERT_EQ(x.kind, Expr::Kind::kSeq);
  EXPECT_TRUE(x.kids[0].negated);
  EXPECT_EQ(x.kids[0].ranges,
            (std::vector<std::pair<uint32_t, uint32_t>>{{'\n', '\n'}, {']', ']'}, {'-', '-'}}));
  EXPECT_EQ(x.kids[1].kids[0].text, "A\xC3\xA9");  // \xHH names a code point
  EXPECT_EQ(x.kids[1].min, 2);
  EXPECT_EQ(x.kids[1].max, kUnbounded);
  EXPECT_EQ(x.kids[2].kind, Expr::Kind::kEmpty);
}

TEST(GrammarGbnf, NewlinesCommentsAndContinuations) {
  // A newline ends a rule, except inside ( ), after ::= or |, or before a line starting with |.
  GrammarSpec s = parse_ok(
      "# leading comment\n"
      "\n"
      "root ::=   # comment after ::=\n"
      "  \"a\" |\n"
      "  \"b\"   # comment\n"
      "  | \"c\" (\n"
      "    \"d\"\n"
      "    | \"e\" ) \n"
      "\r\n"
      "other-rule_2 ::= \"x\"\r\n"
      "Other ::= root\n"
      "  # trailing comment");
  ASSERT_EQ(s.rules.size(), 3u);
  EXPECT_EQ(s.rules[1].first, "other-rule_2");
  EXPECT_EQ(s.rules[2].first, "Other");  // names are case-sensitive
  const Expr& root = s.rules[0].second;
  ASSERT_EQ(root.kind, Expr::Kind::kAlt);
  ASSERT_EQ(root.kids.size(), 3u);
  EXPECT_EQ(root.kids[2].kids[1].kind, Expr::Kind::kAlt);
  auto g = lower(s);
  ASSERT_TRUE(g.ok()) << g.message();
  for (const char* t : {"a", "b", "cd", "ce"}) EXPECT_TRUE(matches(*g, t)) << t;
  EXPECT_FALSE(matches(*g, "c"));

  // Without the continuation, the second line is a new (malformed) rule.
  auto r = parse_gbnf("root ::= \"a\"\n  \"b\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "gbnf: expected a rule name, found '\"' at 2:3");
}

// ---- errors ----

TEST(GrammarGbnf, ErrorsCarryLineAndColumn) {
  struct Case {
    std::string src;
    const char* message;
  };
  const Case cases[] = {
      {"root ::= \"a\"\nroot ::= \"b\"", "gbnf: rule 'root' defined twice (first at 1:1) at 2:1"},
      {"root ::= x\nx ::= foo", "gbnf: undefined rule 'foo' at 2:7"},
      {"foo ::= \"a\"", "gbnf: no rule named 'root'"},
      {"", "gbnf: no rule named 'root'"},
      {"ROOT ::= \"a\"", "gbnf: no rule named 'root'"},
      {"root ::= \"abc", "gbnf: unterminated string literal at 1:10"},
      {"root ::= [a-z", "gbnf: unterminated character class at 1:10"},
      {"root ::= (\"a\"", "gbnf: unclosed '(' at 1:10"},
      {"root ::= \"a\")", "gbnf: unmatched ')' at 1:13"},
      {"root := \"a\"", "gbnf: expected '::=' after rule name 'root', found ':' at 1:6"},
      {"root\n::= \"a\"", "gbnf: expected '::=' after rule name 'root', found a newline at 1:5"},
      {"::= \"a\"", "gbnf: expected a rule name, found ':' at 1:1"},
      {"root ::= \"\\q\"", "gbnf: unknown escape '\\q' at 1:11"},
      {"root ::= \"\\x4\"", "gbnf: '\\x' needs 2 hex digits at 1:11"},
      {"root ::= [\\u12G4]", "gbnf: '\\u' needs 4 hex digits at 1:11"},
      {"root ::= \"\\UFFFFFFFF\"", "gbnf: escape above U+10FFFF at 1:11"},
      {"root ::= \"\\uD800\"", "gbnf: escape names a surrogate (not valid UTF-8) at 1:11"},
      {"root ::= [z-a]", "gbnf: class range out of order at 1:11"},
      {"root ::= []", "gbnf: empty character class '[]' matches nothing at 1:10"},
      {"root ::= \"a\"{3,2}", "gbnf: repeat {3,2} has min > max at 1:13"},
      {"root ::= \"a\"{,}", "gbnf: '{,}' needs a bound at 1:13"},
      {"root ::= \"a\"{x}", "gbnf: expected a count, ',' or '}' in '{...}', found 'x' at 1:14"},
      {"root ::= \"a\"{2,3", "gbnf: expected '}', found the end of input at 1:17"},
      {"root ::= \"a\"{99999999999}", "gbnf: repeat count above 1000000000 at 1:14"},
      {"root ::= *", "gbnf: nothing to repeat before '*' at 1:10"},
      {"root ::= <think>", "gbnf: token references '<...>' are not supported at 1:10"},
      {"root ::= \"a\" b ::= \"c\"", "gbnf: rule 'b' must start on a new line at 1:14"},
      {"root ::= a\na ::= \"x\" @", "gbnf: unexpected '@' at 2:11"},
      {"root ::= \"\xFF\"", "gbnf: invalid UTF-8 at 1:11"},
      {"root ::= \"a\"\n\nx ::= \"\xC3\xA9\" \xE2\x82", "gbnf: invalid UTF-8 at 3:12"},
      {std::string("root ::= ") + std::string(257, '(') + std::string(257, ')'),
       "gbnf: parentheses nested deeper than 256 at 1:266"},
      {std::string("root ::= \"a\"") + std::string(300, '?'),
       "gbnf: more than 256 nested operators at 1:269"},
  };
  for (const Case& c : cases) {
    auto r = parse_gbnf(c.src);
    ASSERT_FALSE(r.ok()) << c.src;
    EXPECT_EQ(r.message(), c.message) << c.src;
  }
  // Deep input fails cleanly instead of overflowing the stack.
  EXPECT_FALSE(parse_gbnf("root ::= " + std::string(100'000, '(')).ok());
}

TEST(GrammarGbnf, LowerLimitsStillApply) {
  auto s = parse_gbnf("root ::= \"a\"{20000}");
  ASSERT_TRUE(s.ok()) << s.message();  // the parser takes it; lower() enforces max_repeat
  EXPECT_FALSE(lower(*s).ok());
  // Left recursion parses but does not lower.
  auto lr = parse_gbnf("root ::= root \"a\" | \"a\"");
  ASSERT_TRUE(lr.ok());
  EXPECT_FALSE(lower(*lr).ok());
}

// ---- printing ----

TEST(GrammarGbnf, PrintRoundTrips) {
  const std::string extra =
      R"(root ::= ("a" | ("b" | "c")) (("d" "e") "f")* (x*)? x{3} x{2,} x{,4} x{1,5} "" | [^] | [a^\]\\"-] | ". # \"\n\r\t\x01\x7f"
x ::= "é😀" [é-ü😀] [^\x00-\x1f]
)";
  for (const std::string& src : {std::string(kJson), std::string(kArithmetic), std::string(kList),
                                 std::string(kChess), std::string(kForms), extra}) {
    GrammarSpec a = parse_ok(src);
    const std::string printed = to_gbnf(a);
    auto b = parse_gbnf(printed);
    ASSERT_TRUE(b.ok()) << b.message() << "\n" << printed;
    EXPECT_TRUE(same_spec(a, *b)) << printed;
    EXPECT_EQ(to_gbnf(*b), printed);  // printing is a fixed point
  }
}

TEST(GrammarGbnf, PrintsRegexTreesToo) {
  // The printer is the debugging view of every front end's output.
  for (const char* p : {"^\\d{3}-[a-f]+$", "(ab|c)*\\s\\S", "x|[^\\u00e9]|\\u{1F600}?"}) {
    RegexOptions o;
    o.search = true;
    auto e = regex_to_expr(p, o);
    ASSERT_TRUE(e.ok()) << e.message();
    GrammarSpec a;
    a.rules.emplace_back("root", std::move(e).value());
    const std::string printed = to_gbnf(a);
    auto b = parse_gbnf(printed);
    ASSERT_TRUE(b.ok()) << b.message() << "\n" << printed;
    EXPECT_TRUE(same_spec(a, *b)) << p << "\n" << printed;
  }
  GrammarSpec s;
  s.root = "start";
  s.rules.emplace_back("start", Expr::seq({Expr::lit("\xFF"), Expr::byte_cls({{0x80, 0xBF}})}));
  EXPECT_EQ(to_gbnf(s),
            "# root: start\n"
            "# note: 'start' has raw bytes; printed here as code points\n"
            "start ::= \"\\xFF\" [\\x80-\\xBF]\n");
}

}  // namespace
}  // namespace sluice::grammar
