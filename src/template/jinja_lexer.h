// Jinja2 lexer with the whitespace rules Hugging Face uses for chat templates
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//
//   text{%- tag -%}text    '-' strips all whitespace on that side (newlines included)
//   "\n  {% tag %}\n"     lstrip drops the "  " before {% / {# when only whitespace precedes
//                          it on its line; trim drops the first "\n" after %} / #}
//   {%+ tag +%}            '+' disables lstrip / trim for that side
//
// Comments vanish, {% raw %} bodies become plain text, and `{{ }}` never lstrips/trims.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sluice::jinja {

enum class TokenType : uint8_t {
  kData,        // literal template text (whitespace control already applied)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,    // text = unescaped value
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // text = the operator ("+", "//", "(", ...)
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  uint32_t pos = 0;  // byte offset in the normalized source
};

// Normalizes newlines (\r\n and \r become \n) and drops one trailing newline, as Jinja does.
std::string normalize_template_source(std::string_view source);

// Maps byte offsets of the normalized source to "line L, column C".
class SourceMap {
 public:
  explicit SourceMap(std::string_view source);
  uint32_t line(uint32_t pos) const;
  std::string describe(uint32_t pos) const;  // "line 3, column 14"

 private:
  std::vector<uint32_t> line_starts_;
};

// Tokenizes a normalized source. Errors name the line and column.
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace sluice::jinja
