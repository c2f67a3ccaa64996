// JSON Schema `format` as structured output enforces it (json_schema_formats.h), against the
// JSON Schema Test Suite's draft2020-12/optional-format files: for every string instance, the
// grammar of the case's schema accepts it exactly when the suite says it is valid, compact and
// pretty-printed, and the validator agrees. Non-string instances are valid for any format.
// The inexact corners are listed with their reason (a host name's total length, IDNA rules of
// A-labels); every other instance must be decided right.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/json_schema_formats.h"
#include "test_util.h"

namespace sluice::grammar {
namespace {

using ojson = nlohmann::ordered_json;

struct FormatInexact {
  const char* file;
  const char* test;  // description prefix
  const char* reason;
};
constexpr const char* kIdna =
    "an A-label's Punycode and the IDNA rules of its Unicode are not checked (no grammar decodes "
    "Punycode); it must still be a well-formed LDH label";
constexpr const char* kLength = "a host name's total length (253) is not checked by the grammar";
constexpr std::array<FormatInexact, 14> kFormatInexact = {{
    {"hostname.json", "exceeds maximum overall length", kLength},
    {"hostname.json", "invalid Punycode", kIdna},
    {"hostname.json", "contains illegal char", kIdna},
    {"hostname.json", "Begins with a", kIdna},
    {"hostname.json", "Exceptions that are DISALLOWED", kIdna},
    {"hostname.json", "MIDDLE DOT with no", kIdna},
    {"hostname.json", "MIDDLE DOT with nothing", kIdna},
    {"hostname.json", "Greek KERAIA not followed", kIdna},
    {"hostname.json", "Hebrew GERESH not preceded", kIdna},
    {"hostname.json", "Hebrew GERSHAYIM not preceded", kIdna},
    {"hostname.json", "KATAKANA MIDDLE DOT with no", kIdna},
    {"hostname.json", "Arabic-Indic digits mixed", kIdna},
    {"hostname.json", "ZERO WIDTH JOINER not preceded", kIdna},
    {"hostname.json", "contains \"--\" in the 3rd and 4th position", kIdna},
}};

const FormatInexact* inexact(const std::string& file, const std::string& test) {
  for (const FormatInexact& k : kFormatInexact)
    if (file == k.file && test.rfind(k.test, 0) == 0) return &k;
  return nullptr;
}

TEST(JsonSchemaFormats, OptionalFormatSuite) {
  SLUICE_REQUIRE_SHARED(suite, "testdata/json_schema_suite/draft2020-12/optional-format");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(suite))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 10u);
  std::vector<std::string> failures;
  int instances = 0, passed = 0, known = 0;
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    std::ifstream in(path);
    const ojson groups = ojson::parse(in);
    for (const ojson& group : groups) {
      JsonSchemaOptions opts;
      opts.refuse_unknown_formats = true;
      auto spec = json_schema_to_grammar(group["schema"], opts);
      ASSERT_TRUE(spec.ok()) << file << ": " << spec.message();
      auto g = lower(*spec);
      ASSERT_TRUE(g.ok()) << file << ": " << g.message();
      for (const ojson& t : group["tests"]) {
        ++instances;
        const std::string desc = t["description"];
        const bool valid = t["valid"];
        bool ok = true;
        std::string why;
        for (const std::string& text : {t["data"].dump(), t["data"].dump(2)}) {
          if (matches(*g, text) != valid) {
            ok = false;
            why = (valid ? "rejected valid " : "accepted invalid ") + text;
            break;
          }
        }
        auto v = json_schema_validate(group["schema"], t["data"]);
        if (ok && (!v.ok() || *v != valid)) {
          ok = false;
          why = v.ok() ? "the validator disagrees" : v.message();
        }
        if (ok) {
          ++passed;
        } else if (inexact(file, desc)) {
          ++known;
        } else {
          failures.push_back(file + " / " + desc + ": " + why);
        }
      }
    }
  }
  std::printf("optional-format: %d instances, %d decided as the suite says, %d known inexact\n",
              instances, passed, known);
  std::string first;
  for (size_t i = 0; i < failures.size() && i < 25; ++i) first += "\n  " + failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " mismatches:" << first;
}

TEST(JsonSchemaFormats, UnknownFormatsIgnoredOrRefused) {
  const ojson schema = {{"type", "string"}, {"format", "int32"}};
  auto loose = json_schema_to_grammar(schema);
  ASSERT_TRUE(loose.ok()) << loose.message();
  JsonSchemaOptions strict;
  strict.refuse_unknown_formats = true;
  auto refused = json_schema_to_grammar(schema, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("unsupported keyword 'format'"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("int32"), std::string::npos);
  EXPECT_EQ(enforced_formats().size(), 10u);
  for (const std::string& f : enforced_formats()) EXPECT_TRUE(format_regex(f)) << f;
  EXPECT_FALSE(format_regex("regex"));
}

TEST(JsonSchemaFormats, EscapedSpellingsAndObjects) {
  // A format constrains the decoded value: "\u0032" spells "2".
  auto spec = json_schema_to_grammar(
      ojson::parse(R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"}},
                      "required": ["d"]})"));
  ASSERT_TRUE(spec.ok()) << spec.message();
  auto g = lower(*spec);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(matches(*g, R"({"d": "2024-02-29"})"));
  EXPECT_TRUE(matches(*g, R"({"d": "\u0032024-02-29"})"));
  EXPECT_FALSE(matches(*g, R"({"d": "2023-02-29"})"));
  EXPECT_FALSE(matches(*g, R"({"d": "soon"})"));
}

}  // namespace
}  // namespace sluice::grammar
