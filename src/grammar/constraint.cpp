#include "grammar/constraint.h"

#include "grammar/grammar.h"
#include "grammar/regex.h"

namespace sluice::grammar {

JsonSchemaOptions generation_schema_options(bool refuse_unknown_formats) {
  JsonSchemaOptions o;
  o.max_indent = 20;
  o.strict = true;
  o.refuse_unknown_formats = refuse_unknown_formats;
  return o;
}

Result<GrammarSpec> schema_grammar(const nlohmann::ordered_json& schema,
                                   bool refuse_unknown_formats) {
  return json_schema_to_grammar(schema, generation_schema_options(refuse_unknown_formats));
}

Result<GrammarSpec> schema_text_grammar(std::string_view schema_json, bool refuse_unknown_formats) {
  const auto schema = nlohmann::ordered_json::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) return make_error("the JSON schema is not valid JSON");
  return schema_grammar(schema, refuse_unknown_formats);
}

Result<GrammarSpec> regex_grammar(std::string_view pattern) {
  SLUICE_ASSIGN_OR_RETURN(Expr e, regex_to_expr(pattern));
  return one_rule(std::move(e));
}

GrammarSpec one_rule(Expr e) {
  GrammarSpec g;
  g.rules.emplace_back("root", std::move(e));
  return g;
}

Result<std::shared_ptr<const CompiledGrammar>> compile_grammar(
    const GrammarSpec& spec, std::shared_ptr<const TokenVocab> vocab) {
  SLUICE_ASSIGN_OR_RETURN(auto lowered, lower(spec));
  return CompiledGrammar::make(std::move(lowered), std::move(vocab));
}

}  // namespace sluice::grammar
