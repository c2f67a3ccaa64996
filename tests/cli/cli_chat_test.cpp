// `sluice run --chat`: the model's chat template renders each turn; the conversation grows.
#include <gtest/gtest.h>

#include "cli_util.h"
#include "gguf/gguf.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(CliChat, TwoTurnsWithTheModelsTemplate) {
  SLUICE_REQUIRE_SHARED(vocab, "testdata/tokenizer/ggml-vocab-llama-bpe.gguf");
  SLUICE_REQUIRE_SHARED(tmpl, "testdata/chat_templates/meta-llama-Llama-3.2-3B-Instruct.jinja");
  test::TempDir dir;
  const std::string plain = dir.path("plain.gguf"), chat = dir.path("chat.gguf");
  auto s =
      test::run_sluice("synth --preset tiny --type q8_0 --vocab-from " + vocab + " -o " + plain);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  {
    auto f = GgufFile::open(plain);
    ASSERT_TRUE(f.ok());
    GgufWriter w;
    ASSERT_TRUE(w.add_all(*f).ok());
    w.set("tokenizer.chat_template", test::read_file(tmpl));
    ASSERT_TRUE(w.write(chat).ok());
  }
  auto r = test::run_sluice("run " + chat + " --chat --temp 0 -n 4 --ignore-eos -c 512",
                            "Hello there\nAnd again\n\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("chat:"), std::string::npos);
  // Two replies, each on its own line.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;

  auto no_template = test::run_sluice("run " + plain + " --chat -n 2", "hi\n\n");
  EXPECT_EQ(no_template.exit_code, 1);
  EXPECT_NE(no_template.err.find("no tokenizer.chat_template"), std::string::npos)
      << no_template.err;
}

}  // namespace
}  // namespace sluice
