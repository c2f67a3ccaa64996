// `sluice info --json` on real files: the numbers a user reads must be right.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(CliInfo, Stories260K) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto r = test::run_sluice("info --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["hparams"]["block_count"], 5);
  EXPECT_EQ(j["hparams"]["embedding_length"], 64);
  EXPECT_EQ(j["hparams"]["feed_forward_length"], 172);
  EXPECT_EQ(j["hparams"]["attention.head_count"], 8);
  EXPECT_EQ(j["hparams"]["attention.head_count_kv"], 4);
  EXPECT_DOUBLE_EQ(j["hparams"]["attention.layer_norm_rms_epsilon"].get<double>(), 1e-5);
  EXPECT_EQ(j["tokenizer"]["model"], "llama");
  EXPECT_EQ(j["tokenizer"]["n_tokens"], 512);
  EXPECT_EQ(j["tokenizer"]["bos"]["text"], "<s>");
  EXPECT_EQ(j["tokenizer"]["eos"]["id"], 2);
  EXPECT_EQ(j["tensors"].size(), 48u);
  EXPECT_EQ(j["tensors"][0]["name"], "token_embd.weight");
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::array({64, 512}));
  EXPECT_EQ(j["tensors"][0]["bytes"], 64 * 512 * 4);
  // 2 x embeddings + output norm + 5 x (q 64x64, k 64x32, v 64x32, o 64x64, 3 x ffn 64x172, 2
  // norms)
  const int64_t params = 2 * 64 * 512 + 64 + 5 * (4096 + 2048 + 2048 + 4096 + 3 * 64 * 172 + 128);
  EXPECT_EQ(j["totals"]["params"], params);
  EXPECT_EQ(j["totals"]["bytes"], params * 4);
  // KV per token at f16: 2 x 5 layers x 4 kv heads x head_dim 8 x 2 bytes.
  EXPECT_EQ(j["memory"]["kv_bytes_per_token_f16"], 2 * 5 * 4 * 8 * 2);
  EXPECT_EQ(j["memory"]["kv_bytes_at_context_f16"], 2 * 5 * 4 * 8 * 2 * 128);
}

// A hybrid (qwen35: 6 Gated DeltaNet + 2 attention layers): K/V for the attention layers only,
// and the recurrent state a sequence holds (per recurrent layer the conv's 3 x 512 inputs and 4
// heads of 64 x 64, f32).
TEST(CliInfo, HybridCountsStateNotKv) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/qwen35.gguf");
  auto r = test::run_sluice("info --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["memory"]["kv_bytes_per_token_f16"], 2 * 2 * 2 * 64 * 2);
  EXPECT_EQ(j["memory"]["recurrent_state_bytes_per_sequence"], 6 * (3 * 512 + 4 * 64 * 64) * 4);
  auto t = test::run_sluice("info " + path);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("recurrent state per sequence"), std::string::npos) << t.out;
}

// gemma4: the per-layer arrays in full, and K/V only for the five layers that store it, each
// with its kind's heads: 4 windowed x 2 heads x 32 + 1 global x 1 head x 64, K and V, f16.
TEST(CliInfo, Gemma4CountsOnlyTheLayersThatStoreKv) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/gemma4.gguf");
  auto r = test::run_sluice("info --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["hparams"]["attention.head_count_kv"],
            nlohmann::json::array({2, 2, 2, 2, 1, 2, 2, 2, 2, 1}));
  EXPECT_EQ(j["hparams"]["attention.sliding_window_pattern"],
            nlohmann::json::array({1, 1, 1, 1, 0, 1, 1, 1, 1, 0}));
  EXPECT_EQ(j["hparams"]["attention.key_length_swa"], 32);
  EXPECT_EQ(j["hparams"]["attention.shared_kv_layers"], 5);
  EXPECT_EQ(j["hparams"]["embedding_length_per_layer_input"], 8);
  EXPECT_EQ(j["memory"]["kv_bytes_per_token_f16"], (4 * 2 * 32 + 1 * 1 * 64) * 2 * 2);
}

TEST(CliInfo, EveryTokenizerVocab) {
  const std::string dir = test::shared_dir();
  if (dir.empty()) SLUICE_SHARED_MISSING("../shared");
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/testdata/tokenizer")) {
    if (e.path().extension() != ".gguf") continue;
    ++n;
    auto r = test::run_sluice("info --json " + e.path().string());
    ASSERT_EQ(r.exit_code, 0) << e.path() << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_GT(j["tokenizer"]["n_tokens"].get<int>(), 1000) << e.path();
    EXPECT_EQ(j["tensors"].size(), 0u);
    EXPECT_FALSE(j["tokenizer"]["model"].get<std::string>().empty());
    // The text form runs too.
    auto t = test::run_sluice("info " + e.path().string());
    EXPECT_EQ(t.exit_code, 0);
    EXPECT_NE(t.out.find("tokenizer:"), std::string::npos);
  }
  EXPECT_EQ(n, 11);
}

TEST(CliInfo, LlamaBpeVocab) {
  SLUICE_REQUIRE_SHARED(path, "testdata/tokenizer/ggml-vocab-llama-bpe.gguf");
  auto r = test::run_sluice("info --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokenizer"]["model"], "gpt2");
  EXPECT_EQ(j["tokenizer"]["pre"], "llama-bpe");
  EXPECT_EQ(j["tokenizer"]["n_tokens"], 128256);
  EXPECT_EQ(j["tokenizer"]["bos"]["text"], "<|begin_of_text|>");
}

TEST(CliInfo, BadFileIsAClearError) {
  test::TempDir dir;
  const std::string p = dir.path("junk.gguf");
  FILE* f = std::fopen(p.c_str(), "wb");
  std::fputs("not a gguf file at all", f);
  std::fclose(f);
  auto r = test::run_sluice("info " + p);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("sluice info: error: invalid GGUF file '" + p + "' at offset 0: bad magic"),
            std::string::npos)
      << r.err;
  auto missing = test::run_sluice("info " + dir.path("none.gguf"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace sluice
