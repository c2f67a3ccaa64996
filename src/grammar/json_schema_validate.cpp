// JSON Schema: instances checked against Constraints directly (the compiler filters enum
// values with it, oneOf asks it for disjointness, tests use it as the oracle), and JSON
// Schema's equality.
#include <algorithm>
#include <cmath>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/json_schema_ir.h"
#include "grammar/regex.h"
#include "grammar/string_checks.h"

namespace sluice::grammar::json_ir {

using json_lex::Bound;
using json_lex::Decimal;

Status check_depth(const ojson& v, int limit, const char* what) {
  std::vector<std::pair<const ojson*, int>> stack = {{&v, 0}};
  while (!stack.empty()) {
    auto [x, d] = stack.back();
    stack.pop_back();
    if (d > limit)
      return make_error("json_schema: ", what, " nested deeper than ", limit, " levels");
    if (x->is_structured())
      for (const ojson& k : *x) stack.push_back({&k, d + 1});
  }
  return {};
}

bool json_equal(const ojson& a, const ojson& b) {
  if (a.is_number() && b.is_number()) {
    auto x = decimal_of(a), y = decimal_of(b);
    return x.ok() && y.ok() && compare(*x, *y) == 0;
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!json_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      auto it = b.find(k);
      if (it == b.end() || !json_equal(v, *it)) return false;
    }
    return true;
  }
  return a == b;
}

namespace {

constexpr int64_t kMaxGroupWork = 200'000;  // as the compiler's kMaxWork

uint8_t type_bit(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null:
      return kNull;
    case ojson::value_t::boolean:
      return kBool;
    case ojson::value_t::string:
      return kString;
    case ojson::value_t::array:
      return kArray;
    case ojson::value_t::object:
      return kObject;
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
      return kInt;
    case ojson::value_t::number_float: {
      double d = v.get<double>();
      return std::isfinite(d) && std::floor(d) == d ? kInt : kNonInt;
    }
    default:
      return 0;
  }
}

// Remainder of a decimal integer string divided by m.
int64_t mod(const std::string& digits, int64_t m) {
  int64_t r = 0;
  for (char c : digits) r = (r * 10 + (c - '0')) % m;
  return r;
}

}  // namespace

Status Reader::check_refused(const Constraints& c, uint8_t types) const {
  for (const Refused& r : c.refused)
    if (r.types & types)
      return make_error("json_schema: unsupported keyword '", r.keyword, "' at ", where(r.ptr),
                        r.why);
  return {};
}

Result<bool> Reader::pattern_matches(const std::string& pattern, const std::string& text,
                                     const std::string& ptr) const {
  auto it = pattern_cache_.find(pattern);
  if (it == pattern_cache_.end()) {
    auto e = regex_to_expr(pattern, RegexOptions{.search = true});
    if (!e.ok())
      return make_error("json_schema: pattern at ", where(ptr), " is not supported: ", e.message());
    GrammarSpec spec;
    spec.rules.push_back({"root", std::move(e).value()});
    auto g = lower(spec);
    if (!g.ok()) return make_error("json_schema: pattern at ", where(ptr), ": ", g.message());
    it = pattern_cache_.emplace(pattern, std::move(g).value()).first;
  }
  return matches(it->second, text);
}

Result<bool> Reader::validate_sub(const ojson& v, const Sub& s, int depth) const {
  SLUICE_ASSIGN_OR_RETURN(Constraints c, read(s, depth));
  return validate(v, c, depth);
}

Result<bool> Reader::validate_conj(const ojson& v, const Conj& conj, int depth) const {
  for (const Sub& s : conj) {
    SLUICE_ASSIGN_OR_RETURN(bool ok, validate_sub(v, s, depth + 1));
    if (!ok) return false;
  }
  return true;
}

Result<bool> Reader::validate_merged_groups(const ojson& v, const Constraints& c, int depth,
                                            int64_t& work) const {
  if (c.groups.empty()) return validate(v, c, depth);
  if (depth > opts_.max_depth)
    return make_error("json_schema: instance nested deeper than ", opts_.max_depth, " levels");
  Constraints rest = c;
  Group g = std::move(rest.groups.front());
  rest.groups.erase(rest.groups.begin());
  int n = 0;
  for (const Sub& b : g.branches) {
    if (++work > kMaxGroupWork)
      return make_error("json_schema: the schema is too complex to validate in strict mode ",
                        "(anyOf/oneOf combinations)");
    SLUICE_ASSIGN_OR_RETURN(Constraints x, read(b, depth + 1));
    SLUICE_ASSIGN_OR_RETURN(bool ok, validate_merged_groups(v, merge(rest, x), depth + 1, work));
    n += ok;
  }
  return g.one_of ? n == 1 : n > 0;
}

Result<bool> Reader::validate(const ojson& v, const Constraints& c, int depth) const {
  if (depth > opts_.max_depth)
    return make_error("json_schema: instance nested deeper than ", opts_.max_depth, " levels");
  uint8_t bit = type_bit(v);
  if (!(bit & c.types)) return false;
  SLUICE_RETURN_IF_ERROR(check_refused(c, bit));
  if (c.enums) {
    bool found = false;
    for (const ojson* e : *c.enums) found |= json_equal(*e, v);
    if (!found) return false;
  }
  if (opts_.strict && !c.groups.empty()) {
    int64_t work = 0;
    return validate_merged_groups(v, c, depth, work);
  }
  for (const Group& g : c.groups) {
    int n = 0;
    for (const Sub& b : g.branches) {
      SLUICE_ASSIGN_OR_RETURN(bool ok, validate_sub(v, b, depth + 1));
      n += ok;
    }
    if (g.one_of ? n != 1 : n == 0) return false;
  }
  if (bit & kNumber) {
    SLUICE_ASSIGN_OR_RETURN(Decimal d, decimal_of(v));
    if (c.lo) {
      int x = compare(d, c.lo->v);
      if (x < 0 || (x == 0 && c.lo->strict)) return false;
    }
    if (c.hi) {
      int x = compare(d, c.hi->v);
      if (x > 0 || (x == 0 && c.hi->strict)) return false;
    }
    if (c.multiple_of > 1 && (!d.is_integer() || mod(d.ip, c.multiple_of) != 0)) return false;
  } else if (bit == kString) {
    const std::string& s = v.get_ref<const std::string&>();
    SLUICE_ASSIGN_OR_RETURN(std::u32string cps, json_lex::decode(s));
    int64_t n = int64_t(cps.size());
    if (n < c.min_len || (c.max_len >= 0 && n > c.max_len)) return false;
    for (const auto& [p, pp] : c.patterns) {
      SLUICE_ASSIGN_OR_RETURN(bool ok, pattern_matches(p, s, pp));
      if (!ok) return false;
    }
    if (c.check == StringCheck::kHostname && !hostname_idna_ok(s)) return false;
  } else if (bit == kArray) {
    int64_t n = int64_t(v.size());
    if (n < c.min_items || (c.max_items >= 0 && n > c.max_items)) return false;
    if (c.unique_items)
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          if (json_equal(v[i], v[j])) return false;
    for (const Contains& ct : c.contains) {
      int64_t hits = 0;
      for (const ojson& x : v) {
        SLUICE_ASSIGN_OR_RETURN(bool ok, validate_sub(x, ct.s, depth + 1));
        hits += ok;
      }
      if (hits < ct.min || (ct.max >= 0 && hits > ct.max)) return false;
    }
    const Conj items = extra_items(c);
    for (size_t i = 0; i < v.size(); ++i) {
      const Conj& conj = i < c.prefix.size() ? c.prefix[i] : items;
      SLUICE_ASSIGN_OR_RETURN(bool ok, validate_conj(v[i], conj, depth));
      if (!ok) return false;
    }
  } else if (bit == kObject) {
    int64_t n = int64_t(v.size());
    if (n < c.min_props || (c.max_props >= 0 && n > c.max_props)) return false;
    if (c.no_keys && n > 0) return false;
    for (const auto& r : c.required)
      if (!v.contains(r)) return false;
    for (const auto& [k, deps] : c.dep_required)
      if (v.contains(k))
        for (const auto& d : deps)
          if (!v.contains(d)) return false;
    const Conj additional = extra_props(c);
    for (const auto& [k, x] : v.items()) {
      if (!c.prop_names.empty()) {
        SLUICE_ASSIGN_OR_RETURN(bool ok, validate_conj(ojson(k), c.prop_names, depth));
        if (!ok) return false;
      }
      const Conj* conj = &additional;
      for (const auto& [pk, pc] : c.props)
        if (pk == k) conj = &pc;
      SLUICE_ASSIGN_OR_RETURN(bool ok, validate_conj(x, *conj, depth));
      if (!ok) return false;
    }
  }
  return true;
}

// --- disjointness, for oneOf ---

uint8_t effective_types(const Constraints& c) {
  if (!c.enums) return c.types;
  uint8_t t = 0;
  for (const ojson* v : *c.enums) t |= type_bit(*v) & c.types;
  return t;
}

bool Reader::disjoint(const Constraints& a, const Constraints& b, int depth) const {
  if (depth > opts_.max_depth) return false;
  uint8_t ta = effective_types(a), tb = effective_types(b);
  if ((ta & tb) == 0) return true;
  // A finite side: none of its values is valid under the other.
  for (auto [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    if (!x->enums) continue;
    bool any = false;
    for (const ojson* v : *x->enums) {
      auto in_x = validate(*v, *x, depth + 1);
      auto in_y = validate(*v, *y, depth + 1);
      if (!in_x.ok() || !in_y.ok()) return false;
      any |= *in_x && *in_y;
    }
    if (!any) return true;
  }
  // Numbers only: disjoint ranges.
  if (((ta | tb) & ~kNumber) == 0) {
    auto below = [](const std::optional<Bound>& hi, const std::optional<Bound>& lo) {
      if (!hi || !lo) return false;
      int x = compare(hi->v, lo->v);
      return x < 0 || (x == 0 && (hi->strict || lo->strict));
    };
    if (below(a.hi, b.lo) || below(b.hi, a.lo)) return true;
  }
  // Objects only: a property both require with disjoint values, or one the other forbids.
  if (((ta | tb) & ~kObject) == 0) {
    auto value_conj = [](const Constraints& c, const std::string& k) -> Conj {
      for (const auto& [pk, pc] : c.props)
        if (pk == k) return pc;
      return extra_props(c);
    };
    for (auto [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
      for (const std::string& k : x->required) {
        auto cy = read_conj(value_conj(*y, k), depth + 1);
        if (cy.ok() && cy->types == 0) return true;  // y forbids k
        if (std::find(y->required.begin(), y->required.end(), k) == y->required.end()) continue;
        auto cx = read_conj(value_conj(*x, k), depth + 1);
        if (cx.ok() && cy.ok() && disjoint(*cx, *cy, depth + 1)) return true;
      }
    }
  }
  return false;
}

}  // namespace sluice::grammar::json_ir

namespace sluice::grammar {

Result<bool> json_schema_validate(const nlohmann::ordered_json& schema,
                                  const nlohmann::ordered_json& instance,
                                  const JsonSchemaOptions& opts) {
  SLUICE_RETURN_IF_ERROR(json_ir::check_depth(schema, json_ir::kMaxJsonDepth, "schema"));
  SLUICE_RETURN_IF_ERROR(json_ir::check_depth(instance, json_ir::kMaxJsonDepth, "instance"));
  json_ir::Reader reader(schema, opts);
  SLUICE_ASSIGN_OR_RETURN(json_ir::Constraints c, reader.read({&schema, ""}, 0));
  return reader.validate(instance, c, 0);
}

}  // namespace sluice::grammar
