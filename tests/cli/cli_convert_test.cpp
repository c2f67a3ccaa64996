// `sluice synth` and `sluice quantize` from the command line: output, table, clear errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

// The gemma4 presets: tiny-gemma4 as written by `sluice synth`, read by `sluice info` (the
// per-layer arrays, K/V only for the 4 layers that store it: 3 windowed x 2 heads x 64 + 1
// global x 1 head x 128, K and V, f16) and `sluice plan`; gemma-4-e4b is listed.
TEST(CliConvert, SynthGemma4ThenInfoAndPlan) {
  test::TempDir dir;
  const std::string m = dir.path("tiny-gemma4.gguf");
  auto s = test::run_sluice("synth --preset tiny-gemma4 --type q8_0 --seed 4 -o " + m);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("tiny-gemma4 preset, q8_0"), std::string::npos) << s.out;
  auto i = test::run_sluice("info --json " + m);
  ASSERT_EQ(i.exit_code, 0) << i.err;
  const auto j = nlohmann::json::parse(i.out);
  EXPECT_EQ(j["architecture"], "gemma4");
  EXPECT_EQ(j["hparams"]["attention.head_count_kv"],
            nlohmann::json::array({2, 2, 2, 1, 2, 2, 2, 1}));
  EXPECT_EQ(j["hparams"]["attention.sliding_window_pattern"],
            nlohmann::json::array({1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(j["hparams"]["attention.shared_kv_layers"], 4);
  EXPECT_EQ(j["hparams"]["embedding_length_per_layer_input"], 32);
  EXPECT_EQ(j["memory"]["kv_bytes_per_token_f16"], (3 * 2 * 64 + 1 * 1 * 128) * 2 * 2);
  auto p = test::run_sluice("plan --model " + m + " --hw rtx-4090 --batch 1 --output-format json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto pj = nlohmann::json::parse(p.out);
  EXPECT_DOUBLE_EQ(pj["model"]["kv_bytes_per_token"].get<double>(), (3 * 128 + 128) * 2 * 2);
  auto h = test::run_sluice("synth --help");
  EXPECT_NE(h.out.find("gemma-4-e4b"), std::string::npos) << h.out;
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
