// Realistic JSON Schema workloads for measuring and testing token masks: a nested extraction
// schema (what `sluice bench grammar` uses by default, and what the real-vocabulary mask test
// walks) and a generator of random valid instances for simple schemas.
//
// The generator knows the keywords typical function-calling and extraction schemas use (type,
// properties, required, items, prefixItems, enum, const, anyOf / oneOf, local $ref, string
// lengths, numeric bounds). It is not an oracle: callers check its output with
// json_schema_validate (json_schema.h); random_instance() does that itself and retries.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sluice::grammar {

// A customer record with an address and orders of line items: 3 levels of objects, arrays
// of objects, strings, integers with bounds, numbers, booleans, enums, 6 top-level properties
// (order-free under the default JsonSchemaOptions).
std::string_view nested_bench_schema();

// A random instance of `schema` valid under json_schema_validate, or nullopt when the
// generator does not know a keyword the schema uses (pattern, allOf, not, ...) or gave up
// after `tries` attempts. Strings are words (with the odd escape and non-ASCII letter), so
// their tokenization looks like a model's output.
std::optional<nlohmann::ordered_json> random_instance(const nlohmann::ordered_json& schema,
                                                      std::mt19937_64& rng, int tries = 20);

// `v` as a model would write it: compact ({"a":1}) when `pretty` is false, else indented
// by 2 with a newline before each member.
std::string instance_text(const nlohmann::ordered_json& v, bool pretty);

}  // namespace sluice::grammar
