// ModelConfig from GGUF metadata: the real llama2.c-converted model and synthetic models of
// every family; context-length option.
#include <gtest/gtest.h>

#include "gguf/quants.h"
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
  EXPECT_FALSE(c.tied_embeddings);
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
    EXPECT_EQ(c.tied_embeddings, w.tied) << w.variant;
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

// Copies `in` to `out` with extra f32 1-D tensors and metadata (LongRoPE factors, ...).
void add_to_gguf(const std::string& in, const std::string& out,
                 const std::vector<std::pair<std::string, std::vector<float>>>& tensors,
                 const std::vector<std::pair<std::string, GgufValue>>& meta) {
  auto f = GgufFile::open(in);
  ASSERT_TRUE(f.ok()) << f.message();
  GgufWriter w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  for (const auto& [k, v] : meta) w.set(k, v);
  for (const GgufTensorInfo& t : f->tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    ASSERT_TRUE(w.add_tensor(t.name, t.type, ne, static_cast<const void*>(t.data)).ok());
  }
  for (const auto& [name, v] : tensors) {
    ASSERT_TRUE(
        w.add_tensor(name, GgmlType::F32, {int64_t(v.size())}, static_cast<const void*>(v.data()))
            .ok());
  }
  const Status st = w.write(out);
  ASSERT_TRUE(st.ok()) << st.message();
}

// Phi-3 LongRoPE: the short factors up to rope.scaling.original_context_length, the long ones
// beyond it; rope.scaling.attn_factor scales the scores by its square; one factor tensor alone
// is refused.
TEST(ModelConfig, Phi3LongRopeFactorsFollowTheContext) {
  test::TempDir dir;
  const std::string base = dir.path("phi3.gguf"), lr = dir.path("phi3-longrope.gguf");
  test::write_synthetic_model("tiny-phi3", FileType::MOSTLY_F16, base);
  const std::vector<float> short_f(32, 1.5f), long_f(32, 4.0f);
  add_to_gguf(base, lr,
              {{"rope_factors_short.weight", short_f}, {"rope_factors_long.weight", long_f}},
              {{"phi3.rope.scaling.original_context_length", GgufValue(uint32_t(128))},
               {"phi3.rope.scaling.attn_factor", GgufValue(1.25f)}});
  auto short_ctx = Model::load(lr, {.n_ctx = 128});
  ASSERT_TRUE(short_ctx.ok()) << short_ctx.message();
  EXPECT_EQ(short_ctx->config().rope_factors_tensor, "rope_factors_short.weight");
  EXPECT_EQ(short_ctx->weights().rope_freqs, short_f);
  EXPECT_FLOAT_EQ(short_ctx->config().attention_scale(), 1.25f * 1.25f / 8.0f);  // head_dim 64
  auto long_ctx = Model::load(lr, {.n_ctx = 512});
  ASSERT_TRUE(long_ctx.ok()) << long_ctx.message();
  EXPECT_EQ(long_ctx->config().rope_factors_tensor, "rope_factors_long.weight");
  EXPECT_EQ(long_ctx->weights().rope_freqs, long_f);

  const std::string one = dir.path("phi3-one.gguf");
  add_to_gguf(base, one, {{"rope_factors_long.weight", long_f}}, {});
  auto refused = Model::load(one);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("LongRoPE needs both"), std::string::npos) << refused.message();
}

// The new families' configuration from their synthetic models.
TEST(ModelConfig, WindowsSoftCapsAndExperts) {
  test::TempDir dir;
  auto load = [&](const char* variant) {
    const std::string path = dir.path(std::string(variant) + ".gguf");
    test::write_synthetic_model(variant, FileType::MOSTLY_Q8_0, path);
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << m.message();
    return m;
  };
  auto g2 = load("tiny-gemma2");
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(g2->config().arch, Arch::kGemma2);
  EXPECT_EQ(g2->config().layer_window(0), 5);
  EXPECT_EQ(g2->config().layer_window(1), 0);
  EXPECT_EQ(g2->config().kv_cache_layout().group_window, (std::vector<int32_t>{5, 0}));
  EXPECT_FLOAT_EQ(g2->config().final_softcap, 0.5f);
  EXPECT_EQ(g2->weights().layers[1].ffn_post_norm.size(), size_t(g2->config().n_embd));

  auto g3 = load("tiny-gemma3");
  ASSERT_TRUE(g3.ok());
  const ModelConfig& c3 = g3->config();
  EXPECT_EQ(c3.arch, Arch::kGemma3);
  EXPECT_TRUE(c3.qk_norm);
  EXPECT_TRUE(c3.post_norms);
  for (int il = 0; il < 5; ++il) {
    EXPECT_EQ(c3.layer_window(il), 5) << il;
    EXPECT_TRUE(c3.layer_uses_swa_rope(il)) << il;
    EXPECT_FLOAT_EQ(c3.layer_rope_params(il, nullptr).theta_base, 10000.0f);
  }
  EXPECT_EQ(c3.layer_window(5), 0);
  // 5 windowed layers and 1 global: six K/V groups of one layer (no slot is padding).
  const KvCacheLayout kv3 = c3.kv_cache_layout();
  EXPECT_EQ(kv3.layers_per_group, 1);
  EXPECT_EQ(kv3.group_window, (std::vector<int32_t>{5, 5, 5, 5, 5, 0}));
  EXPECT_FALSE(c3.layer_uses_swa_rope(5));
  EXPECT_FLOAT_EQ(c3.layer_rope_params(5, nullptr).theta_base, 1000000.0f);
  EXPECT_EQ(c3.attn_softcap, 0.0f);

  auto mix = load("tiny-mixtral");
  ASSERT_TRUE(mix.ok());
  const ModelConfig& mc = mix->config();
  EXPECT_EQ(mc.arch, Arch::kLlama);
  EXPECT_EQ(mc.n_expert, 4);
  EXPECT_EQ(mc.n_expert_used, 2);
  EXPECT_EQ(mc.n_ff_exp, 128);
  EXPECT_TRUE(mc.moe_norm_topk);
  const MoeWeights& m0 = mix->weights().layers[0].moe;
  ASSERT_EQ(m0.gate.size(), 4u);
  EXPECT_EQ(m0.router.type, GgmlType::F32);  // routers are never quantized
  EXPECT_EQ(m0.gate[0].n_rows, 128);
  EXPECT_EQ(static_cast<const uint8_t*>(m0.down[1].data),
            static_cast<const uint8_t*>(m0.down[0].data) +
                row_size(m0.down[0].type, m0.down[0].n_cols) * size_t(mc.n_embd));
  EXPECT_FALSE(m0.has_shared());

  auto q2 = load("tiny-qwen2moe");
  ASSERT_TRUE(q2.ok());
  EXPECT_EQ(q2->config().arch, Arch::kQwen2Moe);
  EXPECT_FALSE(q2->config().moe_norm_topk);
  EXPECT_EQ(q2->config().n_ff_shexp, 256);
  EXPECT_TRUE(q2->weights().layers[0].moe.has_shared());
  EXPECT_EQ(q2->weights().layers[0].moe.sh_gate_inp.n_rows, 1);
  auto q3 = load("tiny-qwen3moe");
  ASSERT_TRUE(q3.ok());
  EXPECT_EQ(q3->config().arch, Arch::kQwen3Moe);
  EXPECT_TRUE(q3->config().qk_norm);
  EXPECT_EQ(q3->config().n_expert_used, 3);
}

}  // namespace
}  // namespace sluice
