// Jinja's built-in filters on strings and numbers (jinja2/filters.py) plus Hugging Face's
// tojson, as chat templates render them (autoescape off, sandboxed attribute access).
// Filters over sequences are in jinja_seq_filters.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/jinja_builtins.h"
#include "template/jinja_string.h"

namespace sluice::jinja {

Status filter_no_args(std::string_view filter, const CallArgs& a) {
  if (a.args.empty() && a.kwargs.empty()) return {};
  return make_error("filter '", filter, "' takes no arguments (", a.args.size() + a.kwargs.size(),
                    " given)");
}

namespace {

Value str_value(std::string s, bool safe = false) {
  return Value::string(std::move(s), safe);
}

// soft_str: Markup stays Markup, anything else goes through str().
Result<Value> soft_str(Interpreter& in, const Value& v) {
  if (v.is_string()) return v;
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  return str_value(std::move(s));
}

bool flag(const Value* v, bool dflt = false) {
  return v ? truthy(*v) : dflt;
}

Result<Value> f_string_transform(Interpreter& in, const Value& v, CallArgs& args,
                                 std::string_view name, std::string (*fn)(std::string_view)) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(name, args, {}, a));
  SLUICE_ASSIGN_OR_RETURN(Value s, soft_str(in, v));
  return str_value(fn(s.as_string()), s.is_safe());
}

Result<Value> f_lower(Interpreter& in, const Value& v, CallArgs& a) {
  return f_string_transform(in, v, a, "lower", py_lower);
}
Result<Value> f_upper(Interpreter& in, const Value& v, CallArgs& a) {
  return f_string_transform(in, v, a, "upper", py_upper);
}
Result<Value> f_capitalize(Interpreter& in, const Value& v, CallArgs& a) {
  return f_string_transform(in, v, a, "capitalize", py_capitalize);
}

// Jinja's title: words start after runs of '-', whitespace, '(', '{', '[' or '<'.
std::string jinja_title(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
    utf8_append(out, sep ? cp : (word_start ? py_to_upper(cp) : py_to_lower(cp)));
    word_start = sep;
  }
  return out;
}
Result<Value> f_title(Interpreter& in, const Value& v, CallArgs& a) {
  return f_string_transform(in, v, a, "title", jinja_title);
}

Result<Value> f_trim(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("trim", args, {"chars"}, a));
  SLUICE_ASSIGN_OR_RETURN(Value s, soft_str(in, v));
  std::string chars;
  bool has_chars = a[0] && !a[0]->is_none();
  if (has_chars) {
    SLUICE_ASSIGN_OR_RETURN(chars, to_string(in, *a[0]));
  }
  return str_value(
      std::string(py_strip(s.as_string(), has_chars ? &chars : nullptr, StripSide::kBoth)),
      s.is_safe());
}

Result<Value> f_length(Interpreter&, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("length", args, {}, a));
  SLUICE_ASSIGN_OR_RETURN(int64_t n, py_len(v));
  return Value::integer(n);
}

Result<Value> f_default(Interpreter&, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("default", args, {"default_value", "boolean"}, a));
  if (v.is_undefined() || (flag(a[1]) && !truthy(v))) return a[0] ? *a[0] : str_value("");
  return v;
}

Result<Value> f_safe(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("safe", args));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  return str_value(std::move(s), true);
}

Result<Value> f_escape(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("escape", args));
  if (v.is_safe()) return v;
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  return str_value(html_escape(s), true);
}

Result<Value> f_forceescape(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("forceescape", args));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  return str_value(html_escape(s), true);
}

Result<Value> f_string(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("string", args));
  return soft_str(in, v);
}

Result<Value> f_tojson(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(
      bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, a));
  JsonOptions o;
  o.max_bytes = in.max_size();
  o.ensure_ascii = flag(a[0]);
  o.sort_keys = flag(a[3]);
  if (a[1] && !a[1]->is_none()) {
    o.has_indent = true;
    o.item_separator = ",";
    if (a[1]->is_string()) {
      o.indent = a[1]->as_string();
    } else if (a[1]->is_integral()) {
      int64_t n = std::min<int64_t>(a[1]->as_int(), static_cast<int64_t>(in.max_size()));
      o.indent.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    } else {
      return make_error("indent must be an int or a str, not ", type_name(*a[1]));
    }
  }
  if (a[2] && !a[2]->is_none()) {
    SLUICE_ASSIGN_OR_RETURN(auto seps, iterate(in, *a[2]));
    if (seps->items.size() != 2 || !seps->items[0].is_string() || !seps->items[1].is_string()) {
      return make_error("separators must be a pair of strings");
    }
    o.item_separator = seps->items[0].as_string();
    o.key_separator = seps->items[1].as_string();
  }
  std::string out;
  WorkMeter m = in.meter();
  o.meter = &m;
  Status st = to_json(out, v, o);
  SLUICE_RETURN_IF_ERROR(in.settle(m));
  SLUICE_RETURN_IF_ERROR(st);
  SLUICE_RETURN_IF_ERROR(in.check_size(out.size()));
  return str_value(std::move(out));
}

Result<Value> f_replace(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("replace", args, {"old", "new", "count"}, a));
  if (!a[0] || !a[1]) return make_error("replace() missing required argument");
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  SLUICE_ASSIGN_OR_RETURN(std::string old_s, to_string(in, *a[0]));
  SLUICE_ASSIGN_OR_RETURN(std::string new_s, to_string(in, *a[1]));
  CallArgs inner;
  inner.args = {str_value(old_s), str_value(new_s)};
  if (a[2] && !a[2]->is_none()) inner.args.push_back(*a[2]);
  SLUICE_ASSIGN_OR_RETURN(Value r, call_method(in, str_value(std::move(s)), "replace", inner));
  return str_value(r.as_string());  // plain str (autoescape off)
}

Result<Value> f_abs(Interpreter&, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("abs", args));
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) return make_error("integer overflow (sluice integers are 64-bit)");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_undefined()) return Error{v.undefined_message()};
  return make_error("bad operand type for abs(): '", type_name(v), "'");
}

// Python float(str): whitespace, underscores between digits, inf/nan spellings.
bool parse_py_float(std::string_view text, double* out) {
  std::string s(py_strip(text, nullptr, StripSide::kBoth));
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return false;
      }
      continue;
    }
    clean += s[i];
  }
  if (clean.empty()) return false;
  std::string lower = py_lower(clean);
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double r = body == "nan" ? NAN : INFINITY;
    *out = lower[0] == '-' ? -r : r;
    return true;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(clean.c_str(), &end);
  return end && *end == '\0';
}

// Python int(str, base).
bool parse_py_int(std::string_view text, int base, int64_t* out) {
  std::string s(py_strip(text, nullptr, StripSide::kBoth));
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (base == 16 && s.compare(i, 2, "0x") == 0) i += 2;
  std::string digits;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits += s[i];
  }
  if (digits.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (!end || *end != '\0' || errno == ERANGE || digits[0] == '-' || digits[0] == '+') return false;
  *out = neg ? -v : v;
  return true;
}

Result<Value> f_int(Interpreter&, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("int", args, {"default", "base"}, a));
  Value dflt = a[0] ? *a[0] : Value::integer(0);
  int base = a[1] && a[1]->is_integral() ? static_cast<int>(a[1]->as_int()) : 10;
  if (v.is_undefined()) return Error{v.undefined_message()};  // Undefined.__int__ raises
  if (v.is_integral()) return Value::integer(v.as_int());
  double d = 0;
  if (v.is_float()) {
    d = v.as_double();
  } else if (v.is_string()) {
    int64_t i = 0;
    if (base >= 2 && base <= 36 && parse_py_int(v.as_string(), base, &i)) return Value::integer(i);
    if (!parse_py_float(v.as_string(), &d)) return dflt;
  } else {
    return dflt;
  }
  SLUICE_ASSIGN_OR_RETURN(int64_t i, float_to_int(d));
  return Value::integer(i);
}

Result<Value> f_float(Interpreter&, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("float", args, {"default"}, a));
  if (v.is_undefined()) return Error{v.undefined_message()};  // Undefined.__float__ raises
  if (v.is_number()) return Value::number(v.as_double());
  double d = 0;
  if (v.is_string() && parse_py_float(v.as_string(), &d)) return Value::number(d);
  return a[0] ? *a[0] : Value::number(0.0);
}

Result<Value> f_round(Interpreter&, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("round", args, {"precision", "method"}, a));
  int64_t precision = 0;
  if (a[0]) {
    SLUICE_ASSIGN_OR_RETURN(precision, to_index(*a[0], "precision"));
  }
  std::string method = a[1] && a[1]->is_string() ? a[1]->as_string() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return make_error("method must be common, ceil or floor");
  }
  if (!v.is_number()) return make_error("type ", type_name(v), " doesn't define __round__ method");
  if (method == "common" && v.is_integral()) {
    if (precision >= 0) return Value::integer(v.as_int());
    if (precision < -18) return Value::integer(0);
    int64_t scale = 1;
    for (int64_t i = 0; i < -precision; ++i) scale *= 10;
    int64_t x = v.as_int(), q = x / scale, r = x % scale;  // round half to even, like Python
    if (r < 0) r += scale, --q;
    if (2 * r > scale || (2 * r == scale && (q & 1))) ++q;
    int64_t out = 0;
    if (__builtin_mul_overflow(q, scale, &out))
      return make_error("integer overflow (sluice integers are 64-bit)");
    return Value::integer(out);
  }
  double x = v.as_double();
  precision = std::clamp<int64_t>(precision, -400, 400);
  if (method != "common") {
    double scale = std::pow(10.0, static_cast<double>(precision));
    double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
    return Value::number(r / scale);
  }
  if (!std::isfinite(x)) return Value::number(x);
  if (precision >= 0) {  // correctly rounded (half-even on the exact binary value), like Python
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
    return Value::number(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(-precision));
  return Value::number(std::nearbyint(x / scale) * scale);
}

Result<Value> f_indent(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("indent", args, {"width", "first", "blank"}, a));
  if (!v.is_string())
    return make_error("unsupported operand type(s) for +=: '", type_name(v), "' and 'str'");
  std::string indention = "    ";
  if (a[0]) {
    if (a[0]->is_string()) {
      indention = a[0]->as_string();
    } else {
      SLUICE_ASSIGN_OR_RETURN(int64_t w, to_index(*a[0], "width"));
      SLUICE_RETURN_IF_ERROR(in.check_size(static_cast<size_t>(std::max<int64_t>(w, 0))));
      indention.assign(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
    }
  }
  std::string s = v.as_string() + "\n";
  std::vector<std::string_view> lines = py_splitlines(s, false);
  std::string out;
  if (flag(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
      if (out.size() > in.max_size()) return in.check_size(out.size());
    }
  } else {
    out = lines.empty() ? "" : std::string(lines[0]);
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
      if (out.size() > in.max_size()) return in.check_size(out.size());
    }
  }
  if (flag(a[1])) out = indention + out;
  SLUICE_RETURN_IF_ERROR(in.check_size(out.size()));
  return str_value(std::move(out), v.is_safe());
}

Result<Value> f_center(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("center", args, {"width"}, a));
  SLUICE_ASSIGN_OR_RETURN(Value s, soft_str(in, v));
  CallArgs inner;
  inner.args.push_back(a[0] ? *a[0] : Value::integer(80));
  return call_method(in, s, "center", inner);
}

Result<Value> f_wordcount(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("wordcount", args));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = utf8_next(s, i);
    bool w = cp == '_' || py_isalpha(cp) || py_isdigit(cp);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Result<Value> f_truncate(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("truncate", args, {"length", "killwords", "end", "leeway"}, a));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  int64_t length = 255, leeway = 5;
  if (a[0]) {
    SLUICE_ASSIGN_OR_RETURN(length, to_index(*a[0], "length"));
  }
  if (a[3] && !a[3]->is_none()) {
    SLUICE_ASSIGN_OR_RETURN(leeway, to_index(*a[3], "leeway"));
  }
  std::string end = "...";
  if (a[2]) {
    SLUICE_ASSIGN_OR_RETURN(end, to_string(in, *a[2]));
  }
  int64_t end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len) return make_error("expected length >= ", end_len, ", got ", length);
  if (leeway < 0) return make_error("expected leeway >= 0, got ", leeway);
  std::vector<uint32_t> cps = utf8_decode(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return str_value(std::move(s));
  std::string head = utf8_encode(cps.data(), static_cast<size_t>(length - end_len));
  if (!flag(a[1])) {
    size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head.resize(sp);
  }
  return str_value(head + end);
}

Result<Value> f_urlencode(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(filter_no_args("urlencode", args));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return str_value(std::move(out));
}

Result<Value> f_format(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(Value s, soft_str(in, v));
  if (!args.args.empty() && !args.kwargs.empty()) {
    return make_error("can't handle positional and keyword arguments at the same time");
  }
  Value operand;
  if (!args.kwargs.empty()) {
    DictData d;
    for (const auto& [k, val] : args.kwargs) d.set(str_value(k), val);
    operand = make_dict(std::move(d));
  } else {
    operand = Value::list(args.args, ListKind::kTuple);
  }
  SLUICE_ASSIGN_OR_RETURN(std::string out, py_percent_format(in, s.as_string(), operand));
  return str_value(std::move(out), s.is_safe());
}

Result<Value> f_attr(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("attr", args, {"name"}, a));
  if (!a[0] || !a[0]->is_string()) return make_error("attribute name must be a string");
  // Python getattr only: unlike `x.name`, dict keys are not consulted.
  const std::string& name = a[0]->as_string();
  if (v.is_object() || find_method(v, name) != MethodKind::kNone) return get_attr(in, v, name);
  if (v.is_undefined()) return Error{v.undefined_message()};
  return Value::undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"e", f_escape},
    {"escape", f_escape},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"length", f_length},
    {"lower", f_lower},
    {"replace", f_replace},
    {"round", f_round},
    {"safe", f_safe},
    {"string", f_string},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"upper", f_upper},
    {"urlencode", f_urlencode},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& e : kFilters) {
    if (e.name == name) return e.fn;
  }
  return find_sequence_filter(name);
}

}  // namespace sluice::jinja
