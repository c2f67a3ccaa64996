// json_schema_to_grammar: the JSON Schema Test Suite (draft 2020-12) run through the grammar
// (every valid instance accepted, compact and pretty; every invalid one rejected; refusals
// counted), exact number ranges against an independent decimal comparison, the whitespace
// bound, refusal messages, string spellings, and random schemas with generated instances
// (accepted) and random instances (grammar == validator).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace sluice::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> compile(const ojson& schema, const JsonSchemaOptions& opts = {}) {
  auto spec = json_schema_to_grammar(schema, opts);
  if (!spec.ok()) {
    ADD_FAILURE() << schema.dump() << ": " << spec.message();
    return nullptr;
  }
  auto g = lower(*spec);
  if (!g.ok()) {
    ADD_FAILURE() << "lower(" << schema.dump() << "): " << g.message();
    return nullptr;
  }
  return std::move(g).value();
}

std::shared_ptr<const Grammar> compile(const char* schema, const JsonSchemaOptions& opts = {}) {
  return compile(ojson::parse(schema), opts);
}

std::string refusal(const char* schema) {
  auto spec = json_schema_to_grammar(ojson::parse(schema));
  return spec.ok() ? "(compiled)" : spec.message();
}

// --- the JSON Schema Test Suite ---

// Instances the grammar decides differently from the suite on purpose (see json_schema.h).
// An entry needs a reason a reviewer accepts.
struct KnownInexact {
  const char* file;
  const char* group;  // description prefix
  const char* test;   // description prefix
  const char* reason;
};
constexpr const char* kFormatEnforced =
    "structured output enforces these formats (json_schema_formats.h; tested against the "
    "suite's optional-format files), where 2020-12's default reading makes format an annotation";
constexpr std::array<KnownInexact, 10> kKnownInexact = {{
    {"format.json", "email format", "", kFormatEnforced},
    {"format.json", "ipv4 format", "", kFormatEnforced},
    {"format.json", "ipv6 format", "", kFormatEnforced},
    {"format.json", "hostname format", "", kFormatEnforced},
    {"format.json", "date format", "", kFormatEnforced},
    {"format.json", "date-time format", "", kFormatEnforced},
    {"format.json", "time format", "", kFormatEnforced},
    {"format.json", "uri format", "", kFormatEnforced},
    {"format.json", "uuid format", "", kFormatEnforced},
    {"format.json", "duration format", "", kFormatEnforced},
}};

const KnownInexact* known_inexact(const std::string& file, const std::string& group,
                                  const std::string& test) {
  for (const KnownInexact& k : kKnownInexact)
    if (file == k.file && group.rfind(k.group, 0) == 0 && test.rfind(k.test, 0) == 0) return &k;
  return nullptr;
}

TEST(JsonSchemaSuite, Draft2020_12) {
  SLUICE_REQUIRE_SHARED(suite, "testdata/json_schema_suite/draft2020-12");
  const std::filesystem::path dir = suite;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());

  struct Row {
    int groups = 0, compiled = 0, refused = 0, unsat = 0, instances = 0, passed = 0, inexact = 0;
  };
  std::map<std::string, Row> rows;
  std::vector<std::string> failures, refusals;
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    std::ifstream in(path);
    ojson groups = ojson::parse(in);
    Row& row = rows[file];
    for (const ojson& group : groups) {
      const ojson& schema = group["schema"];
      const std::string gdesc = group["description"];
      ++row.groups;
      auto spec = json_schema_to_grammar(schema);
      if (!spec.ok()) {
        if (spec.message().find("accepts no JSON value") != std::string::npos) {
          ++row.unsat;
          for (const ojson& t : group["tests"]) {
            ++row.instances;
            if (!t["valid"].get<bool>()) {
              ++row.passed;
            } else {
              failures.push_back(file + " / " + gdesc + " / " +
                                 t["description"].get<std::string>() +
                                 ": called unsatisfiable but the instance is valid");
            }
          }
        } else if (spec.message().find("unsupported") != std::string::npos) {
          ++row.refused;
          refusals.push_back(file + " / " + gdesc + ": " + spec.message());
        } else {
          failures.push_back(file + " / " + gdesc + ": unexpected error: " + spec.message());
        }
        continue;
      }
      auto g = lower(*spec);
      if (!g.ok()) {
        failures.push_back(file + " / " + gdesc + ": lower: " + g.message());
        continue;
      }
      ++row.compiled;
      for (const ojson& t : group["tests"]) {
        const std::string tdesc = t["description"];
        const bool valid = t["valid"];
        ++row.instances;
        bool ok = true;
        std::string why;
        for (const std::string& text : {t["data"].dump(), t["data"].dump(2)}) {
          if (matches(*g, text) != valid) {
            ok = false;
            why = (valid ? "rejected valid " : "accepted invalid ") + text;
            break;
          }
        }
        // The validator (the compiler's reading of the schema) must agree with the suite too.
        auto v = json_schema_validate(schema, t["data"]);
        if (ok && v.ok() && *v != valid) {
          ok = false;
          why = "validator says " + std::string(*v ? "valid" : "invalid");
        }
        if (ok) {
          ++row.passed;
        } else if (known_inexact(file, gdesc, tdesc)) {
          ++row.inexact;
        } else {
          failures.push_back(file + " / " + gdesc + " / " + tdesc + ": " + why +
                             "\n      schema: " + schema.dump());
        }
      }
    }
  }
  Row total;
  std::printf("%-32s %6s %8s %7s %5s %9s %7s %7s\n", "file", "groups", "compiled", "refused",
              "unsat", "instances", "passed", "inexact");
  for (const auto& [file, r] : rows) {
    std::printf("%-32s %6d %8d %7d %5d %9d %7d %7d\n", file.c_str(), r.groups, r.compiled,
                r.refused, r.unsat, r.instances, r.passed, r.inexact);
    total.groups += r.groups;
    total.compiled += r.compiled;
    total.refused += r.refused;
    total.unsat += r.unsat;
    total.instances += r.instances;
    total.passed += r.passed;
    total.inexact += r.inexact;
  }
  std::printf("%-32s %6d %8d %7d %5d %9d %7d %7d\n", "TOTAL", total.groups, total.compiled,
              total.refused, total.unsat, total.instances, total.passed, total.inexact);
  if (std::getenv("SLUICE_JSON_SCHEMA_REFUSALS"))
    for (const auto& r : refusals) std::printf("  refused: %s\n", r.c_str());
  std::string first;
  for (size_t i = 0; i < failures.size() && i < 15; ++i) first += "\n  " + failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " mismatches:" << first;
  // A regression guard on coverage: most groups compile.
  EXPECT_GT(total.compiled, total.groups / 2);
}

// --- numbers ---

// Independent decimal comparison of canonical-or-not number texts without exponent.
int cmp_dec(std::string a, std::string b) {
  auto split = [](std::string s, bool& neg, std::string& ip, std::string& fp) {
    neg = !s.empty() && s[0] == '-';
    if (neg) s.erase(0, 1);
    size_t dot = s.find('.');
    ip = s.substr(0, dot);
    fp = dot == std::string::npos ? "" : s.substr(dot + 1);
    ip.erase(0, std::min(ip.find_first_not_of('0'), ip.size()));
    while (!fp.empty() && fp.back() == '0') fp.pop_back();
    if (ip.empty() && fp.empty()) neg = false;
  };
  bool na, nb;
  std::string ia, fa, ib, fb;
  split(a, na, ia, fa);
  split(b, nb, ib, fb);
  if (na != nb) return na ? -1 : 1;
  size_t w = std::max(ia.size(), ib.size()), f = std::max(fa.size(), fb.size());
  std::string x = std::string(w - ia.size(), '0') + ia + fa + std::string(f - fa.size(), '0');
  std::string y = std::string(w - ib.size(), '0') + ib + fb + std::string(f - fb.size(), '0');
  int c = x.compare(y);
  c = c < 0 ? -1 : (c > 0 ? 1 : 0);
  return na ? -c : c;
}

TEST(JsonSchemaNumbers, IntegerRangesAreExact) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    int mag = int(rng() % 19);
    int64_t scale = 1;
    for (int i = 0; i < mag; ++i) scale *= 10;
    auto pick = [&] {
      int64_t v = int64_t(rng() % uint64_t(std::max<int64_t>(scale, 1)));
      return rng() % 2 ? -v : v;
    };
    int64_t lo = pick(), hi = lo + int64_t(rng() % 200) - 20;
    if (rng() % 4 == 0) hi = pick();
    bool has_lo = rng() % 6 != 0, has_hi = rng() % 6 != 0;
    bool lo_ex = rng() % 3 == 0, hi_ex = rng() % 3 == 0;
    ojson schema = {{"type", "integer"}};
    if (has_lo) schema[lo_ex ? "exclusiveMinimum" : "minimum"] = lo;
    if (has_hi) schema[hi_ex ? "exclusiveMaximum" : "maximum"] = hi;
    auto in = [&](int64_t v) {
      return (!has_lo || (lo_ex ? v > lo : v >= lo)) && (!has_hi || (hi_ex ? v < hi : v <= hi));
    };
    bool satisfiable = !(has_lo && has_hi) || (lo_ex ? lo + 1 : lo) <= (hi_ex ? hi - 1 : hi);
    auto spec = json_schema_to_grammar(schema);
    if (!spec.ok()) {
      EXPECT_FALSE(satisfiable) << schema.dump() << ": " << spec.message();
      continue;
    }
    auto g = lower(*spec);
    ASSERT_TRUE(g.ok()) << g.message();
    std::vector<int64_t> probe;
    for (int64_t c : {lo, hi, int64_t(0)})
      for (int64_t d = -40; d <= 40; ++d) probe.push_back(c + d);
    for (int i = 0; i < 40; ++i) probe.push_back(pick());
    for (int64_t v : probe) {
      std::string t = std::to_string(v);
      ASSERT_EQ(matches(*g, t), in(v)) << schema.dump() << " on " << t;
      ASSERT_EQ(matches(*g, t + ".0"), in(v)) << schema.dump() << " on " << t << ".0";
      if (v == 0) {
        ASSERT_EQ(matches(*g, "-0"), in(0)) << schema.dump();
      }
    }
    // Far values: 20 digits (beyond int64) and out-of-grammar spellings.
    EXPECT_EQ(matches(*g, "99999999999999999999"), !has_hi) << schema.dump();
    EXPECT_EQ(matches(*g, "-99999999999999999999"), !has_lo) << schema.dump();
    EXPECT_FALSE(matches(*g, "999999999999999999999")) << "21 digits";
    EXPECT_FALSE(matches(*g, "01"));
    EXPECT_FALSE(matches(*g, "1.5"));
    EXPECT_FALSE(matches(*g, "1e2"));
  }
}

TEST(JsonSchemaNumbers, DecimalRangesAreExact) {
  std::mt19937_64 rng(11);
  auto rand_dec = [&] {
    std::string s = std::to_string(rng() % (rng() % 2 ? 10 : 1000));
    int fd = int(rng() % 4);
    if (fd > 0) {
      std::string f;
      for (int i = 0; i < fd; ++i) f += char('0' + rng() % 10);
      while (!f.empty() && f.back() == '0') f.pop_back();
      if (!f.empty()) s += "." + f;
    }
    return rng() % 3 == 0 ? "-" + s : s;
  };
  for (int iter = 0; iter < 200; ++iter) {
    std::string lo = rand_dec(), hi = rand_dec();
    bool has_lo = rng() % 5 != 0, has_hi = rng() % 5 != 0;
    bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    std::string text = "{\"type\":\"number\"";
    if (has_lo) text += std::string(",\"") + (lo_ex ? "exclusiveMinimum" : "minimum") + "\":" + lo;
    if (has_hi) text += std::string(",\"") + (hi_ex ? "exclusiveMaximum" : "maximum") + "\":" + hi;
    text += "}";
    auto in = [&](const std::string& v) {
      if (has_lo && (lo_ex ? cmp_dec(v, lo) <= 0 : cmp_dec(v, lo) < 0)) return false;
      if (has_hi && (hi_ex ? cmp_dec(v, hi) >= 0 : cmp_dec(v, hi) > 0)) return false;
      return true;
    };
    auto spec = json_schema_to_grammar(ojson::parse(text));
    if (!spec.ok()) {
      ASSERT_NE(spec.message().find("accepts no JSON value"), std::string::npos) << spec.message();
      continue;
    }
    auto g = lower(*spec);
    ASSERT_TRUE(g.ok()) << g.message();
    // Candidates around both bounds: the bound's integer part +-1, many fractions, both signs.
    std::vector<std::string> cands;
    for (const std::string& b : {lo, hi, std::string("0")}) {
      std::string ip = b.substr(b[0] == '-' ? 1 : 0);
      std::string fp;
      if (size_t dot = ip.find('.'); dot != std::string::npos) {
        fp = ip.substr(dot + 1);
        ip = ip.substr(0, dot);
      }
      long long i0 = std::stoll(ip);
      for (long long i = std::max(0LL, i0 - 1); i <= i0 + 1; ++i) {
        std::vector<std::string> fracs = {
            "", ".0", ".00", ".5", ".05", ".1", ".99", ".001", ".9999999999999999999"};
        if (!fp.empty()) {
          fracs.push_back("." + fp);
          fracs.push_back("." + fp + "0");
          fracs.push_back("." + fp + "1");
          fracs.push_back("." + fp.substr(0, fp.size() - 1));
          std::string up = fp, down = fp;
          up.back() = char(std::min('9', char(up.back() + 1)));
          down.back() = char(std::max('0', char(down.back() - 1)));
          fracs.push_back("." + up);
          fracs.push_back("." + down);
        }
        for (const auto& f : fracs) {
          if (f == ".") continue;
          cands.push_back(std::to_string(i) + f);
          cands.push_back("-" + std::to_string(i) + f);
        }
      }
    }
    for (const std::string& c : cands) ASSERT_EQ(matches(*g, c), in(c)) << text << " on " << c;
  }
}

TEST(JsonSchemaNumbers, DigitBoundsAndSpellings) {
  auto g = compile(R"({"type": "number"})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "-0.5e+10"));
  EXPECT_TRUE(matches(g, "12345678901234567890"));
  EXPECT_FALSE(matches(g, "123456789012345678901"));  // 21 integer digits
  EXPECT_TRUE(matches(g, "0.12345678901234567890"));
  EXPECT_FALSE(matches(g, "0.123456789012345678901"));
  EXPECT_TRUE(matches(g, "1E-0001"));
  EXPECT_FALSE(matches(g, "1e12345"));
  EXPECT_FALSE(matches(g, "01"));
  EXPECT_FALSE(matches(g, "1."));
  EXPECT_FALSE(matches(g, ".5"));
  EXPECT_FALSE(matches(g, "+1"));
  auto i = compile(R"({"type": "integer"})");
  ASSERT_TRUE(i);
  EXPECT_TRUE(matches(i, "-0"));
  EXPECT_TRUE(matches(i, "7.000"));
  EXPECT_FALSE(matches(i, "7.01"));
  EXPECT_FALSE(matches(i, "1e2"));  // inexact by design: exponent spellings of integers
  auto m = compile(R"({"type": "integer", "multipleOf": 3})");
  ASSERT_TRUE(m);
  for (int v = -40; v <= 40; ++v) EXPECT_EQ(matches(m, std::to_string(v)), v % 3 == 0) << v;
  EXPECT_TRUE(matches(m, "12.0"));
  EXPECT_TRUE(matches(m, "123456789012345678"));
  EXPECT_FALSE(matches(m, "123456789012345679"));
  auto c = compile(R"({"const": 2.50})");
  ASSERT_TRUE(c);
  EXPECT_TRUE(matches(c, "2.5"));
  EXPECT_TRUE(matches(c, "2.500"));
  EXPECT_FALSE(matches(c, "2.51"));
  EXPECT_FALSE(matches(c, "2"));
}

// --- whitespace, strings, objects ---

TEST(JsonSchemaLexical, WhitespaceIsBounded) {
  JsonSchemaOptions opts;
  opts.max_indent = 4;
  auto g = compile(R"({"type": "array", "items": {"type": "integer"}})", opts);
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, "[1,2]"));
  EXPECT_TRUE(matches(g, "[ 1 , 2 ]"));
  EXPECT_TRUE(matches(g, "[\n    1,\n    2\n]"));
  EXPECT_TRUE(matches(g, "[\n\t\t1]"));
  EXPECT_FALSE(matches(g, "[\n     1]"));  // 5 spaces > max_indent
  EXPECT_FALSE(matches(g, "[  1]"));       // two spaces without a newline
  EXPECT_FALSE(matches(g, "[\t1]"));
  EXPECT_FALSE(matches(g, "[\r\n1]"));
  EXPECT_FALSE(matches(g, "[1]\n"));  // nothing around the root value
  EXPECT_FALSE(matches(g, " [1]"));
  EXPECT_FALSE(matches(g, "[\n\n1]"));
}

TEST(JsonSchemaLexical, StringsAreExactOnDecodedValues) {
  auto len = compile(R"({"type": "string", "minLength": 2, "maxLength": 2})");
  ASSERT_TRUE(len);
  EXPECT_TRUE(matches(len, R"("ab")"));
  EXPECT_TRUE(matches(len, R"("\n\u0041")"));       // escapes count as one character
  EXPECT_TRUE(matches(len, R"("a\ud83d\ude00")"));  // a surrogate pair is one character
  EXPECT_TRUE(matches(len, "\"a\xF0\x9F\x98\x80\""));
  EXPECT_FALSE(matches(len, R"("a\ud83d")"));  // lone surrogate
  EXPECT_FALSE(matches(len, R"("abc")"));
  EXPECT_FALSE(matches(len, "\"a\tb\""));  // raw control character
  auto c = compile(R"({"const": "fo/\"o"})");
  ASSERT_TRUE(c);
  EXPECT_TRUE(matches(c, R"("fo/\"o")"));
  EXPECT_TRUE(matches(c, R"("\u0066o\/\u0022\u006F")"));
  EXPECT_TRUE(matches(c, R"("\u0066o\/\u0022\u006f")"));
  EXPECT_FALSE(matches(c, R"("fo/\"O")"));
  auto p = compile(R"({"type": "string", "pattern": "^[a-c]+\\.$"})");
  ASSERT_TRUE(p);
  EXPECT_TRUE(matches(p, R"("ab.")"));
  EXPECT_TRUE(matches(p, R"("\u0061b\u002e")"));
  EXPECT_FALSE(matches(p, R"("abd.")"));
  auto big = compile(R"({"type": "string", "maxLength": 25000})");
  ASSERT_TRUE(big);
  EXPECT_TRUE(matches(big, "\"" + std::string(25000, 'x') + "\""));
  EXPECT_FALSE(matches(big, "\"" + std::string(25001, 'x') + "\""));
  EXPECT_TRUE(matches(big, "\"" + std::string(13999, 'x') + "\""));
}

TEST(JsonSchemaObjects, AdditionalKeysCannotSpellDeclaredNames) {
  auto g = compile(R"({"properties": {"foo": {"type": "integer"}, "fob": {"type": "null"}}})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"foo": 1, "bar": "x"})"));
  EXPECT_TRUE(matches(g, R"({"\u0066oo": 1})"));
  EXPECT_FALSE(matches(g, R"({"\u0066oo": "x"})"));  // it IS foo
  EXPECT_FALSE(matches(g, R"({"fo\u006f": "x"})"));
  EXPECT_TRUE(matches(g, R"({"fo": "x", "fooo": "x", "": 1, "fob": null})"));
  EXPECT_FALSE(matches(g, R"({"fob": 1})"));
  EXPECT_FALSE(matches(g, R"({"foo": 1, "foo": 2})"));  // declared keys at most once
}

TEST(JsonSchemaObjects, PropertyOrder) {
  const char* schema = R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "integer"}, "c": {"type": "integer"}}, "required": ["a", "c"],
      "additionalProperties": false})";
  auto any = compile(schema);
  ASSERT_TRUE(any);
  EXPECT_TRUE(matches(any, R"({"c":1,"a":2})"));
  EXPECT_TRUE(matches(any, R"({"b":3,"c":1,"a":2})"));
  EXPECT_FALSE(matches(any, R"({"b":3,"c":1})"));
  JsonSchemaOptions ordered;
  ordered.max_order_free_properties = 2;
  auto in_order = compile(schema, ordered);
  ASSERT_TRUE(in_order);
  EXPECT_TRUE(matches(in_order, R"({"a":2,"c":1})"));
  EXPECT_TRUE(matches(in_order, R"({"a":2,"b":3,"c":1})"));
  EXPECT_FALSE(matches(in_order, R"({"c":1,"a":2})"));  // inexact by design above the limit
  auto e = compile(R"({"enum": [{"x": 1, "y": [true, {"z": null}]}]})");
  ASSERT_TRUE(e);
  EXPECT_TRUE(matches(e, R"({"y":[true,{"z":null}],"x":1.0})"));
  EXPECT_FALSE(matches(e, R"({"y":[true,{"z":null}]})"));
  auto counted = compile(R"({"minProperties": 1, "maxProperties": 2,
      "properties": {"a": {"type": "integer"}}})");
  ASSERT_TRUE(counted);
  EXPECT_FALSE(matches(counted, "{}"));
  EXPECT_TRUE(matches(counted, R"({"x":"y"})"));
  EXPECT_TRUE(matches(counted, R"({"x":"y","a":1})"));
  EXPECT_FALSE(matches(counted, R"({"x":"y","a":1,"b":2})"));
  EXPECT_TRUE(matches(counted, "7"));  // maxProperties says nothing about numbers
  auto deps = compile(R"({"type": "object", "dependentRequired": {"a": ["b"]}})");
  ASSERT_TRUE(deps);
  EXPECT_TRUE(matches(deps, R"({"b":1})"));
  EXPECT_TRUE(matches(deps, R"({"b":1,"zz":0,"a":2})"));
  EXPECT_FALSE(matches(deps, R"({"a":2})"));
}

TEST(JsonSchemaArrays, ContainsCountsMatchingElements) {
  auto min2 = compile(R"({"type": "array", "items": {"type": "integer"},
      "contains": {"minimum": 10}, "minContains": 2})");
  ASSERT_TRUE(min2);
  EXPECT_TRUE(matches(min2, "[10,11]"));
  EXPECT_TRUE(matches(min2, "[1, 12, 2, 3, 10, 4]"));
  EXPECT_FALSE(matches(min2, "[1, 12, 2]"));
  EXPECT_FALSE(matches(min2, "[10, 11, \"x\"]"));
  EXPECT_FALSE(matches(min2, "[]"));
  auto max1 = compile(R"({"type": "array", "contains": {"type": "string"}, "maxContains": 1})");
  ASSERT_TRUE(max1);
  EXPECT_TRUE(matches(max1, R"([1, "a", null])"));
  EXPECT_FALSE(matches(max1, R"(["a", "b"])"));
  EXPECT_FALSE(matches(max1, "[1]"));  // minContains defaults to 1
  EXPECT_FALSE(matches(max1, "[]"));
  EXPECT_NE(refusal(R"({"contains": {"const": 1}, "maxContains": 1})").find("maxContains"),
            std::string::npos);
}

TEST(JsonSchemaArrays, UniqueItemsOverSmallEnums) {
  auto g = compile(R"({"type": "array", "uniqueItems": true, "minItems": 1,
      "items": {"enum": ["red", "green", "blue", 1, 1.0]}})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"(["blue", "red"])"));
  EXPECT_TRUE(matches(g, R"([1.0, "green", "red", "blue"])"));
  EXPECT_FALSE(matches(g, R"(["red", "red"])"));
  EXPECT_FALSE(matches(g, R"([1, 1.0])"));  // equal values
  EXPECT_FALSE(matches(g, "[]"));
  auto b = compile(R"({"type": "array", "uniqueItems": true, "items": {"type": "boolean"}})");
  ASSERT_TRUE(b);
  EXPECT_TRUE(matches(b, "[true, false]"));
  EXPECT_FALSE(matches(b, "[true, true]"));
  EXPECT_EQ(refusal(R"({"items": {"type": "integer"}, "uniqueItems": true})"),
            "json_schema: unsupported keyword 'uniqueItems' at the root (items other than a "
            "small enum)");
}

TEST(JsonSchemaObjects, JsonObjectGrammar) {
  auto g = lower(json_object_grammar());
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_TRUE(matches(*g, "{}"));
  EXPECT_TRUE(matches(*g, R"({"a": [1, {"b": null}, "\u00e9"], "c": -1.5e3})"));
  EXPECT_FALSE(matches(*g, "[]"));
  EXPECT_FALSE(matches(*g, R"("x")"));
  EXPECT_FALSE(matches(*g, R"({"a": 01})"));
}

TEST(JsonSchemaRefs, RecursionAndPointers) {
  auto g = compile(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"], "additionalProperties": false}}, "$ref": "#/$defs/node"})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(matches(g, R"({"v":1,"kids":[{"w":2}]})"));
  auto legacy = compile(R"({"definitions": {"a~b": {"type": "string"}},
      "items": [{"$ref": "#/definitions/a~0b"}], "additionalItems": false})");
  ASSERT_TRUE(legacy);
  EXPECT_TRUE(matches(legacy, R"(["x"])"));
  EXPECT_FALSE(matches(legacy, R"(["x", 1])"));
}

TEST(JsonSchemaRefusals, NameTheKeywordAndPointer) {
  EXPECT_EQ(refusal(R"({"properties": {"tags": {"type": "array", "uniqueItems": true}}})"),
            "json_schema: unsupported keyword 'uniqueItems' at /properties/tags (items other "
            "than a small enum)");
  EXPECT_EQ(refusal(R"({"items": {"prefixItems": [true], "contains": {"type": "integer"}}})"),
            "json_schema: unsupported keyword 'contains' at /items (with prefixItems)");
  EXPECT_EQ(refusal(R"({"if": {"type": "string"}, "then": {"minLength": 2}})"),
            "json_schema: unsupported keyword 'if' at the root");
  EXPECT_EQ(refusal(R"({"items": {"dependentSchemas": {"a": {"required": ["b"]}}}})"),
            "json_schema: unsupported keyword 'dependentSchemas' at /items");
  EXPECT_NE(refusal(R"({"oneOf": [{"type": "integer"}, {"minimum": 2}]})")
                .find("unsupported keyword 'oneOf' at the root: branches 0 and 1 may both match"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "https://example.com/s.json"})").find("unsupported $ref"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type": "number", "multipleOf": 0.5})").find("'multipleOf' at the root"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type": "string", "pattern": "(a)\\1"})").find("'pattern' at the root"),
            std::string::npos);
  EXPECT_NE(refusal("false").find("accepts no JSON value"), std::string::npos);
  // Moot keywords are not refused: the type excludes what they constrain.
  EXPECT_EQ(refusal(R"({"type": "string", "uniqueItems": true, "contains": {}})"), "(compiled)");
  EXPECT_EQ(refusal(R"({"type": "integer", "if": {}, "properties": {"a": {"not": {}}}})"),
            "(compiled)");
  // Disjoint oneOf compiles: a tagged union. (Without "type": "object" a number would match
  // both branches, so oneOf would reject it: that one is refused.)
  EXPECT_EQ(refusal(R"({"type": "object", "oneOf": [
      {"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
      {"properties": {"kind": {"const": "b"}}, "required": ["kind"]}]})"),
            "(compiled)");
  // Depth and size guards.
  std::string deep = "true";
  for (int i = 0; i < 200; ++i) deep = R"({"properties": {"a": )" + deep + "}}";
  EXPECT_NE(refusal(deep.c_str()).find("nested deeper"), std::string::npos);
  EXPECT_NE(refusal(R"({"$defs": {"a": {"$ref": "#/$defs/b", "type": "string"},
      "b": {"$ref": "#/$defs/a", "minLength": 1}}, "$ref": "#/$defs/a", "maxLength": 3})")
                .find("nested deeper"),
            std::string::npos);
}

// --- random schemas ---

// A small schema family with an instance generator that knows it.
struct Gen {
  std::mt19937_64 rng;
  ojson defs = ojson::object();

  int pick(int n) { return int(rng() % uint64_t(n)); }
  std::string word() {
    static const char* const kWords[] = {"a",    "b",      "id",  "name",  "é",
                                         "x\"y", "sp ace", "k/1", "tab\t", "日本"};
    return kWords[pick(10)];
  }
  ojson scalar() {
    switch (pick(6)) {
      case 0:
        return nullptr;
      case 1:
        return bool(pick(2));
      case 2:
        return pick(200) - 100;
      case 3:
        return (pick(2000) - 1000) / 8.0;
      case 4:
        return word();
      default:
        return ojson::array({pick(3), word()});
    }
  }

  ojson schema(int depth) {
    int kind = pick(depth > 2 ? 7 : 14);
    if (kind == 12) {  // multi-select: distinct values of a small enum
      ojson e = ojson::array();
      for (int i = 0, n = 1 + pick(4); i < n; ++i) e.push_back(scalar());
      return {{"type", "array"}, {"uniqueItems", true}, {"items", {{"enum", e}}}};
    }
    if (kind == 13) {  // at least minContains integers among any values
      return {{"type", "array"}, {"contains", {{"type", "integer"}}}, {"minContains", 1 + pick(2)}};
    }
    switch (kind) {
      case 0:
        return {{"type", "null"}};
      case 1:
        return {{"type", "boolean"}};
      case 2: {
        ojson s = {{"type", "integer"}};
        int lo = pick(100) - 50;
        if (pick(2)) s["minimum"] = lo;
        if (pick(2)) s["exclusiveMaximum"] = lo + pick(30) + 1;
        return s;
      }
      case 3: {
        ojson s = {{"type", "number"}};
        if (pick(2)) s["minimum"] = (pick(100) - 50) / 4.0;
        if (pick(2)) s["maximum"] = 13.25;
        return s;
      }
      case 4: {
        ojson s = {{"type", "string"}};
        if (pick(3) == 0) {
          s["pattern"] = "^[a-z]{1,4}$";
        } else {
          if (pick(2)) s["minLength"] = pick(3);
          if (pick(2)) s["maxLength"] = 3 + pick(4);
        }
        return s;
      }
      case 5: {
        ojson e = ojson::array();
        for (int i = 0, n = 1 + pick(4); i < n; ++i) e.push_back(scalar());
        return {{"enum", e}};
      }
      case 6:
        return {{"const", scalar()}};
      case 7:
      case 8: {
        ojson s = {{"type", "array"}, {"items", schema(depth + 1)}};
        if (pick(2)) s["prefixItems"] = ojson::array({schema(depth + 1)});
        if (pick(2)) s["minItems"] = pick(3);
        if (pick(2)) s["maxItems"] = 2 + pick(3);
        return s;
      }
      case 9:
      case 10: {
        ojson s = {{"type", "object"}, {"properties", ojson::object()}};
        ojson req = ojson::array();
        for (int i = 0, n = pick(5); i < n; ++i) {
          std::string k = word();
          s["properties"][k] = schema(depth + 1);
          if (pick(2) && std::find(req.begin(), req.end(), k) == req.end()) req.push_back(k);
        }
        s["required"] = req;
        int a = pick(3);
        if (a == 0) s["additionalProperties"] = false;
        if (a == 1) s["additionalProperties"] = schema(depth + 1);
        return s;
      }
      default: {
        // Different types per branch, so oneOf is exact; sometimes through $defs.
        ojson branches = ojson::array({{{"type", "string"}, {"maxLength", 3}},
                                       {{"type", "integer"}, {"minimum", 0}},
                                       {{"type", "null"}}});
        if (pick(2)) return {{"oneOf", branches}};
        std::string name = "d" + std::to_string(defs.size());
        defs[name] = true;  // reserve the name: nested calls add their own
        defs[name] = schema(depth + 1);
        branches.push_back({{"$ref", "#/$defs/" + name}});  // may overlap: anyOf only
        return {{"anyOf", branches}};
      }
    }
  }

  std::string str(int min, int max) {
    static const char* const kChars[] = {"a", "b", "z", "é", "\"", "\\", "\n", "日", "😀", "/"};
    std::string s;
    for (int i = 0, n = min + pick(max - min + 1); i < n; ++i) s += kChars[pick(10)];
    return s;
  }

  // A valid instance of s (schema from this family).
  ojson instance(const ojson& s) {
    if (s.contains("$ref")) return instance(defs[s["$ref"].get<std::string>().substr(8)]);
    if (s.contains("enum")) return s["enum"][size_t(pick(int(s["enum"].size())))];
    if (s.contains("const")) return s["const"];
    if (s.contains("anyOf") || s.contains("oneOf")) {
      const ojson& b = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
      return instance(b[size_t(pick(int(b.size())))]);
    }
    std::string t = s["type"];
    if (t == "null") return nullptr;
    if (t == "boolean") return bool(pick(2));
    if (t == "integer") {
      int lo = s.contains("minimum") ? s["minimum"].get<int>() : -1000;
      int hi = s.contains("exclusiveMaximum") ? s["exclusiveMaximum"].get<int>() - 1 : 1000;
      if (!s.contains("minimum") && s.contains("exclusiveMaximum")) lo = hi - 100;
      if (s.contains("minimum") && !s.contains("exclusiveMaximum")) hi = lo + 100;
      return lo + pick(std::max(1, hi - lo + 1));
    }
    if (t == "number") {
      double lo = s.contains("minimum") ? s["minimum"].get<double>() : -100;
      double hi = s.contains("maximum") ? s["maximum"].get<double>() : lo + 50;
      if (hi < lo) return ojson();  // unsatisfiable; caller skips
      return lo + (hi - lo) * pick(9) / 8.0;
    }
    if (t == "string") {
      if (s.contains("pattern")) {
        std::string w;
        for (int i = 0, n = 1 + pick(4); i < n; ++i) w += char('a' + pick(26));
        return w;
      }
      int lo = s.value("minLength", 0), hi = s.value("maxLength", 8);
      return str(lo, std::max(lo, hi));
    }
    if (t == "array" && s.contains("uniqueItems")) {
      ojson a = ojson::array();
      for (const ojson& v : s["items"]["enum"])
        if (pick(2) && std::find(a.begin(), a.end(), v) == a.end()) a.push_back(v);
      std::shuffle(a.begin(), a.end(), rng);
      return a;
    }
    if (t == "array" && s.contains("contains")) {
      ojson a = ojson::array();
      for (int i = 0, n = s["minContains"].get<int>(); i < n; ++i) a.push_back(pick(100));
      for (int i = 0, n = pick(3); i < n; ++i) a.push_back(scalar());
      std::shuffle(a.begin(), a.end(), rng);
      return a;
    }
    if (t == "array") {
      int lo = s.value("minItems", 0), hi = s.value("maxItems", 4);
      if (hi < lo) return ojson();
      ojson a = ojson::array();
      for (int i = 0, n = lo + pick(hi - lo + 1); i < n; ++i)
        a.push_back(
            instance(i == 0 && s.contains("prefixItems") ? s["prefixItems"][0] : s["items"]));
      return a;
    }
    ojson o = ojson::object();
    for (const auto& [k, v] : s["properties"].items()) {
      bool req = std::find(s["required"].begin(), s["required"].end(), k) != s["required"].end();
      if (req || pick(2)) o[k] = instance(v);
    }
    if (!s.contains("additionalProperties") || !s["additionalProperties"].is_boolean())
      for (int i = 0, n = pick(3); i < n; ++i) {
        std::string k = "extra" + str(0, 2);
        if (s["properties"].contains(k)) continue;
        o[k] = s.contains("additionalProperties") ? instance(s["additionalProperties"]) : scalar();
      }
    return o;
  }

  // v serialized with random (valid) spellings: escapes, "N.0" integers, whitespace, and
  // shuffled keys.
  std::string spell(const ojson& v, int indent) {
    auto ws = [&]() -> std::string {
      switch (pick(4)) {
        case 0:
          return " ";
        case 1:
          return "\n" + std::string(size_t(pick(std::min(indent, 40) + 1)), ' ');
        default:
          return "";
      }
    };
    auto spell_str = [&](const std::string& s) {
      std::string out = "\"";
      for (size_t i = 0; i < s.size(); ++i) {
        unsigned char c = uint8_t(s[i]);
        if (c < 0x80 && pick(3) == 0) {
          char buf[8];
          std::snprintf(buf, sizeof buf, pick(2) ? "\\u%04x" : "\\u%04X", c);
          out += buf;
        } else if (c == '"' || c == '\\') {
          out += '\\';
          out += char(c);
        } else if (c == '\n') {
          out += "\\n";
        } else if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else if (c == '/' && pick(2)) {
          out += "\\/";
        } else {
          out += char(c);
        }
      }
      return out + "\"";
    };
    if (v.is_string()) return spell_str(v.get<std::string>());
    if (v.is_number_integer() && pick(3) == 0) return v.dump() + ".0";
    if (v.is_array()) {
      if (v.empty()) return "[" + ws() + "]";
      std::string out = "[" + ws();
      for (size_t i = 0; i < v.size(); ++i)
        out += (i ? ws() + "," + ws() : "") + spell(v[i], indent + 2);
      return out + ws() + "]";
    }
    if (v.is_object()) {
      if (v.empty()) return "{" + ws() + "}";
      std::vector<std::string> keys;
      for (const auto& [k, x] : v.items()) keys.push_back(k);
      std::shuffle(keys.begin(), keys.end(), rng);
      std::string out = "{" + ws();
      for (size_t i = 0; i < keys.size(); ++i)
        out += (i ? ws() + "," + ws() : "") + spell_str(keys[i]) + ws() + ":" + ws() +
               spell(v[keys[i]], indent + 2);
      return out + ws() + "}";
    }
    return v.dump();
  }
};

TEST(JsonSchemaRandom, GeneratedInstancesAreAcceptedAndGrammarEqualsValidator) {
  Gen gen{std::mt19937_64(2024)};
  int compiled = 0, instances = 0, random_checked = 0;
  for (int iter = 0; iter < 400; ++iter) {
    gen.defs = ojson::object();
    ojson schema = gen.schema(0);
    if (!gen.defs.empty()) schema["$defs"] = gen.defs;
    auto spec = json_schema_to_grammar(schema);
    if (!spec.ok()) {
      // Only unsatisfiable schemas (e.g. required key with a false value) may fail here.
      EXPECT_NE(spec.message().find("accepts no JSON value"), std::string::npos)
          << schema.dump() << ": " << spec.message();
      continue;
    }
    auto g = lower(*spec);
    ASSERT_TRUE(g.ok()) << schema.dump() << ": " << g.message();
    ++compiled;
    for (int k = 0; k < 8; ++k) {
      ojson v = gen.instance(schema);
      auto valid = json_schema_validate(schema, v);
      ASSERT_TRUE(valid.ok()) << valid.message();
      if (!*valid) continue;  // the generator's instance fell out of range (rare); skip
      ++instances;
      ASSERT_TRUE(matches(*g, v.dump())) << schema.dump() << "\n" << v.dump();
      ASSERT_TRUE(matches(*g, v.dump(2))) << schema.dump() << "\n" << v.dump(2);
      std::string spelled = gen.spell(v, 0);
      ASSERT_TRUE(matches(*g, spelled)) << schema.dump() << "\n" << spelled;
    }
    // Random values (of other schemas from the family): the grammar agrees with the validator.
    for (int k = 0; k < 8; ++k) {
      Gen other{std::mt19937_64(gen.rng())};
      ojson s2 = other.schema(1);
      ojson v = other.instance(s2);
      if (v.is_null() && s2.value("type", "") != "null") continue;
      auto valid = json_schema_validate(schema, v);
      ASSERT_TRUE(valid.ok()) << valid.message();
      ++random_checked;
      ASSERT_EQ(matches(*g, v.dump()), *valid) << schema.dump() << "\n" << v.dump();
      ASSERT_EQ(matches(*g, v.dump(2)), *valid) << schema.dump() << "\n" << v.dump(2);
    }
  }
  std::printf("random schemas compiled: %d, generated instances: %d, differential checks: %d\n",
              compiled, instances, random_checked);
  EXPECT_GT(compiled, 300);
  EXPECT_GT(instances, 1000);
}

// --- strict mode (JsonSchemaOptions::strict) ---

// Each instance against the schema without and with strict: the grammar (compact and pretty)
// and the validator both give the expected answer.
TEST(JsonSchemaStrict, AbsentMeansNothingElseExplicitWins) {
  struct Case {
    const char* schema;
    const char* instance;
    bool loose, strict;
  };
  const Case cases[] = {
      // declared properties only
      {R"({"type": "object", "properties": {"a": {"type": "integer"}}})", R"({"a": 1})", true,
       true},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}}})", R"({"a": 1, "b": 2})",
       true, false},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}}})", R"({})", true, true},
      {R"({"properties": {"p": {"properties": {"q": {}}}}})", R"({"p": {"q": 1, "r": 2}})", true,
       false},
      {R"({"type": "object", "properties": {}})", R"({"z": 1})", true, false},
      {R"({"type": "object", "properties": {}})", R"({})", true, true},
      // nothing declared: open either way
      {R"({"type": "object"})", R"({"z": 1})", true, true},
      {R"({"type": "array"})", R"([1, "x"])", true, true},
      // explicit values win
      {R"({"properties": {"a": {}}, "additionalProperties": true})", R"({"b": 1})", true, true},
      {R"({"properties": {"a": {}}, "additionalProperties": {"type": "string"}})", R"({"b": "x"})",
       true, true},
      {R"({"properties": {"a": {}}, "additionalProperties": {"type": "string"}})", R"({"b": 1})",
       false, false},
      {R"({"properties": {"a": {}}, "unevaluatedProperties": {"type": "integer"}})", R"({"b": 1})",
       true, true},
      {R"({"properties": {"a": {}}, "unevaluatedProperties": {"type": "integer"}})",
       R"({"b": "x"})", false, false},
      {R"({"properties": {"a": {}}, "allOf": [{"additionalProperties": false}]})", R"({"a": 1})",
       false, false},
      // declared over $ref / allOf: composition keeps working
      {R"({"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"extra": {"type": "boolean"}}}],
           "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}},
                              "required": ["id"]}}})",
       R"({"id": 1, "extra": true})", true, true},
      {R"({"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"extra": {"type": "boolean"}}}],
           "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}},
                              "required": ["id"]}}})",
       R"({"id": 1, "other": 0})", true, false},
      // ... and over the anyOf branch the instance is read through
      {R"({"type": "object", "properties": {"kind": {"type": "string"}},
           "anyOf": [{"properties": {"x": {"type": "integer"}}, "required": ["x"]},
                     {"properties": {"y": {"type": "integer"}}, "required": ["y"]}]})",
       R"({"kind": "a", "x": 1})", true, true},
      {R"({"type": "object", "properties": {"kind": {"type": "string"}},
           "anyOf": [{"properties": {"x": {"type": "integer"}}, "required": ["x"]},
                     {"properties": {"y": {"type": "integer"}}, "required": ["y"]}]})",
       R"({"kind": "a", "x": 1, "y": 2})", true, false},
      {R"({"type": "object", "properties": {"kind": {"type": "string"}},
           "anyOf": [{"properties": {"x": {"type": "integer"}}, "required": ["x"]},
                     {"properties": {"y": {"type": "integer"}}, "required": ["y"]}]})",
       R"({"y": 1, "z": 0})", true, false},
      // arrays: nothing after prefixItems unless items / unevaluatedItems say so
      {R"({"prefixItems": [{"type": "integer"}, {"type": "string"}]})", R"([1, "a"])", true, true},
      {R"({"prefixItems": [{"type": "integer"}, {"type": "string"}]})", R"([1])", true, true},
      {R"({"prefixItems": [{"type": "integer"}, {"type": "string"}]})", R"([1, "a", null])", true,
       false},
      {R"({"prefixItems": [{"type": "integer"}], "items": {"type": "boolean"}})",
       R"([1, true, false])", true, true},
      {R"({"prefixItems": [{"type": "integer"}], "unevaluatedItems": {"type": "string"}})",
       R"([1, "a"])", true, true},
      {R"({"prefixItems": [{"type": "integer"}], "unevaluatedItems": {"type": "string"}})",
       R"([1, 2])", false, false},
      {R"({"allOf": [{"prefixItems": [{"type": "integer"}]}, {"prefixItems": [{}, {}]}]})",
       R"([1, 2])", true, true},
      {R"({"allOf": [{"prefixItems": [{"type": "integer"}]}, {"prefixItems": [{}, {}]}]})",
       R"([1, 2, 3])", true, false},
      {R"({"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "integer"}]})",
       R"([1, 2])", true, false},
      {R"({"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "integer"}],
           "additionalItems": {"type": "integer"}})",
       R"([1, 2])", true, true},
      {R"({"type": "array", "items": {"type": "integer"}})", R"([1, 2, 3])", true, true},
  };
  for (const Case& c : cases) {
    const ojson schema = ojson::parse(c.schema);
    const ojson instance = ojson::parse(c.instance);
    for (bool strict : {false, true}) {
      JsonSchemaOptions opts;
      opts.strict = strict;
      const bool want = strict ? c.strict : c.loose;
      auto g = compile(schema, opts);
      ASSERT_TRUE(g) << c.schema;
      EXPECT_EQ(matches(g, instance.dump()), want)
          << c.schema << " " << c.instance << " strict " << strict;
      EXPECT_EQ(matches(g, instance.dump(2)), want) << c.schema << " " << c.instance;
      auto v = json_schema_validate(schema, instance, opts);
      ASSERT_TRUE(v.ok()) << v.message();
      EXPECT_EQ(*v, want) << "validator: " << c.schema << " " << c.instance << " strict " << strict;
    }
  }
}

// Closed objects make oneOf branches with different required keys provably disjoint.
TEST(JsonSchemaStrict, ClosedObjectsMakeOneOfDisjoint) {
  const char* schema = R"({"oneOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]})";
  EXPECT_NE(refusal(schema).find("unsupported keyword 'oneOf'"), std::string::npos);
  JsonSchemaOptions opts;
  opts.strict = true;
  auto g = compile(schema, opts);
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"a":1})"));
  EXPECT_TRUE(matches(g, R"({"b":2})"));
  EXPECT_FALSE(matches(g, R"({"a":1,"b":2})"));
  EXPECT_FALSE(matches(g, R"({})"));
}

// Strict validation merges context and branch for each anyOf branch, so nested groups
// multiply (10^8 combinations here): the validator ends with an error, as the compiler does
// (its kMaxWork; not run here: it takes ~2 s to get there).
TEST(JsonSchemaStrict, GroupCombinationsAreBounded) {
  ojson any = {{"anyOf", ojson::array()}};
  for (int i = 0; i < 10; ++i) any["anyOf"].push_back({{"minimum", i}});
  ojson schema = {{"allOf", ojson::array()}};
  for (int i = 0; i < 8; ++i) schema["allOf"].push_back(any);
  JsonSchemaOptions opts;
  opts.strict = true;
  auto v = json_schema_validate(schema, ojson(-1), opts);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("too complex"), std::string::npos) << v.message();
  auto loose = json_schema_validate(schema, ojson(-1));  // not merged: 80 checks
  ASSERT_TRUE(loose.ok());
  EXPECT_FALSE(*loose);
}

// The random schema family of JsonSchemaRandom in strict mode: grammar == validator on
// random values, and generated instances the strict validator accepts are sentences.
TEST(JsonSchemaStrict, RandomSchemasGrammarEqualsValidator) {
  Gen gen{std::mt19937_64(77)};
  JsonSchemaOptions opts;
  opts.strict = true;
  int compiled = 0, accepted = 0, checked = 0;
  for (int iter = 0; iter < 300; ++iter) {
    gen.defs = ojson::object();
    ojson schema = gen.schema(0);
    if (!gen.defs.empty()) schema["$defs"] = gen.defs;
    auto spec = json_schema_to_grammar(schema, opts);
    if (!spec.ok()) {
      EXPECT_NE(spec.message().find("accepts no JSON value"), std::string::npos)
          << schema.dump() << ": " << spec.message();
      continue;
    }
    auto g = lower(*spec);
    ASSERT_TRUE(g.ok()) << schema.dump() << ": " << g.message();
    ++compiled;
    for (int k = 0; k < 16; ++k) {
      ojson v;
      if (k < 8) {
        v = gen.instance(schema);
      } else {
        Gen other{std::mt19937_64(gen.rng())};
        ojson s2 = other.schema(1);
        v = other.instance(s2);
      }
      auto valid = json_schema_validate(schema, v, opts);
      ASSERT_TRUE(valid.ok()) << valid.message();
      ++checked;
      accepted += *valid;
      ASSERT_EQ(matches(*g, v.dump()), *valid) << schema.dump() << "\n" << v.dump();
      ASSERT_EQ(matches(*g, v.dump(2)), *valid) << schema.dump() << "\n" << v.dump(2);
    }
  }
  std::printf("strict: random schemas compiled: %d, checks: %d (valid: %d)\n", compiled, checked,
              accepted);
  EXPECT_GT(compiled, 200);
  EXPECT_GT(accepted, 500);
}

}  // namespace
}  // namespace sluice::grammar
