// `sluice synth` and `sluice quantize` from the command line: output, table, clear errors.
#include <gtest/gtest.h>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(CliConvert, SynthThenQuantizeThenInfo) {
  test::TempDir dir;
  const std::string f16 = dir.path("tiny-f16.gguf"), q4 = dir.path("tiny-q4km.gguf");
  auto s = test::run_sluice("synth --preset tiny --type f16 --seed 5 -o " + f16);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("wrote " + f16), std::string::npos);
  auto q = test::run_sluice("quantize " + f16 + " " + q4 + " Q4_K_M");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.out.find("blk.1.attn_v.weight"), std::string::npos);
  EXPECT_NE(q.out.find("f16    -> q6_K"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("total: "), std::string::npos);
  auto i = test::run_sluice("info --json " + q4);
  ASSERT_EQ(i.exit_code, 0);
  EXPECT_NE(i.out.find("\"q4_K\""), std::string::npos);
}

TEST(CliConvert, ClearErrors) {
  test::TempDir dir;
  auto a = test::run_sluice("synth --preset llama-99 -o " + dir.path("x.gguf"));
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_NE(a.err.find("unknown preset 'llama-99' (expected one of: tiny, tiny-moe, llama-3.2-1b"),
            std::string::npos)
      << a.err;
  auto b = test::run_sluice("synth --type q9_9 -o " + dir.path("x.gguf"));
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_NE(b.err.find("unknown type 'q9_9'"), std::string::npos);
  auto c =
      test::run_sluice("quantize " + dir.path("none.gguf") + " " + dir.path("o.gguf") + " q8_0");
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("cannot open"), std::string::npos);
  auto d = test::run_sluice("synth --preset tiny --vocab-from " + dir.path("none.gguf") + " -o " +
                            dir.path("x.gguf"));
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_FALSE(std::filesystem::exists(dir.path("x.gguf")));
}

}  // namespace
}  // namespace sluice
