// Python methods of str/dict/list values, loop/cycler methods, and the global functions
// (range, dict, namespace, cycler, joiner, raise_exception, strftime_now).
#include <algorithm>
#include <array>
#include <ctime>

#include "template/jinja_builtins.h"
#include "template/jinja_string.h"

namespace sluice::jinja {
namespace {

constexpr std::array<std::string_view, 47> kStrMethods = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
constexpr std::array<std::string_view, 11> kDictMethods = {
    "clear", "copy",    "fromkeys",   "get",    "items", "keys",
    "pop",   "popitem", "setdefault", "update", "values"};
constexpr std::array<std::string_view, 5> kDictUnsafe = {"clear", "pop", "popitem", "setdefault",
                                                         "update"};
constexpr std::array<std::string_view, 11> kListMethods = {"append", "clear",   "copy",   "count",
                                                           "extend", "index",   "insert", "pop",
                                                           "remove", "reverse", "sort"};
constexpr std::array<std::string_view, 8> kListUnsafe = {"append", "clear",  "extend",  "insert",
                                                         "pop",    "remove", "reverse", "sort"};

template <size_t N>
bool among(const std::array<std::string_view, N>& set, std::string_view name) {
  return std::find(set.begin(), set.end(), name) != set.end();
}

Result<std::string> str_arg(const Value* v, std::string_view fn, const char* what = "argument") {
  if (!v || !v->is_string()) {
    return make_error(fn, "() ", what, " must be str, not ",
                      v ? type_name(*v) : std::string("nothing"));
  }
  return v->as_string();
}

// Byte offset of code point index `i` (Python slice semantics for negatives and clamping).
size_t cp_offset(std::string_view s, int64_t i) {
  int64_t n = static_cast<int64_t>(utf8_length(s));
  if (i < 0) i = std::max<int64_t>(0, i + n);
  if (i >= n) return s.size();
  if (is_ascii(s)) return static_cast<size_t>(i);
  size_t pos = 0;
  for (int64_t k = 0; k < i; ++k) utf8_next(s, pos);
  return pos;
}

int64_t cp_index(std::string_view s, size_t byte_offset) {
  return static_cast<int64_t>(utf8_length(s.substr(0, byte_offset)));
}

// The [start:end] window that find/count/startswith take.
Result<std::pair<size_t, size_t>> window(std::string_view s, const Value* start, const Value* end) {
  size_t b = 0, e = s.size();
  if (start && !start->is_none()) {
    SLUICE_ASSIGN_OR_RETURN(int64_t i, to_index(*start, "slice indices"));
    b = cp_offset(s, i);
  }
  if (end && !end->is_none()) {
    SLUICE_ASSIGN_OR_RETURN(int64_t i, to_index(*end, "slice indices"));
    e = cp_offset(s, i);
  }
  return std::make_pair(b, std::max(b, e));
}

// str.split()/rsplit() without a separator, as CPython does it: runs of whitespace separate,
// and once `maxsplit` pieces are cut the remainder is kept whole (minus the whitespace run
// at the cut), so ' a b c '.split(None, 1) == ['a', 'b c '].
std::vector<Value> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<size_t> offs;  // byte offset of each code point, plus the end
  for (size_t i = 0; i < s.size();) {
    offs.push_back(i);
    utf8_next(s, i);
  }
  offs.push_back(s.size());
  auto piece = [&](size_t b, size_t e) {
    return Value::string(std::string(s.substr(offs[b], offs[e] - offs[b])));
  };
  const int64_t n = static_cast<int64_t>(cps.size());
  int64_t budget = maxsplit < 0 ? INT64_MAX : maxsplit;
  std::vector<Value> out;
  if (!from_right) {
    int64_t i = 0;
    for (; budget > 0; --budget) {
      while (i < n && py_isspace(cps[i])) ++i;
      if (i == n) break;
      int64_t j = i++;
      while (i < n && !py_isspace(cps[i])) ++i;
      out.push_back(piece(j, i));
    }
    while (i < n && py_isspace(cps[i])) ++i;
    if (i < n) out.push_back(piece(i, n));
    return out;
  }
  int64_t i = n - 1;
  for (; budget > 0; --budget) {
    while (i >= 0 && py_isspace(cps[i])) --i;
    if (i < 0) break;
    int64_t j = i--;
    while (i >= 0 && !py_isspace(cps[i])) --i;
    out.push_back(piece(i + 1, j + 1));
  }
  while (i >= 0 && py_isspace(cps[i])) --i;
  if (i >= 0) out.push_back(piece(0, i + 1));
  std::reverse(out.begin(), out.end());
  return out;
}

Result<Value> str_split(Interpreter& in, const std::string& s, CallArgs& args, bool from_right) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(from_right ? "rsplit" : "split", args, {"sep", "maxsplit"}, a));
  int64_t maxsplit = -1;
  if (a[1]) {
    SLUICE_ASSIGN_OR_RETURN(maxsplit, to_index(*a[1], "maxsplit"));
  }
  SLUICE_RETURN_IF_ERROR(in.charge(s.size() / 16));
  if (!a[0] || a[0]->is_none()) return Value::list(split_whitespace(s, maxsplit, from_right));
  SLUICE_ASSIGN_OR_RETURN(std::string sep, str_arg(a[0], "split"));
  if (sep.empty()) return make_error("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t hit = find_substr(s, sep, pos);
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(pos, hit - pos));
      pos = hit + sep.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep.size()) break;
      size_t hit = rfind_substr(s, sep, end - sep.size());
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
      end = hit;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

Result<Value> str_pad(Interpreter& in, const std::string& s, CallArgs& args, std::string_view fn) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(fn, args, {"width", "fillchar"}, a));
  if (!a[0]) return make_error(fn, "() takes at least 1 argument (0 given)");
  SLUICE_ASSIGN_OR_RETURN(int64_t width, to_index(*a[0], "width"));
  std::string fill = " ";
  if (a[1]) {
    SLUICE_ASSIGN_OR_RETURN(fill, str_arg(a[1], fn));
    if (utf8_length(fill) != 1)
      return make_error("The fill character must be exactly one character long");
  }
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::string(s);
  SLUICE_RETURN_IF_ERROR(in.check_size(static_cast<size_t>(width) * fill.size()));
  int64_t marg = width - len;
  int64_t left = 0;
  if (fn == "center")
    left = marg / 2 + (marg & width & 1);
  else if (fn == "rjust")
    left = marg;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < marg; ++i) out += fill;
  return Value::string(std::move(out));
}

Result<Value> str_affix(const std::string& s, CallArgs& args, bool prefix) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(
      bind_args(prefix ? "startswith" : "endswith", args, {"prefix", "start", "end"}, a));
  if (!a[0])
    return make_error(prefix ? "startswith" : "endswith", "() takes at least 1 argument (0 given)");
  SLUICE_ASSIGN_OR_RETURN(auto win, window(s, a[1], a[2]));
  std::string_view w = std::string_view(s).substr(win.first, win.second - win.first);
  auto test = [&](const Value& v) -> Result<bool> {
    if (!v.is_string()) {
      return make_error(prefix ? "startswith" : "endswith",
                        " first arg must be str or a tuple of str, not ", type_name(v));
    }
    const std::string& x = v.as_string();
    if (x.size() > w.size()) return false;
    return prefix ? w.substr(0, x.size()) == x : w.substr(w.size() - x.size()) == x;
  };
  if (a[0]->is_list_kind(ListKind::kTuple)) {
    for (const Value& v : a[0]->as_list().items) {
      SLUICE_ASSIGN_OR_RETURN(bool hit, test(v));
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  SLUICE_ASSIGN_OR_RETURN(bool hit, test(*a[0]));
  return Value::boolean(hit);
}

Result<Value> str_find(const std::string& s, CallArgs& args, std::string_view fn) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(fn, args, {"sub", "start", "end"}, a));
  SLUICE_ASSIGN_OR_RETURN(std::string sub, str_arg(a[0], fn));
  SLUICE_ASSIGN_OR_RETURN(auto win, window(s, a[1], a[2]));
  std::string_view w = std::string_view(s).substr(win.first, win.second - win.first);
  if (fn == "count") {
    if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(w)) + 1);
    int64_t n = 0;
    for (size_t p = find_substr(w, sub); p != std::string_view::npos;
         p = find_substr(w, sub, p + sub.size()))
      ++n;
    return Value::integer(n);
  }
  bool reverse = fn == "rfind" || fn == "rindex";
  size_t hit = reverse ? rfind_substr(w, sub) : find_substr(w, sub);
  if (hit == std::string_view::npos) {
    if (fn == "index" || fn == "rindex") return make_error("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(cp_index(s, win.first + hit));
}

Result<Value> str_replace(Interpreter& in, const Value& self, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("replace", args, {"old", "new", "count"}, a));
  SLUICE_ASSIGN_OR_RETURN(std::string old_s, str_arg(a[0], "replace"));
  SLUICE_ASSIGN_OR_RETURN(std::string new_s, str_arg(a[1], "replace"));
  int64_t count = -1;
  if (a[2]) {
    SLUICE_ASSIGN_OR_RETURN(count, to_index(*a[2], "count"));
  }
  const std::string& s = self.as_string();
  std::string out;
  int64_t done = 0;
  if (old_s.empty()) {
    size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) {
        out += new_s;
        ++done;
      }
      if (i == s.size()) break;
      size_t start = i;
      utf8_next(s, i);
      out.append(s, start, i - start);
      if (out.size() > in.max_size()) return in.check_size(out.size());
    }
  } else {
    size_t pos = 0;
    while (count < 0 || done < count) {
      size_t hit = find_substr(s, old_s, pos);
      if (hit == std::string::npos) break;
      out.append(s, pos, hit - pos);
      out += new_s;
      pos = hit + old_s.size();
      ++done;
      if (out.size() > in.max_size()) return in.check_size(out.size());
    }
    out.append(s, pos, std::string::npos);
  }
  SLUICE_RETURN_IF_ERROR(in.check_size(out.size()));
  return Value::string(std::move(out), self.is_safe());
}

Result<Value> str_join(Interpreter& in, const Value& self, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("join", args, {"iterable"}, a));
  if (!a[0]) return make_error("join() takes exactly one argument (0 given)");
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, *a[0]));
  std::string out;
  for (size_t i = 0; i < seq->items.size(); ++i) {
    const Value& v = seq->items[i];
    if (!v.is_string()) {
      return make_error("sequence item ", i, ": expected str instance, ", type_name(v), " found");
    }
    if (i) out += self.as_string();
    out += v.as_string();
    if (out.size() > in.max_size()) return in.check_size(out.size());
  }
  SLUICE_RETURN_IF_ERROR(in.check_size(out.size()));
  return Value::string(std::move(out), self.is_safe());
}

Result<Value> str_partition(const std::string& s, CallArgs& args, bool from_right) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(from_right ? "rpartition" : "partition", args, {"sep"}, a));
  SLUICE_ASSIGN_OR_RETURN(std::string sep, str_arg(a[0], "partition"));
  if (sep.empty()) return make_error("empty separator");
  size_t hit = from_right ? rfind_substr(s, sep) : find_substr(s, sep);
  std::vector<Value> parts;
  if (hit == std::string::npos) {
    parts = from_right ? std::vector<Value>{Value::string(""), Value::string(""), Value::string(s)}
                       : std::vector<Value>{Value::string(s), Value::string(""), Value::string("")};
  } else {
    parts = {Value::string(s.substr(0, hit)), Value::string(sep),
             Value::string(s.substr(hit + sep.size()))};
  }
  return Value::list(std::move(parts), ListKind::kTuple);
}

// str.isX() predicates over code points; `cased` ones follow islower/isupper rules.
Value str_predicate(const std::string& s, std::string_view fn) {
  std::vector<uint32_t> cps = utf8_decode(s);
  if (fn == "isascii") return Value::boolean(is_ascii(s));
  if (cps.empty()) return Value::boolean(false);
  if (fn == "islower" || fn == "isupper") {
    bool any_cased = false;
    for (uint32_t c : cps) {
      bool up = py_is_cased_upper(c);
      bool lo = py_is_cased_lower(c);
      if ((fn == "islower" && up) || (fn == "isupper" && lo)) return Value::boolean(false);
      any_cased = any_cased || up || lo;
    }
    return Value::boolean(any_cased);
  }
  if (fn == "istitle") {
    bool prev_cased = false, any = false;
    for (uint32_t c : cps) {
      bool up = py_is_cased_upper(c);
      bool lo = py_is_cased_lower(c);
      if (up && prev_cased) return Value::boolean(false);
      if (lo && !prev_cased) return Value::boolean(false);
      any = any || up;
      prev_cased = up || lo;
    }
    return Value::boolean(any);
  }
  for (uint32_t c : cps) {
    bool ok = fn == "isspace"                                               ? py_isspace(c)
              : fn == "isalpha"                                             ? py_isalpha(c)
              : (fn == "isdigit" || fn == "isdecimal" || fn == "isnumeric") ? py_isdigit(c)
              : fn == "isalnum" ? (py_isalpha(c) || py_isdigit(c))
                                : false;
    if (!ok) return Value::boolean(false);
  }
  return Value::boolean(true);
}

Result<Value> call_str_method(Interpreter& in, const Value& self, std::string_view name,
                              CallArgs& args) {
  const std::string& s = self.as_string();
  bool safe = self.is_safe();
  SLUICE_RETURN_IF_ERROR(in.charge(s.size() / 64));
  auto no_args = [&]() -> Status {
    if (!args.args.empty() || !args.kwargs.empty())
      return make_error(name, "() takes no arguments");
    return {};
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    std::vector<const Value*> a;
    SLUICE_RETURN_IF_ERROR(bind_args(name, args, {"chars"}, a));
    std::string chars;
    bool has_chars = a[0] && !a[0]->is_none();
    if (has_chars) {
      SLUICE_ASSIGN_OR_RETURN(chars, str_arg(a[0], name));
    }
    StripSide side = name == "strip"    ? StripSide::kBoth
                     : name == "lstrip" ? StripSide::kLeft
                                        : StripSide::kRight;
    return Value::string(std::string(py_strip(s, has_chars ? &chars : nullptr, side)), safe);
  }
  if (name == "lower" || name == "casefold" || name == "upper" || name == "title" ||
      name == "capitalize" || name == "swapcase") {
    SLUICE_RETURN_IF_ERROR(no_args());
    std::string r = name == "upper"        ? py_upper(s)
                    : name == "title"      ? py_title(s)
                    : name == "capitalize" ? py_capitalize(s)
                    : name == "swapcase"   ? py_swapcase(s)
                                           : py_lower(s);
    return Value::string(std::move(r), safe);
  }
  if (name == "startswith" || name == "endswith") return str_affix(s, args, name == "startswith");
  if (name == "split" || name == "rsplit") return str_split(in, s, args, name == "rsplit");
  if (name == "splitlines") {
    std::vector<const Value*> a;
    SLUICE_RETURN_IF_ERROR(bind_args(name, args, {"keepends"}, a));
    std::vector<Value> out;
    for (std::string_view line : py_splitlines(s, a[0] && truthy(*a[0])))
      out.push_back(Value::string(std::string(line)));
    return Value::list(std::move(out));
  }
  if (name == "replace") return str_replace(in, self, args);
  if (name == "join") return str_join(in, self, args);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return str_find(s, args, name);
  }
  if (name == "center" || name == "ljust" || name == "rjust") return str_pad(in, s, args, name);
  if (name == "zfill") {
    std::vector<const Value*> a;
    SLUICE_RETURN_IF_ERROR(bind_args(name, args, {"width"}, a));
    if (!a[0]) return make_error("zfill() takes exactly one argument (0 given)");
    SLUICE_ASSIGN_OR_RETURN(int64_t width, to_index(*a[0], "width"));
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return Value::string(s);
    SLUICE_RETURN_IF_ERROR(in.check_size(static_cast<size_t>(width)));
    std::string out = s;
    size_t at = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    out.insert(at, static_cast<size_t>(width - len), '0');
    return Value::string(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::vector<const Value*> a;
    SLUICE_RETURN_IF_ERROR(bind_args(name, args, {"affix"}, a));
    SLUICE_ASSIGN_OR_RETURN(std::string x, str_arg(a[0], name));
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0)
      return Value::string(s.substr(x.size()), safe);
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::string(s.substr(0, s.size() - x.size()), safe);
    }
    return self;
  }
  if (name == "partition" || name == "rpartition")
    return str_partition(s, args, name == "rpartition");
  if (name == "format") {
    SLUICE_ASSIGN_OR_RETURN(std::string out, py_str_format(in, s, args));
    return Value::string(std::move(out), safe);
  }
  if (name.substr(0, 2) == "is") {
    SLUICE_RETURN_IF_ERROR(no_args());
    if (name == "isidentifier" || name == "isprintable")
      return make_error("str.", name, "() is not supported");
    return str_predicate(s, name);
  }
  return make_error("str.", name, "() is not supported");
}

Result<Value> call_dict_method(Interpreter& in, const Value& self, std::string_view name,
                               CallArgs& args) {
  const DictData& d = self.as_dict();
  if (name == "get") {
    std::vector<const Value*> a;
    SLUICE_RETURN_IF_ERROR(bind_args("get", args, {"key", "default"}, a));
    if (!a[0]) return make_error("get expected at least 1 argument, got 0");
    WorkMeter m = in.meter();
    SLUICE_RETURN_IF_ERROR(hash_value(*a[0], &m).status());
    const Value* found = d.find(*a[0], &m);
    SLUICE_RETURN_IF_ERROR(in.settle(m));
    if (found) return *found;
    return a[1] ? *a[1] : Value::none();
  }
  if (!args.args.empty() || !args.kwargs.empty())
    return make_error("dict.", name, "() takes no arguments");
  if (name == "copy") return self;
  std::vector<Value> out;
  out.reserve(d.items.size());
  if (name == "keys") {
    for (const auto& kv : d.items) out.push_back(kv.first);
    return Value::list(std::move(out), ListKind::kKeys);
  }
  if (name == "values") {
    for (const auto& kv : d.items) out.push_back(kv.second);
    return Value::list(std::move(out), ListKind::kValues);
  }
  if (name == "items") {
    for (const auto& kv : d.items)
      out.push_back(Value::list({kv.first, kv.second}, ListKind::kTuple));
    return Value::list(std::move(out), ListKind::kItems);
  }
  return make_error("dict.", name, "() is not supported");
}

Result<Value> call_list_method(Interpreter& in, const Value& self, std::string_view name,
                               CallArgs& args) {
  const auto& items = self.as_list().items;
  if (name == "copy") return Value::list(items);
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(name, args, {"value"}, a));
  if (!a[0]) return make_error(name, "() takes exactly one argument (0 given)");
  WorkMeter m = in.meter();
  int64_t count = 0, index = -1;
  for (size_t i = 0; i < items.size() && !m.exhausted(); ++i) {
    if (!equals(items[i], *a[0], &m)) continue;
    ++count;
    if (index < 0) index = static_cast<int64_t>(i);
    if (name == "index") break;
  }
  SLUICE_RETURN_IF_ERROR(in.settle(m));
  if (name == "count") return Value::integer(count);
  if (index >= 0) return Value::integer(index);
  return make_error(short_repr(*a[0]), " is not in ", type_name(self));
}

Result<Value> call_object_method(Interpreter& in, Object* o, std::string_view name,
                                 CallArgs& args) {
  if (o->kind() == Object::Kind::kLoop) {
    auto* loop = static_cast<LoopObject*>(o);
    if (name == "cycle") {
      if (args.args.empty()) return make_error("no items for cycling given");
      return args.args[loop->index0 % args.args.size()];
    }
    // changed(*values): true when the values differ from the previous call's.
    Value current = Value::list(args.args, ListKind::kTuple);
    WorkMeter m = in.meter();
    bool changed = !loop->changed_seen || !equals(current, loop->changed_last, &m);
    SLUICE_RETURN_IF_ERROR(in.settle(m));
    loop->changed_seen = true;
    loop->changed_last = std::move(current);
    return Value::boolean(changed);
  }
  auto* c = static_cast<CyclerObject*>(o);
  if (name == "reset") {
    c->pos = 0;
    return Value::none();
  }
  if (c->items.empty()) return Value::none();
  Value v = c->items[c->pos];
  c->pos = (c->pos + 1) % c->items.size();
  return v;
}

// ---- globals ----

Result<Value> fn_range(Interpreter& in, CallArgs& args) {
  if (!args.kwargs.empty()) return make_error("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3) {
    return make_error("range expected at least 1 argument, got ", args.args.size());
  }
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (!args.args[i].is_integral()) {
      return make_error("'", type_name(args.args[i]),
                        "' object cannot be interpreted as an integer");
    }
  }
  if (args.args.size() == 1) {
    v[1] = args.args[0].as_int();
  } else {
    for (size_t i = 0; i < args.args.size(); ++i) v[i] = args.args[i].as_int();
  }
  if (v[2] == 0) return make_error("range() arg 3 must not be zero");
  // Like the sandbox's safe_range (MAX_RANGE = 100000).
  long double n = v[2] > 0 ? (static_cast<long double>(v[1]) - v[0]) / v[2]
                           : (static_cast<long double>(v[0]) - v[1]) / -v[2];
  if (n > 100000) {
    return make_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  std::vector<Value> out;
  for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2])
    out.push_back(Value::integer(i));
  SLUICE_RETURN_IF_ERROR(in.charge(out.size() / 16));
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) into `d`.
Status fill_dict(Interpreter& in, DictData& d, const CallArgs& args, std::string_view fn) {
  if (args.args.size() > 1)
    return make_error(fn, " expected at most 1 argument, got ", args.args.size());
  if (!args.args.empty()) {
    const Value& src = args.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().items) d.append_unique(k, v);  // d starts empty
    } else {
      SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, src));
      for (size_t i = 0; i < seq->items.size(); ++i) {
        SLUICE_ASSIGN_OR_RETURN(auto pair, iterate(in, seq->items[i]));
        if (pair->items.size() != 2) {
          return make_error("dictionary update sequence element #", i, " has length ",
                            pair->items.size(), "; 2 is required");
        }
        WorkMeter m = in.meter();
        SLUICE_RETURN_IF_ERROR(hash_value(pair->items[0], &m).status());
        d.set(pair->items[0], pair->items[1], &m);
        SLUICE_RETURN_IF_ERROR(in.settle(m));
      }
    }
  }
  for (const auto& [k, v] : args.kwargs) d.set(Value::string(k), v);
  return {};
}

Result<Value> fn_dict(Interpreter& in, CallArgs& args) {
  DictData d;
  SLUICE_RETURN_IF_ERROR(fill_dict(in, d, args, "dict"));
  return make_dict(std::move(d));
}

Result<Value> fn_namespace(Interpreter& in, CallArgs& args) {
  DictData d;
  SLUICE_RETURN_IF_ERROR(fill_dict(in, d, args, "namespace"));
  SLUICE_ASSIGN_OR_RETURN(Value ns, in.make_arena_namespace());
  auto* obj = static_cast<NamespaceObject*>(ns.as_object());
  for (auto& [k, v] : d.items) {
    if (!k.is_string()) return make_error("namespace attribute names must be strings");
    obj->set(k.as_string(), v);
  }
  return ns;
}

Result<Value> fn_cycler(Interpreter&, CallArgs& args) {
  if (args.args.empty()) return make_error("at least one item has to be provided to cycler()");
  return Value::object(std::make_shared<CyclerObject>(args.args));
}

Result<Value> fn_joiner(Interpreter& in, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("joiner", args, {"sep"}, a));
  std::string sep = ", ";
  if (a[0]) {
    SLUICE_ASSIGN_OR_RETURN(sep, to_string(in, *a[0]));
  }
  return Value::object(std::make_shared<JoinerObject>(std::move(sep)));
}

Result<Value> fn_raise_exception(Interpreter& in, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("raise_exception", args, {"message"}, a));
  if (!a[0])
    return make_error("raise_exception() missing 1 required positional argument: 'message'");
  SLUICE_ASSIGN_OR_RETURN(std::string msg, to_string(in, *a[0]));
  return in.raise(std::move(msg));
}

Result<Value> fn_strftime_now(Interpreter& in, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("strftime_now", args, {"format"}, a));
  SLUICE_ASSIGN_OR_RETURN(std::string fmt, str_arg(a[0], "strftime_now", "format"));
  std::time_t now = in.now();
  std::tm tm{};
  localtime_r(&now, &tm);
  if (fmt.empty()) return Value::string("");
  for (size_t cap = fmt.size() * 8 + 64; cap <= std::max<size_t>(in.max_size(), 1024); cap *= 4) {
    std::string buf(cap, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    if (n > 0) {
      buf.resize(n);
      return Value::string(std::move(buf));
    }
    SLUICE_RETURN_IF_ERROR(in.charge(cap / 64));
  }
  return Value::string("");
}

}  // namespace

std::string unsafe_message(const Value& obj, std::string_view name) {
  return "access to attribute '" + std::string(name) + "' of '" + type_name(obj) +
         "' object is unsafe.";
}

MethodKind find_method(const Value& obj, std::string_view name) {
  if (obj.is_string()) return among(kStrMethods, name) ? MethodKind::kSafe : MethodKind::kNone;
  if (obj.is_dict()) {
    if (among(kDictUnsafe, name)) return MethodKind::kUnsafe;
    return among(kDictMethods, name) ? MethodKind::kSafe : MethodKind::kNone;
  }
  if (obj.is_list_kind(ListKind::kList)) {
    if (among(kListUnsafe, name)) return MethodKind::kUnsafe;
    return among(kListMethods, name) ? MethodKind::kSafe : MethodKind::kNone;
  }
  if (obj.is_list_kind(ListKind::kTuple)) {
    return (name == "count" || name == "index") ? MethodKind::kSafe : MethodKind::kNone;
  }
  if (obj.is_object()) {
    Object::Kind k = obj.as_object()->kind();
    if (k == Object::Kind::kLoop && (name == "cycle" || name == "changed"))
      return MethodKind::kSafe;
    if (k == Object::Kind::kCycler && (name == "next" || name == "reset")) return MethodKind::kSafe;
  }
  return MethodKind::kNone;
}

Result<Value> call_method(Interpreter& in, const Value& obj, std::string_view name,
                          CallArgs& args) {
  if (obj.is_string()) return call_str_method(in, obj, name, args);
  if (obj.is_dict()) return call_dict_method(in, obj, name, args);
  if (obj.is_list()) return call_list_method(in, obj, name, args);
  if (obj.is_object()) return call_object_method(in, obj.as_object(), name, args);
  return make_error("'", type_name(obj), "' object has no attribute '", name, "'");
}

void install_globals(Scope& globals) {
  struct Global {
    const char* name;
    const char* repr;
    BuiltinFn fn;
  };
  static const Global kGlobals[] = {
      {"range", "<class 'range'>", fn_range},
      {"dict", "<class 'dict'>", fn_dict},
      {"namespace", "<class 'jinja2.utils.Namespace'>", fn_namespace},
      {"cycler", "<class 'jinja2.utils.Cycler'>", fn_cycler},
      {"joiner", "<class 'jinja2.utils.Joiner'>", fn_joiner},
      {"raise_exception", "<function raise_exception>", fn_raise_exception},
      {"strftime_now", "<function strftime_now>", fn_strftime_now},
  };
  for (const Global& g : kGlobals) {
    globals.set(g.name, Value::object(std::make_shared<FunctionObject>(g.name, g.repr, g.fn)));
  }
}

}  // namespace sluice::jinja
