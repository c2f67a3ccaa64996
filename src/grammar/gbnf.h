// GBNF (llama.cpp's grammar format) <-> GrammarSpec (expr.h).
//
//   root   ::= item ("," ws item)*      # rules: name ::= alternatives
//   item   ::= [a-z]+ | "\"" [^"]* "\"" | num
//   num    ::= "-"? [0-9]{1,5}
//   ws     ::= [ \t\n]*
//
// Accepted as llama.cpp users write it: rule names [a-zA-Z0-9_-]+ (case-sensitive), `#`
// comments to the end of the line, a newline ends a rule except inside parentheses, right after
// `::=` or `|`, or before a line that starts with `|` (an extension: llama.cpp rejects that).
// String literals "..." and classes [...] / [^...] take the escapes \n \r \t \\ \" \[ \] \xHH
// \uHHHH \UHHHHHHHH (each names a code point, so "\xE9" is U+00E9, two UTF-8 bytes); `.` is any
// code point; ( ) groups; | alternates; postfix * + ? {m} {m,} {m,n} {,n}.
//
// Errors, each with line:column (1-based, columns in bytes): syntax errors, invalid UTF-8, a
// rule defined twice (llama.cpp silently keeps the last), a reference to an undefined rule, no
// rule named `root`, parentheses nested deeper than 256, token syntax <...> (unsupported).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "grammar/expr.h"

namespace sluice::grammar {

// The spec's rules are in definition order; its root is "root". An alternation of one
// sequence is that sequence, a sequence of one element is that element, an empty sequence or
// "" is Expr::empty(), and parentheses add no node of their own, so equal texts give equal
// trees and to_gbnf() round-trips.
Result<GrammarSpec> parse_gbnf(std::string_view src);

// Prints `spec` as GBNF, one rule per line in the spec's order (for debugging and round-trip
// tests): parse_gbnf(to_gbnf(s)) has the same trees as s for every s that parse_gbnf made.
// Lossy only for what GBNF cannot say: literal bytes that are not valid UTF-8 and kByteClass
// print as the code points of the same values (\xHH), with a `#` comment line saying so; a
// root not named "root" is named in a comment.
std::string to_gbnf(const GrammarSpec& spec);

}  // namespace sluice::grammar
