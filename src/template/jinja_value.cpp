#include "template/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "template/jinja_string.h"

namespace sluice::jinja {

// ---- construction ----

Value Value::undefined(std::string message) {
  return Value(UndefinedTag{std::make_shared<const std::string>(std::move(message))});
}

Value Value::string(std::string s, bool safe) {
  return Value(Str{std::make_shared<const std::string>(std::move(s)), safe});
}

Value Value::list(std::vector<Value> items, ListKind kind) {
  auto data = std::make_shared<ListData>();
  uint32_t depth = 0;
  for (const Value& v : items) depth = std::max(depth, v.depth());
  data->items = std::move(items);
  data->kind = kind;
  data->depth = depth + 1;
  return Value(std::shared_ptr<const ListData>(std::move(data)));
}

std::string Value::undefined_message() const {
  const auto& msg = std::get<0>(v_).message;
  return msg ? *msg : std::string("value is undefined");
}

bool Value::is_list_kind(ListKind k) const {
  return is_list() && as_list().kind == k;
}

uint32_t Value::depth() const {
  if (is_list()) return as_list().depth;
  if (is_dict()) return as_dict().depth;
  return 0;
}

const Value* DictData::find(std::string_view key) const {
  if (!string_index_.empty()) {
    auto it = string_index_.find(std::string(key));
    return it == string_index_.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* DictData::find(const Value& key, WorkMeter* meter) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items) {
    if (equals(k, key, meter)) return &v;
    if (meter && meter->exhausted()) return nullptr;
  }
  return nullptr;
}

void DictData::set(Value key, Value value, WorkMeter* meter) {
  depth = std::max(depth, value.depth() + 1);
  depth = std::max(depth, key.depth() + 1);
  if (key.is_string()) {
    constexpr size_t kIndexFrom = 8;
    if (string_index_.empty() && items.size() >= kIndexFrom) {
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].first.is_string()) string_index_.emplace(items[i].first.as_string(), i);
      }
    }
    if (!string_index_.empty() || items.size() >= kIndexFrom) {
      auto [it, inserted] = string_index_.emplace(key.as_string(), items.size());
      if (!inserted) {
        items[it->second].second = std::move(value);
        return;
      }
      items.emplace_back(std::move(key), std::move(value));
      return;
    }
  }
  for (auto& [k, v] : items) {
    if (equals(k, key, meter)) {
      v = std::move(value);
      return;
    }
    if (meter && meter->exhausted()) return;
  }
  items.emplace_back(std::move(key), std::move(value));
}

void DictData::append_unique(Value key, Value value) {
  if (key.is_string() && !string_index_.empty())
    string_index_.emplace(key.as_string(), items.size());
  depth = std::max({depth, value.depth() + 1, key.depth() + 1});
  items.emplace_back(std::move(key), std::move(value));
}

const Value* NamespaceObject::find(std::string_view name) const {
  for (const auto& [k, v] : attrs_) {
    if (k == name) return &v;
  }
  return nullptr;
}

void NamespaceObject::set(std::string_view name, Value v) {
  for (auto& [k, old] : attrs_) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  attrs_.emplace_back(std::string(name), std::move(v));
}

// ---- Python semantics ----

bool truthy(const Value& v) {
  if (v.is_undefined() || v.is_none()) return false;
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return v.as_int() != 0;
  if (v.is_float()) return v.as_double() != 0.0;
  if (v.is_string()) return !v.as_string().empty();
  if (v.is_list()) return v.as_list().kind == ListKind::kGenerator || !v.as_list().items.empty();
  if (v.is_dict()) return !v.as_dict().items.empty();
  return v.as_object()->truthy();
}

std::string type_name(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "NoneType";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_string()) return v.is_safe() ? "Markup" : "str";
  if (v.is_dict()) return "dict";
  if (v.is_list()) {
    switch (v.as_list().kind) {
      case ListKind::kList:
        return "list";
      case ListKind::kTuple:
        return "tuple";
      case ListKind::kGenerator:
        return "generator";
      case ListKind::kKeys:
        return "dict_keys";
      case ListKind::kValues:
        return "dict_values";
      case ListKind::kItems:
        return "dict_items";
    }
  }
  return v.as_object()->type_name();
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_undefined()) return "jinja2.runtime.Undefined object";
  if (v.is_safe()) return "markupsafe.Markup object";
  if (v.is_object()) {
    std::string module = v.as_object()->module();
    std::string name = v.as_object()->type_name();
    return module == "builtins" ? name + " object" : module + "." + name + " object";
  }
  return type_name(v) + " object";
}

namespace {

Status too_large(size_t limit) {
  return make_error("converting a value to a string exceeds the size limit of ", limit, " bytes");
}

// Containers being printed, for Python's recursive-repr guard ("[...]", "{...}"): only
// reachable through namespaces, the one mutable object.
using Visiting = std::vector<const void*>;

Status append_repr_impl(std::string& out, const Value& v, size_t limit, int depth,
                        Visiting& visiting);
Status append_repr_inner(std::string& out, const Value& v, size_t limit, int depth,
                         Visiting& visiting);

Status append_str_impl(std::string& out, const Value& v, size_t limit, int depth,
                       Visiting& visiting) {
  if (v.is_undefined()) return {};
  if (v.is_string()) {
    out += v.as_string();
    return out.size() > limit ? too_large(limit) : Status();
  }
  return append_repr_impl(out, v, limit, depth, visiting);
}

void append_int(std::string& out, int64_t i) {
  out += std::to_string(i);
}

Status append_seq(std::string& out, const std::vector<Value>& items, size_t limit, int depth,
                  Visiting& visiting) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    SLUICE_RETURN_IF_ERROR(append_repr_impl(out, items[i], limit, depth + 1, visiting));
    if (out.size() > limit) return too_large(limit);
  }
  return {};
}

bool is_visiting(const Visiting& visiting, const void* p) {
  return std::find(visiting.begin(), visiting.end(), p) != visiting.end();
}

Status append_repr_impl(std::string& out, const Value& v, size_t limit, int depth,
                        Visiting& visiting) {
  // Containers are depth-bounded; only namespaces (mutable, possibly cyclic) can nest deeper.
  if (depth > static_cast<int>(4 * kMaxValueDepth)) {
    out += "...";
    return {};
  }
  const void* container = v.is_list()   ? static_cast<const void*>(&v.as_list())
                          : v.is_dict() ? static_cast<const void*>(&v.as_dict())
                                        : nullptr;
  if (container && is_visiting(visiting, container)) {
    out += v.is_dict() ? "{...}" : v.is_list_kind(ListKind::kTuple) ? "(...)" : "[...]";
    return {};
  }
  if (container) visiting.push_back(container);
  Status st = append_repr_inner(out, v, limit, depth, visiting);
  if (container) visiting.pop_back();
  return st;
}

Status append_repr_inner(std::string& out, const Value& v, size_t limit, int depth,
                         Visiting& visiting) {
  if (v.is_undefined()) {
    out += "Undefined";
  } else if (v.is_none()) {
    out += "None";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "True" : "False";
  } else if (v.is_int()) {
    append_int(out, v.as_int());
  } else if (v.is_float()) {
    append_py_float(out, v.as_double());
  } else if (v.is_string()) {
    if (v.is_safe()) out += "Markup(";
    append_py_repr(out, v.as_string());
    if (v.is_safe()) out += ")";
  } else if (v.is_list()) {
    const ListData& l = v.as_list();
    switch (l.kind) {
      case ListKind::kList:
        out += '[';
        SLUICE_RETURN_IF_ERROR(append_seq(out, l.items, limit, depth, visiting));
        out += ']';
        break;
      case ListKind::kTuple:
        out += '(';
        SLUICE_RETURN_IF_ERROR(append_seq(out, l.items, limit, depth, visiting));
        if (l.items.size() == 1) out += ',';
        out += ')';
        break;
      case ListKind::kGenerator:
        out += "<generator object>";
        break;
      case ListKind::kKeys:
      case ListKind::kValues:
      case ListKind::kItems:
        out += type_name(v);
        out += "([";
        SLUICE_RETURN_IF_ERROR(append_seq(out, l.items, limit, depth, visiting));
        out += "])";
        break;
    }
  } else if (v.is_dict()) {
    out += '{';
    bool first = true;
    for (const auto& [k, val] : v.as_dict().items) {
      if (!first) out += ", ";
      first = false;
      SLUICE_RETURN_IF_ERROR(append_repr_impl(out, k, limit, depth + 1, visiting));
      out += ": ";
      SLUICE_RETURN_IF_ERROR(append_repr_impl(out, val, limit, depth + 1, visiting));
      if (out.size() > limit) return too_large(limit);
    }
    out += '}';
  } else {
    const Object* o = v.as_object();
    if (o->kind() != Object::Kind::kNamespace) {
      out += o->repr();
    } else if (is_visiting(visiting, o)) {
      out += "<Namespace {...}>";
    } else {
      visiting.push_back(o);
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, val] : static_cast<const NamespaceObject*>(o)->attrs()) {
        if (!first) out += ", ";
        first = false;
        append_py_repr(out, k);
        out += ": ";
        Status st = append_repr_impl(out, val, limit, depth + 1, visiting);
        if (!st.ok()) return st;
      }
      out += "}>";
      visiting.pop_back();
    }
  }
  return out.size() > limit ? too_large(limit) : Status();
}

}  // namespace

Status append_str(std::string& out, const Value& v, size_t limit) {
  Visiting visiting;
  return append_str_impl(out, v, limit, 0, visiting);
}

Status append_repr(std::string& out, const Value& v, size_t limit) {
  Visiting visiting;
  return append_repr_impl(out, v, limit, 0, visiting);
}

std::string short_repr(const Value& v) {
  constexpr size_t kMax = 200;
  std::string out;
  if (!append_repr(out, v, kMax).ok() || out.size() > kMax) {
    out.resize(std::min(out.size(), kMax));
    out += "...";
  }
  return out;
}

namespace {

// Exact int64 vs double comparison: -1, 0, 1, or 2 when d is NaN.
int compare_int_double(int64_t i, double d) {
  if (std::isnan(d)) return 2;
  long double li = static_cast<long double>(i);
  long double ld = static_cast<long double>(d);
  return li < ld ? -1 : (li > ld ? 1 : 0);
}

}  // namespace

bool equals(const Value& a, const Value& b, WorkMeter* meter) {
  if (meter && !meter->spend()) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() && b.is_float()) return a.as_double() == b.as_double();
    if (a.is_float()) return compare_int_double(b.as_int(), a.as_double()) == 0;
    if (b.is_float()) return compare_int_double(a.as_int(), b.as_double()) == 0;
    return a.as_int() == b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_none() && b.is_none()) return true;
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_list() && b.is_list()) {
    const ListData& la = a.as_list();
    const ListData& lb = b.as_list();
    if (&la == &lb) return true;
    if (la.kind != lb.kind) return false;
    if (la.kind == ListKind::kGenerator || la.kind == ListKind::kValues) return false;  // identity
    if (la.items.size() != lb.items.size()) return false;
    if (la.kind == ListKind::kKeys || la.kind == ListKind::kItems) {  // set-like views
      for (const Value& x : la.items) {
        bool found = false;
        for (const Value& y : lb.items) {
          if (equals(x, y, meter)) {
            found = true;
            break;
          }
        }
        if (!found) return false;
      }
      return true;
    }
    for (size_t i = 0; i < la.items.size(); ++i) {
      if (!equals(la.items[i], lb.items[i], meter)) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const DictData& da = a.as_dict();
    const DictData& db = b.as_dict();
    if (&da == &db) return true;
    if (da.items.size() != db.items.size()) return false;
    for (const auto& [k, v] : da.items) {
      const Value* other = db.find(k, meter);
      if (!other || !equals(v, *other, meter)) return false;
    }
    return true;
  }
  if (a.is_object() && b.is_object()) return a.as_object() == b.as_object();
  return false;
}

Result<size_t> hash_value(const Value& v, WorkMeter* meter) {
  if (meter && !meter->spend())
    return make_error("template exceeded the step limit (hashing nested values)");
  if (v.is_float()) {
    double d = v.as_double();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
      return std::hash<int64_t>()(static_cast<int64_t>(d));
    }
    return std::hash<double>()(d);
  }
  if (v.is_integral()) return std::hash<int64_t>()(v.as_int());
  if (v.is_string()) return std::hash<std::string_view>()(v.as_string());
  if (v.is_none()) return size_t{0x9e3779b9};
  if (v.is_undefined()) return size_t{0x7f4a7c15};
  if (v.is_object()) return std::hash<const void*>()(v.as_object());
  if (v.is_list_kind(ListKind::kTuple)) {
    size_t h = 0x345678;
    for (const Value& item : v.as_list().items) {
      SLUICE_ASSIGN_OR_RETURN(size_t hi, hash_value(item, meter));
      h = (h ^ hi) * 1000003u;
    }
    return h;
  }
  return make_error("unhashable type: '", type_name(v), "'");
}

Result<bool> less_than(const Value& a, const Value& b, WorkMeter* meter) {
  if (meter && !meter->spend())
    return make_error("template exceeded the step limit (comparing nested values)");
  if (a.is_number() && b.is_number()) {
    if (a.is_float() && b.is_float()) return a.as_double() < b.as_double();
    if (a.is_float()) return compare_int_double(b.as_int(), a.as_double()) == 1;
    if (b.is_float()) return compare_int_double(a.as_int(), b.as_double()) == -1;
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string())
    return a.as_string() < b.as_string();  // UTF-8 = code point order
  bool seq_a = a.is_list_kind(ListKind::kList) || a.is_list_kind(ListKind::kTuple);
  if (seq_a && b.is_list() && a.as_list().kind == b.as_list().kind) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i], meter)) return less_than(x[i], y[i], meter);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) return Error{a.undefined_message()};
  if (b.is_undefined()) return Error{b.undefined_message()};
  return make_error("'<' not supported between instances of '", type_name(a), "' and '",
                    type_name(b), "'");
}

// ---- JSON ----

namespace {

Result<Value> from_json_impl(const nlohmann::ordered_json& j, uint32_t depth) {
  using T = nlohmann::ordered_json::value_t;
  if (depth > kMaxValueDepth)
    return make_error("JSON input nested deeper than ", kMaxValueDepth, " levels");
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value::boolean(j.get<bool>());
    case T::number_integer:
      return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case T::number_float:
      return Value::number(j.get<double>());
    case T::string:
      return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        SLUICE_ASSIGN_OR_RETURN(Value v, from_json_impl(e, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case T::object: {
      DictData d;
      for (const auto& [k, e] : j.items()) {
        SLUICE_ASSIGN_OR_RETURN(Value v, from_json_impl(e, depth + 1));
        d.set(Value::string(k), std::move(v));
      }
      return make_dict(std::move(d));
    }
    default:
      return make_error("unsupported JSON value (binary or discarded)");
  }
}

Status not_serializable(const Value& v) {
  return make_error("Object of type ", type_name(v), " is not JSON serializable");
}

Status json_key(std::string& out, const Value& k, const JsonOptions& opts) {
  if (k.is_string()) {
    append_json_string(out, k.as_string(), opts.ensure_ascii);
  } else if (k.is_bool()) {
    out += k.as_bool() ? "\"true\"" : "\"false\"";
  } else if (k.is_int()) {
    out += '"' + std::to_string(k.as_int()) + '"';
  } else if (k.is_float()) {
    out += '"';
    append_py_float(out, k.as_double());
    out += '"';
  } else if (k.is_none()) {
    out += "\"null\"";
  } else {
    return make_error("keys must be str, int, float, bool or None, not ", type_name(k));
  }
  return {};
}

void json_newline(std::string& out, const JsonOptions& opts, int level) {
  out += '\n';
  for (int i = 0; i < level; ++i) out += opts.indent;
}

}  // namespace

Result<Value> from_json(const nlohmann::ordered_json& j) {
  return from_json_impl(j, 0);
}

Status to_json(std::string& out, const Value& v, const JsonOptions& opts, int level) {
  if (out.size() > opts.max_bytes)
    return make_error("tojson output exceeds ", opts.max_bytes, " bytes");
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    double d = v.as_double();
    if (std::isnan(d)) {
      out += "NaN";
    } else if (std::isinf(d)) {
      out += d < 0 ? "-Infinity" : "Infinity";
    } else {
      append_py_float(out, d);
    }
  } else if (v.is_string()) {
    append_json_string(out, v.as_string(), opts.ensure_ascii);
  } else if (v.is_list_kind(ListKind::kList) || v.is_list_kind(ListKind::kTuple)) {
    const auto& items = v.as_list().items;
    if (items.empty()) {
      out += "[]";
      return {};
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += opts.item_separator;
      if (opts.has_indent) json_newline(out, opts, level + 1);
      SLUICE_RETURN_IF_ERROR(to_json(out, items[i], opts, level + 1));
    }
    if (opts.has_indent) json_newline(out, opts, level);
    out += ']';
  } else if (v.is_dict()) {
    const auto& dict_items = v.as_dict().items;
    if (dict_items.empty()) {
      out += "{}";
      return {};
    }
    std::vector<const std::pair<Value, Value>*> order;
    order.reserve(dict_items.size());
    for (const auto& kv : dict_items) order.push_back(&kv);
    if (opts.sort_keys) {
      Status err;
      std::stable_sort(order.begin(), order.end(), [&](const auto* x, const auto* y) {
        auto r = less_than(x->first, y->first, opts.meter);
        if (!r.ok()) {
          if (err.ok()) err = r.status();
          return false;
        }
        return *r;
      });
      SLUICE_RETURN_IF_ERROR(err);
    }
    out += '{';
    for (size_t i = 0; i < order.size(); ++i) {
      if (i) out += opts.item_separator;
      if (opts.has_indent) json_newline(out, opts, level + 1);
      SLUICE_RETURN_IF_ERROR(json_key(out, order[i]->first, opts));
      out += opts.key_separator;
      SLUICE_RETURN_IF_ERROR(to_json(out, order[i]->second, opts, level + 1));
    }
    if (opts.has_indent) json_newline(out, opts, level);
    out += '}';
  } else {
    return not_serializable(v);
  }
  if (out.size() > opts.max_bytes)
    return make_error("tojson output exceeds ", opts.max_bytes, " bytes");
  return {};
}

}  // namespace sluice::jinja
