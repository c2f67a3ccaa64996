// Synthetic models for model/ and executor/ tests: small presets of every architecture family,
// written with synthesize_model() and then given non-trivial norm weights (synth writes 1.0,
// which would hide a misapplied norm).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/convert.h"
#include "model/presets.h"
#include "test_util.h"

namespace sluice::test {

// The "tiny" preset with overrides: GQA 4/2 heads of 64, n_embd 256, n_ff 512, vocab 512.
inline ModelPreset tiny_preset(const std::string& variant) {
  if (variant != "tiny") {
    if (const ModelPreset* named = find_preset(variant)) return *named;  // tiny-gpt-oss, ...
  }
  ModelPreset p = *find_preset("tiny");
  p.name = variant;
  if (variant == "tiny-mha") p.n_kv_head = 4;
  if (variant == "tiny-mqa") p.n_kv_head = 1;
  if (variant == "tiny-qwen2") {
    p.arch = "qwen2";
    p.qkv_bias = true;
    p.tied_embeddings = true;
    p.rope_theta = 1000000.0f;
    p.rms_eps = 1e-6f;
  }
  if (variant == "tiny-qwen3") {
    // head_dim 64 x 8 heads = 512 != n_embd, as in real Qwen3 models.
    p.arch = "qwen3";
    p.qk_norm = true;
    p.n_head = 8;
    p.n_kv_head = 2;
    p.rms_eps = 1e-6f;
  }
  if (variant == "tiny-gemma") {
    // MQA with head_dim 128: Q is 512 wide, not n_embd (as Gemma 7B's 16 x 256 = 4096 vs 3072).
    p.arch = "gemma";
    p.n_head = 4;
    p.n_kv_head = 1;
    p.head_dim = 128;
    p.tied_embeddings = true;
    p.rms_eps = 1e-6f;
  }
  if (variant == "tiny-gemma2") {
    // Soft-capped scores and logits, post-norms, a window of 5 on the even layers.
    p.arch = "gemma2";
    p.tied_embeddings = true;
    p.rms_eps = 1e-6f;
    p.sliding_window = 5;
    p.attn_softcap = 0.05f;  // the random weights' scores are ~0.1: a cap that bites
    p.final_softcap = 0.5f;
  }
  if (variant == "tiny-gemma3") {
    // q/k norms, post-norms, windowed layers 0-4 (base 10000) and global layer 5 (base 1e6,
    // linear scaling 1/8 through the file's rope scaling is not synthesized: base only).
    p.arch = "gemma3";
    p.n_layer = 6;
    p.qk_norm = true;
    p.tied_embeddings = true;
    p.rms_eps = 1e-6f;
    p.rope_theta = 1000000.0f;
    p.sliding_window = 5;
  }
  if (variant == "tiny-mistral") {
    p.sliding_window = 6;  // llama with llama.attention.sliding_window: every layer windowed
  }
  if (variant == "tiny-phi3") {
    p.arch = "phi3";  // fused qkv and gate_up, a window of 4 on every layer
    p.sliding_window = 4;
  }
  if (variant == "tiny-mixtral") {
    p.n_expert = 4;  // llama with experts: top 2 of 4, renormalized
    p.n_expert_used = 2;
    p.n_ff_exp = 128;
  }
  if (variant == "tiny-qwen2moe") {
    p.arch = "qwen2moe";  // top 2 of 6 as they are, plus a gated shared expert
    p.qkv_bias = true;
    p.rope_theta = 1000000.0f;
    p.n_expert = 6;
    p.n_expert_used = 2;
    p.n_ff_exp = 64;
    p.n_ff_shexp = 256;
  }
  if (variant == "tiny-qwen3moe") {
    p.arch = "qwen3moe";  // q/k norms, top 3 of 8 renormalized
    p.qk_norm = true;
    p.rms_eps = 1e-6f;
    p.n_expert = 8;
    p.n_expert_used = 3;
    p.n_ff_exp = 64;
  }
  if (variant == "tiny-llama3") {
    p.rope_theta = 500000.0f;
    p.tied_embeddings = true;
    p.rope_scaling = {8.0f, 1.0f, 4.0f, 64};
  }
  return p;
}

// Copies the GGUF at `in` to `out` with the values of the tensors `select` picks (they must be
// f32) rewritten in place by `edit`; every other tensor and the metadata as they are.
template <class Select, class Edit>
void rewrite_f32_tensors(const std::string& in, const std::string& out, Select select, Edit edit) {
  auto f = GgufFile::open(in);
  ASSERT_TRUE(f.ok()) << f.message();
  GgufWriter w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  std::vector<std::vector<float>> owned;
  owned.reserve(f->tensors().size());
  for (const GgufTensorInfo& t : f->tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    const void* data = t.data;
    if (select(t)) {
      ASSERT_EQ(t.type, GgmlType::F32) << t.name;
      const auto* x = reinterpret_cast<const float*>(t.data);
      owned.emplace_back(x, x + t.n_elements());
      edit(owned.back());
      data = owned.back().data();
    }
    ASSERT_TRUE(w.add_tensor(t.name, t.type, ne, data).ok());
  }
  const Status s = w.write(out);
  ASSERT_TRUE(s.ok()) << s.message();
}

// Copies `in` to `out`, replacing every *norm.weight tensor with 1 + 0.25 N(0, 1) values.
inline void randomize_norms(const std::string& in, const std::string& out, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.25f);
  rewrite_f32_tensors(
      in, out,
      [](const GgufTensorInfo& t) { return t.name.find("norm.weight") != std::string::npos; },
      [&](std::vector<float>& v) {
        for (float& x : v) x = 1.0f + dist(rng);
      });
}

// Writes a synthetic model of `variant` (see tiny_preset) with file type `ftype` to `path`.
inline void write_synthetic_model(const std::string& variant, FileType ftype,
                                  const std::string& path, uint64_t seed = 1) {
  const ModelPreset preset = tiny_preset(variant);
  SynthParams sp;
  sp.preset = &preset;
  sp.ftype = ftype;
  sp.seed = seed;
  sp.n_threads = 2;
  sp.out_path = path + ".raw";
  const Status s = synthesize_model(sp);
  ASSERT_TRUE(s.ok()) << s.message();
  randomize_norms(sp.out_path, path, seed);
  std::remove(sp.out_path.c_str());
}

}  // namespace sluice::test
