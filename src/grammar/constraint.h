// An output constraint as a user names one (a JSON Schema, a GBNF grammar or a regular
// expression) and the one way each becomes a grammar. Every front end builds through here
// (`sluice run --json-schema/--grammar/--regex`, `sluice bench throughput --json-schema`, the
// server's response_format, guided_* and tool-call fields), so the same schema gets the same
// whitespace bounds, strictness and format rules wherever it comes from.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/expr.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"

namespace sluice::grammar {

// Schemas as sluice compiles them for generation: strict (undeclared properties and items are
// refused unless the schema allows them, as OpenAI's strict mode: a model otherwise invents
// keys), whitespace bounded to pretty-printing 20 levels deep. `refuse_unknown_formats`: a
// `format` sluice does not enforce is an error instead of an annotation (OpenAI's
// json_schema.strict).
JsonSchemaOptions generation_schema_options(bool refuse_unknown_formats = false);

// A JSON Schema (key order kept: it is the order properties are generated in when the object
// has too many to allow any order) under generation_schema_options.
Result<GrammarSpec> schema_grammar(const nlohmann::ordered_json& schema,
                                   bool refuse_unknown_formats = false);
// The same from JSON text; a text that is not JSON is an error saying so.
Result<GrammarSpec> schema_text_grammar(std::string_view schema_json,
                                        bool refuse_unknown_formats = false);
// A regular expression the whole output must match (regex.h's dialect).
Result<GrammarSpec> regex_grammar(std::string_view pattern);
// `e` as the grammar's only rule, "root".
GrammarSpec one_rule(Expr e);

// Lowers `spec` and compiles it against `vocab` (no cache: one-shot front ends; the server
// keeps a GrammarCache).
Result<std::shared_ptr<const CompiledGrammar>> compile_grammar(
    const GrammarSpec& spec, std::shared_ptr<const TokenVocab> vocab);

}  // namespace sluice::grammar
