// Operators, attribute/item access and iteration with Python semantics, as Jinja's
// ImmutableSandboxedEnvironment performs them.
#include <cmath>
#include <limits>

#include "template/jinja_builtins.h"
#include "template/jinja_string.h"

namespace sluice::jinja {
namespace {

constexpr size_t kValueBytes = sizeof(Value);

Error unsupported(std::string_view op, const Value& a, const Value& b) {
  return make_error("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '",
                    type_name(b), "'");
}

Error overflow() {
  return make_error("integer overflow (sluice integers are 64-bit)");
}

bool is_seq(const Value& v) {
  return v.is_list_kind(ListKind::kList) || v.is_list_kind(ListKind::kTuple);
}

Result<Value> concat_strings(Interpreter& in, const Value& a, const Value& b) {
  bool safe = a.is_safe() || b.is_safe();
  std::string left = safe && !a.is_safe() ? html_escape(a.as_string()) : a.as_string();
  std::string_view right = b.as_string();
  std::string escaped;
  if (safe && !b.is_safe()) {
    escaped = html_escape(right);
    right = escaped;
  }
  SLUICE_RETURN_IF_ERROR(in.check_size(left.size() + right.size()));
  left.append(right);
  return Value::string(std::move(left), safe);
}

// Markup % args: plain string arguments are HTML-escaped (markupsafe's escape helper).
Value escape_args(const Value& args) {
  auto escape = [](const Value& v) {
    return v.is_string() && !v.is_safe() ? Value::string(html_escape(v.as_string()), true) : v;
  };
  if (args.is_list_kind(ListKind::kTuple)) {
    std::vector<Value> items;
    for (const Value& v : args.as_list().items) items.push_back(escape(v));
    return Value::list(std::move(items), ListKind::kTuple);
  }
  if (args.is_dict()) {
    DictData d;
    for (const auto& [k, v] : args.as_dict().items) d.append_unique(k, escape(v));
    return make_dict(std::move(d));
  }
  return escape(args);
}

Result<Value> repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > in.max_size() / s.size()) {
      return in.check_size(in.max_size() + 1);
    }
    SLUICE_RETURN_IF_ERROR(in.check_size(s.size() * static_cast<size_t>(n)));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out), seq.is_safe());
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > in.max_size() / (items.size() * kValueBytes)) {
    return in.check_size(in.max_size() + 1);
  }
  SLUICE_RETURN_IF_ERROR(in.check_size(items.size() * static_cast<size_t>(n) * kValueBytes));
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_list().kind);
}

// Python's float divmod.
void float_divmod(double vx, double wx, double* floordiv, double* modulo) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0.0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *modulo = mod;
}

Result<Value> int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) return make_error("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  int64_t b = base;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, b, &result)) return overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(b, b, &b)) return overflow();
  }
  return Value::integer(result);
}

Result<Value> arithmetic(BinaryOp op, const Value& a, const Value& b, std::string_view sym) {
  if (!a.is_float() && !b.is_float()) {
    int64_t x = a.as_int();
    int64_t y = b.as_int();
    int64_t r = 0;
    switch (op) {
      case BinaryOp::kAdd:
        if (__builtin_add_overflow(x, y, &r)) return overflow();
        return Value::integer(r);
      case BinaryOp::kSub:
        if (__builtin_sub_overflow(x, y, &r)) return overflow();
        return Value::integer(r);
      case BinaryOp::kMul:
        if (__builtin_mul_overflow(x, y, &r)) return overflow();
        return Value::integer(r);
      case BinaryOp::kDiv:
        if (y == 0) return make_error("division by zero");
        return Value::number(static_cast<double>(x) / static_cast<double>(y));
      case BinaryOp::kFloorDiv: {
        if (y == 0) return make_error("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) return overflow();
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value::integer(q);
      }
      case BinaryOp::kMod: {
        if (y == 0) return make_error("integer modulo by zero");
        if (y == -1) return Value::integer(0);
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::integer(m);
      }
      case BinaryOp::kPow:
        return int_pow(x, y);
      default:
        break;
    }
    return unsupported(sym, a, b);
  }
  double x = a.as_double();
  double y = b.as_double();
  switch (op) {
    case BinaryOp::kAdd:
      return Value::number(x + y);
    case BinaryOp::kSub:
      return Value::number(x - y);
    case BinaryOp::kMul:
      return Value::number(x * y);
    case BinaryOp::kDiv:
      if (y == 0) return make_error("float division by zero");
      return Value::number(x / y);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (y == 0)
        return make_error(op == BinaryOp::kMod ? "float modulo" : "float floor division by zero");
      double fd, m;
      float_divmod(x, y, &fd, &m);
      return Value::number(op == BinaryOp::kMod ? m : fd);
    }
    case BinaryOp::kPow: {
      if (x == 0 && y < 0) return make_error("0.0 cannot be raised to a negative power");
      if (x < 0 && std::isfinite(y) && y != std::floor(y))
        return make_error("complex numbers are not supported");
      double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
        return make_error("(34, 'Numerical result out of range')");
      return Value::number(r);
    }
    default:
      break;
  }
  return unsupported(sym, a, b);
}

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "** or pow()";
    case BinaryOp::kConcat:
      return "~";
    case BinaryOp::kAnd:
      return "and";
    case BinaryOp::kOr:
      return "or";
  }
  return "?";
}

// Python's slice.indices(): normalized start/stop/step and the resulting length.
Status slice_indices(const Value& start_v, const Value& stop_v, const Value& step_v, int64_t len,
                     int64_t* start, int64_t* stop, int64_t* step, int64_t* count) {
  *step = 1;
  if (!step_v.is_none()) {
    SLUICE_ASSIGN_OR_RETURN(*step, to_index(step_v, "slice indices"));
    if (*step == 0) return make_error("slice step cannot be zero");
    if (*step == std::numeric_limits<int64_t>::min()) *step = -std::numeric_limits<int64_t>::max();
  }
  auto adjust = [&](const Value& v, int64_t dflt, int64_t* out) -> Status {
    if (v.is_none()) {
      *out = dflt;
      return {};
    }
    SLUICE_ASSIGN_OR_RETURN(int64_t i, to_index(v, "slice indices"));
    if (i < 0) {
      i = i < -len ? (*step < 0 ? -1 : 0) : i + len;
    } else if (i >= len) {
      i = *step < 0 ? len - 1 : len;
    }
    *out = i;
    return {};
  };
  SLUICE_RETURN_IF_ERROR(adjust(start_v, *step < 0 ? len - 1 : 0, start));
  SLUICE_RETURN_IF_ERROR(adjust(stop_v, *step < 0 ? -1 : len, stop));
  if (*step < 0) {
    *count = *stop < *start ? (*start - *stop - 1) / (-*step) + 1 : 0;
  } else {
    *count = *start < *stop ? (*stop - *start - 1) / *step + 1 : 0;
  }
  return {};
}

Value missing_element(const Value& obj, const Value& key) {
  if (key.is_string()) {
    return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + key.as_string() +
                            "'");
  }
  return Value::undefined(object_type_repr(obj) + " has no element " + short_repr(key));
}

// Sandboxed getattr fallback used when item lookup fails with a string key.
Result<Value> attribute_fallback(Interpreter& in, const Value& obj, const Value& key) {
  if (key.is_string()) {
    MethodKind k = find_method(obj, key.as_string());
    if (k == MethodKind::kSafe) return get_attr(in, obj, key.as_string());
    if (k == MethodKind::kUnsafe) return Value::undefined(unsafe_message(obj, key.as_string()));
  }
  return missing_element(obj, key);
}

Result<Value> index_sequence(Interpreter& in, const Value& obj, const Value& key) {
  if (!key.is_integral()) return attribute_fallback(in, obj, key);
  int64_t i = key.as_int();
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (is_ascii(s)) {
      int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return missing_element(obj, key);
      return Value::string(std::string(1, s[static_cast<size_t>(i)]));
    }
    std::vector<uint32_t> cps = utf8_decode(s);
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return missing_element(obj, key);
    return Value::string(utf8_encode(&cps[static_cast<size_t>(i)], 1));
  }
  const auto& items = obj.as_list().items;
  int64_t n = static_cast<int64_t>(items.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) return missing_element(obj, key);
  return items[static_cast<size_t>(i)];
}

}  // namespace

Result<int64_t> to_index(const Value& v, std::string_view what) {
  if (v.is_integral()) return v.as_int();
  if (v.is_undefined()) return Error{v.undefined_message()};
  return make_error(what, " must be integers or None or have an __index__ method");
}

Result<int64_t> float_to_int(double d) {
  if (std::isnan(d)) return make_error("cannot convert float NaN to integer");
  if (std::isinf(d)) return make_error("cannot convert float infinity to integer");
  // [-2^63, 2^63) is exactly representable as double bounds.
  if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return overflow();
  return static_cast<int64_t>(d);
}

Result<Value> binary_op(Interpreter& in, BinaryOp op, const Value& a, const Value& b) {
  const char* sym = op_symbol(op);
  if (op == BinaryOp::kConcat) {
    std::string s;
    SLUICE_RETURN_IF_ERROR(append_str(s, a, in.max_size()));
    SLUICE_RETURN_IF_ERROR(append_str(s, b, in.max_size()));
    SLUICE_RETURN_IF_ERROR(in.check_size(s.size()));
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) return Error{a.undefined_message()};
  if (b.is_undefined()) return Error{b.undefined_message()};
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b, sym);
  switch (op) {
    case BinaryOp::kAdd:
      if (a.is_string() && b.is_string()) return concat_strings(in, a, b);
      if (is_seq(a) && b.is_list() && a.as_list().kind == b.as_list().kind) {
        const auto& x = a.as_list().items;
        const auto& y = b.as_list().items;
        SLUICE_RETURN_IF_ERROR(in.check_size((x.size() + y.size()) * kValueBytes));
        std::vector<Value> out;
        out.reserve(x.size() + y.size());
        out.insert(out.end(), x.begin(), x.end());
        out.insert(out.end(), y.begin(), y.end());
        return Value::list(std::move(out), a.as_list().kind);
      }
      if (a.is_string() && !a.is_safe()) {
        return make_error("can only concatenate str (not \"", type_name(b), "\") to str");
      }
      if (is_seq(a)) {
        return make_error("can only concatenate ", type_name(a), " (not \"", type_name(b),
                          "\") to ", type_name(a));
      }
      return unsupported(sym, a, b);
    case BinaryOp::kMul:
      if ((a.is_string() || is_seq(a)) && b.is_integral()) return repeat(in, a, b.as_int());
      if (a.is_integral() && (b.is_string() || is_seq(b))) return repeat(in, b, a.as_int());
      if (a.is_string() || is_seq(a) || b.is_string() || is_seq(b)) {
        const Value& other = (a.is_string() || is_seq(a)) ? b : a;
        return make_error("can't multiply sequence by non-int of type '", type_name(other), "'");
      }
      return unsupported(sym, a, b);
    case BinaryOp::kMod:
      if (a.is_string()) {
        SLUICE_ASSIGN_OR_RETURN(
            std::string s, py_percent_format(in, a.as_string(), a.is_safe() ? escape_args(b) : b));
        return Value::string(std::move(s), a.is_safe());
      }
      return unsupported(sym, a, b);
    default:
      return unsupported(sym, a, b);
  }
}

Result<Value> unary_op(UnaryOp op, const Value& v) {
  if (v.is_undefined()) return Error{v.undefined_message()};
  if (v.is_float()) return Value::number(op == UnaryOp::kNeg ? -v.as_double() : v.as_double());
  if (v.is_integral()) {
    int64_t i = v.as_int();
    if (op == UnaryOp::kPos) return Value::integer(i);
    if (i == std::numeric_limits<int64_t>::min()) return overflow();
    return Value::integer(-i);
  }
  return make_error("bad operand type for unary ", op == UnaryOp::kNeg ? "-" : "+", ": '",
                    type_name(v), "'");
}

Result<bool> compare_op(Interpreter& in, CompareOp op, const Value& a, const Value& b) {
  if (op == CompareOp::kIn) return contains(in, b, a);
  if (op == CompareOp::kNotIn) {
    SLUICE_ASSIGN_OR_RETURN(bool found, contains(in, b, a));
    return !found;
  }
  WorkMeter m = in.meter();
  auto ordered = [&](const Value& x, const Value& y, const char* sym) -> Result<bool> {
    auto r = less_than(x, y, &m);
    if (r.ok() || x.is_undefined() || y.is_undefined() || m.exhausted()) return r;
    return make_error("'", sym, "' not supported between instances of '", type_name(a), "' and '",
                      type_name(b), "'");
  };
  Result<bool> r = false;
  switch (op) {
    case CompareOp::kEq:
      r = equals(a, b, &m);
      break;
    case CompareOp::kNe:
      r = !equals(a, b, &m);
      break;
    case CompareOp::kLt:
      r = ordered(a, b, "<");
      break;
    case CompareOp::kGt:
      r = ordered(b, a, ">");
      break;
    case CompareOp::kLe:
      r = ordered(a, b, "<=");
      if (r.ok() && !*r) r = equals(a, b, &m);
      break;
    case CompareOp::kGe:
      r = ordered(b, a, ">=");
      if (r.ok() && !*r) r = equals(a, b, &m);
      break;
    default:
      break;
  }
  SLUICE_RETURN_IF_ERROR(in.settle(m));
  return r;
}

Result<bool> contains(Interpreter& in, const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      return make_error("'in <string>' requires string as left operand, not ", type_name(item));
    }
    SLUICE_RETURN_IF_ERROR(in.charge_operand(container));
    return find_substr(container.as_string(), item.as_string()) != std::string_view::npos;
  }
  const std::vector<Value>* items = nullptr;
  if (container.is_list()) items = &container.as_list().items;
  if (container.is_object() && container.as_object()->kind() == Object::Kind::kLoop) {
    items = &static_cast<const LoopObject*>(container.as_object())->items();
  }
  WorkMeter m = in.meter();
  bool found = false;
  if (items) {
    for (const Value& v : *items) {
      if (equals(v, item, &m)) {
        found = true;
        break;
      }
      if (m.exhausted()) break;
    }
  } else if (container.is_dict()) {
    SLUICE_RETURN_IF_ERROR(hash_value(item, &m).status());
    found = container.as_dict().find(item, &m) != nullptr;
  } else if (!container.is_undefined()) {
    return make_error("argument of type '", type_name(container), "' is not iterable");
  }
  SLUICE_RETURN_IF_ERROR(in.settle(m));
  return found;
}

Result<Value> get_attr(Interpreter& in, const Value& obj, std::string_view name) {
  (void)in;
  if (obj.is_undefined()) return Error{obj.undefined_message()};
  MethodKind kind = find_method(obj, name);
  if (kind == MethodKind::kSafe)
    return Value::object(std::make_shared<BoundMethodObject>(obj, std::string(name)));
  if (kind == MethodKind::kUnsafe) return Value::undefined(unsafe_message(obj, name));
  if (name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__") {
    return Value::undefined(unsafe_message(obj, name));
  }
  Value key = Value::string(std::string(name));
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_object()) {
    Object* o = obj.as_object();
    if (o->kind() == Object::Kind::kNamespace) {
      if (const Value* v = static_cast<NamespaceObject*>(o)->find(name)) return *v;
    } else if (o->kind() == Object::Kind::kLoop) {
      Value v;
      if (static_cast<LoopObject*>(o)->attr(name, &v)) return v;
    } else if (o->kind() == Object::Kind::kCycler && name == "current") {
      auto* c = static_cast<CyclerObject*>(o);
      return c->items.empty() ? Value::none() : c->items[c->pos];
    } else if (o->kind() == Object::Kind::kMacro && name == "name") {
      return Value::string(static_cast<MacroObject*>(o)->node().name);
    }
  }
  return missing_element(obj, key);
}

Result<Value> get_item(Interpreter& in, const Value& obj, const Value& key) {
  if (obj.is_undefined()) return Error{obj.undefined_message()};
  if (obj.is_string() || is_seq(obj)) return index_sequence(in, obj, key);
  if (obj.is_dict()) {
    WorkMeter m = in.meter();
    const Value* found = hash_value(key, &m).ok() ? obj.as_dict().find(key, &m) : nullptr;
    SLUICE_RETURN_IF_ERROR(in.settle(m));
    if (found) return *found;
    return attribute_fallback(in, obj, key);
  }
  if (key.is_string() && obj.is_object()) return get_attr(in, obj, key.as_string());
  return attribute_fallback(in, obj, key);
}

Result<Value> get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop,
                        const Value& step) {
  if (obj.is_undefined()) return Error{obj.undefined_message()};
  bool sliceable = obj.is_string() || is_seq(obj);
  auto bad_bound = [](const Value& v) { return !v.is_none() && !v.is_integral(); };
  if (!sliceable || bad_bound(start) || bad_bound(stop) || bad_bound(step)) {
    std::string desc =
        "slice(" + short_repr(start) + ", " + short_repr(stop) + ", " + short_repr(step) + ")";
    return Value::undefined(object_type_repr(obj) + " has no element " + desc);
  }
  int64_t b = 0, e = 0, s = 1, count = 0;
  if (obj.is_string()) {
    const std::string& str = obj.as_string();
    bool ascii = is_ascii(str);
    std::vector<uint32_t> cps;
    if (!ascii) cps = utf8_decode(str);
    int64_t len = static_cast<int64_t>(ascii ? str.size() : cps.size());
    SLUICE_RETURN_IF_ERROR(slice_indices(start, stop, step, len, &b, &e, &s, &count));
    SLUICE_RETURN_IF_ERROR(in.charge(static_cast<uint64_t>(count) / 64));
    std::string out;
    if (ascii && s == 1) {
      out = str.substr(static_cast<size_t>(b), static_cast<size_t>(count));
    } else {
      for (int64_t k = 0, i = b; k < count; ++k, i += s) {
        if (ascii) {
          out += str[static_cast<size_t>(i)];
        } else {
          utf8_append(out, cps[static_cast<size_t>(i)]);
        }
      }
    }
    return Value::string(std::move(out), obj.is_safe());
  }
  const auto& items = obj.as_list().items;
  SLUICE_RETURN_IF_ERROR(
      slice_indices(start, stop, step, static_cast<int64_t>(items.size()), &b, &e, &s, &count));
  SLUICE_RETURN_IF_ERROR(in.charge(static_cast<uint64_t>(count) / 16));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0, i = b; k < count; ++k, i += s) out.push_back(items[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.as_list().kind);
}

Result<std::shared_ptr<const ListData>> iterate(Interpreter& in, const Value& v) {
  if (v.is_list()) return v.list_ptr();
  auto out = std::make_shared<ListData>();
  if (v.is_undefined()) return std::shared_ptr<const ListData>(std::move(out));
  if (v.is_dict()) {
    const auto& items = v.as_dict().items;
    SLUICE_RETURN_IF_ERROR(in.charge(items.size() / 16));
    out->items.reserve(items.size());
    for (const auto& kv : items) out->items.push_back(kv.first);
    out->depth = v.as_dict().depth;
    return std::shared_ptr<const ListData>(std::move(out));
  }
  if (v.is_string()) {
    const std::string& s = v.as_string();
    SLUICE_RETURN_IF_ERROR(in.check_size(s.size() * kValueBytes));
    for (size_t i = 0; i < s.size();) {
      size_t start = i;
      utf8_next(s, i);
      out->items.push_back(Value::string(s.substr(start, i - start), v.is_safe()));
    }
    return std::shared_ptr<const ListData>(std::move(out));
  }
  if (v.is_object() && v.as_object()->kind() == Object::Kind::kLoop) {
    out->items = static_cast<const LoopObject*>(v.as_object())->items();
    return std::shared_ptr<const ListData>(std::move(out));
  }
  return make_error("'", type_name(v), "' object is not iterable");
}

Result<int64_t> py_len(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(utf8_length(v.as_string()));
  if (v.is_list() && v.as_list().kind != ListKind::kGenerator)
    return static_cast<int64_t>(v.as_list().items.size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  if (v.is_undefined()) return int64_t{0};
  if (v.is_object() && v.as_object()->kind() == Object::Kind::kLoop) {
    return static_cast<int64_t>(static_cast<const LoopObject*>(v.as_object())->items().size());
  }
  return make_error("object of type '", type_name(v), "' has no len()");
}

Result<std::string> to_string(Interpreter& in, const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string s;
  SLUICE_RETURN_IF_ERROR(append_str(s, v, in.max_size()));
  SLUICE_RETURN_IF_ERROR(in.charge(s.size() / 64));
  return s;
}

}  // namespace sluice::jinja
