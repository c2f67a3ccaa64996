// The forward-pass seam (model/forward.h): what each architecture family asks of an executor's
// ops, recorded by a fake that does no arithmetic. The numbers themselves are checked through
// the CPU executor against llama.cpp goldens and the f64 reference (executor tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "model/forward.h"
#include "model/model.h"
#include "model_test_util.h"

namespace sluice {
namespace {

class RecordingOps final : public ForwardOps {
 public:
  explicit RecordingOps(int64_t n_tokens, int64_t n_logit_rows)
      : n_tokens_(n_tokens), n_logit_rows_(n_logit_rows) {}

  std::vector<std::string> calls;
  std::vector<std::vector<const WeightMatrix*>> norm_next;  // per rms_norm call
  std::vector<const WeightMatrix*> matmuls;
  std::vector<HeadNorms> head_norms;
  std::vector<size_t> sinks;  // per attention call: how many sink logits it got
  int64_t logits_rows = -1, logits_vocab = -1;

  int64_t n_tokens() const override { return n_tokens_; }
  Act buffer(ActBuf role, int64_t rows, int64_t cols) override {
    std::vector<float>& v = bufs_[size_t(role)];
    v.assign(size_t(rows * cols), 0.0f);
    return {v.data(), rows, cols};
  }
  void embed(const WeightMatrix&, Act x) override {
    EXPECT_EQ(x.rows, n_tokens_);
    calls.push_back("embed");
  }
  void rms_norm(Act x, const std::vector<float>& w, float eps, Act out,
                std::initializer_list<const WeightMatrix*> next) override {
    EXPECT_EQ(int64_t(w.size()), x.cols);
    EXPECT_EQ(x.rows, out.rows);
    EXPECT_GT(eps, 0.0f);
    calls.push_back("rms_norm");
    norm_next.emplace_back(next);
  }
  void matmul(const WeightMatrix& w, Act x, Act y) override {
    EXPECT_EQ(x.cols, w.n_cols);
    EXPECT_EQ(y.cols, w.n_rows);
    EXPECT_EQ(x.rows, y.rows);
    calls.push_back("matmul");
    matmuls.push_back(&w);
  }
  void add_bias(Act y, const std::vector<float>& b) override {
    EXPECT_TRUE(b.empty() || int64_t(b.size()) == y.cols);
    calls.push_back(b.empty() ? "add_bias(none)" : "add_bias");
  }
  void rope_store_kv(int, Act q, Act k, Act v, const HeadNorms& norms) override {
    EXPECT_EQ(k.cols, v.cols);
    EXPECT_EQ(q.rows, k.rows);
    calls.push_back("rope_store_kv");
    head_norms.push_back(norms);
  }
  void rope_q(int, Act, const HeadNorms& norms) override {
    calls.push_back("rope_q");
    head_norms.push_back(norms);
  }
  void attention(int, Act q, Act out, const std::vector<float>& s) override {
    EXPECT_EQ(q.cols, out.cols);
    calls.push_back("attention");
    sinks.push_back(s.size());
  }
  void moe(const MoeWeights& w, Act xn, Act out) override {
    EXPECT_EQ(xn.cols, w.router.n_cols);
    EXPECT_EQ(xn.rows, out.rows);
    calls.push_back("moe");
  }
  void delta_net(int, const DeltaNetWeights& w, Act qkv, Act z, Act beta, Act alpha,
                 Act out) override {
    EXPECT_EQ(qkv.cols, w.qkv.n_rows);
    EXPECT_EQ(z.cols, out.cols);
    EXPECT_EQ(beta.cols, alpha.cols);
    calls.push_back("delta_net");
  }
  void split_halves(Act src, int64_t head_dim, Act a, Act b) override {
    EXPECT_EQ(src.cols, a.cols + b.cols);
    EXPECT_EQ(a.cols % head_dim, 0);
    calls.push_back("split_halves");
  }
  void sigmoid_gate(Act x, Act g) override {
    EXPECT_EQ(x.cols, g.cols);
    calls.push_back("sigmoid_gate");
  }
  void swiglu(Act gate, Act up, Act out) override {
    EXPECT_EQ(gate.cols, up.cols);
    EXPECT_EQ(gate.cols, out.cols);
    calls.push_back("swiglu");
  }
  void geglu(Act gate, Act up, Act out) override {
    EXPECT_EQ(gate.cols, up.cols);
    EXPECT_EQ(gate.cols, out.cols);
    calls.push_back("geglu");
  }
  void scale(Act, float s) override { calls.push_back("scale " + std::to_string(s)); }
  void slice_cols(Act src, int64_t col0, Act dst) override {
    EXPECT_EQ(src.rows, dst.rows);
    EXPECT_LE(col0 + dst.cols, src.cols);
    calls.push_back("slice_cols");
  }
  void softcap(Act, float cap) override { calls.push_back("softcap " + std::to_string(cap)); }
  void add(Act x, Act y) override {
    EXPECT_EQ(x.cols, y.cols);
    calls.push_back("add");
  }
  void add_positions(const WeightMatrix&, Act) override { calls.push_back("add_positions"); }
  void layer_norm(Act x, const std::vector<float>& w, const std::vector<float>& b, float,
                  Act) override {
    EXPECT_EQ(int64_t(w.size()), x.cols);
    EXPECT_EQ(w.size(), b.size());
    calls.push_back("layer_norm");
  }
  void gelu(Act) override { calls.push_back("gelu"); }
  void tanh(Act) override { calls.push_back("tanh"); }
  void copy(Act src, Act dst) override {
    EXPECT_EQ(src.rows * src.cols, dst.rows * dst.cols);
    calls.push_back("copy");
  }
  bool pooled() const override { return false; }
  Act pool(Act x, Pooling) override {
    calls.push_back("pool");
    return x;
  }
  void stage_input(Act) override { calls.push_back("stage_input"); }
  void stage_output(Act) override { calls.push_back("stage_output"); }
  Act logit_rows(Act x) override {
    calls.push_back("logit_rows");
    return buffer(ActBuf::kLogitRows, n_logit_rows_, x.cols);
  }
  Act logits(int64_t rows, int64_t n_vocab) override {
    calls.push_back("logits");
    logits_rows = rows;
    logits_vocab = n_vocab;
    return buffer(ActBuf::kProj, rows, n_vocab);
  }

 private:
  int64_t n_tokens_, n_logit_rows_;
  std::vector<float> bufs_[size_t(ActBuf::kCount)];
};

int count(const std::vector<std::string>& v, const std::string& s) {
  return int(std::count(v.begin(), v.end(), s));
}

// The llama block per layer: norm -> q/k/v -> (biases) -> rope + store -> attention -> o ->
// residual; norm -> gate, up -> swiglu -> down -> residual; then the logits rows.
TEST(ForwardSeam, LlamaFamiliesCallTheOpsOfTheirBlock) {
  test::TempDir dir;
  for (const char* variant : {"tiny", "tiny-qwen2", "tiny-qwen3"}) {
    SCOPED_TRACE(variant);
    const std::string path = dir.path(std::string(variant) + ".gguf");
    test::write_synthetic_model(variant, FileType::ALL_F32, path);
    auto model = Model::load(path);
    ASSERT_TRUE(model.ok()) << model.message();
    const ModelConfig& c = model->config();
    const ModelWeights& w = model->weights();
    RecordingOps ops(/*n_tokens=*/5, /*n_logit_rows=*/2);
    model->forward(ops);

    const int L = c.n_layer;
    EXPECT_EQ(ops.calls.front(), "embed");
    EXPECT_EQ(count(ops.calls, "attention"), L);
    EXPECT_EQ(count(ops.calls, "rope_store_kv"), L);
    EXPECT_EQ(count(ops.calls, "swiglu"), L);
    EXPECT_EQ(count(ops.calls, "add"), 2 * L);
    EXPECT_EQ(count(ops.calls, "rms_norm"), 2 * L + 1);
    EXPECT_EQ(count(ops.calls, "add_bias"), c.qkv_bias ? 3 * L : 0);
    ASSERT_EQ(int(ops.matmuls.size()), 7 * L + 1);
    for (int il = 0; il < L; ++il) {
      const LayerWeights& l = w.layers[size_t(il)];
      const std::vector<const WeightMatrix*> want = {&l.wq,     &l.wk,   &l.wv,    &l.wo,
                                                     &l.w_gate, &l.w_up, &l.w_down};
      for (size_t j = 0; j < want.size(); ++j) EXPECT_EQ(ops.matmuls[size_t(il) * 7 + j], want[j]);
      // Each norm names the matmuls that read its output: the fused-quantization contract.
      EXPECT_EQ(ops.norm_next[size_t(2 * il)],
                (std::vector<const WeightMatrix*>{&l.wq, &l.wk, &l.wv}));
      EXPECT_EQ(ops.norm_next[size_t(2 * il + 1)],
                (std::vector<const WeightMatrix*>{&l.w_gate, &l.w_up}));
      const HeadNorms& hn = ops.head_norms[size_t(il)];
      EXPECT_EQ(hn.q != nullptr, c.qk_norm);
      EXPECT_EQ(hn.k != nullptr, c.qk_norm);
    }
    EXPECT_EQ(ops.matmuls.back(), &w.output);
    EXPECT_EQ(ops.logits_rows, 2);
    EXPECT_EQ(ops.logits_vocab, c.n_vocab);
    const std::vector<std::string> tail(ops.calls.end() - 4, ops.calls.end());
    EXPECT_EQ(tail, (std::vector<std::string>{"logit_rows", "rms_norm", "logits", "matmul"}));
  }
}

// Gemma: embeddings scaled by sqrt(n_embd), GeGLU instead of SwiGLU, the output tied.
TEST(ForwardSeam, GemmaScalesTheEmbeddingAndGatesWithGelu) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/gemma.gguf");
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.arch, Arch::kGemma);
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.head_dim, 64);  // attention.key_length, not n_embd / n_head
  RecordingOps ops(/*n_tokens=*/4, /*n_logit_rows=*/1);
  model->forward(ops);
  ASSERT_GE(ops.calls.size(), 2u);
  EXPECT_EQ(ops.calls[0], "embed");
  EXPECT_EQ(ops.calls[1], "scale " + std::to_string(std::sqrt(float(c.n_embd))));
  EXPECT_EQ(count(ops.calls, "geglu"), c.n_layer);
  EXPECT_EQ(count(ops.calls, "swiglu"), 0);
  EXPECT_EQ(ops.matmuls.back()->data, model->weights().token_embd.data);
}

// Gemma 2: post-norms before both residual adds (4 norms a layer, none naming a matmul), and the
// logits soft-capped last; the window / score cap are the config's (attention reads them).
TEST(ForwardSeam, Gemma2NormsTheOutputsAndCapsTheLogits) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/gemma2.gguf");
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.arch, Arch::kGemma2);
  EXPECT_TRUE(c.post_norms);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_window(0), 16);
  EXPECT_EQ(c.layer_window(1), 0);
  EXPECT_EQ(c.layer_window(24), 16);
  // 13 windowed and 13 global layers: two K/V groups of 13 layers, the even ones first.
  const KvCacheLayout kv = c.kv_cache_layout();
  EXPECT_EQ(kv.layers_per_group, 13);
  EXPECT_EQ(kv.group_window, (std::vector<int32_t>{16, 0}));
  EXPECT_EQ(kv.layer_group[24], 0);
  EXPECT_EQ(kv.layer_slot[24], 12);
  EXPECT_EQ(kv.layer_group[25], 1);
  EXPECT_EQ(kv.layer_slot[25], 12);
  EXPECT_FLOAT_EQ(c.attn_softcap, 3.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 5.0f);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f / std::sqrt(32.0f));  // head_dim, 26 layers
  RecordingOps ops(/*n_tokens=*/4, /*n_logit_rows=*/1);
  model->forward(ops);
  EXPECT_EQ(count(ops.calls, "rms_norm"), 4 * c.n_layer + 1);
  EXPECT_EQ(count(ops.calls, "geglu"), c.n_layer);
  EXPECT_EQ(ops.calls.back(), "softcap " + std::to_string(5.0f));
  // Layer 0: attn norm, post-attention norm, ffn norm, post-ffw norm.
  ASSERT_GE(ops.norm_next.size(), 4u);
  EXPECT_EQ(ops.norm_next[1].size(), 0u);
  EXPECT_EQ(ops.norm_next[3].size(), 0u);
}

// gpt-oss: the llama block with q/k/v/o biases, one sink logit per head handed to attention,
// post_attention_norm before the experts (MXFP4, biases, top-4 logits then softmax, clamped
// SwiGLU); even layers windowed (two K/V groups of two layers); YaRN's range and magnitude.
TEST(ForwardSeam, GptOssHandsSinksAndBiasesToTheOps) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/gpt-oss.gguf");
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.arch, Arch::kGptOss);
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c.layer_window(0), 8);
  EXPECT_EQ(c.layer_window(1), 0);
  EXPECT_EQ(c.layer_window(2), 8);
  EXPECT_EQ(c.layer_window(3), 0);
  EXPECT_EQ(c.kv_cache_layout().group_window, (std::vector<int32_t>{8, 0}));
  const RopeParams rp = c.rope_params(nullptr);
  EXPECT_FLOAT_EQ(rp.freq_scale, 1.0f / 32.0f);
  EXPECT_EQ(rp.yarn_ext, 1.0f);
  EXPECT_EQ(rp.yarn_low, 4.0f);
  EXPECT_EQ(rp.yarn_high, 9.0f);
  EXPECT_NEAR(rp.mscale, 1.0 + 0.1 * std::log(32.0), 1e-6);
  const LayerWeights& l0 = model->weights().layers[0];
  EXPECT_EQ(l0.attn_sinks.size(), size_t(c.n_head));
  EXPECT_EQ(l0.bo.size(), size_t(c.n_embd));
  EXPECT_EQ(l0.moe.gate[0].type, GgmlType::MXFP4);
  EXPECT_EQ(l0.moe.gating, MoeGating::kTopKSoftmax);
  EXPECT_EQ(l0.moe.act, MoeActivation::kSwigluOai);
  EXPECT_EQ(l0.moe.router_bias.size(), size_t(c.n_expert));
  EXPECT_EQ(l0.moe.down_bias.size(), size_t(c.n_expert) * size_t(c.n_embd));
  RecordingOps ops(/*n_tokens=*/3, /*n_logit_rows=*/1);
  model->forward(ops);
  EXPECT_EQ(ops.sinks, std::vector<size_t>(size_t(c.n_layer), size_t(c.n_head)));
  EXPECT_EQ(count(ops.calls, "add_bias"), 4 * c.n_layer);  // q, k, v, o
  EXPECT_EQ(count(ops.calls, "moe"), c.n_layer);
}

// gemma4: layer kinds from the pattern array with their own head shapes and RoPE; the last
// five layers read the K/V of layers 3 (windowed) and 4 (global) and own no K/V slot; each
// layer takes its slice of the per-layer inputs and ends with its scale.
TEST(ForwardSeam, Gemma4SharesKvAndAddsPerLayerInputs) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/gemma4.gguf");
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.arch, Arch::kGemma4);
  EXPECT_EQ(c.n_kv_head, 2);  // the largest of [2, 2, 2, 2, 1, ...]
  EXPECT_EQ(c.layer_n_kv_head(3), 2);
  EXPECT_EQ(c.layer_n_kv_head(4), 1);
  EXPECT_EQ(c.layer_head_dim(0), 32);
  EXPECT_EQ(c.layer_head_dim(4), 64);
  EXPECT_EQ(c.layer_window(8), 8);
  EXPECT_EQ(c.layer_window(9), 0);
  EXPECT_EQ(c.kv_slot_width(), 64);  // 2 x 32 and 1 x 64
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f);
  EXPECT_FLOAT_EQ(c.final_softcap, 10.0f);
  EXPECT_EQ(c.n_embd_per_layer, 8);
  const RopeParams swa = c.layer_rope_params(0, model->weights().rope_freqs.data());
  EXPECT_EQ(swa.n_rot, 32);
  EXPECT_EQ(swa.freq_factors, nullptr);  // rope_freqs: global layers only
  EXPECT_FLOAT_EQ(swa.theta_base, 10000.0f);
  const RopeParams global = c.layer_rope_params(4, model->weights().rope_freqs.data());
  EXPECT_EQ(global.n_rot, 64);
  EXPECT_NE(global.freq_factors, nullptr);
  EXPECT_FLOAT_EQ(global.theta_base, 1e6f);
  const std::vector<int> sources = {0, 1, 2, 3, 4, 3, 3, 3, 3, 4};
  for (int il = 0; il < c.n_layer; ++il) EXPECT_EQ(c.kv_source_layer(il), sources[size_t(il)]);
  // Five layers store K/V: four windowed groups of one layer and one global; the shared
  // layers point at their source's group and slot.
  const KvCacheLayout kv = c.kv_cache_layout();
  EXPECT_EQ(kv.layers_per_group, 1);
  EXPECT_EQ(kv.group_window, (std::vector<int32_t>{8, 8, 8, 8, 0}));
  EXPECT_EQ(kv.n_kv_layers(), 5);
  for (int il = 0; il < c.n_layer; ++il) {
    const size_t src = size_t(sources[size_t(il)]);
    EXPECT_EQ(kv.layer_group[size_t(il)], kv.layer_group[src]) << il;
    EXPECT_EQ(kv.layer_slot[size_t(il)], kv.layer_slot[src]) << il;
    EXPECT_EQ(kv.layer_stores_kv(il), il < 5) << il;
  }
  EXPECT_EQ(model->weights().layers[7].wk.data, nullptr);
  RecordingOps ops(/*n_tokens=*/3, /*n_logit_rows=*/1);
  model->forward(ops);
  EXPECT_EQ(count(ops.calls, "rope_store_kv"), 5);
  EXPECT_EQ(count(ops.calls, "rope_q"), 5);
  EXPECT_EQ(count(ops.calls, "attention"), c.n_layer);
  EXPECT_EQ(count(ops.calls, "slice_cols"), c.n_layer);
  EXPECT_EQ(count(ops.calls, "geglu"), 2 * c.n_layer);  // the FFN and the per-layer input
  EXPECT_EQ(count(ops.calls, "embed"), 2);              // tokens and per-layer tokens
  ASSERT_EQ(ops.head_norms.size(), size_t(c.n_layer));
  EXPECT_TRUE(ops.head_norms[0].v_unit);
  EXPECT_EQ(ops.head_norms[0].k, &model->weights().layers[0].k_norm);
  EXPECT_EQ(ops.head_norms[9].k, nullptr);
  EXPECT_EQ(ops.calls.back(), "softcap " + std::to_string(10.0f));
}

// Phi-3: the fused attn_qkv and ffn_up bound as row views (the block is llama's).
TEST(ForwardSeam, Phi3BindsFusedTensorsAsViews) {
  SLUICE_REQUIRE_SHARED(path, "testdata/models/arch/phi3.gguf");
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.arch, Arch::kPhi3);
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_TRUE(c.fused_gate_up);
  EXPECT_EQ(c.kv_cache_layout().group_window, std::vector<int32_t>{8});  // every layer windowed
  EXPECT_EQ(c.layer_window(2), 8);
  const LayerWeights& l = model->weights().layers[1];
  const size_t row = row_size(l.wq.type, l.wq.n_cols);
  const auto* base = static_cast<const uint8_t*>(l.wq.data);
  EXPECT_EQ(l.wq.n_rows, c.q_dim());
  EXPECT_EQ(static_cast<const uint8_t*>(l.wk.data), base + row * size_t(c.q_dim()));
  EXPECT_EQ(static_cast<const uint8_t*>(l.wv.data), base + row * size_t(c.q_dim() + c.kv_dim()));
  EXPECT_EQ(l.wv.n_rows, c.kv_dim());
  EXPECT_EQ(static_cast<const uint8_t*>(l.w_up.data),
            static_cast<const uint8_t*>(l.w_gate.data) + row * size_t(c.n_ff));
  RecordingOps ops(/*n_tokens=*/4, /*n_logit_rows=*/1);
  model->forward(ops);
  EXPECT_EQ(count(ops.calls, "swiglu"), c.n_layer);
  EXPECT_EQ(ops.matmuls.back(), &model->weights().output);
}

// No row asks for logits (a prompt chunk that is not the last): no output projection.
TEST(ForwardSeam, NoLogitRowsSkipsTheOutputProjection) {
  test::TempDir dir;
  const std::string path = dir.path("tiny.gguf");
  test::write_synthetic_model("tiny", FileType::ALL_F32, path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  RecordingOps ops(/*n_tokens=*/3, /*n_logit_rows=*/0);
  model->forward(ops);
  EXPECT_EQ(ops.calls.back(), "logit_rows");
  EXPECT_EQ(ops.logits_rows, -1);
  EXPECT_EQ(int(ops.matmuls.size()), 7 * model->config().n_layer);
}

}  // namespace
}  // namespace sluice
