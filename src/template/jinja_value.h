// The value model of the chat-template interpreter: Python's object model as far as Jinja
// templates can observe it (None/bool/int/float/str/list/tuple/dict, Jinja's Undefined,
// and interpreter objects such as namespaces, loops and macros).
//
// Ownership: strings, lists and dicts are immutable once built and shared by refcount, so
// copying a Value is cheap and containers form a DAG. Objects that can close a reference
// cycle (namespaces, which templates mutate, and macros, which capture the scope they are
// stored in) live in the render's arena and Values point at them without owning them
// (a non-owning shared_ptr), so `{% set ns.self = ns %}` can neither leak nor dangle.
// Other objects (loop contexts, bound methods) are refcounted and freed as soon as unused.
// Container nesting depth is recorded at construction so recursive algorithms stay bounded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace sluice::jinja {

class Object;
struct ListData;
struct DictData;

// Python sequence flavours sharing ListData: they differ in repr, equality and whether they
// support len()/indexing (generators, dict views and iterators do not all).
enum class ListKind : uint8_t { kList, kTuple, kGenerator, kKeys, kValues, kItems };

// Containers nested deeper than this cannot be built (bounds every recursive algorithm).
constexpr uint32_t kMaxValueDepth = 200;

// Bounds the work of recursive comparison and hashing. Containers are shared, so a nest of
// depth d can unfold to 2^d elements; every element visited costs one unit, and once the
// budget is spent the operation stops early (its result is then meaningless: callers check
// exhausted() and fail with the step-limit error).
struct WorkMeter {
  uint64_t used = 0;
  uint64_t budget = UINT64_MAX;
  bool spend() { return ++used <= budget; }
  bool exhausted() const { return used > budget; }
};

class Value {
 public:
  struct UndefinedTag {
    std::shared_ptr<const std::string> message;  // why it is undefined (for errors); may be null
  };
  struct NoneTag {};
  struct Str {
    std::shared_ptr<const std::string> s;
    bool safe = false;  // markupsafe.Markup (from |safe): `+` with a plain str HTML-escapes it
  };

  Value() = default;  // Undefined
  static Value undefined(std::string message);
  static Value none() { return Value(NoneTag{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value number(double d) { return Value(d); }
  static Value string(std::string s, bool safe = false);
  static Value list(std::vector<Value> items, ListKind kind = ListKind::kList);
  static Value dict(std::shared_ptr<const DictData> d) { return Value(std::move(d)); }
  static Value object(std::shared_ptr<Object> o) { return Value(std::move(o)); }
  // A Value pointing at an arena-owned object without owning it.
  static Value arena_object(Object* o) {
    return Value(std::shared_ptr<Object>(std::shared_ptr<Object>(), o));
  }

  bool is_undefined() const { return v_.index() == 0; }
  bool is_none() const { return v_.index() == 1; }
  bool is_bool() const { return v_.index() == 2; }
  bool is_int() const { return v_.index() == 3; }  // excludes bool
  bool is_float() const { return v_.index() == 4; }
  bool is_integral() const { return is_int() || is_bool(); }  // Python isinstance(x, int)
  bool is_number() const { return is_int() || is_bool() || is_float(); }
  bool is_string() const { return v_.index() == 5; }
  bool is_list() const { return v_.index() == 6; }
  bool is_dict() const { return v_.index() == 7; }
  bool is_object() const { return v_.index() == 8; }
  bool is_safe() const { return is_string() && std::get<5>(v_).safe; }

  bool as_bool() const { return std::get<2>(v_); }
  // int or bool as int64.
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<3>(v_); }
  // Any number as double.
  double as_double() const { return is_float() ? std::get<4>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *std::get<5>(v_).s; }
  const std::shared_ptr<const std::string>& string_ptr() const { return std::get<5>(v_).s; }
  const ListData& as_list() const { return *std::get<6>(v_); }
  const std::shared_ptr<const ListData>& list_ptr() const { return std::get<6>(v_); }
  const DictData& as_dict() const { return *std::get<7>(v_); }
  const std::shared_ptr<const DictData>& dict_ptr() const { return std::get<7>(v_); }
  Object* as_object() const { return std::get<8>(v_).get(); }
  const std::shared_ptr<Object>& object_ptr() const { return std::get<8>(v_); }
  // The message an UndefinedError raised by using this Undefined carries.
  std::string undefined_message() const;

  bool is_list_kind(ListKind k) const;
  uint32_t depth() const;  // 0 for scalars, 1 + max child depth for containers

 private:
  using Storage = std::variant<UndefinedTag, NoneTag, bool, int64_t, double, Str,
                               std::shared_ptr<const ListData>, std::shared_ptr<const DictData>,
                               std::shared_ptr<Object>>;
  template <class T>
  explicit Value(T v) : v_(std::move(v)) {}

  Storage v_;
};

struct ListData {
  std::vector<Value> items;
  ListKind kind = ListKind::kList;
  uint32_t depth = 1;
};

// An insertion-ordered dict. Keys are hashable Values (str, numbers, None, tuples); string
// keys are indexed, others are found by linear scan with Python equality.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  uint32_t depth = 1;

  const Value* find(const Value& key, WorkMeter* meter = nullptr) const;
  const Value* find(std::string_view key) const;
  // Inserts or overwrites (keeping the original position, like a Python dict).
  void set(Value key, Value value, WorkMeter* meter = nullptr);
  // Appends a key known to be absent (copying another dict): no equality scan.
  void append_unique(Value key, Value value);

 private:
  std::unordered_map<std::string, size_t> string_index_;
};

inline Value make_dict(DictData d) {
  return Value::dict(std::make_shared<const DictData>(std::move(d)));
}

// Base of arena-owned interpreter objects. `type_name` and `module` give the Python type
// used in error messages ("'jinja2.utils.Namespace object' has no attribute 'x'").
class Object {
 public:
  enum class Kind : uint8_t {
    kNamespace,
    kLoop,
    kMacro,
    kFunction,
    kBoundMethod,
    kCycler,
    kJoiner
  };
  explicit Object(Kind kind) : kind_(kind) {}
  virtual ~Object() = default;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  Kind kind() const { return kind_; }
  bool is_callable() const { return kind_ != Kind::kNamespace && kind_ != Kind::kCycler; }
  virtual std::string type_name() const = 0;  // "Namespace"
  virtual std::string module() const { return "builtins"; }
  virtual std::string repr() const = 0;  // not used for namespaces (see append_repr)
  virtual bool truthy() const { return true; }

 private:
  Kind kind_;
};

// jinja2.utils.Namespace: the only object templates can mutate (`{% set ns.x = 1 %}`).
class NamespaceObject final : public Object {
 public:
  NamespaceObject() : Object(Kind::kNamespace) {}
  std::string type_name() const override { return "Namespace"; }
  std::string module() const override { return "jinja2.utils"; }
  std::string repr() const override { return "<Namespace>"; }

  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value v);
  const std::vector<std::pair<std::string, Value>>& attrs() const { return attrs_; }

 private:
  std::vector<std::pair<std::string, Value>> attrs_;
};

// ---- Python semantics over Values (jinja_value.cpp) ----

// Python truthiness; Undefined is false.
bool truthy(const Value& v);
// Python type(x).__name__: 'str', 'int', 'NoneType', 'Undefined', ...
std::string type_name(const Value& v);
// jinja2.utils.object_type_repr: 'dict object', 'None', 'jinja2.utils.Namespace object'.
std::string object_type_repr(const Value& v);
// Python str(x) / repr(x) appended to `out`; an error once `out` grows past `limit` bytes
// (a list repeated by `*` can otherwise print gigabytes). Undefined prints as "".
Status append_str(std::string& out, const Value& v, size_t limit);
Status append_repr(std::string& out, const Value& v, size_t limit);
// repr() cut to ~200 bytes, for error messages.
std::string short_repr(const Value& v);
// Python ==.
bool equals(const Value& a, const Value& b, WorkMeter* meter = nullptr);
// Python hash() contract: equal values hash equal. Errors for unhashable values.
Result<size_t> hash_value(const Value& v, WorkMeter* meter = nullptr);
// Python <; an error for unorderable types ("'<' not supported between ...").
Result<bool> less_than(const Value& a, const Value& b, WorkMeter* meter = nullptr);

// Builds a Value from JSON (objects keep their key order).
Result<Value> from_json(const nlohmann::ordered_json& j);

struct JsonOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;  // used when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  size_t max_bytes = 64u << 20;
  WorkMeter* meter = nullptr;  // for sort_keys comparisons
};
// json.dumps(v, ...) as Python writes it; errors for values JSON cannot represent.
Status to_json(std::string& out, const Value& v, const JsonOptions& opts, int level = 0);

}  // namespace sluice::jinja
