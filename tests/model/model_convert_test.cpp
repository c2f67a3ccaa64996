// synth and quantize: real shapes, llama.cpp's recipes, values within each type's bound of the
// f32 originals, deterministic output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "gguf/gguf.h"
#include "gguf/quants.h"
#include "model/convert.h"
#include "model/model.h"
#include "test_util.h"

namespace sluice {
namespace {

// Relative RMS error bound per type for N(0, sigma) data (the quants tests measure the same).
double error_bound(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return 0.0;
    case GgmlType::F16:
      return 0.00025;
    case GgmlType::BF16:
      return 0.0019;
    case GgmlType::Q8_0:
      return 0.006;
    case GgmlType::Q6_K:
      return 0.02;
    case GgmlType::Q5_0:
      return 0.047;
    case GgmlType::Q4_K:
      return 0.079;
    case GgmlType::Q4_0:
      return 0.095;
    case GgmlType::MXFP4:
      return 0.13;
    default:
      return 0.35;
  }
}

std::vector<float> decode(const GgufTensorInfo& t) {
  std::vector<float> out(size_t(t.n_elements()));
  const size_t rb = row_size(t.type, t.ne[0]);
  for (int64_t r = 0; r < t.n_rows(); ++r) {
    if (t.type == GgmlType::F32) {
      std::memcpy(out.data() + r * t.ne[0], t.data + r * rb, rb);
    } else if (t.type == GgmlType::F16 || t.type == GgmlType::BF16 || can_dequantize(t.type)) {
      EXPECT_TRUE(dequantize_row(t.type, t.data + r * rb, out.data() + r * t.ne[0], t.ne[0]).ok());
    }
  }
  return out;
}

// Checks every random tensor of a synthesized file against the regenerated f32 originals
// (every `row_step`-th row).
void expect_within_bounds(const GgufFile& f, uint64_t seed, int64_t row_step = 1) {
  for (const GgufTensorInfo& t : f.tensors()) {
    std::vector<float> got = decode(t);
    if (t.name.find("norm") != std::string::npos ||
        t.name.find("layer_output_scale") != std::string::npos) {
      for (float x : got) ASSERT_EQ(x, 1.0f) << t.name;
      continue;
    }
    if (t.name == "rope_freqs.weight") continue;
    double err = 0, ref = 0;
    std::vector<float> want(size_t(t.ne[0]));
    for (int64_t r = 0; r < t.n_rows(); r += row_step) {
      synth_normal_row(seed, t.name, r, want.data(), t.ne[0]);
      for (int64_t i = 0; i < t.ne[0]; ++i) {
        const double w = double(want[size_t(i)] * 0.02f);  // as synth computes it
        const double d = double(got[size_t(r * t.ne[0] + i)]) - w;
        err += d * d;
        ref += w * w;
      }
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LE(rel, error_bound(t.type)) << t.name << " (" << type_name(t.type) << ")";
  }
}

TEST(Synth, TinyEveryFileTypeWithinBoundsOfOriginals) {
  test::TempDir dir;
  for (FileType ft : {FileType::ALL_F32, FileType::MOSTLY_F16, FileType::MOSTLY_BF16,
                      FileType::MOSTLY_Q8_0, FileType::MOSTLY_Q4_0, FileType::MOSTLY_Q4_K_M}) {
    SynthParams p;
    p.preset = find_preset("tiny");
    p.ftype = ft;
    p.seed = 7;
    p.n_threads = 2;
    p.out_path = dir.path("m.gguf");
    ASSERT_TRUE(synthesize_model(p).ok());
    auto f = GgufFile::open(p.out_path);
    ASSERT_TRUE(f.ok()) << f.message();
    EXPECT_EQ(*f->get<uint32_t>("general.file_type"), uint32_t(ft));
    EXPECT_EQ(*f->get<uint32_t>("llama.block_count"), 2u);
    EXPECT_EQ(f->tensors().size(), 2u + 2 * 9 + 1);
    SCOPED_TRACE(std::string(file_type_name(ft)));
    expect_within_bounds(*f, 7);
  }
}

// The benchmark model of the cpu-kernels issue: real Llama-3.2-1B shapes, Q8_0 (~1.3 GB, ~40 s).
TEST(Synth, Llama32_1B_Q8_0LoadsAndIsWithinBounds) {
#ifdef SLUICE_SANITIZER_BUILD
  GTEST_SKIP() << "1.3 GB of quantization is too slow under sanitizers (runs in the Release suite)";
#endif
  test::TempDir dir;
  SynthParams p;
  p.preset = find_preset("llama-3.2-1b");
  p.ftype = FileType::MOSTLY_Q8_0;
  p.seed = 1;
  p.vocab_path = test::shared_path("testdata/tokenizer/ggml-vocab-llama-bpe.gguf");
  p.out_path = dir.path("l1b.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  auto f = GgufFile::open(p.out_path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->tensors().size(), 1u + 1 + 16 * 9 + 1);  // embd, rope_freqs, blocks, norm (tied)
  int64_t params = 0;
  for (const auto& t : f->tensors()) params += t.n_elements();
  EXPECT_NEAR(double(params), 1.2358e9, 0.001e9);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f->find_tensor("rope_freqs.weight")->ne[0], 32);
  expect_within_bounds(*f, 1, 97);
}

TEST(Synth, SameSeedSameBytesWhateverTheThreadCount) {
  test::TempDir dir;
  SynthParams p;
  p.preset = find_preset("tiny");
  p.ftype = FileType::MOSTLY_Q4_K_M;
  p.seed = 3;
  p.n_threads = 1;
  p.out_path = dir.path("a.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  p.n_threads = 3;
  p.out_path = dir.path("b.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  p.seed = 4;
  p.out_path = dir.path("c.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  EXPECT_EQ(test::read_file(dir.path("a.gguf")), test::read_file(dir.path("b.gguf")));
  EXPECT_NE(test::read_file(dir.path("a.gguf")), test::read_file(dir.path("c.gguf")));
}

TEST(Synth, Q4KMRecipeFollowsLlamaCpp) {
  test::TempDir dir;
  SynthParams p;
  p.preset = find_preset("tiny");  // 2 layers, untied output
  p.ftype = FileType::MOSTLY_Q4_K_M;
  p.out_path = dir.path("m.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  auto f = GgufFile::open(p.out_path);
  ASSERT_TRUE(f.ok());
  auto type_of = [&](const char* n) { return f->find_tensor(n)->type; };
  EXPECT_EQ(type_of("output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("token_embd.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("blk.0.attn_q.weight"), GgmlType::Q4_K);
  // use_more_bits(i, 2): layer 1 only.
  EXPECT_EQ(type_of("blk.0.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("blk.1.attn_v.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("blk.0.ffn_down.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("blk.1.ffn_down.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("blk.0.attn_norm.weight"), GgmlType::F32);
}

TEST(QuantRecipe, TiedEmbeddingsAndFallbacks) {
  RecipeModel m;
  m.n_layer = 16;
  m.has_output = false;
  RecipeState s;
  // Tied token_embd is the output: Q6_K for K-quant mixes, Q8_0 stays Q8_0.
  EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_Q4_K_M, m, s, "token_embd.weight", 2048, 2),
            GgmlType::Q6_K);
  EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_Q8_0, m, s, "token_embd.weight", 2048, 2),
            GgmlType::Q8_0);
  EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_Q4_0, m, s, "token_embd.weight", 2048, 2),
            GgmlType::Q6_K);
  // Rows of 896 (Qwen2.5-0.5B) cannot hold 256-element blocks: Q4_K -> Q5_0, output -> Q8_0.
  EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_Q4_K_M, m, s, "blk.0.attn_q.weight", 896, 2),
            GgmlType::Q5_0);
  EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_Q4_K_M, m, s, "token_embd.weight", 896, 2),
            GgmlType::Q8_0);
  EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_F16, m, s, "blk.0.attn_q.weight", 896, 2),
            GgmlType::F16);
  EXPECT_EQ(choose_tensor_type(FileType::MOSTLY_Q8_0, m, s, "blk.0.attn_norm.weight", 896, 1),
            GgmlType::F32);
  EXPECT_EQ(parse_file_type("Q4_K_M"), FileType::MOSTLY_Q4_K_M);
  EXPECT_EQ(parse_file_type("q4_k"), FileType::MOSTLY_Q4_K_M);
  EXPECT_FALSE(parse_file_type("q4_z").has_value());
}

// MXFP4_MOE (llama.cpp's file type 38, gpt-oss's): the experts' 3-D tensors MXFP4, the other
// matrices Q8_0, routers and norms f32; synth of the MoE preset loads and is within bounds.
TEST(QuantRecipe, Mxfp4MoeExpertsOnly) {
  EXPECT_EQ(parse_file_type("mxfp4"), FileType::MOSTLY_MXFP4_MOE);
  EXPECT_EQ(parse_file_type("MXFP4_MOE"), FileType::MOSTLY_MXFP4_MOE);
  RecipeModel m;
  m.n_layer = 4;
  RecipeState s;
  const FileType ft = FileType::MOSTLY_MXFP4_MOE;
  EXPECT_EQ(choose_tensor_type(ft, m, s, "blk.0.ffn_up_exps.weight", 2880, 3), GgmlType::MXFP4);
  EXPECT_EQ(choose_tensor_type(ft, m, s, "blk.0.ffn_down_exps.weight", 2880, 3), GgmlType::MXFP4);
  EXPECT_EQ(choose_tensor_type(ft, m, s, "blk.0.attn_q.weight", 2880, 2), GgmlType::Q8_0);
  EXPECT_EQ(choose_tensor_type(ft, m, s, "output.weight", 2880, 2), GgmlType::Q8_0);
  EXPECT_EQ(choose_tensor_type(ft, m, s, "blk.0.ffn_gate_inp.weight", 2880, 2), GgmlType::F32);
  EXPECT_EQ(choose_tensor_type(ft, m, s, "blk.0.ffn_up_exps.bias", 2880, 2), GgmlType::F32);

  test::TempDir dir;
  SynthParams p;
  p.preset = find_preset("tiny-moe");
  p.ftype = ft;
  p.seed = 5;
  p.out_path = dir.path("m.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  auto f = GgufFile::open(p.out_path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_exps.weight")->type, GgmlType::MXFP4);
  EXPECT_EQ(f->find_tensor("blk.1.attn_k.weight")->type, GgmlType::Q8_0);
  expect_within_bounds(*f, 5);
  auto model = Model::load(p.out_path);
  EXPECT_TRUE(model.ok()) << model.message();
}

// gemma4 (the tiny preset): per_layer_token_embd takes token_embd's type (the tied output's,
// as llama.cpp's quantize), per_layer_model_proj stays F16, the scales and norms F32, and
// Q4_K_M's extra bits on attn_v go by the 4 attn_v tensors (layers 0-3; 4-7 read their K/V),
// not by the 8 layers: use_more_bits(i, 4) picks 2 and 3. `sluice quantize` of the F16 file
// chooses the same types (the per-layer head_count_kv array read as llama.cpp reads it).
TEST(Synth, Gemma4RecipeFollowsLlamaCpp) {
  test::TempDir dir;
  SynthParams p;
  p.preset = find_preset("tiny-gemma4");
  ASSERT_NE(p.preset, nullptr);
  p.ftype = FileType::MOSTLY_Q4_K_M;
  p.seed = 3;
  p.out_path = dir.path("q4km.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  auto f = GgufFile::open(p.out_path);
  ASSERT_TRUE(f.ok()) << f.message();
  auto type_of = [&](const std::string& n) {
    const GgufTensorInfo* t = f->find_tensor(n);
    EXPECT_NE(t, nullptr) << n;
    return t ? t->type : GgmlType::F32;
  };
  EXPECT_EQ(type_of("token_embd.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("per_layer_token_embd.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("per_layer_model_proj.weight"), GgmlType::F16);
  EXPECT_EQ(type_of("per_layer_proj_norm.weight"), GgmlType::F32);
  EXPECT_EQ(type_of("rope_freqs.weight"), GgmlType::F32);
  EXPECT_EQ(type_of("blk.0.layer_output_scale.weight"), GgmlType::F32);
  EXPECT_EQ(type_of("blk.0.inp_gate.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("blk.0.proj.weight"), GgmlType::Q5_0);  // rows of 32: Q4_K's fallback
  EXPECT_EQ(type_of("blk.0.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("blk.1.attn_v.weight"), GgmlType::Q4_K);
  EXPECT_EQ(type_of("blk.2.attn_v.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("blk.3.attn_v.weight"), GgmlType::Q6_K);
  EXPECT_EQ(f->find_tensor("blk.4.attn_v.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.4.attn_k_norm.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  expect_within_bounds(*f, 3);

  // Q2_K's attn_v: Q4_K from 4 query heads a KV head, else Q3_K; llama.cpp takes layer 0's
  // ratio (4 / 2, windowed), not the global layers' (4 / 1).
  SynthParams q2 = p;
  q2.ftype = FileType::MOSTLY_Q2_K;
  auto q2_plan = plan_synth(q2);
  ASSERT_TRUE(q2_plan.ok()) << q2_plan.message();
  for (const SynthTensor& t : q2_plan->tensors) {
    if (t.name == "blk.0.attn_v.weight") {
      EXPECT_EQ(t.type, GgmlType::Q3_K);
    }
  }

  SynthParams h = p;
  h.ftype = FileType::MOSTLY_F16;
  h.out_path = dir.path("f16.gguf");
  ASSERT_TRUE(synthesize_model(h).ok());
  for (FileType ft : {FileType::MOSTLY_Q4_K_M, FileType::MOSTLY_Q2_K}) {
    QuantizeParams q;
    q.in_path = h.out_path;
    q.out_path = dir.path("quantized.gguf");
    q.ftype = ft;
    ASSERT_TRUE(quantize_model(q).ok());
    auto g = GgufFile::open(q.out_path);
    ASSERT_TRUE(g.ok()) << g.message();
    SynthParams direct = p;
    direct.ftype = ft;
    auto want = plan_synth(direct);
    ASSERT_TRUE(want.ok()) << want.message();
    ASSERT_EQ(g->tensors().size(), want->tensors.size());
    for (const SynthTensor& t : want->tensors) {
      const GgufTensorInfo* u = g->find_tensor(t.name);
      ASSERT_NE(u, nullptr) << t.name;
      EXPECT_EQ(u->type, t.type) << t.name << " " << file_type_name(ft);
    }
  }
}

// The gemma-4-e4b preset (5.1 GB at Q4_0: too big to write in a test) through plan_synth: its
// metadata read by the model loader gives Gemma 4 E4B's published shape, and its tensor
// directory holds exactly the tensors of the shapes the loader binds (weights.cpp), typed as
// llama.cpp's quantize would.
TEST(Synth, Gemma4E4BPlanMatchesPresetAndLoader) {
  SynthParams p;
  p.preset = find_preset("gemma-4-e4b");
  ASSERT_NE(p.preset, nullptr);
  p.ftype = FileType::MOSTLY_Q4_0;
  auto plan = plan_synth(p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  auto buf = plan->metadata.write_to_buffer();
  ASSERT_TRUE(buf.ok()) << buf.message();
  auto f = GgufFile::parse(buf->data(), buf->size(), "gemma-4-e4b");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->get<std::string>("general.architecture").value_or(""), "gemma4");
  auto cfg = read_model_config(*f, ModelOptions{});
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  const ModelConfig& c = *cfg;
  EXPECT_EQ(c.arch, Arch::kGemma4);
  EXPECT_EQ(c.n_layer, 42);
  EXPECT_EQ(c.n_embd, 2560);
  EXPECT_EQ(c.n_ff, 10240);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_TRUE(c.layer_n_kv_heads.empty());  // one head_count_kv: both kinds have 2
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.head_dim_swa, 256);
  EXPECT_EQ(c.n_rot, 512);
  EXPECT_EQ(c.n_rot_swa, 256);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_theta_swa, 1e4f);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.n_ctx_train, 131072);
  EXPECT_EQ(c.n_embd_per_layer, 256);
  EXPECT_FLOAT_EQ(c.final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f);
  EXPECT_TRUE(c.tied_embeddings);
  int n_global = 0, n_store = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const bool global = il % 6 == 5;  // 5, 11, .., 41
    n_global += global;
    n_store += c.layer_stores_kv(il);
    EXPECT_EQ(c.layer_window(il), global ? 0 : 512) << il;
    EXPECT_EQ(c.layer_head_dim(il), global ? 512 : 256) << il;
    EXPECT_EQ(c.layer_stores_kv(il), il < 24) << il;
    EXPECT_EQ(c.kv_source_layer(il), il < 24 ? il : global ? 23 : 22) << il;
  }
  EXPECT_EQ(n_global, 7);
  EXPECT_EQ(n_store, 24);

  std::map<std::string, const SynthTensor*> by_name;
  for (const SynthTensor& t : plan->tensors) by_name[t.name] = &t;
  ASSERT_EQ(by_name.size(), plan->tensors.size()) << "a tensor name repeats";
  auto expect = [&](const std::string& name, std::vector<int64_t> ne, GgmlType type) {
    auto it = by_name.find(name);
    ASSERT_NE(it, by_name.end()) << name;
    EXPECT_EQ(it->second->ne, ne) << name;
    EXPECT_EQ(it->second->type, type) << name;
    by_name.erase(it);
  };
  const int64_t V = 262144, D = 2560, F = 10240, P = 256, LP = 42 * P;
  expect("token_embd.weight", {D, V}, GgmlType::Q6_K);  // tied: the output's type
  expect("per_layer_token_embd.weight", {LP, V}, GgmlType::Q6_K);
  expect("per_layer_model_proj.weight", {D, LP}, GgmlType::F16);
  expect("per_layer_proj_norm.weight", {P}, GgmlType::F32);
  expect("rope_freqs.weight", {256}, GgmlType::F32);
  expect("output_norm.weight", {D}, GgmlType::F32);
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const int64_t hd = c.layer_head_dim(il), q = c.layer_q_dim(il), kv = c.layer_kv_dim(il);
    EXPECT_EQ(kv, 2 * hd);
    expect(b + "attn_norm.weight", {D}, GgmlType::F32);
    expect(b + "attn_q.weight", {D, q}, GgmlType::Q4_0);
    expect(b + "attn_q_norm.weight", {hd}, GgmlType::F32);
    if (c.layer_stores_kv(il)) {
      expect(b + "attn_k.weight", {D, kv}, GgmlType::Q4_0);
      expect(b + "attn_v.weight", {D, kv}, GgmlType::Q4_0);
      expect(b + "attn_k_norm.weight", {hd}, GgmlType::F32);
    }
    expect(b + "attn_output.weight", {q, D}, GgmlType::Q4_0);
    expect(b + "post_attention_norm.weight", {D}, GgmlType::F32);
    expect(b + "ffn_norm.weight", {D}, GgmlType::F32);
    expect(b + "ffn_gate.weight", {D, F}, GgmlType::Q4_0);
    expect(b + "ffn_up.weight", {D, F}, GgmlType::Q4_0);
    expect(b + "ffn_down.weight", {F, D}, GgmlType::Q4_0);
    expect(b + "post_ffw_norm.weight", {D}, GgmlType::F32);
    expect(b + "inp_gate.weight", {D, P}, GgmlType::Q4_0);
    expect(b + "proj.weight", {P, D}, GgmlType::Q4_0);
    expect(b + "post_norm.weight", {D}, GgmlType::F32);
    expect(b + "layer_output_scale.weight", {1}, GgmlType::F32);
  }
  for (const auto& [name, t] : by_name) ADD_FAILURE() << "unexpected tensor " << name;
  EXPECT_EQ(plan->tensors.size(), 6u + 24 * 17 + 18 * 14);
  // Proportional RoPE on the global heads of 512: 0.25 x 256 pairs rotate, 192 do not.
  ASSERT_EQ(plan->rope_factors.size(), 256u);
  EXPECT_EQ(std::count(plan->rope_factors.begin(), plan->rope_factors.end(), 1.0f), 64);
  EXPECT_EQ(plan->rope_factors[64], 1e30f);

  double params = 0, bytes = 0;
  for (const SynthTensor& t : plan->tensors) {
    params += double(t.ne[0]) * double(t.n_rows());
    bytes += double(t.bytes);
  }
  // Text model: 7.46e9 parameters, 3.52e9 of them the two embedding tables.
  EXPECT_NEAR(params / 1e9, 7.46, 0.01);
  std::printf("[ synth ] gemma-4-e4b Q4_0: %zu tensors, %.3fe9 params, %.2f GB of tensor data\n",
              plan->tensors.size(), params / 1e9, bytes / 1e9);
}

TEST(Quantize, F16ToQ8AndQ4KMMatchesDirectEncoding) {
  test::TempDir dir;
  SynthParams p;
  p.preset = find_preset("tiny");
  p.ftype = FileType::ALL_F32;
  p.seed = 11;
  p.out_path = dir.path("f32.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  for (FileType ft : {FileType::MOSTLY_Q8_0, FileType::MOSTLY_Q4_K_M}) {
    QuantizeParams q;
    q.in_path = p.out_path;
    q.out_path = dir.path("q.gguf");
    q.ftype = ft;
    std::vector<TensorConversion> seen;
    ConvertCallbacks cb;
    cb.on_tensor = [&](const TensorConversion& c) { seen.push_back(c); };
    ASSERT_TRUE(quantize_model(q, cb).ok());
    // Quantizing the f32 synth gives exactly what synthesizing straight to the type gives.
    SynthParams d = p;
    d.ftype = ft;
    d.out_path = dir.path("direct.gguf");
    ASSERT_TRUE(synthesize_model(d).ok());
    auto a = GgufFile::open(q.out_path);
    auto b = GgufFile::open(d.out_path);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    EXPECT_EQ(seen.size(), a->tensors().size());
    for (size_t i = 0; i < a->tensors().size(); ++i) {
      const auto& x = a->tensors()[i];
      const auto& y = b->tensors()[i];
      EXPECT_EQ(x.type, y.type) << x.name;
      ASSERT_EQ(x.n_bytes, y.n_bytes);
      EXPECT_EQ(0, std::memcmp(x.data, y.data, x.n_bytes)) << x.name;
    }
    expect_within_bounds(*a, 11);
  }
}

TEST(Quantize, RefusesToRequantizeUnlessAsked) {
  test::TempDir dir;
  SynthParams p;
  p.preset = find_preset("tiny");
  p.ftype = FileType::MOSTLY_Q8_0;
  p.out_path = dir.path("q8.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  QuantizeParams q;
  q.in_path = p.out_path;
  q.out_path = dir.path("q4.gguf");
  q.ftype = FileType::MOSTLY_Q4_0;
  Status st = quantize_model(q);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("already q8_0"), std::string::npos) << st.message();
  q.allow_requantize = true;
  EXPECT_TRUE(quantize_model(q).ok());
  q.in_path = dir.path("missing.gguf");
  EXPECT_FALSE(quantize_model(q).ok());
}

TEST(Synth, CopiesTokenizerFromVocabFile) {
  SLUICE_REQUIRE_SHARED(vocab, "testdata/tokenizer/ggml-vocab-llama-spm.gguf");
  test::TempDir dir;
  SynthParams p;
  p.preset = find_preset("tiny");
  p.ftype = FileType::MOSTLY_Q8_0;
  p.vocab_path = vocab;
  p.out_path = dir.path("m.gguf");
  ASSERT_TRUE(synthesize_model(p).ok());
  auto f = GgufFile::open(p.out_path);
  ASSERT_TRUE(f.ok());
  auto v = GgufFile::open(vocab);
  const size_t n_vocab = v->get_array<std::string>("tokenizer.ggml.tokens")->size();
  EXPECT_EQ(f->get_array<std::string>("tokenizer.ggml.tokens")->size(), n_vocab);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->ne[1], int64_t(n_vocab));
  EXPECT_EQ(*f->get<std::string>("tokenizer.ggml.model"), "llama");
}

}  // namespace
}  // namespace sluice
