// Regular expressions (an ECMAScript subset, as JSON Schema `pattern` and OpenAI-style regex
// constraints use) -> Expr (expr.h).
//
// Supported: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H..} \/ and escaped
// metacharacters), `.` (any code point but \n \r), classes [...] / [^...] with ranges and
// \d \w \s \D \W \S inside and outside them, groups (...) (?:...) and named groups (?<n>...),
// alternation |, quantifiers * + ? {n} {n,} {n,m} and their lazy forms (same language), and ^ / $
// at the very start / end of the pattern. Anything else (backreferences, lookaround, \b, inner
// anchors, flags) is an error that names the construct and its offset.
#pragma once

#include <string_view>

#include "base/status.h"
#include "grammar/expr.h"

namespace sluice::grammar {

struct RegexOptions {
  // false: the whole text must match (a `regex` output constraint).
  // true: JSON Schema `pattern` semantics: the pattern may match anywhere in the string, so an
  // unanchored side gets `.*` (any code point, newlines included) added; ^ / $ anchor it.
  bool search = false;
  int32_t max_repeat = 10'000;  // larger {n,m} bounds are an error
};

Result<Expr> regex_to_expr(std::string_view pattern, const RegexOptions& opts = {});

}  // namespace sluice::grammar
