// libFuzzer target: parses the input as JSON, compiles it as a JSON Schema, lowers the grammar
// and matches a few JSON texts against it (host names among them: the matcher's string checks),
// and runs the validator on them; the raw input also goes through the checks' JSON unescaper
// and host-name check (libidn2) as a string's contents. Any crash, sanitizer
// report, hang or unbounded allocation is a bug: hostile schemas must end in an error.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DSLUICE_FUZZ=ON
//   -DSLUICE_SANITIZE=address ninja -C build-fuzz json_schema_fuzz
//   build-fuzz/fuzz/json_schema_fuzz -max_len=4096 -timeout=10 -rss_limit_mb=2048 CORPUS_DIR
// A good seed corpus: the "schema" values of ../shared/testdata/json_schema_suite/*/*.json.
#include <cstddef>
#include <cstdint>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/string_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nlohmann::ordered_json;
  if (size > 64 * 1024) return 0;
  {
    std::string decoded;
    const std::string_view raw(reinterpret_cast<const char*>(data), size);
    (void)sluice::grammar::json_unescape_prefix(raw, decoded);
    (void)sluice::grammar::hostname_idna_ok(decoded);
  }
  ordered_json schema = ordered_json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  sluice::grammar::JsonSchemaOptions opts;
  opts.max_expr_nodes = 200'000;  // keep one input well under the fuzzer's time and memory
  opts.strict = size % 2 == 1;    // both readings of undeclared properties and items
  auto spec = sluice::grammar::json_schema_to_grammar(schema, opts);
  if (!spec.ok()) return 0;
  sluice::grammar::LowerLimits limits;
  limits.max_elements = 400'000;
  auto g = sluice::grammar::lower(*spec, limits);
  if (!g.ok()) return 0;
  static const char* const kTexts[] = {"null",
                                       "true",
                                       "0",
                                       "-1.5e3",
                                       "12345678901234567890",
                                       "\"\"",
                                       "\"a\\u00e9\\n\"",
                                       "[]",
                                       "[1, \"x\", null]",
                                       "{}",
                                       "{\"a\": 1, \"b\": [true, {\"c\": \"d\"}]}",
                                       "{\n  \"a\": 1\n}",
                                       "\"xn--ll-0ea.example\"",
                                       "[\"xn--l-gda\", \"a.b\", \"xn\\u002d-X\"]"};
  for (const char* text : kTexts) {
    (void)sluice::grammar::matches(*g, text);
    (void)sluice::grammar::json_schema_validate(schema, ordered_json::parse(text), opts);
  }
  return 0;
}
