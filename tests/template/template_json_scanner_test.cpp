// The incremental JSON scanner against nlohmann's parser: the same documents accepted and
// rejected, on a fixed list and on random texts over JSON's alphabet.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "template/json_scanner.h"

namespace sluice {
namespace {

using Step = JsonScanner::Step;

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// A whole document: one value, whitespace around it.
bool scanner_accepts(std::string_view text) {
  JsonScanner scanner;
  bool done = false;
  for (char c : text) {
    if (done) {
      if (!is_ws(c)) return false;
      continue;
    }
    Step step = scanner.push(c);
    if (step == Step::kError) return false;
    if (step == Step::kDoneBefore && !is_ws(c)) return false;
    done = step == Step::kDone || step == Step::kDoneBefore;
  }
  return done || scanner.finish() == Step::kDone;
}

TEST(TemplateJsonScanner, AgreesWithNlohmannOnExamples) {
  const char* kTexts[] = {
      "{}",
      "[]",
      "0",
      "-0",
      "12",
      "-1.5e+10",
      "1E5",
      "0.5",
      "\"\"",
      "true",
      "false",
      "null",
      " { \"a\" : [ 1 , 2 , { \"b\" : null } ] } ",
      R"({"s": "\"\\\/\b\f\n\r\t\u00e9"})",
      "[[[[]]]]",
      "{\"a\":{\"b\":{\"c\":[true,false]}}}",
      // Invalid:
      "",
      " ",
      "{",
      "}",
      "[1,]",
      "{\"a\":1,}",
      "{\"a\"}",
      "{a:1}",
      "01",
      "-",
      "1.",
      ".5",
      "1e",
      "1e+",
      "+1",
      "tru",
      "nul",
      "\"abc",
      "\"\\x\"",
      "\"\\u12g4\"",
      "[1 2]",
      "{\"a\":1 \"b\":2}",
      "[}",
      "{]",
      "\"a\nb\"",
      "1 2",
      "{} {}",
      "'a'",
      "[1,,2]",
      "NaN",
      "-a",
  };
  for (const char* text : kTexts) {
    EXPECT_EQ(scanner_accepts(text), nlohmann::json::accept(text)) << "'" << text << "'";
  }
}

TEST(TemplateJsonScanner, AgreesWithNlohmannOnRandomTexts) {
  const char kAlphabet[] = "{}[]\",: 0123456789-+.eEtrufalsn\\u\"ab";
  std::mt19937 rng(11);
  size_t accepted = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    std::string text;
    const size_t n = 1 + rng() % 12;
    for (size_t i = 0; i < n; ++i) text += kAlphabet[rng() % (sizeof kAlphabet - 1)];
    const bool expected = nlohmann::json::accept(text);
    accepted += expected;
    if (!expected && scanner_accepts(text)) {
      // Valid JSON that nlohmann cannot represent (1E659): its only stricter rule.
      EXPECT_THROW([[maybe_unused]] auto j = nlohmann::json::parse(text),
                   nlohmann::json::out_of_range)
          << "'" << text << "'";
      continue;
    }
    ASSERT_EQ(scanner_accepts(text), expected) << "'" << text << "'";
  }
  EXPECT_GT(accepted, 100u);  // the alphabet does produce valid documents
}

TEST(TemplateJsonScanner, FindsTheEndOfAValue) {
  JsonScanner scanner;
  const std::string text = R"({"a": "}", "b": [1, {"c": 2}]} trailing)";
  size_t end = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    Step step = scanner.push(text[i]);
    ASSERT_NE(step, Step::kError) << scanner.error();
    if (step == Step::kDone) {
      end = i + 1;
      break;
    }
  }
  EXPECT_EQ(text.substr(0, end), R"({"a": "}", "b": [1, {"c": 2}]})");
  scanner.reset();
  EXPECT_EQ(scanner.push('4'), Step::kMore);
  EXPECT_EQ(scanner.push('2'), Step::kMore);
  EXPECT_EQ(scanner.push(','), Step::kDoneBefore);  // a number ends before the next byte
}

TEST(TemplateJsonScanner, LimitsNestingAndExplainsErrors) {
  JsonScanner scanner;
  Step step = Step::kMore;
  for (size_t i = 0; i <= JsonScanner::kMaxDepth && step == Step::kMore; ++i)
    step = scanner.push('[');
  EXPECT_EQ(step, Step::kError);
  EXPECT_EQ(scanner.depth(), JsonScanner::kMaxDepth);
  EXPECT_NE(scanner.error().find("nesting deeper than 256"), std::string::npos) << scanner.error();

  scanner.reset();
  scanner.push('{');
  EXPECT_EQ(scanner.push('x'), Step::kError);
  EXPECT_EQ(scanner.error(), "expected an object key (got 'x')");
  scanner.reset();
  scanner.push('"');
  EXPECT_EQ(scanner.push('\x01'), Step::kError);
  EXPECT_EQ(scanner.error(), "control character in a string (got 0x01)");
  scanner.reset();
  scanner.push('[');
  EXPECT_EQ(scanner.finish(), Step::kError);
  EXPECT_EQ(scanner.error(), "unexpected end of the text inside a JSON value");
}

}  // namespace
}  // namespace sluice
