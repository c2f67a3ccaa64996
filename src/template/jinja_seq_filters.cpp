// Jinja's built-in filters over sequences and mappings (jinja2/filters.py): sort, unique,
// select/map, join, first/last, batch/slice, ... Most return generators in Jinja; here they
// return ListKind::kGenerator lists, which print, compare and len() like generators do.
#include <algorithm>
#include <cstdlib>
#include <random>
#include <unordered_map>

#include "template/jinja_builtins.h"
#include "template/jinja_string.h"

namespace sluice::jinja {
namespace {

constexpr size_t kValueBytes = sizeof(Value);

Value str_value(std::string s, bool safe = false) {
  return Value::string(std::move(s), safe);
}
bool flag(const Value* v, bool dflt = false) {
  return v ? truthy(*v) : dflt;
}

Result<Value> f_join(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("join", args, {"d", "attribute"}, a));
  std::string sep;
  if (a[0]) {
    SLUICE_ASSIGN_OR_RETURN(sep, to_string(in, *a[0]));
  }
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  std::string out;
  for (size_t i = 0; i < seq->items.size(); ++i) {
    if (i) out += sep;
    Value item = seq->items[i];
    if (a[1] && !a[1]->is_none()) {
      SLUICE_ASSIGN_OR_RETURN(item, get_attribute_path(in, item, *a[1]));
    }
    SLUICE_RETURN_IF_ERROR(append_str(out, item, in.max_size()));
    if (out.size() > in.max_size()) return in.check_size(out.size());
  }
  SLUICE_RETURN_IF_ERROR(in.check_size(out.size()));
  return str_value(std::move(out));
}

Result<Value> f_first(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("first", args));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (seq->items.empty()) return Value::undefined("No first item, sequence was empty.");
  return seq->items.front();
}

Result<Value> f_last(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("last", args));
  if (v.is_list_kind(ListKind::kGenerator))
    return make_error("'generator' object is not reversible");
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (seq->items.empty()) return Value::undefined("No last item, sequence was empty.");
  return seq->items.back();
}

Result<Value> f_list(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("list", args));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  return Value::list(seq->items);
}

Result<Value> f_items(Interpreter&, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("items", args));
  if (v.is_undefined()) return Value::list({}, ListKind::kGenerator);
  if (!v.is_dict()) return make_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().items)
    out.push_back(Value::list({k, val}, ListKind::kTuple));
  return Value::list(std::move(out), ListKind::kGenerator);
}

Result<Value> f_reverse(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("reverse", args));
  if (v.is_string()) {
    std::vector<uint32_t> cps = utf8_decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return str_value(utf8_encode(cps.data(), cps.size()));
  }
  if (!v.is_list() && !v.is_dict() && !v.is_undefined())
    return make_error("argument must be iterable");
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  std::vector<Value> out(seq->items.rbegin(), seq->items.rend());
  bool reversible = v.is_list_kind(ListKind::kList) || v.is_list_kind(ListKind::kTuple) ||
                    v.is_dict() || v.is_undefined();
  return Value::list(std::move(out), reversible ? ListKind::kGenerator : ListKind::kList);
}

Result<Value> f_random(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("random", args));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (seq->items.empty()) return make_error("Cannot choose from an empty sequence");
  std::random_device entropy;  // like Python's random.choice: not reproducible by design
  return seq->items[std::uniform_int_distribution<size_t>(0, seq->items.size() - 1)(entropy)];
}

// ---- sequence filters ----

// Jinja's ignore_case postprocess for sort/unique/min/max keys.
Value fold_case(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return str_value(py_lower(v.as_string()));
}

Result<Value> sort_key(Interpreter& in, const Value& item, const Value* attribute,
                       bool case_sensitive) {
  if (!attribute || attribute->is_none()) return fold_case(item, case_sensitive);
  if (attribute->is_string() && attribute->as_string().find(',') != std::string::npos) {
    std::vector<Value> parts;
    std::string_view attrs = attribute->as_string();
    size_t start = 0;
    while (start <= attrs.size()) {
      size_t comma = attrs.find(',', start);
      std::string part(attrs.substr(
          start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
      SLUICE_ASSIGN_OR_RETURN(Value k, get_attribute_path(in, item, str_value(part)));
      parts.push_back(fold_case(k, case_sensitive));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return Value::list(std::move(parts));
  }
  SLUICE_ASSIGN_OR_RETURN(Value k, get_attribute_path(in, item, *attribute));
  return fold_case(k, case_sensitive);
}

// Stable sort of (key, item) pairs with Python ordering; errors surface after sorting.
// sorted(reverse=x) takes an int-like x only.
Result<bool> reverse_flag(const Value* v) {
  if (!v) return false;
  if (v->is_undefined()) return Error{v->undefined_message()};
  if (!v->is_integral())
    return make_error("'", type_name(*v), "' object cannot be interpreted as an integer");
  return v->as_int() != 0;
}

Status sort_pairs(Interpreter& in, std::vector<std::pair<Value, Value>>& pairs, bool reverse) {
  SLUICE_RETURN_IF_ERROR(in.charge(pairs.size() * 4));
  Status err;
  WorkMeter m = in.meter();
  auto cmp = [&](const std::pair<Value, Value>& x, const std::pair<Value, Value>& y) {
    if (!err.ok()) return false;
    auto r = reverse ? less_than(y.first, x.first, &m) : less_than(x.first, y.first, &m);
    if (!r.ok()) {
      err = r.status();
      return false;
    }
    return *r;
  };
  std::stable_sort(pairs.begin(), pairs.end(), cmp);
  SLUICE_RETURN_IF_ERROR(in.settle(m));
  return err;
}

Result<Value> f_sort(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("sort", args, {"reverse", "case_sensitive", "attribute"}, a));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  std::vector<std::pair<Value, Value>> pairs;
  for (const Value& item : seq->items) {
    SLUICE_ASSIGN_OR_RETURN(Value k, sort_key(in, item, a[2], flag(a[1])));
    // Jinja sorts by a list of keys, so equal items never need `<` ([None, None] sorts).
    if (!k.is_list_kind(ListKind::kList)) k = Value::list({std::move(k)});
    pairs.emplace_back(std::move(k), item);
  }
  SLUICE_ASSIGN_OR_RETURN(bool reverse, reverse_flag(a[0]));
  SLUICE_RETURN_IF_ERROR(sort_pairs(in, pairs, reverse));
  std::vector<Value> out;
  for (auto& p : pairs) out.push_back(std::move(p.second));
  return Value::list(std::move(out));
}

Result<Value> f_dictsort(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("dictsort", args, {"case_sensitive", "by", "reverse"}, a));
  if (!v.is_dict()) return make_error("dictsort() expects a mapping");
  bool by_value = a[1] && a[1]->is_string() && a[1]->as_string() == "value";
  if (a[1] && !(a[1]->is_string() && (a[1]->as_string() == "key" || by_value))) {
    return make_error("You can only sort by either \"key\" or \"value\"");
  }
  std::vector<std::pair<Value, Value>> pairs;
  for (const auto& [k, val] : v.as_dict().items) {
    pairs.emplace_back(fold_case(by_value ? val : k, flag(a[0])),
                       Value::list({k, val}, ListKind::kTuple));
  }
  SLUICE_ASSIGN_OR_RETURN(bool reverse, reverse_flag(a[2]));
  SLUICE_RETURN_IF_ERROR(sort_pairs(in, pairs, reverse));
  std::vector<Value> out;
  for (auto& p : pairs) out.push_back(std::move(p.second));
  return Value::list(std::move(out));
}

Result<Value> f_unique(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("unique", args, {"case_sensitive", "attribute"}, a));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  std::unordered_multimap<size_t, Value> seen;  // hash -> keys seen
  std::vector<Value> out;
  WorkMeter m = in.meter();
  for (const Value& item : seq->items) {
    SLUICE_ASSIGN_OR_RETURN(Value k, sort_key(in, item, a[1], flag(a[0])));
    SLUICE_ASSIGN_OR_RETURN(size_t h, hash_value(k, &m));
    auto [first, last] = seen.equal_range(h);
    bool dup = std::any_of(first, last, [&](const auto& s) { return equals(s.second, k, &m); });
    SLUICE_RETURN_IF_ERROR(in.settle(m));
    m = in.meter();
    if (dup) continue;
    seen.emplace(h, std::move(k));
    out.push_back(item);
  }
  return Value::list(std::move(out), ListKind::kGenerator);
}

Result<Value> min_max(Interpreter& in, const Value& v, CallArgs& args, bool want_max) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(
      bind_args(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}, a));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (seq->items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  SLUICE_ASSIGN_OR_RETURN(Value best_key, sort_key(in, seq->items[0], a[1], flag(a[0])));
  for (size_t i = 1; i < seq->items.size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(Value k, sort_key(in, seq->items[i], a[1], flag(a[0])));
    WorkMeter m = in.meter();
    auto better_r = want_max ? less_than(best_key, k, &m) : less_than(k, best_key, &m);
    SLUICE_RETURN_IF_ERROR(in.settle(m));
    SLUICE_ASSIGN_OR_RETURN(bool better, std::move(better_r));
    if (better) best = i, best_key = std::move(k);
  }
  return seq->items[best];
}
Result<Value> f_min(Interpreter& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, false);
}
Result<Value> f_max(Interpreter& in, const Value& v, CallArgs& a) {
  return min_max(in, v, a, true);
}

Result<Value> f_sum(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("sum", args, {"attribute", "start"}, a));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  Value total = a[1] ? *a[1] : Value::integer(0);
  for (const Value& item : seq->items) {
    Value x = item;
    if (a[0] && !a[0]->is_none()) {
      SLUICE_ASSIGN_OR_RETURN(x, get_attribute_path(in, item, *a[0]));
    }
    if (total.is_string()) return make_error("sum() can't sum strings [use ''.join(seq) instead]");
    SLUICE_ASSIGN_OR_RETURN(total, binary_op(in, BinaryOp::kAdd, total, x));
  }
  return total;
}

// select/reject/selectattr/rejectattr: keep items whose (attribute's) test result == keep.
Result<Value> select_or_reject(Interpreter& in, const Value& v, CallArgs& args, bool keep,
                               bool by_attr) {
  std::vector<Value> out;
  if (!truthy(v) && !v.is_list_kind(ListKind::kGenerator))
    return Value::list(std::move(out), ListKind::kGenerator);
  size_t off = 0;
  Value attribute;
  if (by_attr) {
    if (args.args.empty()) return make_error("Missing parameter for attribute name");
    attribute = args.args[0];
    off = 1;
  }
  TestFn test = nullptr;
  CallArgs test_args;
  if (args.args.size() > off) {
    if (!args.args[off].is_string()) return make_error("test name must be a string");
    test = find_test(args.args[off].as_string());
    if (!test) return make_error("No test named '", args.args[off].as_string(), "'.");
    test_args.args.assign(args.args.begin() + static_cast<ptrdiff_t>(off + 1), args.args.end());
    test_args.kwargs = args.kwargs;
  }
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  for (const Value& item : seq->items) {
    SLUICE_RETURN_IF_ERROR(in.charge(1));
    Value x = item;
    if (by_attr) {
      SLUICE_ASSIGN_OR_RETURN(x, get_attribute_path(in, item, attribute));
    }
    bool r = false;
    if (test) {
      CallArgs ta = test_args;
      SLUICE_ASSIGN_OR_RETURN(r, test(in, x, ta));
    } else {
      r = truthy(x);
    }
    if (r == keep) out.push_back(item);
  }
  return Value::list(std::move(out), ListKind::kGenerator);
}
Result<Value> f_select(Interpreter& in, const Value& v, CallArgs& a) {
  return select_or_reject(in, v, a, true, false);
}
Result<Value> f_reject(Interpreter& in, const Value& v, CallArgs& a) {
  return select_or_reject(in, v, a, false, false);
}
Result<Value> f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_or_reject(in, v, a, true, true);
}
Result<Value> f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_or_reject(in, v, a, false, true);
}

Result<Value> f_map(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (!truthy(v) && !v.is_list_kind(ListKind::kGenerator))
    return Value::list(std::move(out), ListKind::kGenerator);
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (args.args.empty() && args.kwarg("attribute")) {
    Value attribute = *args.kwarg("attribute");
    Value dflt = args.kwarg("default") ? *args.kwarg("default") : Value();
    for (const auto& [k, _] : args.kwargs) {
      if (k != "attribute" && k != "default")
        return make_error("Unexpected keyword argument '", k, "'");
    }
    for (const Value& item : seq->items) {
      SLUICE_ASSIGN_OR_RETURN(Value x, get_attribute_path(in, item, attribute));
      if (x.is_undefined() && args.kwarg("default")) x = dflt;
      out.push_back(std::move(x));
    }
    return Value::list(std::move(out), ListKind::kGenerator);
  }
  if (args.args.empty() || !args.args[0].is_string())
    return make_error("map requires a filter argument");
  FilterFn fn = find_filter(args.args[0].as_string());
  if (!fn) return make_error("No filter named '", args.args[0].as_string(), "'.");
  CallArgs rest;
  rest.args.assign(args.args.begin() + 1, args.args.end());
  rest.kwargs = args.kwargs;
  for (const Value& item : seq->items) {
    SLUICE_RETURN_IF_ERROR(in.charge(1));
    CallArgs a = rest;
    SLUICE_ASSIGN_OR_RETURN(Value x, fn(in, item, a));
    out.push_back(std::move(x));
  }
  return Value::list(std::move(out), ListKind::kGenerator);
}

Result<Value> batch_or_slice(Interpreter& in, const Value& v, CallArgs& args, bool is_slice) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(is_slice ? "slice" : "batch", args,
                                   {is_slice ? "slices" : "linecount", "fill_with"}, a));
  if (!a[0]) return make_error(is_slice ? "slice" : "batch", "() missing a count argument");
  SLUICE_ASSIGN_OR_RETURN(int64_t n, to_index(*a[0], "count"));
  const Value* fill = a[1] && !a[1]->is_none() ? a[1] : nullptr;
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  const auto& items = seq->items;
  std::vector<Value> out;
  if (!is_slice) {  // chunks of n; Jinja's loop emits an empty first chunk when n == 0
    std::vector<Value> chunk;
    for (const Value& item : items) {
      if (static_cast<int64_t>(chunk.size()) == n)
        out.push_back(Value::list(std::move(chunk))), chunk.clear();
      chunk.push_back(item);
    }
    if (!chunk.empty()) {
      if (fill && static_cast<int64_t>(chunk.size()) < n) {
        SLUICE_RETURN_IF_ERROR(in.check_size(static_cast<size_t>(n) * kValueBytes));
        chunk.resize(static_cast<size_t>(n), *fill);
      }
      out.push_back(Value::list(std::move(chunk)));
    }
    return Value::list(std::move(out), ListKind::kGenerator);
  }
  if (n == 0) return make_error("integer division or modulo by zero");
  if (n < 0) return Value::list({}, ListKind::kGenerator);
  SLUICE_RETURN_IF_ERROR(
      in.check_size(static_cast<size_t>(std::min<int64_t>(n, INT32_MAX)) * kValueBytes));
  size_t len = items.size();
  size_t per = len / static_cast<size_t>(n), extra = len % static_cast<size_t>(n), offset = 0;
  for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
    size_t start = offset + k * per;
    if (k < extra) ++offset;
    size_t end = offset + (k + 1) * per;
    std::vector<Value> chunk(items.begin() + static_cast<ptrdiff_t>(start),
                             items.begin() + static_cast<ptrdiff_t>(end));
    if (fill && k >= extra) chunk.push_back(*fill);
    out.push_back(Value::list(std::move(chunk)));
  }
  return Value::list(std::move(out), ListKind::kGenerator);
}
Result<Value> f_batch(Interpreter& in, const Value& v, CallArgs& a) {
  return batch_or_slice(in, v, a, false);
}
Result<Value> f_slice(Interpreter& in, const Value& v, CallArgs& a) {
  return batch_or_slice(in, v, a, true);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kSequenceFilters[] = {
    {"batch", f_batch},
    {"dictsort", f_dictsort},
    {"first", f_first},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"list", f_list},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"random", f_random},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"reverse", f_reverse},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"sum", f_sum},
    {"unique", f_unique},
};

}  // namespace

FilterFn find_sequence_filter(std::string_view name) {
  for (const FilterEntry& e : kSequenceFilters) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

Result<Value> get_attribute_path(Interpreter& in, const Value& obj, const Value& path) {
  if (!path.is_string()) return get_item(in, obj, path);
  Value cur = obj;
  std::string_view p = path.as_string();
  size_t start = 0;
  while (true) {
    size_t dot = p.find('.', start);
    std::string_view part =
        p.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    Value key = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos
                    ? Value::integer(std::strtoll(std::string(part).c_str(), nullptr, 10))
                    : str_value(std::string(part));
    SLUICE_ASSIGN_OR_RETURN(cur, get_item(in, cur, key));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return cur;
}

}  // namespace sluice::jinja
