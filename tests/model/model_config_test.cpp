// ModelConfig from GGUF metadata: the real llama2.c-converted model and synthetic models of
// every family; context-length option.
#include <gtest/gtest.h>

#include "model/model.h"
#include "model/model_test_util.h"

namespace sluice {
namespace {

TEST(ModelConfig, Stories260K) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.message();
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_kv_head, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_ctx_train, 128);
  EXPECT_EQ(c.n_ctx, 128);
  EXPECT_EQ(c.rope_style, RopeStyle::kNormal);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FALSE(c.tied_output);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.has_rope_freqs);
}

TEST(ModelConfig, ContextBeyondTrainedNeedsTheOption) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto refused = Model::load(path, {512, false});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("context length 512 exceeds the trained context of 128"),
            std::string::npos)
      << refused.message();
  auto allowed = Model::load(path, {512, true});
  ASSERT_TRUE(allowed.ok()) << allowed.message();
  EXPECT_EQ(allowed->config().n_ctx, 512);
  auto shorter = Model::load(path, {64, false});
  ASSERT_TRUE(shorter.ok());
  EXPECT_EQ(shorter->config().n_ctx, 64);
}

TEST(ModelConfig, SyntheticFamilies) {
  test::TempDir dir;
  struct Want {
    const char* variant;
    Arch arch;
    RopeStyle rope;
    int n_head, n_kv_head, head_dim;
    bool bias, qk_norm, tied, rope_freqs;
  };
  const Want wants[] = {
      {"tiny", Arch::kLlama, RopeStyle::kNormal, 4, 2, 64, false, false, false, false},
      {"tiny-mha", Arch::kLlama, RopeStyle::kNormal, 4, 4, 64, false, false, false, false},
      {"tiny-mqa", Arch::kLlama, RopeStyle::kNormal, 4, 1, 64, false, false, false, false},
      {"tiny-qwen2", Arch::kQwen2, RopeStyle::kNeox, 4, 2, 64, true, false, true, false},
      {"tiny-qwen3", Arch::kQwen3, RopeStyle::kNeox, 8, 2, 64, false, true, false, false},
      {"tiny-llama3", Arch::kLlama, RopeStyle::kNormal, 4, 2, 64, false, false, true, true},
  };
  for (const Want& w : wants) {
    const std::string path = dir.path(std::string(w.variant) + ".gguf");
    test::write_synthetic_model(w.variant, FileType::MOSTLY_F16, path);
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.message();
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.arch, w.arch) << w.variant;
    EXPECT_EQ(c.rope_style, w.rope) << w.variant;
    EXPECT_EQ(c.n_head, w.n_head) << w.variant;
    EXPECT_EQ(c.n_kv_head, w.n_kv_head) << w.variant;
    EXPECT_EQ(c.head_dim, w.head_dim) << w.variant;
    EXPECT_EQ(c.qkv_bias, w.bias) << w.variant;
    EXPECT_EQ(c.qk_norm, w.qk_norm) << w.variant;
    EXPECT_EQ(c.tied_output, w.tied) << w.variant;
    EXPECT_EQ(c.has_rope_freqs, w.rope_freqs) << w.variant;
    EXPECT_EQ(c.n_vocab, 512);
    const ModelWeights& mw = m->weights();
    EXPECT_EQ(mw.layers.size(), size_t(c.n_layer));
    EXPECT_EQ(mw.output.data == mw.token_embd.data, w.tied) << w.variant;
    EXPECT_EQ(mw.rope_freqs.size(), w.rope_freqs ? size_t(c.n_rot / 2) : 0u) << w.variant;
    EXPECT_EQ(mw.layers[0].bq.size(), w.bias ? size_t(c.q_dim()) : 0u) << w.variant;
    EXPECT_EQ(mw.layers[1].k_norm.size(), w.qk_norm ? size_t(c.head_dim) : 0u) << w.variant;
  }
}

}  // namespace
}  // namespace sluice
