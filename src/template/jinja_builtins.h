// Python/Jinja semantics the interpreter dispatches to: operators and attribute/item access
// as the sandboxed environment performs them (jinja_ops.cpp), str/dict/list methods and
// global functions (jinja_methods.cpp), str.format and % formatting (jinja_format.cpp), and
// the filter and test tables (jinja_filters.cpp, jinja_seq_filters.cpp, jinja_predicates.cpp).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "template/jinja_ast.h"
#include "template/jinja_interp.h"
#include "template/jinja_value.h"

namespace sluice::jinja {

// ---- operators and access (jinja_ops.cpp) ----

// Arithmetic and `~`; `and`/`or` are evaluated lazily by the interpreter.
Result<Value> binary_op(Interpreter& in, BinaryOp op, const Value& a, const Value& b);
Result<Value> unary_op(UnaryOp op, const Value& v);
Result<bool> compare_op(Interpreter& in, CompareOp op, const Value& a, const Value& b);
// Python `item in container`.
Result<bool> contains(Interpreter& in, const Value& container, const Value& item);
// Sandboxed `obj.name`: a Python attribute first (methods), else obj['name'], else Undefined.
Result<Value> get_attr(Interpreter& in, const Value& obj, std::string_view name);
// Sandboxed `obj[key]`: item first, else (for string keys) the attribute, else Undefined.
Result<Value> get_item(Interpreter& in, const Value& obj, const Value& key);
// obj[start:stop:step]; each bound may be None/Undefined (omitted).
Result<Value> get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop,
                        const Value& step);
// Python iter(v) materialized: list items, dict keys, string code points; Undefined is empty.
Result<std::shared_ptr<const ListData>> iterate(Interpreter& in, const Value& v);
// Python len(v).
Result<int64_t> py_len(const Value& v);
// Python str(v), capped at the interpreter's value size limit.
Result<std::string> to_string(Interpreter& in, const Value& v);
// An integer index (int or bool, like Python's __index__); errors otherwise.
Result<int64_t> to_index(const Value& v, std::string_view what);
// Python int(float): truncates; errors for NaN, infinities and values beyond 64 bits.
Result<int64_t> float_to_int(double d);

// ---- methods and globals (jinja_methods.cpp) ----

enum class MethodKind : uint8_t { kNone, kSafe, kUnsafe };
// Whether `obj.name` is a Python method; kUnsafe for ones the immutable sandbox blocks
// (list.append, dict.update, ...).
MethodKind find_method(const Value& obj, std::string_view name);
Result<Value> call_method(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args);
// The message Jinja's sandbox gives for a blocked attribute.
std::string unsafe_message(const Value& obj, std::string_view name);
// Adds range, dict, namespace, cycler, joiner, raise_exception and strftime_now.
void install_globals(Scope& globals);

// ---- formatting (jinja_format.cpp) ----

// str.format(*args, **kwargs).
Result<std::string> py_str_format(Interpreter& in, std::string_view fmt, const CallArgs& args);
// fmt % args (printf-style; args may be a tuple, a dict or a single value).
Result<std::string> py_percent_format(Interpreter& in, std::string_view fmt, const Value& args);

// ---- filters and tests (jinja_filters.cpp, jinja_seq_filters.cpp, jinja_predicates.cpp) ----

using FilterFn = Result<Value> (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = Result<bool> (*)(Interpreter&, const Value&, CallArgs&);
FilterFn find_filter(std::string_view name);
// For filters that take no arguments besides their input: an error naming the filter otherwise.
Status filter_no_args(std::string_view filter, const CallArgs& a);
FilterFn find_sequence_filter(std::string_view name);  // the part in jinja_seq_filters.cpp
TestFn find_test(std::string_view name);
// Jinja's make_attrgetter: "a.b.0" looked up item-first along the path.
Result<Value> get_attribute_path(Interpreter& in, const Value& obj, const Value& path);

}  // namespace sluice::jinja
