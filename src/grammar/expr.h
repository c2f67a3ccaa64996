// The grammar front ends' common language: rules of regular-expression-like trees over
// Unicode text. GBNF, regex and JSON Schema each compile to a GrammarSpec; lower() (grammar.h)
// turns it into byte-level rules the matcher runs. One tree type keeps the front ends small
// and makes every construct mean the same thing whichever front end produced it.
//
//   root ::= "{" ws "\"a\"" ws ":" ws int ws "}"       GBNF source
//   Seq{Lit "{", Ref ws, Lit "\"a\"", Ref ws, ...}      what a front end builds
//   rule 0: [7B] r1 [22] [61] [22] r1 [3A] ...          what lower() makes (bytes, rule refs)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice::grammar {

// Unicode code points are 0..0x10FFFF; surrogates (D800..DFFF) never match (UTF-8 text only).
inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;
// Repeat::max for "no upper bound".
inline constexpr int32_t kUnbounded = -1;

// The value of a hexadecimal digit, or -1 (GBNF and regex escapes, JSON's \\uXXXX).
inline int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A check on a JSON string's decoded value that a byte grammar cannot express, run by the
// matcher as the string grows (string_checks.h): GrammarSpec::checked names the rule that
// spells the string's contents.
enum class StringCheck : uint8_t {
  kNone = 0,
  kHostname = 1,  // total length <= 253, A-labels valid under IDNA2008
};

struct Expr {
  enum class Kind : uint8_t {
    kEmpty,      // matches the empty string
    kLiteral,    // `text`: exact UTF-8 bytes (may be any bytes, also invalid UTF-8)
    kClass,      // one code point in `ranges` (inclusive), or not in them when `negated`
    kByteClass,  // one byte in `ranges` (values 0..255): for grammars over raw bytes
    kRef,        // the rule named `text`
    kSeq,        // kids in order
    kAlt,        // one of kids (ordered choice is NOT implied: any alternative may match)
    kRepeat,     // kids[0] repeated min..max times (max == kUnbounded: no bound)
  };
  Kind kind = Kind::kEmpty;
  std::string text;                                   // kLiteral bytes, kRef rule name
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kClass / kByteClass, inclusive
  bool negated = false;                               // kClass / kByteClass
  std::vector<Expr> kids;                             // kSeq, kAlt, kRepeat (one kid)
  int32_t min = 0, max = 0;                           // kRepeat

  static Expr empty() { return {}; }
  static Expr lit(std::string bytes) {
    Expr e;
    e.kind = Kind::kLiteral;
    e.text = std::move(bytes);
    return e;
  }
  static Expr cls(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false) {
    Expr e;
    e.kind = Kind::kClass;
    e.ranges = std::move(ranges);
    e.negated = negated;
    return e;
  }
  static Expr byte_cls(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false) {
    Expr e = cls(std::move(ranges), negated);
    e.kind = Kind::kByteClass;
    return e;
  }
  static Expr ref(std::string rule) {
    Expr e;
    e.kind = Kind::kRef;
    e.text = std::move(rule);
    return e;
  }
  static Expr seq(std::vector<Expr> kids) {
    Expr e;
    e.kind = Kind::kSeq;
    e.kids = std::move(kids);
    return e;
  }
  static Expr alt(std::vector<Expr> kids) {
    Expr e;
    e.kind = Kind::kAlt;
    e.kids = std::move(kids);
    return e;
  }
  static Expr repeat(Expr kid, int32_t min, int32_t max) {
    Expr e;
    e.kind = Kind::kRepeat;
    e.kids.push_back(std::move(kid));
    e.min = min;
    e.max = max;
    return e;
  }
  static Expr opt(Expr kid) { return repeat(std::move(kid), 0, 1); }
  static Expr star(Expr kid) { return repeat(std::move(kid), 0, kUnbounded); }
  static Expr plus(Expr kid) { return repeat(std::move(kid), 1, kUnbounded); }
  // Any one code point (any valid UTF-8 character).
  static Expr any_char() { return cls({{0, kMaxCodepoint}}); }
};

// A grammar: named rules, one of them the start. Rule names are unique; every kRef names a
// rule of the spec (lower() reports the first that does not). Left recursion (a rule that can
// reach itself without consuming a byte) is refused by lower().
struct GrammarSpec {
  std::vector<std::pair<std::string, Expr>> rules;
  std::string root = "root";
  // Rules whose text is checked (the contents of a JSON string, referenced between its
  // quotes: the reference must not end an alternative, lower() refuses that).
  std::vector<std::pair<std::string, StringCheck>> checked;

  // The rule named `name`, or nullptr.
  const Expr* find(const std::string& name) const {
    for (const auto& [n, e] : rules)
      if (n == name) return &e;
    return nullptr;
  }
};

}  // namespace sluice::grammar
