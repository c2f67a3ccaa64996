// Structured output end to end: 1,000 constrained generations (temperature 1, various seeds,
// top-k / top-p, several requests batched at once) over random bounded JSON Schemas compiled
// in strict mode, on two real tiny models and two random-weight ones. Every output must end
// with the model's stop token (not max_tokens: the grammar forces termination), parse as JSON
// and validate twice: under json_schema_validate (strict, the compiler's reading) and under an
// independent checker of the generator's keyword subset written here. A slice runs with
// n-gram speculative drafts, which must compose with the grammar.
//
//   model                          tokenizer                 generations (spec slice)
//   stories260K (real)             SPM 512, byte fallback    250 (50)
//   aidreams260K (real)            SPM 512, byte fallback    250
//   "tiny" preset, random weights  byte-level SPM            250 (50)
//   "tiny" preset, random weights  stories260K's SPM         250
//
// Schemas are BOUNDED so that every path through the grammar ends: objects of 1-4 declared
// properties (strict: no other keys), strings of at most 12 code points, enums, consts,
// integers and numbers with bounds, booleans, null, arrays of at most 3 items (or a closed
// prefixItems tuple), objects nested at most 2 deep, anyOf / oneOf of disjoint branches,
// $defs / $ref, and allOf composition of a $ref'd base with extra properties; whitespace
// after a newline is at most 8 blanks (kMaxIndent). Two requests per schema: 500 schemas.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "model/convert.h"
#include "model/presets.h"
#include "test_util.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;

// --- the schema generator ---

class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}

  // A root schema (an object 85% of the time) whose estimated output stays within `budget`
  // bytes (see estimate()), with its $defs.
  ojson root(int budget) {
    for (;;) {
      defs_ = ojson::object();
      n_defs_ = 0;
      ojson s = chance(85) ? object(0) : value(0);
      if (!defs_.empty()) s["$defs"] = defs_;
      if (estimate(s, s) <= budget) return s;
    }
  }

 private:
  int pick(int n) { return int(rng_() % uint64_t(n)); }
  bool chance(int pct) { return pick(100) < pct; }

  std::string word() {
    static const char* const kWords[] = {"red",  "green", "blue", "caf\xc3\xa9",  "a b",
                                         "q\"t", "x\\y",  "",     "\xe2\x82\xac", "na\xc3\xafve"};
    return kWords[pick(10)];
  }

  ojson string_schema() {
    ojson s = {{"type", "string"}};
    int hi = pick(13);
    s["maxLength"] = hi;
    if (chance(30)) s["minLength"] = pick(hi + 1);
    return s;
  }

  ojson scalar() {
    switch (pick(10)) {
      case 0:
      case 1:
        return string_schema();
      case 2: {
        ojson e = ojson::array();
        for (int i = 0, n = 1 + pick(4); i < n; ++i) {
          std::string w = word();
          if (std::find(e.begin(), e.end(), ojson(w)) == e.end()) e.push_back(w);
        }
        if (chance(30)) e.push_back(pick(50));
        if (chance(20)) e.push_back(nullptr);
        return {{"enum", e}};
      }
      case 3: {
        switch (pick(4)) {
          case 0:
            return {{"const", word()}};
          case 1:
            return {{"const", pick(2000) - 1000}};
          case 2:
            return {{"const", chance(50)}};
          default:
            return {{"const", 2.5}};
        }
      }
      case 4: {
        int lo = pick(1100) - 1000, hi = lo + pick(2000);
        ojson s = {{"type", "integer"}};
        if (chance(25)) {
          s["exclusiveMinimum"] = lo - 1;
        } else {
          s["minimum"] = lo;
        }
        if (chance(25)) {
          s["exclusiveMaximum"] = hi + 1;
        } else {
          s["maximum"] = hi;
        }
        return s;
      }
      case 5: {
        // Inclusive bounds only: a decimal just under an exclusive bound (valid, and the
        // grammar is exact on decimals) can parse to the bound itself as a double.
        double lo = double(pick(400) - 200) / 4, hi = lo + double(pick(400)) / 8;
        return {{"type", "number"}, {"minimum", lo}, {"maximum", hi}};
      }
      case 6:
        return {{"type", "boolean"}};
      case 7:
        return {{"type", "null"}};
      case 8: {
        static const char* const kPatterns[] = {"^[a-z]{1,6}$", "^[A-Z][a-z]{0,5}$",
                                                "^[0-9]{3}-[0-9]{2}$", "^(yes|no|maybe)$"};
        return {{"type", "string"}, {"pattern", kPatterns[pick(4)]}};
      }
      default:
        return string_schema();
    }
  }

  // depth: objects / arrays above this value (the root object is 0; at 2 only scalars).
  ojson value(int depth) {
    int r = pick(100);
    if (depth < 2 && r < 14) return object(depth + 1);
    if (depth < 2 && r < 26) return array(depth + 1);
    if (r < 34) return alternatives(depth);
    if (r < 40) return ref(value(depth));
    return scalar();
  }

  ojson ref(ojson target) {
    std::string name = "d" + std::to_string(n_defs_++);
    defs_[name] = std::move(target);
    return {{"$ref", "#/$defs/" + name}};
  }

  ojson array(int depth) {
    if (chance(20)) {
      // A tuple: strict mode allows nothing after the prefix.
      ojson prefix = ojson::array();
      for (int i = 0, n = 1 + pick(3); i < n; ++i) prefix.push_back(scalar());
      return {{"type", "array"}, {"prefixItems", prefix}};
    }
    int max = 1 + pick(3);
    ojson s = {{"type", "array"},
               {"items", depth < 2 && chance(20) ? object(depth + 1) : scalar()},
               {"maxItems", max}};
    if (chance(40)) s["minItems"] = pick(max + 1);
    return s;
  }

  ojson props(int depth, int n, ojson& required, std::vector<std::string>& used) {
    static const char* const kKeys[] = {"id",   "name", "age",  "tags", "score", "ok",
                                        "kind", "data", "note", "x",    "y",     "when"};
    ojson p = ojson::object();
    while (int(p.size()) < n) {
      std::string k = kKeys[pick(12)];
      if (std::find(used.begin(), used.end(), k) != used.end()) continue;
      used.push_back(k);
      p[k] = value(depth);
      if (chance(60)) required.push_back(k);
    }
    return p;
  }

  ojson object(int depth) {
    std::vector<std::string> used;
    ojson required = ojson::array();
    if (depth < 2 && chance(12)) {
      // allOf composition: a $ref'd base plus more properties (strict: both sets declared).
      ojson base_req = ojson::array();
      ojson base = {{"type", "object"}, {"properties", props(depth, 1 + pick(2), base_req, used)}};
      if (!base_req.empty()) base["required"] = base_req;
      ojson extra = {{"properties", props(depth, 1 + pick(2), required, used)}};
      if (!required.empty()) extra["required"] = required;
      return {{"allOf", ojson::array({ref(base), extra})}};
    }
    ojson s = {{"type", "object"}, {"properties", props(depth, 1 + pick(4), required, used)}};
    if (!required.empty()) s["required"] = required;
    return s;
  }

  // anyOf / oneOf whose branches are disjoint (by type, or by a required key the other
  // branch does not declare: closed objects in strict mode).
  ojson alternatives(int depth) {
    switch (pick(3)) {
      case 0:
        return {{"anyOf", ojson::array({string_schema(),
                                        {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}})}};
      case 1:
        return {{"anyOf",
                 ojson::array({{{"type", "null"}}, depth < 2 ? object(depth + 1) : scalar()})}};
      default: {
        ojson a = {
            {"type", "object"},
            {"properties",
             {{"cat", scalar()}, {"n", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}}},
            {"required", {"cat"}}};
        ojson b = {{"type", "object"},
                   {"properties", {{"dog", scalar()}, {"ok", {{"type", "boolean"}}}}},
                   {"required", {"dog"}}};
        return {{"oneOf", ojson::array({a, b})}};
      }
    }
  }

  // Typical output bytes (not the worst case: escapes and long numbers are rarer).
  static int estimate(const ojson& s, const ojson& root) {
    if (s.contains("$ref"))
      return estimate(root.at(ojson::json_pointer(s["$ref"].get<std::string>().substr(1))), root);
    if (s.contains("allOf")) {
      int n = 0;
      for (const ojson& m : s["allOf"]) n += estimate(m, root);
      return n;
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (s.contains(k)) {
        int n = 0;
        for (const ojson& b : s[k]) n = std::max(n, estimate(b, root));
        return n;
      }
    if (s.contains("const")) return int(s["const"].dump().size());
    if (s.contains("enum")) {
      int n = 0;
      for (const ojson& e : s["enum"]) n = std::max(n, int(e.dump().size()));
      return n;
    }
    const std::string t = s.value("type", "");
    if (t == "string") return s.contains("pattern") ? 10 : 2 + 2 * s.value("maxLength", 12);
    if (t == "integer") return 8;
    if (t == "number") return 16;
    if (t == "boolean" || t == "null") return 5;
    if (t == "array") {
      int n = 2;
      if (s.contains("prefixItems")) {
        for (const ojson& x : s["prefixItems"]) n += 3 + estimate(x, root);
      } else {
        n += s["maxItems"].get<int>() * (3 + estimate(s["items"], root));
      }
      return n;
    }
    int n = 2;  // object
    for (const auto& [k, v] : s["properties"].items()) n += int(k.size()) + 6 + estimate(v, root);
    return n;
  }

  std::mt19937_64 rng_;
  ojson defs_;
  int n_defs_ = 0;
};

// --- an independent checker of the generator's keyword subset (strict reading) ---

bool is_integer(const ojson& v) {
  return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                   std::floor(v.get<double>()) == v.get<double>());
}

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

const ojson& resolve(const ojson& root, const ojson& s) {
  return root.at(ojson::json_pointer(s["$ref"].get<std::string>().substr(1)));
}

// Keys `s` declares, over its $ref and allOf.
void declared(const ojson& root, const ojson& s, std::vector<std::string>& out) {
  if (s.contains("$ref")) declared(root, resolve(root, s), out);
  if (s.contains("properties"))
    for (const auto& [k, v] : s["properties"].items()) out.push_back(k);
  if (s.contains("allOf"))
    for (const ojson& m : s["allOf"]) declared(root, m, out);
}

// "" when `v` is valid under `s`, else why not. `closed`: strict mode's "nothing undeclared"
// applies here (not inside allOf members: the whole allOf declares).
std::string check(const ojson& root, const ojson& s, const ojson& v, bool closed = true) {
  if (s.empty()) return "";
  if (s.contains("$ref")) return check(root, resolve(root, s), v, closed);
  if (s.contains("allOf")) {
    for (const ojson& m : s["allOf"])
      if (std::string e = check(root, m, v, false); !e.empty()) return "allOf: " + e;
    if (closed && v.is_object()) {
      std::vector<std::string> names;
      declared(root, s, names);
      for (const auto& [k, x] : v.items())
        if (std::find(names.begin(), names.end(), k) == names.end())
          return "undeclared key '" + k + "'";
    }
    return "";
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (s.contains(k)) {
      int n = 0;
      for (const ojson& b : s[k]) n += check(root, b, v).empty();
      if (k[0] == 'o' ? n != 1 : n == 0)
        return std::string(k) + ": " + std::to_string(n) + " match";
      return "";
    }
  if (s.contains("const")) return s["const"] == v ? "" : "not the const";
  if (s.contains("enum")) {
    for (const ojson& e : s["enum"])
      if (e == v) return "";
    return "not in the enum";
  }
  const std::string t = s.value("type", "");
  if (t == "string") {
    if (!v.is_string()) return "not a string";
    const std::string& str = v.get_ref<const std::string&>();
    int64_t n = code_points(str);
    if (n > s.value("maxLength", int64_t(1) << 40) || n < s.value("minLength", 0))
      return "length " + std::to_string(n);
    if (s.contains("pattern") &&
        !std::regex_search(str, std::regex(s["pattern"].get<std::string>())))
      return "pattern";
    return "";
  }
  if (t == "integer" || t == "number") {
    if (!v.is_number() || (t == "integer" && !is_integer(v))) return "not an " + t;
    double d = v.get<double>();
    if (s.contains("minimum") && d < s["minimum"].get<double>()) return "below minimum";
    if (s.contains("maximum") && d > s["maximum"].get<double>()) return "above maximum";
    if (s.contains("exclusiveMinimum") && d <= s["exclusiveMinimum"].get<double>())
      return "not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && d >= s["exclusiveMaximum"].get<double>())
      return "not below exclusiveMaximum";
    return "";
  }
  if (t == "boolean") return v.is_boolean() ? "" : "not a boolean";
  if (t == "null") return v.is_null() ? "" : "not null";
  if (t == "array") {
    if (!v.is_array()) return "not an array";
    if (s.contains("prefixItems")) {
      const ojson& p = s["prefixItems"];
      if (closed && v.size() > p.size()) return "items past prefixItems";
      for (size_t i = 0; i < v.size() && i < p.size(); ++i)
        if (std::string e = check(root, p[i], v[i]); !e.empty())
          return "[" + std::to_string(i) + "] " + e;
      return "";
    }
    if (v.size() > s.value("maxItems", size_t(1) << 40) ||
        v.size() < s.value("minItems", size_t(0)))
      return "item count " + std::to_string(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      if (std::string e = check(root, s["items"], v[i]); !e.empty())
        return "[" + std::to_string(i) + "] " + e;
    return "";
  }
  if (t == "object" || s.contains("properties")) {
    if (!v.is_object()) return t == "object" ? "not an object" : "";
    for (const ojson& r : s.value("required", ojson::array()))
      if (!v.contains(r.get<std::string>())) return "missing '" + r.get<std::string>() + "'";
    const ojson& p = s["properties"];
    for (const auto& [k, x] : v.items()) {
      if (!p.contains(k)) {
        if (closed) return "undeclared key '" + k + "'";
        continue;
      }
      if (std::string e = check(root, p[k], x); !e.empty()) return "." + k + " " + e;
    }
    return "";
  }
  return "unknown schema " + s.dump();
}

// --- running the engine ---

struct ModelRun {
  const char* name;
  int n_generations;
  int n_spec;  // of which with n-gram drafts
  uint64_t seed;
};

struct Tally {
  int generations = 0, stopped = 0, parsed = 0, valid = 0, max_tokens_used = 0;
  uint64_t tokens = 0;
};

constexpr int kMaxTokens = 400;
constexpr int kRequestsPerSchema = 2;
constexpr int kBudget = 150;  // typical output bytes of a schema (SchemaGen::estimate)
// Whitespace after a newline: up to 8 spaces or tabs. At the default 40, aidreams260K (which
// likes a space after a space) writes "\n" + 40 spaces in most whitespace slots, 41 tokens
// each, and 2 of its 250 outputs reached 400 tokens (finite, but not "a few hundred").
constexpr int32_t kMaxIndent = 8;

// n generations over n / kRequestsPerSchema schemas on `l`, all queued at once (the
// scheduler runs up to 64 together), with n_spec of them on an engine with n-gram drafts.
void run_model(Loaded& l, const ModelRun& run, Tally& tally) {
  SchemaGen gen(run.seed);
  std::mt19937_64 rng(run.seed * 7 + 1);
  const std::vector<std::string> starts = {"Once upon a time", "The little dog",
                                           "JSON: ", "Lily and Ben"};
  for (bool spec : {false, true}) {
    const int n = spec ? run.n_spec : run.n_generations - run.n_spec;
    if (n == 0) continue;
    EngineConfig c;
    if (spec) {
      c.spec.mode = SpecMode::kNgram;
      c.spec.n_draft_max = 4;
    }
    auto engine = Engine::create(l.tokenizer, *l.executor, c);
    ASSERT_TRUE(engine.ok()) << engine.message();
    grammar::JsonSchemaOptions opts;
    opts.strict = true;
    opts.max_indent = kMaxIndent;
    std::vector<ojson> schemas;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<GenerationParams> params;
    std::vector<int> arrivals;
    std::vector<size_t> schema_of;
    for (int i = 0; i < n; ++i) {
      if (i % kRequestsPerSchema == 0) schemas.push_back(gen.root(kBudget));
      auto ids = l.tokenizer.encode(starts[size_t(i) % starts.size()]);
      ASSERT_TRUE(ids.ok());
      prompts.push_back(*ids);
      GenerationParams p;
      p.max_tokens = kMaxTokens;
      p.sampling.temperature = 1.0f;
      p.sampling.seed = rng();
      p.sampling.top_k = std::vector<int>{0, 0, 5, 40}[size_t(i) % 4];
      p.sampling.top_p = std::vector<float>{1.0f, 0.9f, 1.0f, 0.5f, 1.0f}[size_t(i) % 5];
      params.push_back(p);
      arrivals.push_back(int(rng() % 40));
      schema_of.push_back(schemas.size() - 1);
    }
    std::vector<std::shared_ptr<const grammar::CompiledGrammar>> compiled;
    for (const ojson& schema : schemas) {
      auto spec_r = grammar::json_schema_to_grammar(schema, opts);
      ASSERT_TRUE(spec_r.ok()) << schema.dump() << ": " << spec_r.message();
      auto g = grammar::lower(*spec_r);
      ASSERT_TRUE(g.ok()) << schema.dump() << ": " << g.message();
      compiled.push_back(grammar::CompiledGrammar::make(*g, (*engine)->grammar_vocab()));
    }
    for (size_t i = 0; i < params.size(); ++i) params[i].sampling.grammar = compiled[schema_of[i]];
    auto out = run_all(**engine, prompts, params, arrivals);
    for (size_t i = 0; i < out.size(); ++i) {
      const ojson& schema = schemas[schema_of[i]];
      const std::string where = std::string(run.name) + (spec ? " (ngram)" : "") + " #" +
                                std::to_string(i) + " schema " + schema.dump() + "\n  output '" +
                                out[i].text + "'";
      ++tally.generations;
      tally.tokens += out[i].tokens.size();
      tally.max_tokens_used = std::max(tally.max_tokens_used, int(out[i].tokens.size()));
      EXPECT_EQ(out[i].finish, FinishReason::kStop)
          << where << "\n  finish " << finish_reason_name(out[i].finish) << " after "
          << out[i].tokens.size() << " tokens";
      tally.stopped += out[i].finish == FinishReason::kStop;
      ojson v;
      try {
        v = ojson::parse(out[i].text);
      } catch (const std::exception& e) {
        ADD_FAILURE() << where << "\n  does not parse: " << e.what();
        continue;
      }
      ++tally.parsed;
      auto valid = grammar::json_schema_validate(schema, v, opts);
      ASSERT_TRUE(valid.ok()) << where << ": " << valid.message();
      EXPECT_TRUE(*valid) << where << "\n  json_schema_validate: invalid";
      const std::string why = check(schema, schema, v);
      EXPECT_EQ(why, "") << where << "\n  independent check";
      tally.valid += *valid && why.empty();
    }
    EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
    if (spec) {
      const EngineStats& st = (*engine)->stats();
      std::printf("%s ngram: %llu draft tokens verified, %llu accepted, %llu cut by the grammar\n",
                  run.name, (unsigned long long)st.spec_draft_tokens,
                  (unsigned long long)st.spec_accepted_tokens,
                  (unsigned long long)st.spec_grammar_cut_tokens);
      EXPECT_GT(st.spec_draft_tokens, 0u) << run.name << ": no drafts were verified";
    }
  }
}

void report(const char* name, const Tally& t, std::chrono::steady_clock::time_point start) {
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%s: %d generations, %d stopped, %d parsed, %d valid; %llu tokens (mean %.0f, max %d); "
      "%.1f s\n",
      name, t.generations, t.stopped, t.parsed, t.valid, (unsigned long long)t.tokens,
      t.generations ? double(t.tokens) / t.generations : 0.0, t.max_tokens_used, s);
}

// A random-weight copy of the "tiny" preset (llama, 2 layers, n_embd 256, vocab 512), with
// a byte-level SPM vocabulary or the tokenizer of `vocab_path`.
std::unique_ptr<Loaded> random_model(test::TempDir& dir, const std::string& vocab_path) {
  SynthParams sp;
  sp.preset = find_preset("tiny");
  sp.ftype = FileType::MOSTLY_Q8_0;
  sp.vocab_path = vocab_path;
  sp.seed = 11;
  sp.n_threads = 2;
  sp.out_path = dir.path("tiny.gguf");
  Status st = synthesize_model(sp);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return nullptr;
  return load(sp.out_path, 1024, 3000);
}

TEST(EngineStructured, SchemaGeneratorAndCheckerAgreeWithTheValidator) {
  // The generator's schemas compile in strict mode (and are refused nothing), and the
  // independent checker agrees with json_schema_validate on hand-picked instances.
  SchemaGen gen(5);
  grammar::JsonSchemaOptions opts;
  opts.strict = true;
  for (int i = 0; i < 200; ++i) {
    ojson s = gen.root(kBudget);
    auto spec = grammar::json_schema_to_grammar(s, opts);
    ASSERT_TRUE(spec.ok()) << s.dump() << ": " << spec.message();
  }
  const ojson s = ojson::parse(R"({"type": "object",
      "properties": {"a": {"type": "string", "maxLength": 2},
                     "t": {"type": "array", "prefixItems": [{"type": "integer"}]},
                     "o": {"allOf": [{"$ref": "#/$defs/b"}, {"properties": {"y": {"const": 1}}}]}},
      "required": ["a"], "$defs": {"b": {"type": "object", "properties": {"x": {}}}}})");
  for (const char* text :
       {R"({"a": "hi"})", R"({"a": "hi!"})", R"({"b": 1, "a": ""})", R"({"a": "", "t": [1]})",
        R"({"a": "", "t": [1, 2]})", R"({"a": "", "o": {"x": 1, "y": 1}})",
        R"({"a": "", "o": {"x": 1, "z": 1}})", R"({"t": []})"}) {
    ojson v = ojson::parse(text);
    auto valid = grammar::json_schema_validate(s, v, opts);
    ASSERT_TRUE(valid.ok());
    EXPECT_EQ(*valid, check(s, s, v).empty()) << text << ": " << check(s, s, v);
  }
}

TEST(EngineStructured, RealModelStories260K) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto start = std::chrono::steady_clock::now();
  auto l = load(path, 1024, 3000);
  ASSERT_TRUE(l);
  Tally t;
  run_model(*l, {"stories260K", 250, 50, 1}, t);
  report("stories260K", t, start);
  EXPECT_EQ(t.valid, 250);
}

TEST(EngineStructured, RealModelAidreams260K) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/aidreams260K.gguf");
  auto start = std::chrono::steady_clock::now();
  auto l = load(path, 1024, 3000);
  ASSERT_TRUE(l);
  Tally t;
  run_model(*l, {"aidreams260K", 250, 0, 2}, t);
  report("aidreams260K", t, start);
  EXPECT_EQ(t.valid, 250);
}

TEST(EngineStructured, RandomWeightsByteVocab) {
  auto start = std::chrono::steady_clock::now();
  test::TempDir dir;
  auto l = random_model(dir, "");
  ASSERT_TRUE(l);
  Tally t;
  run_model(*l, {"random/bytes", 250, 50, 3}, t);
  report("random/bytes", t, start);
  EXPECT_EQ(t.valid, 250);
}

TEST(EngineStructured, RandomWeightsStoriesVocab) {
  SLUICE_REQUIRE_SHARED(vocab, "testdata/models/stories260K.gguf");
  auto start = std::chrono::steady_clock::now();
  test::TempDir dir;
  auto l = random_model(dir, vocab);
  ASSERT_TRUE(l);
  Tally t;
  run_model(*l, {"random/stories-vocab", 250, 0, 4}, t);
  report("random/stories-vocab", t, start);
  EXPECT_EQ(t.valid, 250);
}

}  // namespace
}  // namespace sluice
