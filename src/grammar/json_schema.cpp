// JSON Schema -> GrammarSpec: reading schemas into Constraints (one schema object's
// keywords, with $ref and allOf merged in) and merging them. json_schema_emit.cpp turns
// Constraints into grammar rules; json_schema_validate.cpp checks instances against them.
//
// A schema is read lazily: subschemas (property values, items, branches) stay Subs (a pointer
// into the document plus its JSON pointer) until the compiler or validator needs them, so a
// recursive schema is read one level at a time and $ref rules can close the recursion.
#include "grammar/json_schema.h"

#include "grammar/json_schema_formats.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include "grammar/json_schema_ir.h"

namespace sluice::grammar::json_ir {
namespace {

using json_lex::Bound;
using json_lex::Decimal;

std::string child_ptr(const std::string& ptr, std::string_view key) {
  std::string out = ptr + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// Every keyword this reader acts on or refuses; anything else is an unknown keyword, which
// JSON Schema ignores.
bool is_validation(const std::string& k) {
  static const char* const kNames[] = {"type",
                                       "enum",
                                       "const",
                                       "minimum",
                                       "maximum",
                                       "exclusiveMinimum",
                                       "exclusiveMaximum",
                                       "multipleOf",
                                       "minLength",
                                       "maxLength",
                                       "pattern",
                                       "format",
                                       "items",
                                       "prefixItems",
                                       "additionalItems",
                                       "minItems",
                                       "maxItems",
                                       "uniqueItems",
                                       "contains",
                                       "minContains",
                                       "maxContains",
                                       "unevaluatedItems",
                                       "properties",
                                       "patternProperties",
                                       "additionalProperties",
                                       "required",
                                       "minProperties",
                                       "maxProperties",
                                       "dependentRequired",
                                       "dependentSchemas",
                                       "dependencies",
                                       "propertyNames",
                                       "unevaluatedProperties",
                                       "allOf",
                                       "anyOf",
                                       "oneOf",
                                       "not",
                                       "if",
                                       "then",
                                       "else",
                                       "$ref",
                                       "$dynamicRef",
                                       "$recursiveRef"};
  for (const char* n : kNames)
    if (k == n) return true;
  return false;
}

bool is_trivially_true(const ojson& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object()) return false;
  for (const auto& [k, v] : s.items())
    if (is_validation(k)) return false;
  return true;
}

// A non-negative integer keyword value (2.0 is 2); huge values saturate.
Result<int64_t> count_of(const ojson& v, const std::string& kw, const std::string& ptr) {
  if (v.is_number_unsigned())
    return int64_t(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(INT64_MAX / 4)));
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d >= 0 && std::floor(d) == d) return d > 1e15 ? int64_t(1e15) : int64_t(d);
  }
  return make_error("json_schema: '", kw, "' at ", where(ptr), " must be a non-negative integer");
}

int64_t min_opt(int64_t a, int64_t b) {  // -1: none
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(uint8_t(s[i + 1])) &&
        std::isxdigit(uint8_t(s[i + 2]))) {
      out += char(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The subschema with $anchor (or $dynamicAnchor, which is also a plain anchor) `name`, not
// looking into embedded resources (subschemas with their own $id).
const ojson* find_anchor(const ojson& s, const std::string& name, std::string& ptr, int depth) {
  if (depth > 64) return nullptr;
  if (s.is_object()) {
    if (depth > 0 && s.contains("$id")) return nullptr;
    for (const char* kw : {"$anchor", "$dynamicAnchor"})
      if (auto it = s.find(kw); it != s.end() && it->is_string() && *it == name) return &s;
    for (const auto& [k, v] : s.items()) {
      std::string p = child_ptr(ptr, k);
      if (const ojson* r = find_anchor(v, name, p, depth + 1)) {
        ptr = p;
        return r;
      }
    }
  } else if (s.is_array()) {
    for (size_t i = 0; i < s.size(); ++i) {
      std::string p = ptr + "/" + std::to_string(i);
      if (const ojson* r = find_anchor(s[i], name, p, depth + 1)) {
        ptr = p;
        return r;
      }
    }
  }
  return nullptr;
}

}  // namespace

Result<Decimal> decimal_of(const ojson& v) {
  return json_lex::parse_decimal(v.dump());
}

bool is_trivial_object(const Constraints& c) {
  return c.props.empty() && c.additional.empty() && !c.closed_props && c.required.empty() &&
         c.min_props == 0 && c.max_props < 0 && c.dep_required.empty() && !c.no_keys &&
         c.prop_names.empty();
}
bool is_trivial_array(const Constraints& c) {
  return c.prefix.empty() && c.items.empty() && !c.closed_items && c.min_items == 0 &&
         c.max_items < 0 && !c.unique_items && c.contains.empty();
}
bool is_trivial_string(const Constraints& c) {
  return c.min_len == 0 && c.max_len < 0 && c.patterns.empty();
}
bool is_trivial_number(const Constraints& c) {
  return !c.lo && !c.hi && c.multiple_of == 1;
}
bool is_pure_type(const Constraints& c) {
  return !c.enums && is_trivial_object(c) && is_trivial_array(c) && is_trivial_string(c) &&
         is_trivial_number(c) && c.groups.empty() && c.refused.empty();
}

namespace {
const ojson kFalseSchema = false;
}  // namespace

Conj extra_props(const Constraints& c) {
  if (c.closed_props && c.additional.empty()) return {Sub{&kFalseSchema, c.ptr}};
  return c.additional;
}
Conj extra_items(const Constraints& c) {
  if (c.closed_items && c.items.empty()) return {Sub{&kFalseSchema, c.ptr}};
  return c.items;
}

Constraints merge(Constraints a, const Constraints& b) {
  a.types &= b.types;
  if (b.enums) {
    if (!a.enums) {
      a.enums = b.enums;
    } else {
      std::vector<const ojson*> keep;
      for (const ojson* v : *a.enums)
        for (const ojson* w : *b.enums)
          if (json_equal(*v, *w)) {
            keep.push_back(v);
            break;
          }
      a.enums = std::move(keep);
    }
  }
  if (b.lo) {
    int c = a.lo ? compare(a.lo->v, b.lo->v) : -1;
    if (c < 0 || (c == 0 && b.lo->strict)) a.lo = b.lo;
  }
  if (b.hi) {
    int c = a.hi ? compare(a.hi->v, b.hi->v) : 1;
    if (c > 0 || (c == 0 && b.hi->strict)) a.hi = b.hi;
  }
  if (b.multiple_of != 1) {
    int64_t g = std::gcd(a.multiple_of, b.multiple_of);
    int64_t l = a.multiple_of / g;
    a.multiple_of = l > (int64_t(1) << 40) / b.multiple_of ? (int64_t(1) << 40) : l * b.multiple_of;
  }
  a.min_len = std::max(a.min_len, b.min_len);
  a.max_len = min_opt(a.max_len, b.max_len);
  for (const auto& p : b.patterns)
    if (std::find_if(a.patterns.begin(), a.patterns.end(),
                     [&](const auto& q) { return q.first == p.first; }) == a.patterns.end())
      a.patterns.push_back(p);
  if (b.check != StringCheck::kNone) a.check = b.check;
  // Arrays: position i is constrained by each side's prefix[i], or its items past its prefix.
  std::vector<Conj> prefix(std::max(a.prefix.size(), b.prefix.size()));
  for (size_t i = 0; i < prefix.size(); ++i) {
    const Conj& x = i < a.prefix.size() ? a.prefix[i] : a.items;
    const Conj& y = i < b.prefix.size() ? b.prefix[i] : b.items;
    prefix[i] = x;
    prefix[i].insert(prefix[i].end(), y.begin(), y.end());
  }
  a.prefix = std::move(prefix);
  a.items.insert(a.items.end(), b.items.begin(), b.items.end());
  a.closed_items |= b.closed_items;
  a.min_items = std::max(a.min_items, b.min_items);
  a.max_items = min_opt(a.max_items, b.max_items);
  a.unique_items |= b.unique_items;
  a.contains.insert(a.contains.end(), b.contains.begin(), b.contains.end());
  if (a.unique_ptr.empty()) a.unique_ptr = b.unique_ptr;
  // Objects: key k is constrained by each side's properties[k], or its additionalProperties.
  for (auto& [k, conj] : a.props) {
    const Conj* other = &b.additional;
    for (const auto& [bk, bconj] : b.props)
      if (bk == k) other = &bconj;
    conj.insert(conj.end(), other->begin(), other->end());
  }
  for (const auto& [bk, bconj] : b.props) {
    bool seen = false;
    for (const auto& [k, conj] : a.props) seen |= k == bk;
    if (seen) continue;
    Conj conj = a.additional;
    conj.insert(conj.end(), bconj.begin(), bconj.end());
    a.props.push_back({bk, std::move(conj)});
  }
  a.additional.insert(a.additional.end(), b.additional.begin(), b.additional.end());
  a.closed_props |= b.closed_props;
  for (const auto& r : b.required)
    if (std::find(a.required.begin(), a.required.end(), r) == a.required.end())
      a.required.push_back(r);
  a.min_props = std::max(a.min_props, b.min_props);
  a.max_props = min_opt(a.max_props, b.max_props);
  a.dep_required.insert(a.dep_required.end(), b.dep_required.begin(), b.dep_required.end());
  a.no_keys |= b.no_keys;
  a.prop_names.insert(a.prop_names.end(), b.prop_names.begin(), b.prop_names.end());
  a.groups.insert(a.groups.end(), b.groups.begin(), b.groups.end());
  a.refused.insert(a.refused.end(), b.refused.begin(), b.refused.end());
  return a;
}

Reader::Reader(const ojson& root, const JsonSchemaOptions& opts) : root_(root), opts_(opts) {}

Result<Sub> Reader::resolve(const std::string& ref, const std::string& ptr) const {
  if (ref.empty() || ref[0] != '#')
    return make_error("json_schema: unsupported $ref '", ref, "' at ", where(ptr),
                      " (only references within the schema, '#...', are supported)");
  std::string frag = percent_decode(std::string_view(ref).substr(1));
  if (frag.empty()) return Sub{&root_, ""};
  if (frag[0] != '/') {
    std::string p;
    if (const ojson* s = find_anchor(root_, frag, p, 0)) return Sub{s, p};
    return make_error("json_schema: unsupported $ref '", ref, "' at ", where(ptr), ": no $anchor '",
                      frag, "' outside embedded resources (subschemas with their own $id)");
  }
  const ojson* cur = &root_;
  std::string canon;
  size_t i = 1;
  while (true) {
    size_t j = frag.find('/', i);
    std::string tok = frag.substr(i, j == std::string::npos ? std::string::npos : j - i);
    std::string key;
    for (size_t k = 0; k < tok.size(); ++k) {
      if (tok[k] == '~' && k + 1 < tok.size() && (tok[k + 1] == '0' || tok[k + 1] == '1')) {
        key += tok[k + 1] == '0' ? '~' : '/';
        ++k;
      } else {
        key += tok[k];
      }
    }
    const ojson* next = nullptr;
    if (cur->is_object()) {
      if (auto it = cur->find(key); it != cur->end()) next = &*it;
    } else if (cur->is_array() && !key.empty() &&
               key.find_first_not_of("0123456789") == std::string::npos && key.size() < 10) {
      size_t idx = std::stoul(key);
      if (idx < cur->size()) next = &(*cur)[idx];
    }
    if (!next)
      return make_error("json_schema: $ref '", ref, "' at ", where(ptr), " points to nothing");
    cur = next;
    canon = child_ptr(canon, key);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return Sub{cur, canon};
}

// The $ref target when `s` is nothing but a reference (annotations aside); else nullptr.
Result<std::optional<Sub>> Reader::lone_ref(const Sub& s) const {
  if (!s.s->is_object()) return std::optional<Sub>();
  auto it = s.s->find("$ref");
  if (it == s.s->end() || !it->is_string()) return std::optional<Sub>();
  for (const auto& [k, v] : s.s->items())
    if (k != "$ref" && is_validation(k)) return std::optional<Sub>();
  if (s.s->contains("$id") && !s.ptr.empty()) return std::optional<Sub>();
  SLUICE_ASSIGN_OR_RETURN(Sub t, resolve(it->get<std::string>(), s.ptr));
  return std::optional<Sub>(t);
}

Result<Constraints> Reader::read_conj(const Conj& conj, int depth) const {
  Constraints c;
  for (const Sub& s : conj) {
    SLUICE_ASSIGN_OR_RETURN(Constraints x, read(s, depth));
    c = merge(std::move(c), x);
  }
  if (!conj.empty()) c.ptr = conj[0].ptr;
  return c;
}

Result<Constraints> Reader::read(const Sub& sub, int depth) const {
  const ojson& s = *sub.s;
  const std::string& ptr = sub.ptr;
  if (depth > opts_.max_depth)
    return make_error("json_schema: schema at ", where(ptr), " nested deeper than ",
                      opts_.max_depth, " levels ($ref cycle?)");
  Constraints c;
  c.ptr = ptr;
  if (s.is_boolean()) {
    if (!s.get<bool>()) c.types = 0;
    return c;
  }
  if (!s.is_object())
    return make_error("json_schema: the schema at ", where(ptr), " must be an object or a boolean");
  auto bad = [&](const std::string& kw, const char* what) {
    return make_error("json_schema: '", kw, "' at ", where(ptr), " must be ", what);
  };
  auto refuse = [&](const std::string& kw, uint8_t types, std::string why = "") {
    c.refused.push_back({kw, ptr, types, std::move(why)});
  };
  auto schema_at = [&](const ojson& v, const std::string& p) -> Result<Sub> {
    if (!v.is_object() && !v.is_boolean())
      return make_error("json_schema: the schema at ", where(p), " must be an object or a boolean");
    return Sub{&v, p};
  };
  const ojson* items_array = nullptr;
  // $ref and allOf are merged after this schema's own keywords: additionalProperties and
  // items here do not see properties / prefixItems declared inside them.
  std::vector<Constraints> applied;
  for (const auto& [k, v] : s.items()) {
    std::string kp = child_ptr(ptr, k);
    if (k == "$schema") {
      if (!ptr.empty()) continue;
      static const char* const kKnown[] = {
          "json-schema.org/draft/2020-12/schema", "json-schema.org/draft/2019-09/schema",
          "json-schema.org/draft-07/schema", "json-schema.org/draft-06/schema",
          "json-schema.org/draft-04/schema"};  // draft-04's boolean exclusive* are refused
      bool known = false;
      if (v.is_string())
        for (const char* n : kKnown) known |= v.get<std::string>().find(n) != std::string::npos;
      if (!known)
        return make_error("json_schema: unsupported $schema ", v.dump(),
                          " (a custom meta-schema may change what keywords mean)");
    } else if (k == "$id") {
      if (!ptr.empty()) refuse(k, kAllTypes, " (embedded schema resources)");
    } else if (k == "type") {
      uint8_t t = 0;
      auto one = [&](const ojson& n) -> Status {
        static const std::pair<const char*, uint8_t> kTypes[] = {
            {"null", kNull},     {"boolean", kBool},  {"object", kObject}, {"array", kArray},
            {"string", kString}, {"number", kNumber}, {"integer", kInt}};
        if (n.is_string())
          for (auto [name, bit] : kTypes)
            if (n == name) {
              t |= bit;
              return {};
            }
        return make_error("json_schema: unknown type ", n.dump(), " at ", where(kp));
      };
      if (v.is_array()) {
        for (const ojson& n : v) SLUICE_RETURN_IF_ERROR(one(n));
      } else {
        SLUICE_RETURN_IF_ERROR(one(v));
      }
      c.types &= t;
    } else if (k == "enum" || k == "const") {
      std::vector<const ojson*> vals;
      if (k == "const") {
        vals.push_back(&v);
      } else {
        if (!v.is_array()) return bad(k, "an array");
        for (const ojson& x : v) vals.push_back(&x);
      }
      Constraints e;
      e.enums = std::move(vals);
      c = merge(std::move(c), e);
    } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" ||
               k == "exclusiveMaximum") {
      if (v.is_boolean()) {
        refuse(k, kNumber, " (draft-04 boolean form)");
        continue;
      }
      if (!v.is_number()) return bad(k, "a number");
      SLUICE_ASSIGN_OR_RETURN(Decimal d, decimal_of(v));
      Constraints b;
      Bound bound{d, k[0] == 'e'};
      (k == "minimum" || k == "exclusiveMinimum" ? b.lo : b.hi) = bound;
      c = merge(std::move(c), b);
    } else if (k == "multipleOf") {
      if (!v.is_number()) return bad(k, "a number");
      SLUICE_ASSIGN_OR_RETURN(Decimal d, decimal_of(v));
      if (d.neg || d.is_zero()) return bad(k, "a positive number");
      if (!d.is_integer() || d.ip.size() > 12) {
        refuse(k, kNumber, " (only integer divisors are supported)");
        continue;
      }
      Constraints m;
      m.multiple_of = std::stoll(d.ip);
      m.types = kAllTypes & ~kNonInt;  // multiples of an integer are integers
      c = merge(std::move(c), m);
    } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" ||
               k == "minProperties" || k == "maxProperties") {
      SLUICE_ASSIGN_OR_RETURN(int64_t n, count_of(v, k, ptr));
      Constraints b;
      if (k == "minLength") b.min_len = n;
      if (k == "maxLength") b.max_len = n;
      if (k == "minItems") b.min_items = n;
      if (k == "maxItems") b.max_items = n;
      if (k == "minProperties") b.min_props = n;
      if (k == "maxProperties") b.max_props = n;
      c = merge(std::move(c), b);
    } else if (k == "pattern") {
      if (!v.is_string()) return bad(k, "a string");
      c.patterns.push_back({v.get<std::string>(), ptr});
    } else if (k == "format") {
      // An annotation in 2020-12; enforced here like a pattern (json_schema_formats.h).
      if (!v.is_string()) return bad(k, "a string");
      if (std::optional<std::string> re = format_regex(v.get<std::string>())) {
        c.patterns.push_back({*re, ptr});
        c.check = format_check(v.get<std::string>());
      } else if (opts_.refuse_unknown_formats) {
        std::string known;
        for (const std::string& f : enforced_formats()) known += (known.empty() ? "" : ", ") + f;
        return make_error("json_schema: unsupported keyword 'format' at ", where(ptr), " ('",
                          v.get<std::string>(), "'; enforced: ", known, ")");
      }
    } else if (k == "items") {
      if (v.is_array()) {
        items_array = &v;  // draft 2019-09 and earlier: positional items
        for (size_t i = 0; i < v.size(); ++i) {
          SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v[i], kp + "/" + std::to_string(i)));
          c.prefix.push_back({x});
        }
      } else {
        SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v, kp));
        c.items.push_back(x);
      }
    } else if (k == "prefixItems") {
      if (!v.is_array()) return bad(k, "an array");
      for (size_t i = 0; i < v.size(); ++i) {
        SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v[i], kp + "/" + std::to_string(i)));
        c.prefix.push_back({x});
      }
    } else if (k == "additionalItems") {
      // Read below, with an items array; without one it means nothing (also in draft-07).
    } else if (k == "uniqueItems") {
      if (!v.is_boolean()) return bad(k, "a boolean");
      if (v.get<bool>()) {
        c.unique_items = true;
        c.unique_ptr = ptr;
      }
    } else if (k == "contains") {
      SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v, kp));
      Contains ct{x, 1, -1, ptr};
      if (auto it = s.find("minContains"); it != s.end()) {
        SLUICE_ASSIGN_OR_RETURN(ct.min, count_of(*it, "minContains", ptr));
      }
      if (auto it = s.find("maxContains"); it != s.end()) {
        SLUICE_ASSIGN_OR_RETURN(ct.max, count_of(*it, "maxContains", ptr));
      }
      c.contains.push_back(std::move(ct));
    } else if (k == "minContains" || k == "maxContains") {
      // Read with contains; without it they mean nothing.
    } else if (k == "properties") {
      if (!v.is_object()) return bad(k, "an object");
      for (const auto& [name, ps] : v.items()) {
        SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(ps, child_ptr(kp, name)));
        c.props.push_back({name, {x}});
      }
    } else if (k == "additionalProperties") {
      SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v, kp));
      c.additional.push_back(x);
    } else if (k == "patternProperties") {
      if (!v.is_object()) return bad(k, "an object");
      bool moot = true;
      for (const auto& [p, ps] : v.items()) moot &= is_trivially_true(ps);
      if (s.contains("additionalProperties") && !is_trivially_true(s["additionalProperties"]))
        moot = false;
      if (s.contains("unevaluatedProperties") && !v.empty()) moot = false;
      if (!moot) refuse(k, kObject);
    } else if (k == "required") {
      if (!v.is_array()) return bad(k, "an array of strings");
      for (const ojson& n : v) {
        if (!n.is_string()) return bad(k, "an array of strings");
        if (std::find(c.required.begin(), c.required.end(), n) == c.required.end())
          c.required.push_back(n.get<std::string>());
      }
    } else if (k == "dependentRequired") {
      if (!v.is_object()) return bad(k, "an object of string arrays");
      for (const auto& [name, deps] : v.items()) {
        if (!deps.is_array()) return bad(k, "an object of string arrays");
        std::vector<std::string> d;
        for (const ojson& n : deps) {
          if (!n.is_string()) return bad(k, "an object of string arrays");
          d.push_back(n.get<std::string>());
        }
        if (!d.empty()) c.dep_required.push_back({name, std::move(d)});
      }
    } else if (k == "propertyNames") {
      if (v.is_boolean() && !v.get<bool>()) {
        c.no_keys = true;
      } else if (!is_trivially_true(v)) {
        SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v, kp));
        c.prop_names.push_back(x);
      }
    } else if (k == "dependentSchemas" || k == "dependencies") {
      refuse(k, kObject);
    } else if (k == "unevaluatedProperties" || k == "unevaluatedItems") {
      // Keys / items that neither this schema nor its $ref / allOf subschemas evaluate must
      // satisfy v: a static set here, so it is one more allOf term.
      bool props = k == "unevaluatedProperties";
      Evaluated e;
      std::vector<std::string> seen;
      SLUICE_RETURN_IF_ERROR(collect_evaluated(sub, e, seen, 0));
      std::string why;
      for (const std::string& d : e.dynamic)
        if (why.empty() && d != (props ? "contains" : "patternProperties")) why = d;
      if (!why.empty()) {
        refuse(k, props ? kObject : kArray,
               " (with '" + why + "' in reach, what is evaluated depends on the instance)");
      } else if (props ? !e.all_props : !e.all_items) {
        SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v, kp));
        Constraints term;
        if (props) {
          for (const std::string& n : e.names) term.props.push_back({n, {}});
          term.additional.push_back(x);
        } else {
          term.prefix.resize(e.prefix);
          term.items.push_back(x);
        }
        applied.push_back(std::move(term));
      }
    } else if (k == "allOf" || k == "anyOf" || k == "oneOf") {
      if (!v.is_array() || v.empty()) return bad(k, "a non-empty array of schemas");
      Group g{k == "oneOf", {}, ptr};
      for (size_t i = 0; i < v.size(); ++i) {
        SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v[i], kp + "/" + std::to_string(i)));
        g.branches.push_back(x);
      }
      if (k == "allOf") {
        for (const Sub& x : g.branches) {
          SLUICE_ASSIGN_OR_RETURN(Constraints b, read(x, depth + 1));
          applied.push_back(std::move(b));
        }
      } else {
        c.groups.push_back(std::move(g));
      }
    } else if (k == "not") {
      SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(v, kp));
      SLUICE_ASSIGN_OR_RETURN(Constraints n, read(x, depth + 1));
      if (is_pure_type(n)) {
        c.types &= uint8_t(~n.types) & kAllTypes;
      } else {
        refuse(k, kAllTypes, " (other than of a set of types)");
      }
    } else if (k == "if") {
      if (s.contains("then") || s.contains("else")) refuse("if", kAllTypes);
    } else if (k == "$ref") {
      if (!v.is_string()) return bad(k, "a string");
      SLUICE_ASSIGN_OR_RETURN(Sub t, resolve(v.get<std::string>(), ptr));
      SLUICE_ASSIGN_OR_RETURN(Constraints r, read(t, depth + 1));
      applied.push_back(std::move(r));
    } else if (k == "$dynamicRef" || k == "$recursiveRef") {
      refuse(k, kAllTypes);
    }
    // then / else (without if), annotations and unknown keywords: nothing to check.
  }
  if (items_array) {
    if (auto it = s.find("additionalItems"); it != s.end()) {
      SLUICE_ASSIGN_OR_RETURN(Sub x, schema_at(*it, child_ptr(ptr, "additionalItems")));
      c.items.push_back(x);
    }
  }
  if (opts_.strict) {
    // Absent means "nothing else" (json_schema.h). The flags, not false schemas: what this
    // schema's $ref / allOf / anyOf branches declare is declared here too.
    if (s.contains("properties") && !s.contains("additionalProperties") &&
        !s.contains("unevaluatedProperties"))
      c.closed_props = true;
    bool tail = (s.contains("items") && !items_array) ||
                (items_array && s.contains("additionalItems")) || s.contains("unevaluatedItems");
    if ((s.contains("prefixItems") || items_array) && !tail) c.closed_items = true;
  }
  for (const Constraints& a : applied) c = merge(std::move(c), a);
  c.ptr = ptr;
  return c;
}

Status Reader::collect_evaluated(const Sub& sub, Evaluated& e, std::vector<std::string>& seen,
                                 int depth) const {
  if (depth > opts_.max_depth)
    return make_error("json_schema: schema at ", where(sub.ptr), " nested deeper than ",
                      opts_.max_depth, " levels ($ref cycle?)");
  const ojson& s = *sub.s;
  if (!s.is_object()) return {};
  if (std::find(seen.begin(), seen.end(), sub.ptr) != seen.end()) return {};
  seen.push_back(sub.ptr);
  for (const char* k : {"$dynamicRef", "anyOf", "oneOf", "if", "dependentSchemas", "$recursiveRef",
                        "patternProperties", "contains"})
    if (s.contains(k)) e.dynamic.push_back(k);
  // A nested unevaluated* evaluates everything once it holds; the walk's own does not count.
  if (s.contains("additionalProperties") || (depth > 0 && s.contains("unevaluatedProperties")))
    e.all_props = true;
  if ((s.contains("items") && !s["items"].is_array()) || s.contains("additionalItems") ||
      (depth > 0 && s.contains("unevaluatedItems")))
    e.all_items = true;
  if (auto it = s.find("properties"); it != s.end() && it->is_object())
    for (const auto& [n, x] : it->items()) e.names.push_back(n);
  for (const char* k : {"prefixItems", "items"})
    if (auto it = s.find(k); it != s.end() && it->is_array())
      e.prefix = std::max(e.prefix, it->size());
  if (auto it = s.find("$ref"); it != s.end() && it->is_string()) {
    SLUICE_ASSIGN_OR_RETURN(Sub t, resolve(it->get<std::string>(), sub.ptr));
    SLUICE_RETURN_IF_ERROR(collect_evaluated(t, e, seen, depth + 1));
  }
  if (auto it = s.find("allOf"); it != s.end() && it->is_array())
    for (size_t i = 0; i < it->size(); ++i)
      SLUICE_RETURN_IF_ERROR(collect_evaluated(
          {&(*it)[i], child_ptr(sub.ptr, "allOf") + "/" + std::to_string(i)}, e, seen, depth + 1));
  return {};
}

}  // namespace sluice::grammar::json_ir
