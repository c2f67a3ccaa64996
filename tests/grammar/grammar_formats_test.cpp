// JSON Schema `format` as structured output enforces it (json_schema_formats.h), against the
// JSON Schema Test Suite's draft2020-12/optional-format files: for every string instance, the
// grammar of the case's schema accepts it exactly when the suite says it is valid, compact and
// pretty-printed, and the validator agrees. Non-string instances are valid for any format.
// Every instance must be decided right: a host name's total length and its A-labels' IDNA
// rules too, which the matcher checks on the text (string_checks.h). Then the checks' own
// cases: as the text grows, through escapes and rollback, and the token masks against brute
// force along random walks.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/json_schema_formats.h"
#include "grammar/string_checks.h"
#include "grammar/token_mask.h"
#include "test_util.h"

namespace sluice::grammar {
namespace {

using ojson = nlohmann::ordered_json;

TEST(JsonSchemaFormats, OptionalFormatSuite) {
  SLUICE_REQUIRE_SHARED(suite, "testdata/json_schema_suite/draft2020-12/optional-format");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(suite))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 10u);
  std::vector<std::string> failures;
  int instances = 0, passed = 0;
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
        } else {
          failures.push_back(file + " / " + desc + ": " + why);
        }
      }
    }
  }
  std::printf("optional-format: %d instances, %d decided as the suite says\n", instances, passed);
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

std::shared_ptr<const Grammar> hostname_grammar(const char* schema) {
  auto spec = json_schema_to_grammar(ojson::parse(schema));
  EXPECT_TRUE(spec.ok()) << spec.message();
  auto g = lower(*spec);
  EXPECT_TRUE(g.ok()) << g.message();
  EXPECT_TRUE((*g)->has_checks());
  return *g;
}

TEST(JsonSchemaFormats, HostnameChecksRunAsTheTextGrows) {
  auto g = hostname_grammar(R"({"type": "string", "format": "hostname"})");
  // An A-label is judged when it ends (a dot or the closing quote), not before: "xn--l-gda" is
  // l followed by a MIDDLE DOT with nothing after it, "xn--ll-0ea" has it between two l's.
  Matcher m(g);
  EXPECT_TRUE(m.accept("\"xn--l-gda"));
  EXPECT_FALSE(m.can_accept("\""));
  EXPECT_FALSE(m.can_accept("."));
  EXPECT_FALSE(m.can_accept("\\u002e"));  // a dot spelled as an escape ends the label too
  EXPECT_TRUE(m.can_accept("\\u002"));    // ... but not before the escape is whole
  m.reset();
  EXPECT_TRUE(m.accept("\"xn--ll-0ea"));
  EXPECT_TRUE(m.accept(".example\""));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(matches(g, R"("XN--LL-0EA.com")"));  // labels are case-insensitive
  EXPECT_TRUE(matches(g, R"("xn\u002d-ll-0ea")"));
  EXPECT_FALSE(matches(g, R"("xn--X")"));
  EXPECT_FALSE(matches(g, R"("xn--X.com")"));

  // 253 characters in all: labels of 63 with dots, the shortest completion counted.
  const std::string l63(63, 'a');
  const std::string h252 = l63 + "." + l63 + "." + l63 + "." + std::string(60, 'b');  // 252
  EXPECT_TRUE(matches(g, "\"" + h252 + "c\""));
  EXPECT_FALSE(matches(g, "\"" + h252 + "cd\""));
  m.reset();
  ASSERT_TRUE(m.accept("\"" + h252));
  EXPECT_TRUE(m.can_accept("c"));
  EXPECT_FALSE(m.can_accept("-"));  // "-" needs a letter after it: 254
  EXPECT_FALSE(m.can_accept("."));
  EXPECT_FALSE(m.can_accept("cd"));
  EXPECT_TRUE(m.accept("\\u0063"));  // an escape counts as the one character it spells
  EXPECT_TRUE(m.accept("\""));

  // Rollback takes the text back with the state.
  m.reset();
  ASSERT_TRUE(m.accept("\"xn--"));
  ASSERT_TRUE(m.accept("l-gda"));
  EXPECT_FALSE(m.can_accept("\""));
  m.rollback(1);
  ASSERT_TRUE(m.accept("ll-0ea"));
  EXPECT_TRUE(m.accept("\""));
  EXPECT_TRUE(m.can_end());
}

TEST(JsonSchemaFormats, HostnameOnlyWhereTheSchemaSaysSo) {
  // The same string without the format, and an email's domain (idn-email is another format),
  // are not checked; a hostname under anyOf with a plain string is checked on its branch only.
  auto plain = json_schema_to_grammar(ojson::parse(R"({"type": "string"})"));
  ASSERT_TRUE(plain.ok());
  auto pg = lower(*plain);
  ASSERT_TRUE(pg.ok());
  EXPECT_FALSE((*pg)->has_checks());
  EXPECT_TRUE(matches(*pg, R"("xn--X")"));
  auto g = hostname_grammar(
      R"({"anyOf": [{"type": "string", "format": "hostname"}, {"type": "string", "maxLength": 3}]})");
  EXPECT_TRUE(matches(g, R"("xn--ll-0ea")"));
  EXPECT_FALSE(matches(g, R"("xn--X")"));
  EXPECT_TRUE(matches(g, R"("x.y")"));
  EXPECT_TRUE(matches(g, R"("-")"));  // not a host name, but three characters
  auto arr =
      hostname_grammar(R"({"type": "array", "items": {"type": "string", "format": "hostname"}})");
  EXPECT_TRUE(matches(arr, R"(["xn--ll-0ea", "a.b", "xn--9n2bp8q.xn--9t4b11yi5a"])"));
  EXPECT_FALSE(matches(arr, R"(["a.b", "xn--l-gda"])"));
}

// Masks over a checked string against is_allowed() for every token, along random walks that
// take A-labels, escapes and long labels (to reach the length bound). A walk may reach a dead
// end (an A-label that no character can save, at 63 characters or the length bound): it rolls
// back and goes on.
TEST(JsonSchemaFormats, HostnameMasksMatchBruteForce) {
  auto g =
      hostname_grammar(R"({"type": "array", "items": {"type": "string", "format": "hostname"}})");
  std::vector<std::string> toks;
  for (int c = 0; c < 128; ++c) toks.push_back(std::string(1, char(c)));
  for (const char* t : {"xn--",
                        "XN--",
                        "ll-0ea",
                        "l-gda",
                        "9n2bp8q",
                        "9t4b11yi5a",
                        "X",
                        ".",
                        ".com",
                        "\"",
                        "\",",
                        "\"]",
                        "[\"",
                        ", \"",
                        "\\u002e",
                        "\\u002d",
                        "\\u0078n",
                        "\\u00",
                        "abcdefghijklmnopqrstuvwxyz",
                        "0123456789abcdefghijklmnopqrstuvwxyz-0123456789abcdefghijklmn",
                        "a.",
                        "-a",
                        ".xn--",
                        "a\"]",
                        "ll-0ea\"",
                        "l-gda.",
                        "x.y\", \"xn--"})
    toks.push_back(t);
  toks.push_back("");
  auto vocab = std::make_shared<TokenVocab>(toks, std::vector<int32_t>{int32_t(toks.size() - 1)});
  auto cg = CompiledGrammar::make(g, vocab);
  std::vector<uint64_t> mask(vocab->n_words());
  std::mt19937 rng(7);
  int checked = 0, dead = 0;
  for (int walk = 0; walk < 40; ++walk) {
    TokenMatcher m(cg);
    for (int step = 0; step < 120 && !m.terminated(); ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed, long_ones;
      for (int32_t t = 0; t < int32_t(vocab->size()); ++t) {
        const bool bit = (mask[size_t(t) >> 6] >> (t & 63)) & 1;
        ASSERT_EQ(bit, m.is_allowed(t)) << "walk " << walk << " step " << step << " token '"
                                        << vocab->bytes(t) << "' after " << m.text();
        ++checked;
        if (bit) (t >= 128 ? long_ones : allowed).push_back(t);
      }
      if (allowed.empty() && long_ones.empty()) {
        ++dead;
        m.rollback(std::min<size_t>(m.n_tokens(), 3));
        continue;
      }
      const auto& from = !long_ones.empty() && rng() % 3 ? long_ones
                         : allowed.empty()               ? long_ones
                                                         : allowed;
      ASSERT_TRUE(m.accept_token(from[rng() % from.size()]));
      if (step % 9 == 4 && m.n_tokens() >= 2) m.rollback(1 + rng() % 2);
    }
  }
  std::printf("hostname masks: %d token verdicts checked, %d dead ends\n", checked, dead);
}

}  // namespace
}  // namespace sluice::grammar
