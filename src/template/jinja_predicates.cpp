// Jinja's built-in tests (jinja2/tests.py): `x is defined`, `x is divisibleby 3`, ...
#include "template/jinja_builtins.h"
#include "template/jinja_string.h"

namespace sluice::jinja {
namespace {

// Tests without a parameter reject arguments (`x is defined(1)`), as Python would.
Status test_no_args(std::string_view test, const CallArgs& a) {
  if (a.args.empty() && a.kwargs.empty()) return {};
  return make_error("test_", test, "() takes 1 positional argument but ",
                    1 + a.args.size() + a.kwargs.size(), " were given");
}

Result<const Value*> one_arg(const CallArgs& args, std::string_view test) {
  std::vector<const Value*> a;
  SLUICE_RETURN_IF_ERROR(bind_args(test, args, {"other"}, a));
  if (!a[0]) return make_error("test '", test, "' requires an argument");
  return a[0];
}

Result<bool> t_defined(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("defined", a));
  return !v.is_undefined();
}
Result<bool> t_undefined(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("undefined", a));
  return v.is_undefined();
}
Result<bool> t_none(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("none", a));
  return v.is_none();
}
Result<bool> t_boolean(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("boolean", a));
  return v.is_bool();
}
Result<bool> t_true(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("true", a));
  return v.is_bool() && v.as_bool();
}
Result<bool> t_false(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("false", a));
  return v.is_bool() && !v.as_bool();
}
Result<bool> t_integer(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("integer", a));
  return v.is_int();
}
Result<bool> t_float(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("float", a));
  return v.is_float();
}
Result<bool> t_number(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("number", a));
  return v.is_number();
}
Result<bool> t_string(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("string", a));
  return v.is_string();
}
Result<bool> t_mapping(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("mapping", a));
  return v.is_dict();
}
Result<bool> t_escaped(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("escaped", a));
  return v.is_safe();
}

Result<bool> t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("iterable", a));
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() ||
         (v.is_object() && v.as_object()->kind() == Object::Kind::kLoop);
}

Result<bool> t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("sequence", a));
  // len() and __getitem__: str, list, tuple, dict (and Undefined) qualify; views and generators do
  // not.
  return v.is_string() || v.is_dict() || v.is_undefined() || v.is_list_kind(ListKind::kList) ||
         v.is_list_kind(ListKind::kTuple);
}

Result<bool> t_callable(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("callable", a));
  return v.is_undefined() || (v.is_object() && v.as_object()->is_callable());
}

Result<bool> t_lower(Interpreter& in, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("lower", a));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  bool cased = false;
  for (uint32_t c : utf8_decode(s)) {
    if (py_is_cased_upper(c)) return false;
    cased = cased || py_is_cased_lower(c);
  }
  return cased;
}

Result<bool> t_upper(Interpreter& in, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("upper", a));
  SLUICE_ASSIGN_OR_RETURN(std::string s, to_string(in, v));
  bool cased = false;
  for (uint32_t c : utf8_decode(s)) {
    if (py_is_cased_lower(c)) return false;
    cased = cased || py_is_cased_upper(c);
  }
  return cased;
}

Result<bool> modulo_is(Interpreter& in, const Value& v, const Value& divisor, int64_t expected) {
  SLUICE_ASSIGN_OR_RETURN(Value r, binary_op(in, BinaryOp::kMod, v, divisor));
  return equals(r, Value::integer(expected));
}
Result<bool> t_odd(Interpreter& in, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("odd", a));
  return modulo_is(in, v, Value::integer(2), 1);
}
Result<bool> t_even(Interpreter& in, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("even", a));
  return modulo_is(in, v, Value::integer(2), 0);
}
Result<bool> t_divisibleby(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(const Value* num, one_arg(args, "divisibleby"));
  return modulo_is(in, v, *num, 0);
}

template <CompareOp op>
Result<bool> t_compare(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(const Value* other, one_arg(args, "comparison"));
  return compare_op(in, op, v, *other);
}

Result<bool> t_in(Interpreter& in, const Value& v, CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(const Value* seq, one_arg(args, "in"));
  return contains(in, *seq, v);
}

Result<bool> t_sameas(Interpreter&, const Value& v, CallArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(const Value* other, one_arg(args, "sameas"));
  const Value& o = *other;
  if (v.is_none() || v.is_bool() || v.is_undefined())
    return v.is_none() == o.is_none() && equals(v, o) && v.is_bool() == o.is_bool();
  if (v.is_int() && o.is_int())
    return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
  if (v.is_string() && o.is_string()) return v.string_ptr() == o.string_ptr();
  if (v.is_list() && o.is_list()) return v.list_ptr() == o.list_ptr();
  if (v.is_dict() && o.is_dict()) return v.dict_ptr() == o.dict_ptr();
  if (v.is_object() && o.is_object()) return v.as_object() == o.as_object();
  return false;
}

Result<bool> t_filter(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("filter", a));
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
Result<bool> t_test(Interpreter&, const Value& v, CallArgs& a) {
  SLUICE_RETURN_IF_ERROR(test_no_args("test", a));
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"!=", t_compare<CompareOp::kNe>},
    {"<", t_compare<CompareOp::kLt>},
    {"<=", t_compare<CompareOp::kLe>},
    {"==", t_compare<CompareOp::kEq>},
    {">", t_compare<CompareOp::kGt>},
    {">=", t_compare<CompareOp::kGe>},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_compare<CompareOp::kEq>},
    {"equalto", t_compare<CompareOp::kEq>},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_compare<CompareOp::kGe>},
    {"greaterthan", t_compare<CompareOp::kGt>},
    {"gt", t_compare<CompareOp::kGt>},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_compare<CompareOp::kLe>},
    {"lessthan", t_compare<CompareOp::kLt>},
    {"lower", t_lower},
    {"lt", t_compare<CompareOp::kLt>},
    {"mapping", t_mapping},
    {"ne", t_compare<CompareOp::kNe>},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const TestEntry& e : kTests) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

}  // namespace sluice::jinja
