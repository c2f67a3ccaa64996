// Black-box tests of `sluice template`: the rendered prompt goes to stdout byte for byte,
// errors to stderr with a non-zero exit. Skips when the sluice binary has not been built.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

class TemplateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::sluice_binary())) GTEST_SKIP() << "sluice binary not built";
  }
  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_.path(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  test::TempDir dir_;
};

TEST_F(TemplateCli, RendersExactlyWithoutTrailingNewline) {
  std::string tmpl = write(
      "t.jinja",
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}{{ tools | length }}{{ eos_token }}");
  std::string msgs = write("m.json", R"([{"role": "user", "content": "Hi  there"}])");
  std::string tools = write("tools.json", R"([{"type": "function"}])");
  auto r =
      test::run_sluice("template --template " + tmpl + " --messages " + msgs + " --tools " + tools +
                       " --bos-token '<s>' --eos-token '</s>' --add-generation-prompt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s><user>Hi  there<assistant>1</s>");
  EXPECT_EQ(r.err, "");
}

TEST_F(TemplateCli, MessagesFileMayCarryTools) {
  std::string tmpl = write("t.jinja", "{{ messages | length }}/{{ tools[0].name }}");
  std::string msgs = write(
      "m.json", R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]})");
  auto r = test::run_sluice("template --template " + tmpl + " --messages " + msgs);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1/f");
}

TEST_F(TemplateCli, ReportsTemplateErrors) {
  std::string msgs = write("m.json", R"([{"role": "system", "content": "x"}])");
  std::string raises = write("r.jinja", "{{ raise_exception('System role not supported') }}");
  auto r = test::run_sluice("template --template " + raises + " --messages " + msgs);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "sluice template: error: System role not supported\n");

  std::string bad = write("b.jinja", "{% for %}");
  r = test::run_sluice("template --template " + bad + " --messages " + msgs);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("syntax error at line 1, column"), std::string::npos) << r.err;

  r = test::run_sluice("template --template " + dir_.path("missing.jinja") + " --messages " + msgs);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot read"), std::string::npos) << r.err;
}

TEST_F(TemplateCli, TemplateAndSpecialTokensFromGguf) {
  SLUICE_REQUIRE_SHARED(model, "testdata/tokenizer/ggml-vocab-phi-3.gguf");
  std::string msgs =
      write("m.json",
            R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  auto r =
      test::run_sluice("template " + model + " --messages " + msgs + " --add-generation-prompt");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Phi-3's template drops system messages; <s> is the model's BOS token.
  EXPECT_EQ(r.out, "<s><|user|>\nHi<|end|>\n<|assistant|>\n");
}

}  // namespace
}  // namespace sluice
