// The JSON Schema compiler's intermediate form (internal to src/grammar): Constraints, what
// one schema object says about an instance once $ref and allOf are merged in. Read by
// json_schema.cpp (Reader), turned into rules by json_schema_emit.cpp.
//
//   {"type": ["integer", "string"], "minimum": 3, "allOf": [{"maxLength": 4}]}
//   -> types {int, string}, lo 3, max_len 4
//
// Keywords about one type are kept per type: "minimum" means nothing to a string, so an
// instance's type picks the fields that apply. Subschemas stay unread (Sub) until needed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/json_schema.h"
#include "grammar/json_schema_lex.h"

namespace sluice::grammar {
class Grammar;
}

namespace sluice::grammar::json_ir {

using ojson = nlohmann::ordered_json;

// JSON types as bits; "number" is kNonInt | kInt (1.0 is an integer).
enum : uint8_t {
  kNull = 1,
  kBool = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kNonInt = 32,
  kInt = 64,
  kNumber = kNonInt | kInt,
  kAllTypes = 127,
};

// A subschema (in the document being compiled) and its JSON pointer, for messages and rule
// identity.
struct Sub {
  const ojson* s = nullptr;
  std::string ptr;
};
// Subschemas that must all hold; empty: true.
using Conj = std::vector<Sub>;

// Pointers in messages name the schema object that holds the keyword.
// A keyword the compiler cannot do exactly; an error only if an instance of `types` remains
// possible (a string schema's uniqueItems is moot).
struct Refused {
  std::string keyword, ptr;
  uint8_t types = kAllTypes;
  std::string why;
};

// contains: between min and max (-1: no bound) elements are valid under s.
struct Contains {
  Sub s;
  int64_t min = 1, max = -1;
  std::string ptr;
};

// anyOf / oneOf: one branch (oneOf: exactly one) must hold.
struct Group {
  bool one_of = false;
  std::vector<Sub> branches;
  std::string ptr;
};

struct Constraints {
  uint8_t types = kAllTypes;
  std::optional<std::vector<const ojson*>> enums;  // allowed values (enum / const), if any
  // numbers
  std::optional<json_lex::Bound> lo, hi;
  int64_t multiple_of = 1;  // an integer divisor (1: none)
  // strings
  int64_t min_len = 0, max_len = -1;                          // -1: no bound
  std::vector<std::pair<std::string, std::string>> patterns;  // (regex, schema pointer)
  StringCheck check =
      StringCheck::kNone;  // what the regexes cannot say (a format's: string_checks.h)
  // arrays: element i is constrained by prefix[i], later ones by items
  std::vector<Conj> prefix;
  Conj items;
  // Strict mode: no items past prefix unless `items` is given (a flag, not a false schema:
  // a merged-in longer prefixItems lengthens what is allowed). extra_items() reads both.
  bool closed_items = false;
  int64_t min_items = 0, max_items = -1;
  bool unique_items = false;
  std::string unique_ptr;
  std::vector<Contains> contains;
  // objects: key k by props[k], or additional when k is not declared
  std::vector<std::pair<std::string, Conj>> props;  // schema order
  Conj additional;
  // Strict mode: no keys but props unless `additional` is given (as closed_items).
  bool closed_props = false;
  std::vector<std::string> required;
  int64_t min_props = 0, max_props = -1;
  std::vector<std::pair<std::string, std::vector<std::string>>> dep_required;
  bool no_keys = false;  // propertyNames: false
  Conj prop_names;       // propertyNames schemas (keys are strings valid under all)
  // not yet distributed
  std::vector<Group> groups;
  std::vector<Refused> refused;
  std::string ptr;  // where these came from
};

// "the root" or the pointer, for messages.
inline std::string where(const std::string& ptr) {
  return ptr.empty() ? "the root" : ptr;
}
// The exact decimal a JSON number is.
Result<json_lex::Decimal> decimal_of(const ojson& v);

// Errors when `v` nests deeper than `limit` arrays/objects. Iterative: every recursive walk
// over schemas and values (equality, spelling a const, dump()) runs after this check.
Status check_depth(const ojson& v, int limit, const char* what);
inline constexpr int kMaxJsonDepth = 512;

// JSON Schema equality: numbers by exact decimal value (1 == 1.0), objects regardless of key
// order (nlohmann::ordered_json's == compares key order too).
bool json_equal(const ojson& a, const ojson& b);

// What keys other than props / items past prefix must satisfy: `additional` / `items`, or
// the false schema when the strict-mode flag closes them.
Conj extra_props(const Constraints& c);
Conj extra_items(const Constraints& c);

// a AND b. Never fails: conflicts become an empty type set or empty ranges.
Constraints merge(Constraints a, const Constraints& b);
bool is_trivial_object(const Constraints& c);
bool is_trivial_array(const Constraints& c);
bool is_trivial_string(const Constraints& c);
bool is_trivial_number(const Constraints& c);
// Nothing but a type set.
bool is_pure_type(const Constraints& c);
// The types an instance can have (enum values narrow them).
uint8_t effective_types(const Constraints& c);

// Reads schemas of one document. Holds a cache of lowered pattern grammars (validation).
class Reader {
 public:
  Reader(const ojson& root, const JsonSchemaOptions& opts);

  const ojson& root() const { return root_; }
  const JsonSchemaOptions& opts() const { return opts_; }

  Result<Constraints> read(const Sub& s, int depth) const;
  Result<Constraints> read_conj(const Conj& c, int depth) const;
  // A local reference ("#", "#/json/pointer", "#anchor") -> its target.
  Result<Sub> resolve(const std::string& ref, const std::string& ptr) const;
  // The target when `s` is only a $ref (plus annotations): compiled as a rule reference.
  Result<std::optional<Sub>> lone_ref(const Sub& s) const;

  // Whether `v` satisfies `c` (errors: refused keywords that apply to v, bad patterns).
  Result<bool> validate(const ojson& v, const Constraints& c, int depth) const;
  Result<bool> validate_sub(const ojson& v, const Sub& s, int depth) const;
  Result<bool> validate_conj(const ojson& v, const Conj& c, int depth) const;
  // True only when no instance satisfies both (a sound, incomplete test: oneOf).
  bool disjoint(const Constraints& a, const Constraints& b, int depth) const;
  // The first refused keyword that applies to `types`, as an error.
  Status check_refused(const Constraints& c, uint8_t types) const;

 private:
  // unevaluatedProperties / unevaluatedItems next to $ref / allOf only: what the schema and
  // those subschemas evaluate is static (no anyOf/oneOf/if whose success decides it).
  struct Evaluated {
    std::vector<std::string> names;             // properties declared somewhere in the tree
    size_t prefix = 0;                          // longest prefixItems
    bool all_props = false, all_items = false;  // additional* / items / unevaluated* seen
    std::vector<std::string> dynamic;           // keywords that make it dynamic (refused)
  };
  Status collect_evaluated(const Sub& s, Evaluated& e, std::vector<std::string>& seen,
                           int depth) const;
  // Strict mode's anyOf/oneOf: `v` against context AND branch, merged (so that the branch's
  // properties count as declared), group by group. Nested groups multiply: `work` counts the
  // merges for one instance value, and too many end in an error (as the compiler's kMaxWork).
  Result<bool> validate_merged_groups(const ojson& v, const Constraints& c, int depth,
                                      int64_t& work) const;
  Result<bool> pattern_matches(const std::string& pattern, const std::string& text,
                               const std::string& ptr) const;

  const ojson& root_;
  JsonSchemaOptions opts_;
  mutable std::map<std::string, std::shared_ptr<const Grammar>> pattern_cache_;
};

}  // namespace sluice::grammar::json_ir
