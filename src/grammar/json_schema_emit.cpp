// JSON Schema -> GrammarSpec: Constraints (json_schema_ir.h) -> rules.
//
// Shared rules keep the grammar small (the token-mask cache keys on grammar positions): ws,
// char (one spelled code point), char-high (one >= U+0080), chars (char*), string, number,
// integer, value, object, array, member. A lone $ref becomes one rule per target (recursion
// closes there); an object becomes one rule per state of its key automaton, an array one
// rule; large object members are shared rules; everything else is inlined.
#include <bit>
#include <optional>
#include <set>

#include "grammar/json_schema.h"
#include "grammar/json_schema_ir.h"
#include "grammar/regex.h"

namespace sluice::grammar {
namespace {

using namespace json_ir;
using json_lex::alt_of;
using json_lex::Bound;
using json_lex::Decimal;
using json_lex::is_never;
using json_lex::lit;
using json_lex::never;
using json_lex::repeat_of;
using json_lex::seq_of;

constexpr int32_t kRepeatLimit = 10'000;  // LowerLimits::max_repeat
constexpr int64_t kMaxWork = 200'000;     // compile() calls (anyOf x oneOf products)
constexpr int64_t kMaxObjectStates = 8'192;
constexpr int kMaxLiteralDepth = 256;
constexpr size_t kMaxTrieString = 100;  // longer enum strings: own alternative (Expr depth)

int64_t count_nodes(const Expr& e) {
  int64_t n = 1;
  for (const Expr& k : e.kids) n += count_nodes(k);
  return n;
}

// x repeated exactly n times, for any n: blocks of 1000 keep every Expr bound within
// lower()'s repeat limit.
Expr repeat_exact(const Expr& x, int64_t n) {
  if (n <= kRepeatLimit) return repeat_of(x, int32_t(n), int32_t(n));
  constexpr int32_t kBlock = 1000;
  return seq_of({repeat_exact(repeat_of(x, kBlock, kBlock), n / kBlock),
                 repeat_of(x, int32_t(n % kBlock), int32_t(n % kBlock))});
}
// x repeated 0..n times, unambiguously: (x{B}){0,q-1} x{0,B-1} | (x{B}){q} x{0,r}, n = qB + r.
Expr repeat_upto(const Expr& x, int64_t n) {
  if (n <= kRepeatLimit) return repeat_of(x, 0, int32_t(n));
  constexpr int32_t kBlock = 1000;
  Expr block = repeat_of(x, kBlock, kBlock);
  int64_t q = n / kBlock, r = n % kBlock;
  return alt_of({seq_of({repeat_upto(block, q - 1), repeat_of(x, 0, kBlock - 1)}),
                 seq_of({repeat_exact(block, q), repeat_of(x, 0, int32_t(r))})});
}
// x repeated min..max times (max < 0: unbounded).
Expr repeat_range(const Expr& x, int64_t min, int64_t max) {
  if (max >= 0 && max < min) return never();
  if (min <= kRepeatLimit && max <= kRepeatLimit)
    return repeat_of(x, int32_t(min), max < 0 ? kUnbounded : int32_t(max));
  return seq_of({repeat_exact(x, min), max < 0 ? Expr::star(x) : repeat_upto(x, max - min)});
}

class Compiler {
 public:
  Compiler(const ojson& root, const JsonSchemaOptions& opts) : reader_(root, opts), opts_(opts) {}

  Result<GrammarSpec> run() {
    SLUICE_ASSIGN_OR_RETURN(Expr root, compile_ref({&reader_.root(), ""}, 0));
    if (is_never(root))
      return make_error("json_schema: the schema accepts no JSON value (it is unsatisfiable)");
    spec_.rules.insert(spec_.rules.begin(), {"root", std::move(root)});
    SLUICE_RETURN_IF_ERROR(check_size());
    spec_.root = "root";
    return std::move(spec_);
  }

  GrammarSpec object_only() {
    // common() adds rules, so it runs before begin() is taken: as one call's arguments the two
    // are unsequenced, and clang's order inserted at an iterator the growth had invalidated.
    Expr root = common("object");
    spec_.rules.insert(spec_.rules.begin(), {"root", std::move(root)});
    return std::move(spec_);
  }

 private:
  Status check_size() const {
    if (nodes_ > opts_.max_expr_nodes)
      return make_error("json_schema: the grammar would be too large (more than ",
                        opts_.max_expr_nodes, " expression nodes)");
    return {};
  }

  std::string add_rule(const char* kind, Expr body) {
    std::string name = std::string(kind) + "-" + std::to_string(n_rules_++);
    nodes_ += count_nodes(body);
    spec_.rules.push_back({name, std::move(body)});
    return name;
  }

  Expr ws() { return common("ws"); }
  Expr sep() { return seq_of({ws(), lit(","), ws()}); }

  // The shared rule `name`, added on first use.
  Expr common(const std::string& name) {
    if (common_.insert(name).second) {
      Expr body;
      if (name == "ws") {
        body = json_lex::whitespace(opts_.max_indent);
      } else if (name == "char") {
        Expr high = common("char-high");
        body = json_lex::spell_class(json_lex::normalize({{0, kMaxCodepoint}}, false), &high);
      } else if (name == "char-high") {
        body = json_lex::spell_class(json_lex::normalize({{0x80, kMaxCodepoint}}, false));
      } else if (name == "string") {
        body = seq_of({lit("\""), common("chars"), lit("\"")});
      } else if (name == "chars") {
        body = Expr::star(common("char"));
      } else if (name == "number") {
        body = json_lex::any_number();
      } else if (name == "integer") {
        body = json_lex::any_integer();
      } else if (name == "value") {
        body = alt_of({common("object"), common("array"), common("string"), common("number"),
                       lit("true"), lit("false"), lit("null")});
      } else if (name == "member") {
        body = seq_of({common("string"), ws(), lit(":"), ws(), common("value")});
      } else if (name == "object" || name == "array") {
        bool obj = name == "object";
        Expr item = common(obj ? "member" : "value");
        body =
            seq_of({lit(obj ? "{" : "["), ws(),
                    alt_of({lit(obj ? "}" : "]"), seq_of({item, Expr::star(seq_of({sep(), item})),
                                                          ws(), lit(obj ? "}" : "]")})})});
      }
      nodes_ += count_nodes(body);
      spec_.rules.push_back({name, std::move(body)});
    }
    return Expr::ref(name);
  }

  Result<Expr> compile_ref(const Sub& target, int depth) {
    auto it = refs_.find(target.ptr);
    if (it != refs_.end()) {
      RefRule& r = it->second;
      if (!r.done) {
        r.used_open = true;
        return Expr::ref(r.name);
      }
      return r.never ? never() : Expr::ref(r.name);
    }
    std::string name = "ref-" + std::to_string(n_rules_++);
    refs_[target.ptr] = RefRule{name};
    SLUICE_ASSIGN_OR_RETURN(Expr body, compile_sub(target, depth));
    RefRule& r = refs_[target.ptr];
    r.done = true;
    if (is_never(body)) {
      if (r.used_open)
        return make_error("json_schema: the recursive schema at ", where(target.ptr),
                          " accepts no JSON value");
      r.never = true;
      return never();
    }
    nodes_ += count_nodes(body);
    spec_.rules.push_back({name, std::move(body)});
    return Expr::ref(name);
  }

  Result<Expr> compile_sub(const Sub& s, int depth) {
    SLUICE_ASSIGN_OR_RETURN(std::optional<Sub> target, reader_.lone_ref(s));
    if (target) return compile_ref(*target, depth + 1);
    SLUICE_ASSIGN_OR_RETURN(Constraints c, reader_.read(s, depth));
    return compile(std::move(c), depth);
  }

  Result<Expr> compile_conj(const Conj& conj, int depth) {
    if (conj.empty()) return common("value");
    if (conj.size() == 1) return compile_sub(conj[0], depth + 1);
    SLUICE_ASSIGN_OR_RETURN(Constraints c, reader_.read_conj(conj, depth + 1));
    return compile(std::move(c), depth + 1);
  }

  Result<Expr> compile(Constraints c, int depth) {
    if (++work_ > kMaxWork)
      return make_error("json_schema: the schema is too complex (anyOf/oneOf combinations)");
    SLUICE_RETURN_IF_ERROR(check_size());
    if (depth > opts_.max_depth)
      return make_error("json_schema: schema at ", where(c.ptr), " nested deeper than ",
                        opts_.max_depth, " levels");
    if (!c.groups.empty()) return compile_group(std::move(c), depth);
    SLUICE_RETURN_IF_ERROR(reader_.check_refused(c, effective_types(c)));
    if (c.types == 0) return never();
    if (c.enums) {
      std::vector<const ojson*> values = std::move(*c.enums);
      c.enums.reset();
      std::vector<Expr> alts;
      std::vector<std::u32string> strings;  // as one trie: the matcher stays deterministic
      for (const ojson* v : values) {
        SLUICE_ASSIGN_OR_RETURN(bool ok, reader_.validate(*v, c, depth));
        if (!ok) continue;
        if (v->is_string()) {
          SLUICE_ASSIGN_OR_RETURN(std::u32string cps,
                                  json_lex::decode(v->get_ref<const std::string&>()));
          if (cps.size() <= kMaxTrieString) {
            strings.push_back(std::move(cps));
            continue;
          }
        }
        SLUICE_ASSIGN_OR_RETURN(Expr e, literal(*v, 0));
        alts.push_back(std::move(e));
      }
      if (!strings.empty())
        alts.push_back(seq_of({lit("\""), json_lex::spell_one_of(strings), lit("\"")}));
      return alt_of(std::move(alts));
    }
    if (c.types == kAllTypes && is_pure_type(c)) return common("value");
    std::vector<Expr> alts;
    if (c.types & kNull) alts.push_back(lit("null"));
    if (c.types & kBool) alts.push_back(alt_of({lit("true"), lit("false")}));
    if (c.types & kNumber) {
      SLUICE_ASSIGN_OR_RETURN(Expr e, compile_number(c));
      alts.push_back(std::move(e));
    }
    if (c.types & kString) {
      SLUICE_ASSIGN_OR_RETURN(Expr e, compile_string(c));
      alts.push_back(std::move(e));
    }
    if (c.types & kArray) {
      SLUICE_ASSIGN_OR_RETURN(Expr e, compile_array(c, depth));
      alts.push_back(std::move(e));
    }
    if (c.types & kObject) {
      SLUICE_ASSIGN_OR_RETURN(Expr e, compile_object(c, depth));
      alts.push_back(std::move(e));
    }
    return alt_of(std::move(alts));
  }

  // context AND anyOf/oneOf(branches) = anyOf(context AND branch); for oneOf only when the
  // branches (in context) are provably disjoint, so "exactly one" is "at least one".
  Result<Expr> compile_group(Constraints c, int depth) {
    Group g = std::move(c.groups.front());
    c.groups.erase(c.groups.begin());
    bool bare = c.types == kAllTypes && is_pure_type(c);  // no context: branches as written
    std::vector<Constraints> merged;
    for (const Sub& b : g.branches) {
      SLUICE_ASSIGN_OR_RETURN(Constraints x, reader_.read(b, depth + 1));
      merged.push_back(merge(c, x));
    }
    if (g.one_of) {
      for (size_t i = 0; i < merged.size(); ++i)
        for (size_t j = i + 1; j < merged.size(); ++j) {
          if (effective_types(merged[i]) == 0 || effective_types(merged[j]) == 0) continue;
          if (!reader_.disjoint(merged[i], merged[j], depth + 1))
            return make_error("json_schema: unsupported keyword 'oneOf' at ", where(g.ptr),
                              ": branches ", i, " and ", j,
                              " may both match (supported: branches that differ in type, in "
                              "constant values, or in a required property's values)");
        }
    }
    std::vector<Expr> alts;
    for (size_t i = 0; i < merged.size(); ++i) {
      Result<Expr> e =
          bare ? compile_sub(g.branches[i], depth + 1) : compile(std::move(merged[i]), depth + 1);
      if (!e.ok()) return e;
      alts.push_back(std::move(e).value());
    }
    return alt_of(std::move(alts));
  }

  Result<Expr> compile_number(const Constraints& c) {
    uint8_t t = c.types & kNumber;
    if (c.multiple_of > 1) {
      if (c.lo || c.hi)
        return make_error("json_schema: unsupported keyword 'multipleOf' at ", where(c.ptr),
                          " (together with minimum/maximum)");
      if (c.multiple_of > 1000)
        return make_error("json_schema: unsupported keyword 'multipleOf' at ", where(c.ptr),
                          " (divisors above 1000)");
      return json_lex::multiple_of(c.multiple_of,
                                   [this](Expr e) { return add_rule("mul", std::move(e)); });
    }
    if (!c.lo && !c.hi) {
      if (t == kNumber) return common("number");
      if (t == kInt) return common("integer");
      return json_lex::any_non_integer();
    }
    if (t == kNonInt)
      return make_error("json_schema: unsupported keyword 'not' at ", where(c.ptr),
                        " (non-integer numbers with bounds)");
    return json_lex::number_range(c.lo, c.hi, t == kInt);
  }

  Result<Expr> compile_string(const Constraints& c) {
    if (c.max_len >= 0 && c.min_len > c.max_len) return never();
    if (c.patterns.empty()) {
      if (is_trivial_string(c)) return common("string");
      return seq_of({lit("\""), repeat_range(common("char"), c.min_len, c.max_len), lit("\"")});
    }
    const auto& [pattern, pptr] = c.patterns[0];
    if (c.patterns.size() > 1)
      return make_error("json_schema: unsupported keyword 'pattern' at ",
                        where(c.patterns[1].second), " (several patterns on one string)");
    auto re = regex_to_expr(pattern, RegexOptions{.search = true});
    if (!re.ok())
      return make_error("json_schema: unsupported keyword 'pattern' at ", where(pptr), ": ",
                        re.message());
    if (c.min_len > 0 || c.max_len >= 0) {
      auto lens = json_lex::length_range(*re);
      bool implied = lens.ok() && lens->first >= c.min_len &&
                     (c.max_len < 0 || (lens->second >= 0 && lens->second <= c.max_len));
      if (!implied)
        return make_error("json_schema: unsupported keyword '",
                          c.max_len >= 0 ? "maxLength" : "minLength", "' at ", where(c.ptr),
                          " (together with a pattern that does not imply it)");
    }
    Expr high = common("char-high");
    SLUICE_ASSIGN_OR_RETURN(Expr spelled, json_lex::spell_regex(*re, &high));
    if (c.check != StringCheck::kNone) {  // the matcher checks the contents' text
      std::string name = add_rule("checked", std::move(spelled));
      spec_.checked.push_back({name, c.check});
      return seq_of({lit("\""), Expr::ref(std::move(name)), lit("\"")});
    }
    return seq_of({lit("\""), std::move(spelled), lit("\"")});
  }

  Result<Expr> compile_array(const Constraints& c, int depth) {
    int64_t min = c.min_items, max = c.max_items;
    if (max >= 0 && min > max) return never();
    if (c.unique_items && (max < 0 || max > 1)) return compile_unique(c, depth);
    if (is_trivial_array(c)) return common("array");
    if (!c.contains.empty()) return compile_contains(c, depth);
    int64_t k = int64_t(c.prefix.size());
    if (max >= 0) k = std::min(k, max);
    std::vector<Expr> elems;
    for (int64_t i = 0; i < k; ++i) {
      SLUICE_ASSIGN_OR_RETURN(Expr e, compile_conj(c.prefix[size_t(i)], depth));
      elems.push_back(std::move(e));
    }
    Expr item = never();
    if (max < 0 || max > k) {
      SLUICE_ASSIGN_OR_RETURN(item, compile_conj(extra_items(c), depth));
    }
    // tail(i): what may follow once i elements are written (i >= 1).
    Expr tail = is_never(item) ? (min <= k ? Expr::empty() : never())
                               : repeat_range(seq_of({sep(), item}), std::max<int64_t>(0, min - k),
                                              max < 0 ? -1 : max - k);
    for (int64_t i = k - 1; i >= 1; --i) {
      tail = alt_of({i >= min ? Expr::empty() : never(),
                     seq_of({sep(), std::move(elems[size_t(i)]), std::move(tail)})});
      if (k > 8 && !is_never(tail) && tail.kind != Expr::Kind::kEmpty)
        tail = Expr::ref(add_rule("items", std::move(tail)));
    }
    Expr first = never();
    if (k >= 1) {
      first = seq_of({std::move(elems[0]), std::move(tail)});
    } else if (!is_never(item) && max != 0) {
      first = seq_of({item, repeat_range(seq_of({sep(), item}), std::max<int64_t>(0, min - 1),
                                         max < 0 ? -1 : max - 1)});
    }
    Expr body = seq_of(
        {lit("["), ws(),
         alt_of({min == 0 ? lit("]") : never(), seq_of({std::move(first), ws(), lit("]")})})});
    if (is_never(body)) return never();
    return Expr::ref(add_rule("array", std::move(body)));
  }

  // contains: lists whose element count valid under S lies in [min, max]. Over "hit" (items
  // AND S) and "other" elements: other (sep other)* ((sep hit)(sep other)*){min,max} | hit ...
  // Without maxContains "other" is any item (hits too): at least min hits, exactly. With it,
  // "other" must be items AND NOT S, so S must be a type set.
  // String content (no quotes) whose value is none of `names`.
  Expr not_in(const std::vector<std::u32string>& names) {
    Expr high = common("char-high");
    return json_lex::spell_not_in(names, common("chars"), &high);
  }

  Result<Expr> compile_contains(const Constraints& c, int depth) {
    const Contains& ct = c.contains[0];
    auto refuse = [&](const char* why) {
      return make_error("json_schema: unsupported keyword 'contains' at ", where(ct.ptr), why);
    };
    if (c.contains.size() > 1) return refuse(" (several contains on one array)");
    if (!c.prefix.empty()) return refuse(" (with prefixItems)");
    if (c.max_items >= 0 || c.min_items > ct.min) return refuse(" (with minItems/maxItems)");
    if (ct.max >= 0 && ct.max < ct.min) return never();
    const Conj items = extra_items(c);
    Conj hit_conj = items;
    hit_conj.push_back(ct.s);
    SLUICE_ASSIGN_OR_RETURN(Expr hit, compile_conj(hit_conj, depth));
    Expr other;
    if (ct.max < 0) {
      SLUICE_ASSIGN_OR_RETURN(other, compile_conj(items, depth));
    } else {
      SLUICE_ASSIGN_OR_RETURN(Constraints s, reader_.read(ct.s, depth + 1));
      if (!is_pure_type(s)) return refuse(" (maxContains with a schema other than a type set)");
      SLUICE_ASSIGN_OR_RETURN(Constraints o, reader_.read_conj(items, depth + 1));
      o.types &= uint8_t(~s.types) & kAllTypes;
      SLUICE_ASSIGN_OR_RETURN(other, compile(std::move(o), depth + 1));
    }
    Expr others = Expr::star(seq_of({sep(), other}));
    Expr group = seq_of({sep(), hit, others});  // one more hit and the others after it
    std::vector<Expr> lists;
    lists.push_back(seq_of({other, others, repeat_range(group, ct.min, ct.max)}));
    if (ct.max != 0)
      lists.push_back(seq_of(
          {hit, others,
           repeat_range(group, std::max<int64_t>(ct.min - 1, 0), ct.max < 0 ? -1 : ct.max - 1)}));
    Expr body = seq_of({lit("["), ws(),
                        alt_of({ct.min == 0 ? lit("]") : never(),
                                seq_of({alt_of(std::move(lists)), ws(), lit("]")})})});
    if (is_never(body)) return never();
    return Expr::ref(add_rule("array", std::move(body)));
  }

  // uniqueItems over a small finite set of item values (enum/const items, booleans): the
  // order-free automaton of the objects, one state per subset of values used. Other item
  // sets would need the whole history of an unbounded array.
  Result<Expr> compile_unique(const Constraints& c, int depth) {
    auto refuse = [&](const char* why) {
      return make_error("json_schema: unsupported keyword 'uniqueItems' at ", where(c.unique_ptr),
                        why);
    };
    if (!c.prefix.empty() || !c.contains.empty()) return refuse(" (with prefixItems/contains)");
    SLUICE_ASSIGN_OR_RETURN(Constraints items, reader_.read_conj(extra_items(c), depth + 1));
    static const ojson kBools[] = {false, true, nullptr};
    std::vector<const ojson*> candidates;
    if (items.enums) {
      candidates = *items.enums;
    } else if ((effective_types(items) & ~(kBool | kNull)) == 0) {
      for (const ojson& b : kBools) candidates.push_back(&b);
    } else {
      return refuse(" (items other than a small enum)");
    }
    ObjectPlan plan;
    plan.open = "[";
    plan.close = "]";
    plan.min_props = c.min_items;
    plan.max_props = c.max_items;
    plan.ptr = c.ptr;
    std::vector<const ojson*> values;
    for (const ojson* v : candidates) {
      bool dup = false;
      for (const ojson* w : values) dup |= json_equal(*v, *w);
      if (dup) continue;
      SLUICE_ASSIGN_OR_RETURN(bool ok, reader_.validate(*v, items, depth + 1));
      if (!ok) continue;
      values.push_back(v);
      SLUICE_ASSIGN_OR_RETURN(Expr e, literal(*v, 0));
      plan.members.push_back({v->dump(), std::move(e), false});
    }
    if (int(values.size()) > opts_.max_order_free_properties)
      return refuse(" (more distinct item values than max_order_free_properties)");
    return object_expr(std::move(plan));
  }

  // A key the object automaton tracks (declared, required or named by dependentRequired).
  struct Member {
    std::string name;
    Expr entry;  // "key" ws ":" ws value; never when the key may not appear
    bool required = false;
  };
  struct ObjectPlan {
    std::vector<Member> members;
    Expr extra = never();  // a member with any other key; never when none allowed
    int64_t min_props = 0, max_props = -1;
    std::vector<std::pair<int, std::vector<int>>> deps;  // member -> members it requires
    std::string ptr;
    const char* open = "{";  // "[" for a uniqueItems array (members are element values)
    const char* close = "}";
  };

  Result<Expr> compile_object(const Constraints& c, int depth) {
    if (c.max_props >= 0 && c.min_props > c.max_props) return never();
    if (is_trivial_object(c)) return common("object");
    ObjectPlan plan;
    plan.min_props = c.min_props;
    plan.max_props = c.max_props;
    plan.ptr = c.ptr;
    std::vector<std::string> names;
    auto track = [&](const std::string& n) {
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    };
    for (const auto& [k, conj] : c.props) track(k);
    for (const auto& r : c.required) track(r);
    for (const auto& [k, deps] : c.dep_required) {
      track(k);
      for (const auto& d : deps) track(d);
    }
    Expr extra_value = never();
    if (!c.no_keys) {
      SLUICE_ASSIGN_OR_RETURN(extra_value, compile_conj(extra_props(c), depth));
    }
    // propertyNames: every key is a string valid under it.
    std::optional<Constraints> key_c;
    if (!c.prop_names.empty()) {
      SLUICE_ASSIGN_OR_RETURN(Constraints pn, reader_.read_conj(c.prop_names, depth + 1));
      pn.types &= kString;
      if (!pn.groups.empty())
        return make_error("json_schema: unsupported keyword 'propertyNames' at ", where(c.ptr),
                          " (with anyOf/oneOf)");
      SLUICE_RETURN_IF_ERROR(reader_.check_refused(pn, kString));
      key_c = std::move(pn);
    }
    std::vector<std::u32string> forbidden;
    for (const std::string& n : names) {
      Member m;
      m.name = n;
      m.required = std::find(c.required.begin(), c.required.end(), n) != c.required.end();
      const Conj* conj = nullptr;
      for (const auto& [k, pc] : c.props)
        if (k == n) conj = &pc;
      Expr value = never();
      bool key_ok = !c.no_keys;
      if (key_ok && key_c) {
        SLUICE_ASSIGN_OR_RETURN(key_ok, reader_.validate(ojson(n), *key_c, depth + 1));
      }
      if (!key_ok) {
        value = never();
      } else if (conj) {
        SLUICE_ASSIGN_OR_RETURN(value, compile_conj(*conj, depth));
      } else {
        value = extra_value;
      }
      if (is_never(value) && m.required) return never();
      auto key = json_lex::spell_string(n);
      if (!key.ok())
        return make_error("json_schema: property name at ", where(c.ptr), ": ", key.message());
      SLUICE_ASSIGN_OR_RETURN(std::u32string cps, json_lex::decode(n));
      forbidden.push_back(std::move(cps));
      m.entry = seq_of(
          {lit("\""), std::move(key).value(), lit("\""), ws(), lit(":"), ws(), std::move(value)});
      plan.members.push_back(std::move(m));
    }
    for (const auto& [k, deps] : c.dep_required) {
      auto index = [&](const std::string& n) {
        return int(std::find(names.begin(), names.end(), n) - names.begin());
      };
      std::vector<int> d;
      for (const auto& x : deps) d.push_back(index(x));
      plan.deps.push_back({index(k), std::move(d)});
    }
    if (!is_never(extra_value)) {
      // The other keys: strings not tracked (and valid under propertyNames).
      Expr key = never();
      if (!key_c) {
        key = seq_of({lit("\""), not_in(forbidden), lit("\"")});
      } else if (key_c->types == 0) {
        key = never();
      } else if (key_c->enums) {
        std::vector<Expr> alts;
        for (const ojson* e : *key_c->enums) {
          if (!e->is_string() ||
              std::find(names.begin(), names.end(), e->get<std::string>()) != names.end())
            continue;
          SLUICE_ASSIGN_OR_RETURN(bool ok, reader_.validate(*e, *key_c, depth + 1));
          if (!ok) continue;
          SLUICE_ASSIGN_OR_RETURN(Expr k, json_lex::spell_string(e->get<std::string>()));
          alts.push_back(seq_of({lit("\""), std::move(k), lit("\"")}));
        }
        key = alt_of(std::move(alts));
      } else if (names.empty()) {
        SLUICE_ASSIGN_OR_RETURN(key, compile_string(*key_c));
      } else if (is_trivial_string(*key_c)) {
        key = seq_of({lit("\""), not_in(forbidden), lit("\"")});
      } else {
        return make_error("json_schema: unsupported keyword 'propertyNames' at ", where(c.ptr),
                          " (a pattern or length limit next to declared property names)");
      }
      plan.extra = seq_of({std::move(key), ws(), lit(":"), ws(), std::move(extra_value)});
    }
    return object_expr(std::move(plan));
  }

  // The key automaton. Order-free: a state is (keys seen, other keys counted up to what
  // min/maxProperties need, nothing written yet?); ordered: (next member index, count,
  // nothing written yet?). One rule per live state; states that cannot reach "}" are dropped.
  Result<Expr> object_expr(ObjectPlan p) {
    const int n = int(p.members.size());
    const bool order_free =
        opts_.any_property_order && n <= opts_.max_order_free_properties && n <= 16;
    // Entries appear in many states: a large one becomes a rule instead of a copy per state.
    auto share = [&](Expr& e) {
      if (!is_never(e) && count_nodes(e) > 24) e = Expr::ref(add_rule("member", std::move(e)));
    };
    for (Member& m : p.members) share(m.entry);
    share(p.extra);
    if (!p.deps.empty() && !order_free)
      return make_error("json_schema: unsupported keyword 'dependentRequired' at ", where(p.ptr),
                        " (with more than ", opts_.max_order_free_properties,
                        " tracked properties)");
    const bool has_extra = !is_never(p.extra);
    const int64_t cap = p.max_props >= 0 ? p.max_props : p.min_props;
    struct State {
      uint32_t set;   // order-free: keys seen; ordered: next member index
      int64_t count;  // order-free: other keys; ordered: all keys (both capped at `cap`)
      bool first;
      auto operator<=>(const State&) const = default;
    };
    struct Edge {
      Expr label;
      int target;  // -1: the object ends
    };
    std::map<State, int> ids;
    std::vector<State> states;
    std::vector<std::vector<Edge>> edges;
    auto id_of = [&](State s) -> int {
      auto [it, fresh] = ids.try_emplace(s, int(states.size()));
      if (fresh) {
        states.push_back(s);
        edges.emplace_back();
      }
      return it->second;
    };
    uint32_t required = 0;
    for (int i = 0; i < n; ++i)
      if (p.members[size_t(i)].required) required |= 1u << i;
    id_of({0, 0, true});
    for (size_t si = 0; si < states.size(); ++si) {
      if (int64_t(states.size()) > kMaxObjectStates)
        return make_error("json_schema: the object at ", where(p.ptr),
                          " needs too many grammar states (minProperties/maxProperties with "
                          "many properties)");
      State s = states[si];
      Expr prefix = s.first ? Expr::empty() : sep();
      Expr close = s.first ? lit(p.close) : seq_of({ws(), lit(p.close)});
      std::vector<Edge> out;
      if (order_free) {
        int64_t count = std::popcount(s.set) + s.count;
        bool can_add = p.max_props < 0 || count < p.max_props;
        bool can_end = (s.set & required) == required && count >= p.min_props;
        for (const auto& [k, deps] : p.deps)
          if (s.set >> k & 1)
            for (int d : deps) can_end &= bool(s.set >> d & 1);
        if (can_end) out.push_back({close, -1});
        for (int i = 0; i < n && can_add; ++i) {
          if ((s.set >> i & 1) || is_never(p.members[size_t(i)].entry)) continue;
          out.push_back({seq_of({prefix, p.members[size_t(i)].entry}),
                         id_of({s.set | 1u << i, s.count, false})});
        }
        if (has_extra && can_add)
          out.push_back({seq_of({prefix, p.extra}),
                         id_of({s.set, std::min(s.count + 1, std::max<int64_t>(cap, 0)), false})});
      } else {
        bool can_add = p.max_props < 0 || s.count < p.max_props;
        int64_t next = std::min(s.count + 1, cap);
        if (int(s.set) < n) {
          const Member& m = p.members[s.set];
          if (can_add && !is_never(m.entry))
            out.push_back({seq_of({prefix, m.entry}), id_of({s.set + 1, next, false})});
          if (!m.required) out.push_back({Expr::empty(), id_of({s.set + 1, s.count, s.first})});
        } else {
          if (s.count >= p.min_props) out.push_back({close, -1});
          if (has_extra && can_add)
            out.push_back({seq_of({prefix, p.extra}), id_of({s.set, next, false})});
        }
      }
      edges[si] = std::move(out);
    }
    // Liveness: a state is live when "}" is reachable from it.
    std::vector<bool> live(states.size());
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < states.size(); ++i) {
        if (live[i]) continue;
        for (const Edge& e : edges[i])
          if (e.target < 0 || live[size_t(e.target)]) {
            live[i] = changed = true;
            break;
          }
      }
    }
    if (!live[0]) return never();
    std::vector<std::string> names(states.size());
    for (size_t i = 0; i < states.size(); ++i)
      if (live[i]) names[i] = "obj-" + std::to_string(n_rules_++);
    for (size_t i = 0; i < states.size(); ++i) {
      if (!live[i]) continue;
      std::vector<Expr> alts;
      for (Edge& e : edges[i]) {
        if (e.target >= 0 && !live[size_t(e.target)]) continue;
        alts.push_back(seq_of({std::move(e.label),
                               e.target < 0 ? Expr::empty() : Expr::ref(names[size_t(e.target)])}));
      }
      Expr body = alt_of(std::move(alts));
      nodes_ += count_nodes(body);
      spec_.rules.push_back({names[i], std::move(body)});
    }
    return seq_of({lit(p.open), ws(), Expr::ref(names[0])});
  }

  // Every spelling of the JSON value v (equal values: 1 == 1.0, keys in any order up to
  // max_order_free_properties).
  Result<Expr> literal(const ojson& v, int depth) {
    if (depth > kMaxLiteralDepth)
      return make_error("json_schema: const/enum value nested deeper than ", kMaxLiteralDepth);
    switch (v.type()) {
      case ojson::value_t::null:
      case ojson::value_t::boolean:
        return lit(v.dump());
      case ojson::value_t::number_integer:
      case ojson::value_t::number_unsigned:
      case ojson::value_t::number_float: {
        SLUICE_ASSIGN_OR_RETURN(Decimal d, json_lex::parse_decimal(v.dump()));
        return alt_of({json_lex::number_range(Bound{d, false}, Bound{d, false}, false),
                       json_lex::scientific(d)});
      }
      case ojson::value_t::string: {
        SLUICE_ASSIGN_OR_RETURN(Expr s, json_lex::spell_string(v.get_ref<const std::string&>()));
        return seq_of({lit("\""), std::move(s), lit("\"")});
      }
      case ojson::value_t::array: {
        std::vector<Expr> parts = {lit("["), ws()};
        for (size_t i = 0; i < v.size(); ++i) {
          if (i > 0) parts.push_back(sep());
          SLUICE_ASSIGN_OR_RETURN(Expr e, literal(v[i], depth + 1));
          parts.push_back(std::move(e));
        }
        if (!v.empty()) parts.push_back(ws());
        parts.push_back(lit("]"));
        return seq_of(std::move(parts));
      }
      case ojson::value_t::object: {
        ObjectPlan plan;
        for (const auto& [k, x] : v.items()) {
          SLUICE_ASSIGN_OR_RETURN(Expr key, json_lex::spell_string(k));
          SLUICE_ASSIGN_OR_RETURN(Expr val, literal(x, depth + 1));
          plan.members.push_back(
              {k,
               seq_of({lit("\""), std::move(key), lit("\""), ws(), lit(":"), ws(), std::move(val)}),
               true});
        }
        return object_expr(plan);
      }
      default:
        return make_error("json_schema: unsupported const/enum value ", v.dump());
    }
  }

  struct RefRule {
    std::string name;
    bool done = false, never = false;
    bool used_open = false;  // referenced while being compiled (recursion)
  };

  json_ir::Reader reader_;
  JsonSchemaOptions opts_;
  GrammarSpec spec_;
  std::set<std::string> common_;
  std::map<std::string, RefRule> refs_;  // by target pointer
  int64_t n_rules_ = 0, nodes_ = 0, work_ = 0;
};

// nlohmann::json -> ordered_json without recursion limits surprises: depth-checked.
Result<nlohmann::ordered_json> to_ordered(const nlohmann::json& j, int depth) {
  if (depth > kMaxJsonDepth)
    return make_error("json_schema: schema nested deeper than ", kMaxJsonDepth, " levels");
  if (j.is_object()) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (const auto& [k, v] : j.items()) {
      SLUICE_ASSIGN_OR_RETURN(nlohmann::ordered_json x, to_ordered(v, depth + 1));
      o[k] = std::move(x);
    }
    return o;
  }
  if (j.is_array()) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& v : j) {
      SLUICE_ASSIGN_OR_RETURN(nlohmann::ordered_json x, to_ordered(v, depth + 1));
      a.push_back(std::move(x));
    }
    return a;
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return nlohmann::ordered_json(nullptr);
    case nlohmann::json::value_t::boolean:
      return nlohmann::ordered_json(j.get<bool>());
    case nlohmann::json::value_t::string:
      return nlohmann::ordered_json(j.get<std::string>());
    case nlohmann::json::value_t::number_integer:
      return nlohmann::ordered_json(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return nlohmann::ordered_json(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return nlohmann::ordered_json(j.get<double>());
    default:
      return make_error("json_schema: unsupported JSON value in the schema");
  }
}

}  // namespace

Result<GrammarSpec> json_schema_to_grammar(const nlohmann::ordered_json& schema,
                                           const JsonSchemaOptions& opts) {
  if (!schema.is_object() && !schema.is_boolean())
    return make_error("json_schema: the schema must be an object or a boolean");
  SLUICE_RETURN_IF_ERROR(check_depth(schema, kMaxJsonDepth, "schema"));
  Compiler c(schema, opts);
  return c.run();
}

Result<GrammarSpec> json_schema_to_grammar(const nlohmann::json& schema,
                                           const JsonSchemaOptions& opts) {
  SLUICE_ASSIGN_OR_RETURN(nlohmann::ordered_json o, to_ordered(schema, 0));
  return json_schema_to_grammar(o, opts);
}

GrammarSpec json_object_grammar(const JsonSchemaOptions& opts) {
  static const nlohmann::ordered_json kAny = true;
  Compiler c(kAny, opts);
  return c.object_only();
}

}  // namespace sluice::grammar
