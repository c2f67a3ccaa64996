// Real chat templates (../shared/testdata/chat_templates): one test per case of cases.json,
// whose expectations were rendered by Python Jinja2 as transformers' apply_chat_template does.
// Skips cleanly when ../shared is absent.
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <vector>

#include "template/chat_template.h"
#include "test_util.h"

namespace sluice {
namespace {

constexpr const char* kCasesFile = "testdata/chat_templates/cases.json";

struct CaseRef {
  size_t index = 0;
  std::string name;  // empty: cases.json is not available
};

// Names like "Qwen_Qwen2_5_7B_Instruct_multi_turn_12".
std::vector<CaseRef> list_cases() {
  std::string path = test::shared_path(kCasesFile);
  if (path.empty()) return {CaseRef{}};
  auto json = nlohmann::ordered_json::parse(test::read_file(path), nullptr, false);
  if (json.is_discarded() || !json.contains("cases")) return {CaseRef{}};
  std::vector<CaseRef> out;
  for (size_t i = 0; i < json["cases"].size(); ++i) {
    const auto& c = json["cases"][i];
    std::string name = c.value("template", "case");
    if (name.size() > 6 && name.substr(name.size() - 6) == ".jinja") name.resize(name.size() - 6);
    name += "_" + c.value("conversation", std::string("case")) + "_" + std::to_string(i);
    for (char& ch : name) {
      if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    out.push_back(CaseRef{i, name});
  }
  return out;
}

const nlohmann::ordered_json& all_cases(const std::string& path) {
  static const nlohmann::ordered_json cases = nlohmann::ordered_json::parse(test::read_file(path));
  return cases;
}

std::time_t pinned_now() {  // the cases pin strftime_now() to 2026-01-15 12:00:00
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

// Test names already say which case; print just that on failure.
void PrintTo(const CaseRef& c, std::ostream* os) {
  *os << c.name;
}

class TemplateCase : public ::testing::TestWithParam<CaseRef> {};

TEST_P(TemplateCase, RendersLikeTransformers) {
  SLUICE_REQUIRE_SHARED(cases_path, kCasesFile);
  ASSERT_FALSE(GetParam().name.empty()) << "cannot read " << cases_path;
  const auto& c = all_cases(cases_path)["cases"][GetParam().index];
  std::string dir = cases_path.substr(0, cases_path.rfind('/') + 1);
  std::string source = test::read_file(dir + c["template"].get<std::string>());
  ASSERT_FALSE(source.empty()) << "missing template " << c["template"];

  auto tmpl = ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  ChatTemplateInputs in;
  in.messages = c["messages"];
  if (c.contains("tools")) in.tools = c["tools"];
  in.bos_token = c["bos_token"].get<std::string>();
  in.eos_token = c["eos_token"].get<std::string>();
  in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  in.now = pinned_now();
  auto out = tmpl->render(in);
  if (c.contains("expected_error")) {
    ASSERT_FALSE(out.ok()) << "expected error '" << c["expected_error"] << "', rendered:\n" << *out;
    EXPECT_EQ(out.message(), c["expected_error"].get<std::string>());
  } else {
    ASSERT_TRUE(out.ok()) << out.message();
    EXPECT_EQ(*out, c["expected"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(CasesJson, TemplateCase, ::testing::ValuesIn(list_cases()),
                         [](const ::testing::TestParamInfo<CaseRef>& info) {
                           return info.param.name.empty() ? std::string("cases_json_unavailable")
                                                          : info.param.name;
                         });

}  // namespace
}  // namespace sluice
