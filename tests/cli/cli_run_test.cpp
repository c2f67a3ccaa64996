// `sluice run` and `sluice bench throughput` as a user runs them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(CliRun, JsonOutputMatchesTheGoldenContinuation) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  SLUICE_REQUIRE_SHARED(golden_path, "testdata/models/stories260K.once_upon_a_time.json");
  auto golden = nlohmann::json::parse(test::read_file(golden_path));
  const auto want = golden["greedy_tokens"].get<std::vector<int>>();
  auto r = test::run_sluice("run " + model + " -p 'Once upon a time' --temp 0 -c 512 -n " +
                            std::to_string(want.size()) + " --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], golden["prompt_tokens"]);
  EXPECT_EQ(j["tokens"].get<std::vector<int>>(), want);
  EXPECT_EQ(j["text"], golden["greedy_text"]);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_GT(j["timings"]["decode_tokens_per_s"].get<double>(), 0);
}

TEST(CliRun, TextModeStreamsAndReportsTimings) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto r =
      test::run_sluice("run " + model + " -p 'Once upon a time' --temp 0 -c 512 -n 12 --stop girl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ", there was a little ");
  EXPECT_NE(r.err.find("TTFT"), std::string::npos);
  EXPECT_NE(r.err.find("decode"), std::string::npos);
}

TEST(CliRun, SeededSamplingIsReproducible) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  const std::string args =
      "run " + model + " -p 'Once upon a time' -c 512 -n 30 --temp 1 --seed 7 --output-format json";
  auto a = test::run_sluice(args), b = test::run_sluice(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["tokens"], nlohmann::json::parse(b.out)["tokens"]);
}

TEST(CliRun, ClearErrors) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto none = test::run_sluice("run " + model);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("give a prompt"), std::string::npos);
  auto missing = test::run_sluice("run /nonexistent.gguf -p hi");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos);
  auto badp = test::run_sluice("run " + model + " -p hi --top-p 3");
  EXPECT_EQ(badp.exit_code, 1);
  EXPECT_NE(badp.err.find("top_p"), std::string::npos) << badp.err;
  auto toolong = test::run_sluice(
      "run " + model +
      " -c 16 -p 'Once upon a time there was a very long prompt that does not fit'");
  EXPECT_EQ(toolong.exit_code, 1);
  EXPECT_NE(toolong.err.find("context"), std::string::npos) << toolong.err;
}

// --json-schema / --grammar / --regex: the output is in the constraint's language (checked here
// without the grammar engine: nlohmann's parser, field by field, and std::regex) and ends there.

// The JSON output of `sluice run` under `constraint`, greedy and sampled at two seeds.
std::vector<nlohmann::json> constrained_runs(const std::string& model,
                                             const std::string& constraint) {
  std::vector<nlohmann::json> out;
  for (const char* sampling : {"--temp 0", "--temp 1 --seed 1", "--temp 1 --seed 2"}) {
    auto r = test::run_sluice("run " + model + " -p 'Once upon a time' -c 512 -n 200 " + sampling +
                              " --output-format json " + constraint);
    EXPECT_EQ(r.exit_code, 0) << sampling << ": " << r.err;
    out.push_back(nlohmann::json::parse(r.out, nullptr, false));
    EXPECT_TRUE(out.back().is_object()) << r.out;
  }
  return out;
}

TEST(CliRun, JsonSchemaOutputIsAnObjectOfTheSchema) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  test::TempDir dir;
  const std::string schema = dir.path("pet.json");
  test::write_text(schema, R"({
    "type": "object",
    "properties": {
      "age": {"type": "integer", "minimum": 0, "maximum": 20},
      "kind": {"enum": ["cat", "dog", "bird"]}
    },
    "required": ["age", "kind"],
    "additionalProperties": false
  })");
  for (const nlohmann::json& j : constrained_runs(model, "--json-schema " + schema)) {
    const std::string text = j.value("text", "");
    EXPECT_EQ(j["finish_reason"], "stop") << text;
    const auto v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << "not a JSON object: " << text;
    EXPECT_EQ(v.size(), 2u) << text;
    ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
    EXPECT_GE(v["age"].get<int64_t>(), 0) << text;
    EXPECT_LE(v["age"].get<int64_t>(), 20) << text;
    ASSERT_TRUE(v.contains("kind") && v["kind"].is_string()) << text;
    EXPECT_TRUE(std::set<std::string>({"cat", "dog", "bird"}).count(v["kind"])) << text;
  }
}

TEST(CliRun, GrammarOutputIsASentenceOfTheGrammar) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  test::TempDir dir;
  struct Case {
    const char* gbnf;
    const char* language;  // the same language as a std::regex
  } cases[] = {
      {"root ::= \"yes\" | \"no\"\n", "yes|no"},
      {"root ::= (\"yes\" | \"no\") \" because \" [a-z ]{1,12} \".\"\n",
       "(yes|no) because [a-z ]{1,12}\\."},
  };
  for (const Case& c : cases) {
    const std::string path = dir.path("g.gbnf");
    test::write_text(path, c.gbnf);
    for (const nlohmann::json& j : constrained_runs(model, "--grammar " + path)) {
      const std::string text = j.value("text", "");
      EXPECT_TRUE(std::regex_match(text, std::regex(c.language))) << c.gbnf << " -> " << text;
      EXPECT_EQ(j["finish_reason"], "stop") << text;
    }
  }
}

TEST(CliRun, RegexOutputMatchesTheRegex) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  const std::string re = "[0-9]{3}-[a-z]{2,4}";
  for (const nlohmann::json& j : constrained_runs(model, "--regex '" + re + "'")) {
    const std::string text = j.value("text", "");
    EXPECT_TRUE(std::regex_match(text, std::regex(re))) << text;
    EXPECT_EQ(j["finish_reason"], "stop") << text;
  }
}

TEST(CliRun, BadConstraintsAreClearErrors) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  test::TempDir dir;
  const auto file = [&](const std::string& name, const std::string& text) {
    test::write_text(dir.path(name), text);
    return dir.path(name);
  };
  struct Case {
    std::string args, says;
  } cases[] = {
      {"--json-schema " + file("broken.json", "{\"type\": "), "is not valid JSON"},
      {"--json-schema " + file("unique.json", R"({"type": "array", "uniqueItems": true})"),
       "json_schema: unsupported keyword 'uniqueItems'"},
      {"--grammar " + file("bad.gbnf", "root ::= \"a\" |\n  oops ::="), "gbnf:"},
      {"--grammar " + file("noroot.gbnf", "start ::= \"a\"\n"), "gbnf: no rule named 'root'"},
      {"--grammar " + dir.path("missing.gbnf"), "cannot read"},
      {"--regex '(?=x)'", "lookahead"},
      {"--regex '[a-'", "regex:"},
      {"--regex a --grammar " + file("ok.gbnf", "root ::= \"a\"\n"), "at most one"},
  };
  for (const Case& c : cases) {
    auto r = test::run_sluice("run " + model + " -p 'Once upon a time' -c 512 -n 8 " + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_NE(r.err.find("sluice run: error: "), std::string::npos) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << ": nothing generated, got " << r.out;
  }
}

TEST(CliBenchThroughput, ReportsServingMetrics) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto r = test::run_sluice("bench throughput " + model +
                            " --requests 6 --input-len 24 --output-len 8 --concurrency 3 "
                            "--shared-prefix 16 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests"], 6);
  EXPECT_EQ(j["concurrency"], 3);
  EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["ttft_ms"]["p99"].get<double>(), 0);
  EXPECT_GE(j["ttft_ms"]["p99"].get<double>(), j["ttft_ms"]["p50"].get<double>());
  EXPECT_GT(j["prefix_cache_hit_tokens"].get<int>(),
            0);  // later requests reuse the 16-token prefix
}

}  // namespace
}  // namespace sluice
