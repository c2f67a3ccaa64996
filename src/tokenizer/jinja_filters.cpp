// Jinja's built-in filters (jinja2/filters.py) plus Hugging Face's tojson, with the
// environment chat templates render under (autoescape off, sandboxed attribute access).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <unordered_map>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_string.h"

namespace sluice::jinja {
namespace {

constexpr size_t kValueBytes = sizeof(Value);

Value str_value(std::string s, bool safe = false) { return Value::string(std::move(s), safe); }

// For filters that take no arguments besides their input.
Status no_args(std::string_view filter, const CallArgs& a) {
  if (a.args.empty() && a.kwargs.empty()) return {};
  return make_error("filter '", filter, "' takes no arguments (", a.args.size() + a.kwargs.size(), " given)");
}

// soft_str: Markup stays Markup, anything else goes through str().
Result<Value> soft_str(Interpreter& in, const Value& v) {
  if (v.is_string()) return v;
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  return str_value(std::move(s));
}

bool flag(const Value* v, bool dflt = false) { return v ? truthy(*v) : dflt; }

Result<Value> f_string_transform(Interpreter& in, const Value& v, CallArgs& args, std::string_view name,
                                 std::string (*fn)(std::string_view)) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(name, args, {}, a));
  SLUICE_ASSIGN_OR_RETURN(Value s, soft_str(in, v));
  return str_value(fn(s.as_string()), s.is_safe());
}

Result<Value> f_lower(Interpreter& in, const Value& v, CallArgs& a) { return f_string_transform(in, v, a, "lower", py_lower); }
Result<Value> f_upper(Interpreter& in, const Value& v, CallArgs& a) { return f_string_transform(in, v, a, "upper", py_upper); }
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
Result<Value> f_title(Interpreter& in, const Value& v, CallArgs& a) { return f_string_transform(in, v, a, "title", jinja_title); }

Result<Value> f_trim(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("trim", args, {"chars"}, a));
  SLUICE_ASSIGN_OR_RETURN(Value s, soft_str(in, v));
  std::string chars;
  bool has_chars = a[0] && !a[0]->is_none();
  if (has_chars) {
    SLUICE_ASSIGN_OR_RETURN(chars, to_string(in, *a[0]));
  }
  return str_value(std::string(py_strip(s.as_string(), has_chars ? &chars : nullptr, StripSide::kBoth)), s.is_safe());
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
  SLUICE_RETURN_IF_ERROR(no_args("safe", args));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  return str_value(std::move(s), true);
}

Result<Value> f_escape(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("escape", args));
  if (v.is_safe()) return v;
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  return str_value(html_escape(s), true);
}

Result<Value> f_forceescape(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("forceescape", args));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  return str_value(html_escape(s), true);
}

Result<Value> f_string(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("string", args));
  return soft_str(in, v);
}

Result<Value> f_tojson(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, a));
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
  SLUICE_RETURN_IF_ERROR(no_args("first", args));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (seq->items.empty()) return Value::undefined("No first item, sequence was empty.");
  return seq->items.front();
}

Result<Value> f_last(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("last", args));
  if (v.is_list_kind(ListKind::kGenerator)) return make_error("'generator' object is not reversible");
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (seq->items.empty()) return Value::undefined("No last item, sequence was empty.");
  return seq->items.back();
}

Result<Value> f_list(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("list", args));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  return Value::list(seq->items);
}

Result<Value> f_items(Interpreter&, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("items", args));
  if (v.is_undefined()) return Value::list({}, ListKind::kGenerator);
  if (!v.is_dict()) return make_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::list({k, val}, ListKind::kTuple));
  return Value::list(std::move(out), ListKind::kGenerator);
}

Result<Value> f_reverse(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("reverse", args));
  if (v.is_string()) {
    std::vector<uint32_t> cps = utf8_decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return str_value(utf8_encode(cps.data(), cps.size()));
  }
  if (!v.is_list() && !v.is_dict() && !v.is_undefined()) return make_error("argument must be iterable");
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  std::vector<Value> out(seq->items.rbegin(), seq->items.rend());
  bool reversible = v.is_list_kind(ListKind::kList) || v.is_list_kind(ListKind::kTuple) || v.is_dict() ||
                    v.is_undefined();
  return Value::list(std::move(out), reversible ? ListKind::kGenerator : ListKind::kList);
}

Result<Value> f_abs(Interpreter&, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("abs", args));
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
    if (__builtin_mul_overflow(q, scale, &out)) return make_error("integer overflow (sluice integers are 64-bit)");
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
  if (!v.is_string()) return make_error("unsupported operand type(s) for +=: '", type_name(v), "' and 'str'");
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
  SLUICE_RETURN_IF_ERROR(no_args("wordcount", args));
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

Result<Value> f_random(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("random", args));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (seq->items.empty()) return make_error("Cannot choose from an empty sequence");
  std::random_device entropy;  // like Python's random.choice: not reproducible by design
  return seq->items[std::uniform_int_distribution<size_t>(0, seq->items.size() - 1)(entropy)];
}

Result<Value> f_urlencode(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_RETURN_IF_ERROR(no_args("urlencode", args));
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

// ---- sequence filters ----

// Jinja's ignore_case postprocess for sort/unique/min/max keys.
Value fold_case(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return str_value(py_lower(v.as_string()));
}

Result<Value> sort_key(Interpreter& in, const Value& item, const Value* attribute, bool case_sensitive) {
  if (!attribute || attribute->is_none()) return fold_case(item, case_sensitive);
  if (attribute->is_string() && attribute->as_string().find(',') != std::string::npos) {
    std::vector<Value> parts;
    std::string_view attrs = attribute->as_string();
    size_t start = 0;
    while (start <= attrs.size()) {
      size_t comma = attrs.find(',', start);
      std::string part(attrs.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
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
  SLUICE_RETURN_IF_ERROR(sort_pairs(in, pairs, flag(a[0])));
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
    pairs.emplace_back(fold_case(by_value ? val : k, flag(a[0])), Value::list({k, val}, ListKind::kTuple));
  }
  SLUICE_RETURN_IF_ERROR(sort_pairs(in, pairs, flag(a[2])));
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
  SLUICE_RETURN_IF_ERROR(bind_args(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}, a));
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
Result<Value> f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Result<Value> f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

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
Result<Value> select_or_reject(Interpreter& in, const Value& v, CallArgs& args, bool keep, bool by_attr) {
  std::vector<Value> out;
  if (!truthy(v) && !v.is_list_kind(ListKind::kGenerator)) return Value::list(std::move(out), ListKind::kGenerator);
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
Result<Value> f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, false); }
Result<Value> f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, false); }
Result<Value> f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, true); }
Result<Value> f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, true); }

Result<Value> f_map(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (!truthy(v) && !v.is_list_kind(ListKind::kGenerator)) return Value::list(std::move(out), ListKind::kGenerator);
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  if (args.args.empty() && args.kwarg("attribute")) {
    Value attribute = *args.kwarg("attribute");
    Value dflt = args.kwarg("default") ? *args.kwarg("default") : Value();
    for (const auto& [k, _] : args.kwargs) {
      if (k != "attribute" && k != "default") return make_error("Unexpected keyword argument '", k, "'");
    }
    for (const Value& item : seq->items) {
      SLUICE_ASSIGN_OR_RETURN(Value x, get_attribute_path(in, item, attribute));
      if (x.is_undefined() && args.kwarg("default")) x = dflt;
      out.push_back(std::move(x));
    }
    return Value::list(std::move(out), ListKind::kGenerator);
  }
  if (args.args.empty() || !args.args[0].is_string()) return make_error("map requires a filter argument");
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
  SLUICE_RETURN_IF_ERROR(bind_args(is_slice ? "slice" : "batch", args, {is_slice ? "slices" : "linecount", "fill_with"}, a));
  if (!a[0]) return make_error(is_slice ? "slice" : "batch", "() missing a count argument");
  SLUICE_ASSIGN_OR_RETURN(int64_t n, to_index(*a[0], "count"));
  SLUICE_ASSIGN_OR_RETURN(auto seq, iterate(in, v));
  const auto& items = seq->items;
  std::vector<Value> out;
  if (!is_slice) {
    if (n <= 0) return make_error("batch size must be positive");
    for (size_t i = 0; i < items.size(); i += static_cast<size_t>(n)) {
      std::vector<Value> chunk(items.begin() + static_cast<ptrdiff_t>(i),
                               items.begin() + static_cast<ptrdiff_t>(std::min(items.size(), i + static_cast<size_t>(n))));
      while (a[1] && chunk.size() < static_cast<size_t>(n)) chunk.push_back(*a[1]);
      out.push_back(Value::list(std::move(chunk)));
    }
    return Value::list(std::move(out), ListKind::kGenerator);
  }
  if (n <= 0) return make_error("integer division or modulo by zero");
  SLUICE_RETURN_IF_ERROR(in.check_size(static_cast<size_t>(std::min<int64_t>(n, INT32_MAX)) * kValueBytes));
  size_t len = items.size();
  size_t per = len / static_cast<size_t>(n), extra = len % static_cast<size_t>(n), offset = 0;
  for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
    size_t start = offset + k * per;
    if (k < extra) ++offset;
    size_t end = offset + (k + 1) * per;
    std::vector<Value> chunk(items.begin() + static_cast<ptrdiff_t>(start), items.begin() + static_cast<ptrdiff_t>(end));
    if (a[1] && k >= extra && extra > 0) chunk.push_back(*a[1]);
    out.push_back(Value::list(std::move(chunk)));
  }
  return Value::list(std::move(out), ListKind::kGenerator);
}
Result<Value> f_batch(Interpreter& in, const Value& v, CallArgs& a) { return batch_or_slice(in, v, a, false); }
Result<Value> f_slice(Interpreter& in, const Value& v, CallArgs& a) { return batch_or_slice(in, v, a, true); }

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},         {"capitalize", f_capitalize},
    {"center", f_center},   {"count", f_length},        {"d", f_default},           {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},       {"first", f_first},
    {"float", f_float},     {"forceescape", f_forceescape}, {"format", f_format},   {"indent", f_indent},
    {"int", f_int},         {"items", f_items},         {"join", f_join},           {"last", f_last},
    {"length", f_length},   {"list", f_list},           {"lower", f_lower},         {"map", f_map},
    {"max", f_max},         {"min", f_min},             {"random", f_random},             {"reject", f_reject},       {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse},     {"round", f_round},         {"safe", f_safe},
    {"select", f_select},   {"selectattr", f_selectattr}, {"slice", f_slice},       {"sort", f_sort},
    {"string", f_string},   {"sum", f_sum},             {"title", f_title},         {"tojson", f_tojson},
    {"trim", f_trim},       {"truncate", f_truncate},   {"unique", f_unique},       {"upper", f_upper},
    {"urlencode", f_urlencode}, {"wordcount", f_wordcount},
};

}  // namespace

Result<Value> get_attribute_path(Interpreter& in, const Value& obj, const Value& path) {
  if (!path.is_string()) return get_item(in, obj, path);
  Value cur = obj;
  std::string_view p = path.as_string();
  size_t start = 0;
  while (true) {
    size_t dot = p.find('.', start);
    std::string_view part = p.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    Value key = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos
                    ? Value::integer(std::strtoll(std::string(part).c_str(), nullptr, 10))
                    : str_value(std::string(part));
    SLUICE_ASSIGN_OR_RETURN(cur, get_item(in, cur, key));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return cur;
}

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& e : kFilters) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

}  // namespace sluice::jinja
