// grammar/constraint.h: the one builder every front end takes a schema, grammar or regex
// through (sluice run, bench throughput, the server), so they cannot disagree again.
#include <gtest/gtest.h>

#include "grammar/constraint.h"
#include "grammar/gbnf.h"
#include "grammar/grammar.h"

namespace sluice::grammar {
namespace {

bool accepts(const Result<GrammarSpec>& spec, const std::string& text) {
  EXPECT_TRUE(spec.ok()) << spec.message();
  if (!spec.ok()) return false;
  auto g = lower(*spec);
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() && matches(*g, text);
}

constexpr const char* kSchema =
    R"({"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}},
        "required": ["a", "b"]})";

// Text or parsed, the same grammar: generation's strictness and whitespace bound.
TEST(Constraint, SchemaFromTextOrJsonIsOneGrammar) {
  const auto from_text = schema_text_grammar(kSchema);
  const auto from_json = schema_grammar(nlohmann::ordered_json::parse(kSchema));
  ASSERT_TRUE(from_text.ok()) << from_text.message();
  ASSERT_TRUE(from_json.ok()) << from_json.message();
  EXPECT_EQ(to_gbnf(*from_text), to_gbnf(*from_json));
  EXPECT_TRUE(accepts(from_text, R"({"a": "x", "b": 1})"));
  EXPECT_TRUE(accepts(from_text, R"({"b": 1, "a": "x"})"));  // few properties: any order
  // Strict: an undeclared key is refused (JSON Schema alone would allow it).
  EXPECT_FALSE(accepts(from_text, R"({"a": "x", "b": 1, "c": 2})"));
  // Whitespace: a newline and up to 20 spaces of indent, not 21.
  EXPECT_TRUE(accepts(from_text, "{\n" + std::string(20, ' ') + R"("a": "x", "b": 1})"));
  EXPECT_FALSE(accepts(from_text, "{\n" + std::string(21, ' ') + R"("a": "x", "b": 1})"));
  EXPECT_EQ(generation_schema_options().max_indent, 20);
  EXPECT_TRUE(generation_schema_options().strict);
}

TEST(Constraint, StrictFormatsRefuseWhatIsNotEnforced) {
  const std::string schema = R"({"type": "string", "format": "idn-email"})";
  EXPECT_TRUE(schema_text_grammar(schema).ok());  // an annotation
  const auto strict = schema_text_grammar(schema, /*refuse_unknown_formats=*/true);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.message().find("idn-email"), std::string::npos) << strict.message();
}

TEST(Constraint, RegexAndErrors) {
  EXPECT_TRUE(accepts(regex_grammar("(yes|no)[0-9]{2}"), "yes42"));
  EXPECT_FALSE(accepts(regex_grammar("(yes|no)[0-9]{2}"), "maybe42"));
  EXPECT_FALSE(regex_grammar("(unclosed").ok());
  const auto bad = schema_text_grammar("{not json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("not valid JSON"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace sluice::grammar
