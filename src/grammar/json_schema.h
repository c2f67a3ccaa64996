// JSON Schema (draft 2020-12, as OpenAI `response_format: json_schema` and llama.cpp
// `json_schema` clients send it) -> GrammarSpec (expr.h) whose sentences are exactly the JSON
// texts valid under the schema.
//
// EXACT or REFUSE: every validation keyword is either compiled so that the grammar accepts
// exactly the valid instances, or compilation fails with an error naming the keyword and its
// JSON pointer ("json_schema: unsupported keyword 'uniqueItems' at /properties/tags").
// Annotations ($schema, $id at the root, $comment, title, description, default, examples,
// deprecated, readOnly, writeOnly, $anchor, content*) are ignored, as are keywords JSON Schema
// does not know. `format` (an annotation in 2020-12) is enforced for the formats of
// json_schema_formats.h, like a pattern; others are ignored or, with refuse_unknown_formats,
// refused. A keyword that only
// constrains a type the schema excludes anyway is moot and never refused ({"type": "string",
// "uniqueItems": true} compiles).
//
// "Exactly" is with respect to the decoded JSON value, with these deliberate limits:
//   * Whitespace: between tokens "" | " " | "\n" followed by up to max_indent spaces or tabs;
//     none before or after the root value. (Unbounded whitespace lets a model loop forever.)
//   * Numbers: at most 20 integer digits, 20 fraction digits, 4 exponent digits. Integers are
//     spelled as digits optionally followed by ".0...", so 1.0 is an integer but 1e2 is not
//     accepted as one. A number with a bound (minimum, ...) is spelled without exponent; a
//     const/enum number also in normalized scientific notation ("9.007199254740992e+15", as
//     nlohmann, Python and JavaScript print large and small doubles). Within those spellings,
//     bounds are exact for any decimal value (no binary floating point involved).
//   * Strings: every spelling of a code point is accepted wherever the value matters (const,
//     enum, property names, pattern, "a key other than the declared ones"): "\u0066oo" is
//     "foo". Lone surrogate escapes are rejected. Lengths count code points.
//   * Objects: a declared property appears at most once; JSON allows duplicate keys, we don't.
//     With any_property_order and at most max_order_free_properties tracked properties
//     (declared + required + dependentRequired names) any order is accepted (one rule per
//     subset of keys seen: 2^n rules). Above that, tracked properties come in schema order
//     (INEXACT BY DESIGN: a valid instance in another order is rejected) and other keys only
//     after them. Pass an nlohmann::ordered_json to keep the schema's order; nlohmann::json
//     sorts keys.
//   * const/enum objects with more keys than max_order_free_properties: keys in the given
//     order only (inexact by design).
//
// Supported: boolean schemas, type, enum, const, properties, required, additionalProperties,
// items, prefixItems (and draft-07 items arrays + additionalItems), minItems, maxItems,
// minLength, maxLength, pattern (regex.h; next to min/maxLength only when the pattern implies
// them), minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf (integer divisors
// up to 1000, without bounds), minProperties / maxProperties / dependentRequired (order-free
// mode), anyOf, allOf (merged), oneOf (when its branches are provably disjoint: different
// types, different constants, disjoint ranges, or a required property with disjoint values),
// not (of a type set), propertyNames (finite sets; patterns and lengths when no property is
// declared), patternProperties (when moot), contains / minContains (maxContains when contains
// is a type set), uniqueItems (over a small enum or booleans), unevaluatedProperties /
// unevaluatedItems (next to $ref and allOf: what is evaluated is then static), local $ref
// ("#", "#/$defs/x", "#/definitions/x", any JSON pointer, "#anchor"; recursion allowed).
// Refused: if/then/else, dependentSchemas, dependencies, patternProperties that matter,
// $dynamicRef, remote and relative-URI refs, $id below the root, custom $schema meta-schemas,
// and the cases above that cannot be exact.
//
// STRICT MODE (JsonSchemaOptions::strict, for generation; OpenAI's strict structured outputs
// and XGrammar's strict_mode read schemas the same way): a schema object that declares
// `properties` but says nothing about other keys (no additionalProperties, no
// unevaluatedProperties) allows no other keys, and one with prefixItems (or a draft-07 items
// array) but nothing about later items (no items / additionalItems / unevaluatedItems) allows
// no later items. "Declared" is over the merged schema: properties and prefixItems of its
// $ref / allOf subschemas count, and so do those of the anyOf / oneOf branch the instance is
// read through, so {"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"extra": {}}}]}
// accepts base's keys and "extra". An explicit additionalProperties / items /
// unevaluated* anywhere in the merged schema wins (`true` reopens it). {"type": "object"}
// and {"type": "array"} (nothing declared) stay open: any object / array. The validator
// reads schemas the same way under the same options.
//
// Cost: compilation is linear in the schema except order-free objects (2^n rules for n
// tracked properties) and anyOf/oneOf next to other keywords (the context is copied into each
// branch). A 5000-value string enum compiles to about 470k lowered elements in ~0.15 s.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/expr.h"

namespace sluice::grammar {

struct JsonSchemaOptions {
  // Whitespace allowed between tokens: "" / " " / "\n" followed by up to max_indent spaces
  // or tabs (pretty-printed JSON with indent 2 up to depth 20).
  int32_t max_indent = 40;
  // Accept declared properties in any order (else schema order).
  bool any_property_order = true;
  // Above this many tracked properties, schema order even when any_property_order.
  int32_t max_order_free_properties = 6;
  // Refuse schemas whose grammar would exceed this many expression nodes.
  int64_t max_expr_nodes = 1'000'000;
  // Refuse schemas nested deeper than this (subschemas, $ref chains, allOf merges).
  int32_t max_depth = 64;
  // Generation mode (see "Strict mode" above): an object's undeclared keys and an array's
  // items past its prefixItems are refused unless the schema says what they may be. Off:
  // JSON Schema's reading (absent means anything).
  bool strict = false;
  // `format`: the formats of json_schema_formats.h are enforced; another one is refused with
  // an error when set (OpenAI's strict: true), else ignored as the annotation 2020-12 makes it.
  bool refuse_unknown_formats = false;
};

// Errors: unsupported keywords (named, with their JSON pointer), malformed schemas, a schema
// no JSON value satisfies ("accepts no JSON value"), limits exceeded.
Result<GrammarSpec> json_schema_to_grammar(const nlohmann::ordered_json& schema,
                                           const JsonSchemaOptions& opts = {});
Result<GrammarSpec> json_schema_to_grammar(const nlohmann::json& schema,
                                           const JsonSchemaOptions& opts = {});

// Any JSON object (OpenAI response_format json_object: the root must be an object).
GrammarSpec json_object_grammar(const JsonSchemaOptions& opts = {});

// Whether `instance` is valid under `schema` for the keywords json_schema_to_grammar
// supports (the same reading of the schema, evaluated directly). Errors where compilation
// would refuse. The compiler uses it to filter enum values; tests use it as the oracle.
Result<bool> json_schema_validate(const nlohmann::ordered_json& schema,
                                  const nlohmann::ordered_json& instance,
                                  const JsonSchemaOptions& opts = {});

}  // namespace sluice::grammar
