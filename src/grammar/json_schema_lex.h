// The lexical layer of the JSON Schema compiler (json_schema.cpp): Expr builders for JSON
// text whose *decoded value* lies in a set. Internal to src/grammar.
//
// Strings: a JSON string may spell one code point several ways ("a", "\u0061", "\u0061" with
// either hex case; "\/" for "/"; a surrogate pair for U+10000..). Everything here is exact
// with respect to the decoded value: spell_class() accepts every spelling of every code point
// in a set and nothing else, so a const "foo", a property name or a regex pattern accepts
// "\u0066oo" too, and "a key that is not 'foo'" rejects it. Lone surrogate escapes are never
// accepted (they decode to no code point).
//
// Numbers: JSON number texts with bounded digit counts (kMax*Digits): a model must not be able
// to ramble digits forever. number_range() builds the texts, without exponent, whose value
// lies in an interval; the bounds are decimals (exact, no binary floating point involved).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "grammar/expr.h"

namespace sluice::grammar::json_lex {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Digits a number text may have: integer part, fraction, exponent.
inline constexpr int kMaxIntDigits = 20;
inline constexpr int kMaxFracDigits = 20;
inline constexpr int kMaxExpDigits = 4;

// "Matches nothing": an alternation with no alternatives. The simplifying constructors below
// propagate it (a sequence containing it is never, an alternation drops it); lower() refuses
// it, so the compiler removes it before emitting a rule.
Expr never();
bool is_never(const Expr& e);
// Simplifying constructors: flatten nested sequences / alternations, merge adjacent literals,
// propagate never. Same language as Expr::seq / alt / repeat.
Expr seq_of(std::vector<Expr> kids);
Expr alt_of(std::vector<Expr> kids);
Expr repeat_of(Expr kid, int32_t min, int32_t max);
// seq_of({a, b}) without the deep copy an initializer list makes (recursive builders).
Expr seq2(Expr a, Expr b);
Expr lit(std::string_view bytes);

// Sorted, merged, surrogate-free ranges of the code points `ranges` (complemented when
// `negated`) denote.
Ranges normalize(Ranges ranges, bool negated);
// One code point of `r` in any JSON string spelling (raw, \-escape, \uXXXX, surrogate pair).
// `high`, when given, stands for spell_class of all code points >= U+0080 (a shared rule):
// used when r contains them all, so classes that differ only below U+0080 (the complements a
// trie of ASCII names needs) cost a few elements each instead of a UTF-8 and hex expansion.
Expr spell_class(const Ranges& r, const Expr* high = nullptr);
Expr spell_char(uint32_t cp);
// String content (between the quotes) whose decoded value is `utf8`.
Result<Expr> spell_string(std::string_view utf8);
// Code points of valid UTF-8 text; an error names the offset of the first invalid byte.
Result<std::u32string> decode(std::string_view utf8);
// String content whose decoded value is one of `values` (a trie: after each code point the
// matcher has one live path, however many values share the prefix).
Expr spell_one_of(const std::vector<std::u32string>& values);
// String content whose decoded value is NOT one of `names` (a complemented trie: cost
// proportional to the total length of the names). `any_chars` stands for any string content
// (a reference to the shared `char*` rule), what follows once the content left the trie.
Expr spell_not_in(const std::vector<std::u32string>& names, const Expr& any_chars,
                  const Expr* high = nullptr);
// A regex tree over code points (regex_to_expr) -> the same language over spelled string
// content. Errors for byte classes and rule references (not regex output).
Result<Expr> spell_regex(const Expr& e, const Expr* high = nullptr);
// Shortest and longest number of code points a regex tree matches (max -1: unbounded).
// Errors for rule references.
Result<std::pair<int64_t, int64_t>> length_range(const Expr& e);

// An exact decimal: sign, integer digits without leading zeros ("0" for zero), fraction
// digits without trailing zeros. Zero is never negative.
struct Decimal {
  bool neg = false;
  std::string ip = "0";
  std::string fp;

  bool is_integer() const { return fp.empty(); }
  bool is_zero() const { return ip == "0" && fp.empty(); }
};
// The decimal a JSON number text spells ("-1.50e+2" -> -150). Errors for non-number text.
Result<Decimal> parse_decimal(std::string_view text);
// <0, 0, >0 like strcmp.
int compare(const Decimal& a, const Decimal& b);
std::string to_string(const Decimal& d);

// A lower or upper bound on a number; strict: exclusive.
struct Bound {
  Decimal v;
  bool strict = false;
};

// Number texts without exponent whose value v satisfies lo <= v <= hi (either bound may be
// absent; strict bounds exclude). integer_only: the integer part followed at most by ".0...".
// "-0" counts as 0. Cost: O(digits) alternatives.
Expr number_range(const std::optional<Bound>& lo, const std::optional<Bound>& hi,
                  bool integer_only);
// The value d != 0 in normalized scientific notation ("9.007199254740992e+15", "1E-05":
// one nonzero digit before the point, trailing zeros allowed), the form serializers such as
// nlohmann, Python and JavaScript print for large and small doubles; never for d == 0 or when
// the exponent would be 0. Other exponent spellings of d are not accepted.
Expr scientific(const Decimal& d);
// Any number text (with optional exponent), digit counts bounded.
Expr any_number();
// Any integer text: digits, optionally ".0..." (1.0 is an integer in JSON Schema).
Expr any_integer();
// Number texts without exponent whose value is not an integer (a nonzero fraction digit).
Expr any_non_integer();
// Integer texts (as any_integer, non-negative or negative) whose value is a multiple of `m`
// (2 <= m <= 1000), as rules added through `add_rule(name, expr)` -> reference. Cost: m
// rules per digit position.
Expr multiple_of(int64_t m, const std::function<std::string(Expr)>& add_rule);

// The whitespace allowed between tokens: "" | " " | "\n" [ \t]{0,max_indent}.
Expr whitespace(int32_t max_indent);

}  // namespace sluice::grammar::json_lex
