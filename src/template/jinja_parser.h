// Recursive-descent parser for the Jinja2 subset chat templates use, following Jinja's own
// grammar and precedence (jinja2/parser.py): conditional expressions < or < and < not <
// comparisons < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) and filters/tests.
#pragma once

#include <memory>
#include <string_view>

#include "base/status.h"
#include "template/jinja_ast.h"

namespace sluice::jinja {

// Recursion budget of the parser: each nested expression, parenthesis or block costs a few
// units, so this bounds stack use on hostile input (roughly 60 nested parentheses).
constexpr int kDefaultMaxParseDepth = 200;

// Parses template source (any newline style). Errors read "line L, column C: message".
Result<std::unique_ptr<Program>> parse_template(std::string_view source,
                                                int max_depth = kDefaultMaxParseDepth);

}  // namespace sluice::jinja
