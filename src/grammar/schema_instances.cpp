// The bench schema and the random instance generator (schema_instances.h).
#include "grammar/schema_instances.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "grammar/json_schema.h"

namespace sluice::grammar {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kNestedSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 80},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "status": {"enum": ["active", "inactive", "pending", "banned"]},
    "address": {
      "type": "object",
      "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "postal_code": {"type": "string", "maxLength": 10},
        "country": {"enum": ["US", "CA", "DE", "FR", "JP", "BR"]}
      },
      "required": ["street", "city", "country"],
      "additionalProperties": false
    },
    "orders": {
      "type": "array",
      "maxItems": 8,
      "items": {
        "type": "object",
        "properties": {
          "order_id": {"type": "integer", "minimum": 1},
          "placed_at": {"type": "string", "format": "date-time"},
          "lines": {
            "type": "array",
            "minItems": 1,
            "items": {
              "type": "object",
              "properties": {
                "sku": {"type": "string"},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
                "unit_price": {"type": "number", "minimum": 0}
              },
              "required": ["sku", "quantity"],
              "additionalProperties": false
            }
          },
          "gift": {"type": "boolean"},
          "notes": {"type": ["string", "null"]}
        },
        "required": ["order_id", "lines"],
        "additionalProperties": false
      }
    },
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}
  },
  "required": ["name", "status", "orders"],
  "additionalProperties": false
})";

const std::vector<std::string_view> kWords = {
    "the",    "order",   "Main",  "Street", "Berlin", "shipped", "Zürich",  "café",   "data",
    "alpha",  "42",      "Smith", "Anna",   "Paris",  "north",   "express", "item",   "red",
    "blue",   "São",     "Paulo", "東京",   "box",    "gift",    "wrap",    "urgent", "Müller",
    "review", "pending", "label", "A-113",  "note:",  "small",   "large",   "ref#7",  "ok"};

class Generator {
 public:
  Generator(const ojson& root, std::mt19937_64& rng) : root_(root), rng_(rng) {}

  // nullopt: a keyword the generator does not know.
  std::optional<ojson> gen(const ojson& s, int depth) {
    if (depth > 12) return std::nullopt;
    if (s.is_boolean())
      return s.get<bool>() ? std::optional<ojson>(word_string(0, 12)) : std::nullopt;
    if (!s.is_object()) return std::nullopt;
    for (const char* k : {"allOf", "not", "pattern", "patternProperties", "if", "contains",
                          "uniqueItems", "multipleOf", "dependentRequired", "minProperties"})
      if (s.contains(k)) return std::nullopt;
    if (s.contains("$ref")) {
      const ojson* t = resolve(s["$ref"]);
      return t ? gen(*t, depth + 1) : std::nullopt;
    }
    if (s.contains("const")) return s["const"];
    if (s.contains("enum") && s["enum"].is_array() && !s["enum"].empty())
      return s["enum"][pick(s["enum"].size())];
    for (const char* k : {"anyOf", "oneOf"})
      if (s.contains(k) && s[k].is_array() && !s[k].empty())
        return gen(s[k][pick(s[k].size())], depth + 1);
    std::string type;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string())
        type = t.get<std::string>();
      else if (t.is_array() && !t.empty() && t[pick(t.size())].is_string())
        type = t[pick(t.size())].get<std::string>();
      else
        return std::nullopt;
    } else if (s.contains("properties") || s.contains("required")) {
      type = "object";
    } else if (s.contains("items") || s.contains("prefixItems")) {
      type = "array";
    } else {
      type = "string";
    }
    if (type == "object") return object(s, depth);
    if (type == "array") return array(s, depth);
    if (type == "string") return word_string(s.value("minLength", 0), s.value("maxLength", 40));
    if (type == "integer") return ojson(int64_t(std::llround(number(s, true))));
    if (type == "number") return ojson(std::round(number(s, false) * 100) / 100);
    if (type == "boolean") return ojson(pick(2) == 1);
    if (type == "null") return ojson(nullptr);
    return std::nullopt;
  }

 private:
  size_t pick(size_t n) { return size_t(rng_() % n); }

  const ojson* resolve(const ojson& ref) {
    if (!ref.is_string()) return nullptr;
    std::string r = ref.get<std::string>();
    if (r == "#") return &root_;
    if (!r.starts_with("#/")) return nullptr;
    try {
      const ojson& t = root_.at(ojson::json_pointer(r.substr(1)));
      return &t;
    } catch (const std::exception&) {
      return nullptr;
    }
  }

  std::optional<ojson> object(const ojson& s, int depth) {
    ojson o = ojson::object();
    std::vector<std::string> required;
    if (s.contains("required") && s["required"].is_array())
      for (const ojson& r : s["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    auto is_required = [&](const std::string& k) {
      return std::find(required.begin(), required.end(), k) != required.end();
    };
    if (s.contains("properties") && s["properties"].is_object()) {
      for (const auto& [k, v] : s["properties"].items()) {
        if (!is_required(k) && (depth > 6 || pick(10) < 3)) continue;
        auto x = gen(v, depth + 1);
        if (!x) return std::nullopt;
        o[k] = std::move(*x);
      }
    }
    for (const std::string& k : required) {
      if (o.contains(k)) continue;
      const ojson& ap = s.value("additionalProperties", ojson(true));
      auto x = gen(ap, depth + 1);
      if (!x) return std::nullopt;
      o[k] = std::move(*x);
    }
    return o;
  }

  std::optional<ojson> array(const ojson& s, int depth) {
    int64_t lo = s.value("minItems", int64_t(0));
    int64_t hi = std::min<int64_t>(s.value("maxItems", lo + 4), lo + 4);
    if (depth > 6) hi = lo;
    int64_t n = lo + int64_t(pick(size_t(hi - lo + 1)));
    ojson a = ojson::array();
    const ojson* prefix =
        s.contains("prefixItems") && s["prefixItems"].is_array() ? &s["prefixItems"] : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      const ojson* item = nullptr;
      if (prefix && size_t(i) < prefix->size())
        item = &(*prefix)[size_t(i)];
      else if (s.contains("items"))
        item = &s["items"];
      std::optional<ojson> x =
          item ? gen(*item, depth + 1) : std::optional<ojson>(word_string(0, 12));
      if (!x) return std::nullopt;
      a.push_back(std::move(*x));
    }
    return a;
  }

  double number(const ojson& s, bool integer) {
    double lo = -1000, hi = 100000;
    if (s.contains("minimum") && s["minimum"].is_number()) lo = s["minimum"].get<double>();
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number())
      lo = s["exclusiveMinimum"].get<double>() + (integer ? 1 : 0.01);
    if (s.contains("maximum") && s["maximum"].is_number()) hi = s["maximum"].get<double>();
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number())
      hi = s["exclusiveMaximum"].get<double>() - (integer ? 1 : 0.01);
    if (hi < lo) hi = lo;
    if (hi - lo > 1e6) hi = lo + 1e6;
    // Mostly small values (a model writes quantities, not uniform 64-bit numbers).
    double span = pick(4) == 0 ? hi - lo : std::min(hi - lo, 100.0);
    double x = lo + span * double(rng_() % 1000001) / 1e6;
    if (!integer) return x;
    return std::clamp(std::round(x), std::ceil(lo), std::max(std::ceil(lo), std::floor(hi)));
  }

  ojson word_string(int64_t min_len, int64_t max_len) {
    std::string out;
    int64_t n_cp = 0;
    auto count = [](std::string_view w) {
      int64_t n = 0;
      for (unsigned char c : w) n += (c & 0xC0) != 0x80;
      return n;
    };
    int64_t target = std::clamp<int64_t>(int64_t(1 + pick(40)), min_len, max_len);
    while (n_cp < target) {
      std::string w(kWords[pick(kWords.size())]);
      if (pick(30) == 0) w = pick(2) ? "\"quoted\"" : "line\nbreak";
      if (!out.empty()) w = " " + w;
      if (n_cp + count(w) > max_len) break;
      out += w;
      n_cp += count(w);
    }
    while (n_cp < min_len) {
      out += "x";
      ++n_cp;
    }
    return ojson(out);
  }

  const ojson& root_;
  std::mt19937_64& rng_;
};

void write(const ojson& v, bool pretty, int indent, std::string& out) {
  auto newline = [&](int n) {
    out += '\n';
    out.append(size_t(n), ' ');
  };
  if (v.is_object() && !v.empty()) {
    out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += pretty ? "," : ", ";
      first = false;
      if (pretty) newline(indent + 2);
      out += ojson(k).dump();
      out += ": ";
      write(x, pretty, indent + 2, out);
    }
    if (pretty) newline(indent);
    out += '}';
  } else if (v.is_array() && !v.empty()) {
    out += '[';
    bool first = true;
    for (const ojson& x : v) {
      if (!first) out += pretty ? "," : ", ";
      first = false;
      if (pretty) newline(indent + 2);
      write(x, pretty, indent + 2, out);
    }
    if (pretty) newline(indent);
    out += ']';
  } else {
    out += v.dump();
  }
}

}  // namespace

std::string_view nested_bench_schema() {
  return kNestedSchema;
}

std::optional<ojson> random_instance(const ojson& schema, std::mt19937_64& rng, int tries) {
  Generator gen(schema, rng);
  for (int i = 0; i < tries; ++i) {
    std::optional<ojson> v = gen.gen(schema, 0);
    if (!v) return std::nullopt;
    Result<bool> ok = json_schema_validate(schema, *v);
    if (!ok.ok()) return std::nullopt;
    if (*ok) return v;
  }
  return std::nullopt;
}

std::string instance_text(const ojson& v, bool pretty) {
  std::string out;
  write(v, pretty, 0, out);
  return out;
}

}  // namespace sluice::grammar
