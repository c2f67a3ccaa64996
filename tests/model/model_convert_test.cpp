// synth and quantize: real shapes, llama.cpp's recipes, values within each type's bound of the
// f32 originals, deterministic output.
#include <gtest/gtest.h>

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
    if (t.name.find("norm") != std::string::npos) {
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
