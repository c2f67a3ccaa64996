#include "model/presets.h"

#include "model/arch.h"

namespace sluice {
namespace {

// What every Qwen3.5 shares (config.json's text_config): head size 256 with RoPE over its first
// 64 dims (partial_rotary_factor 0.25, mrope sections 11/11/10: the text part), theta 1e7,
// Gated DeltaNet heads of 128 with 16 Q/K heads and a conv of 4, full attention every 4th
// layer, 248320 tokens, 262144 positions.
ModelPreset qwen35_base() {
  ModelPreset m;
  m.arch = "qwen35";
  m.head_dim = 256;
  m.n_rot = 64;
  m.rope_sections = {11, 11, 10, 0};
  m.n_vocab = 248320;
  m.n_ctx = 262144;
  m.rope_theta = 10000000.0f;
  m.rms_eps = 1e-6f;
  m.qk_norm = true;
  m.recurrent.conv_kernel = 4;
  m.recurrent.state_size = 128;
  m.recurrent.n_k_heads = 16;
  m.full_attention_interval = 4;
  return m;
}

// What every Gemma 4 (text, dense) shares: q/k norms, post-norms, GELU, tied embeddings,
// windowed layers with RoPE base 10000 over the whole head, global layers with base 1e6 over a
// quarter of theirs (proportional RoPE through rope_freqs), logits soft-capped at 30.
ModelPreset gemma4_base() {
  ModelPreset m;
  m.arch = "gemma4";
  m.rope_theta = 1000000.0f;
  m.rope_theta_swa = 10000.0f;
  m.rope_partial = 0.25f;
  m.rms_eps = 1e-6f;
  m.qk_norm = true;
  m.tied_embeddings = true;
  m.final_softcap = 30.0f;
  return m;
}

}  // namespace

// What every gpt-oss shares (openai/gpt-oss-20b's config.json): q/k/v and output biases,
// attention sinks, expert biases, NeoX RoPE base 150000 with YaRN factor 32.
ModelPreset gpt_oss_base() {
  ModelPreset m;
  m.arch = "gpt-oss";
  m.qkv_bias = true;
  m.rope_theta = 150000.0f;
  m.rms_eps = 1e-5f;
  m.yarn_factor = 32.0f;
  return m;
}

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> kPresets = [] {
    std::vector<ModelPreset> p;
    {
      // Small enough for tests, with rows that fit every block size (256) and GQA.
      ModelPreset m;
      m.name = "tiny";
      m.arch = "llama";
      m.n_layer = 2;
      m.n_embd = 256;
      m.n_ff = 512;
      m.n_head = 4;
      m.n_kv_head = 2;
      m.head_dim = 64;
      m.n_vocab = 512;
      m.n_ctx = 512;
      m.tied_embeddings = false;
      p.push_back(m);
    }
    {
      // "tiny" with 4 experts, 2 per token (Mixtral-style): tests and the CLI's MoE paths.
      ModelPreset m = p.back();
      m.name = "tiny-moe";
      m.n_expert = 4;
      m.n_expert_used = 2;
      m.n_ff_exp = 256;
      p.push_back(m);
    }
    {
      ModelPreset m;  // meta-llama/Llama-3.2-1B
      m.name = "llama-3.2-1b";
      m.arch = "llama";
      m.n_layer = 16;
      m.n_embd = 2048;
      m.n_ff = 8192;
      m.n_head = 32;
      m.n_kv_head = 8;
      m.head_dim = 64;
      m.n_vocab = 128256;
      m.n_ctx = 131072;
      m.rope_theta = 500000.0f;
      m.rms_eps = 1e-5f;
      m.tied_embeddings = true;
      m.rope_scaling = {32.0f, 1.0f, 4.0f, 8192};
      p.push_back(m);
    }
    {
      ModelPreset m;  // meta-llama/Llama-3.1-8B
      m.name = "llama-3.1-8b";
      m.arch = "llama";
      m.n_layer = 32;
      m.n_embd = 4096;
      m.n_ff = 14336;
      m.n_head = 32;
      m.n_kv_head = 8;
      m.head_dim = 128;
      m.n_vocab = 128256;
      m.n_ctx = 131072;
      m.rope_theta = 500000.0f;
      m.rms_eps = 1e-5f;
      m.rope_scaling = {8.0f, 1.0f, 4.0f, 8192};
      p.push_back(m);
    }
    {
      ModelPreset m;  // Qwen/Qwen2.5-0.5B
      m.name = "qwen2.5-0.5b";
      m.arch = "qwen2";
      m.n_layer = 24;
      m.n_embd = 896;
      m.n_ff = 4864;
      m.n_head = 14;
      m.n_kv_head = 2;
      m.head_dim = 64;
      m.n_vocab = 151936;
      m.n_ctx = 32768;
      m.rope_theta = 1000000.0f;
      m.rms_eps = 1e-6f;
      m.tied_embeddings = true;
      m.qkv_bias = true;
      p.push_back(m);
    }
    {
      ModelPreset m;  // google/gemma-2b: MQA, head_dim 256 (Q is 2048 wide = n_embd by chance)
      m.name = "gemma-2b";
      m.arch = "gemma";
      m.n_layer = 18;
      m.n_embd = 2048;
      m.n_ff = 16384;
      m.n_head = 8;
      m.n_kv_head = 1;
      m.head_dim = 256;
      m.n_vocab = 256000;
      m.n_ctx = 8192;
      m.rope_theta = 10000.0f;
      m.rms_eps = 1e-6f;
      m.tied_embeddings = true;
      p.push_back(m);
    }
    {
      ModelPreset m;  // google/gemma-2-2b: soft-caps 50 / 30, window 4096 on even layers
      m.name = "gemma-2-2b";
      m.arch = "gemma2";
      m.n_layer = 26;
      m.n_embd = 2304;
      m.n_ff = 9216;
      m.n_head = 8;
      m.n_kv_head = 4;
      m.head_dim = 256;
      m.n_vocab = 256000;
      m.n_ctx = 8192;
      m.rms_eps = 1e-6f;
      m.tied_embeddings = true;
      m.sliding_window = 4096;
      m.attn_softcap = 50.0f;
      m.final_softcap = 30.0f;
      p.push_back(m);
    }
    {
      ModelPreset m;  // google/gemma-3-1b-pt: q/k norms, window 512 on 5 of every 6 layers
      m.name = "gemma-3-1b";
      m.arch = "gemma3";
      m.n_layer = 26;
      m.n_embd = 1152;
      m.n_ff = 6912;
      m.n_head = 4;
      m.n_kv_head = 1;
      m.head_dim = 256;
      m.n_vocab = 262144;
      m.n_ctx = 32768;
      m.rope_theta = 1000000.0f;
      m.rms_eps = 1e-6f;
      m.tied_embeddings = true;
      m.qk_norm = true;
      m.sliding_window = 512;
      p.push_back(m);
    }
    {
      // google/gemma-3-4b-pt: q/k norms, window 1024 on 5 of every 6 layers (29 of 34). The
      // real file's linear RoPE scaling (factor 8 on the global layers) is not written.
      ModelPreset m;
      m.name = "gemma-3-4b";
      m.arch = "gemma3";
      m.n_layer = 34;
      m.n_embd = 2560;
      m.n_ff = 10240;
      m.n_head = 8;
      m.n_kv_head = 4;
      m.head_dim = 256;
      m.n_vocab = 262144;
      m.n_ctx = 131072;
      m.rope_theta = 1000000.0f;
      m.rms_eps = 1e-6f;
      m.tied_embeddings = true;
      m.qk_norm = true;
      m.sliding_window = 1024;
      p.push_back(m);
    }
    {
      // gemma4 for tests: 8 layers, every 4th global (3, 7), the last 4 reading the K/V of
      // layers 2 (windowed) and 3 (global); windowed heads of 64 with 2 KV heads, global ones of
      // 128 with 1 (an array head_count_kv), a window of 8, per-layer inputs of 32 (8 x 32 = 256
      // columns: every block size), logits capped at 0.5 (the random logits are ~0.3: it bites).
      ModelPreset m = gemma4_base();
      m.name = "tiny-gemma4";
      m.n_layer = 8;
      m.n_embd = 256;
      m.n_ff = 512;
      m.n_head = 4;
      m.n_kv_head = 1;
      m.head_dim = 128;
      m.n_rot = 128;
      m.swa_period = 4;
      m.head_dim_swa = 64;
      m.n_kv_head_swa = 2;
      m.n_rot_swa = 64;
      m.n_shared_kv_layers = 4;
      m.n_embd_per_layer = 32;
      m.n_vocab = 512;
      m.n_ctx = 512;
      m.sliding_window = 8;
      m.final_softcap = 0.5f;
      p.push_back(m);
    }
    {
      // google/gemma-4-E4B (text model). Not read from Google's config.json itself; from
      // NVIDIA Megatron-Bridge's E4B recipe (recipes/gemma/gemma4.py, built from
      // google/gemma-4-E4B-it, and its unit test's mirror of that config): 42 layers, hidden
      // 2560, FFN 10240, 8 query heads, 2 KV heads on both kinds, heads of 256 (windowed) and
      // 512 (global), a global layer every 6th (5, 11, .., 41), RoPE bases 1e4 / 1e6 with 0.25
      // of the global head rotated, per-layer inputs of 256 over a 262144-token table, the last
      // 18 layers sharing K/V, 131072 positions, rms eps 1e-6. From three other third-party
      // copies of its text_config (agreeing with the above where they overlap): sliding_window
      // 512, vocab 262144, final soft-cap 30, tied embeddings, no double-wide MLP, no K = V.
      // Keys as llama.cpp's converter (conversion/gemma.py) writes them: one head_count_kv
      // (both kinds have 2), rope.dimension_count 512 (rope_freqs: 64 ones, then 1e30), _swa
      // 256. Not reproduced: the learned layer_output_scale values (1.0 here).
      ModelPreset m = gemma4_base();
      m.name = "gemma-4-e4b";
      m.n_layer = 42;
      m.n_embd = 2560;
      m.n_ff = 10240;
      m.n_head = 8;
      m.n_kv_head = 2;
      m.head_dim = 512;
      m.n_rot = 512;
      m.swa_period = 6;
      m.head_dim_swa = 256;
      m.n_kv_head_swa = 2;
      m.n_rot_swa = 256;
      m.n_shared_kv_layers = 18;
      m.n_embd_per_layer = 256;
      m.n_vocab = 262144;
      m.n_ctx = 131072;
      m.sliding_window = 512;
      p.push_back(m);
    }
    {
      ModelPreset m;  // microsoft/Phi-3-mini-4k-instruct: fused qkv / gate_up, window 2047
      m.name = "phi-3-mini";
      m.arch = "phi3";
      m.n_layer = 32;
      m.n_embd = 3072;
      m.n_ff = 8192;
      m.n_head = 32;
      m.n_kv_head = 32;
      m.head_dim = 96;
      m.n_vocab = 32064;
      m.n_ctx = 4096;
      m.sliding_window = 2047;
      p.push_back(m);
    }
    {
      ModelPreset m;  // mistralai/Mixtral-8x7B-v0.1: 8 experts, 2 per token
      m.name = "mixtral-8x7b";
      m.arch = "llama";
      m.n_layer = 32;
      m.n_embd = 4096;
      m.n_ff = 14336;
      m.n_head = 32;
      m.n_kv_head = 8;
      m.head_dim = 128;
      m.n_vocab = 32000;
      m.n_ctx = 32768;
      m.rope_theta = 1000000.0f;
      m.n_expert = 8;
      m.n_expert_used = 2;
      m.n_ff_exp = 14336;
      p.push_back(m);
    }
    {
      ModelPreset m;  // Qwen/Qwen3-30B-A3B: 128 experts of width 768, 8 per token
      m.name = "qwen3-30b-a3b";
      m.arch = "qwen3moe";
      m.n_layer = 48;
      m.n_embd = 2048;
      m.n_ff = 6144;
      m.n_head = 32;
      m.n_kv_head = 4;
      m.head_dim = 128;
      m.n_vocab = 151936;
      m.n_ctx = 40960;
      m.rope_theta = 1000000.0f;
      m.rms_eps = 1e-6f;
      m.qk_norm = true;
      m.n_expert = 128;
      m.n_expert_used = 8;
      m.n_ff_exp = 768;
      p.push_back(m);
    }
    {
      // gpt-oss for tests: 4 layers alternating a window of 32 and global, q/k/v and output
      // biases, attention sinks, 8 experts (4 per token) with biases, YaRN over 256 positions.
      ModelPreset m = gpt_oss_base();
      m.name = "tiny-gpt-oss";
      m.n_layer = 4;
      m.n_embd = 256;
      m.n_ff = 256;
      m.n_ff_exp = 256;
      m.n_head = 8;
      m.n_kv_head = 2;
      m.head_dim = 32;
      m.n_vocab = 512;
      m.n_ctx = 4096;
      m.n_expert = 8;
      m.n_expert_used = 4;
      m.sliding_window = 32;
      m.yarn_orig_ctx = 256;
      p.push_back(m);
    }
    {
      // openai/gpt-oss-20b: 24 layers alternating a window of 128 and global, 64 query and 8
      // KV heads of 64, 32 experts of width 2880 (4 per token), o200k's 201088 tokens.
      ModelPreset m = gpt_oss_base();
      m.name = "gpt-oss-20b";
      m.n_layer = 24;
      m.n_embd = 2880;
      m.n_ff = 2880;
      m.n_ff_exp = 2880;
      m.n_head = 64;
      m.n_kv_head = 8;
      m.head_dim = 64;
      m.n_vocab = 201088;
      m.n_ctx = 131072;
      m.n_expert = 32;
      m.n_expert_used = 4;
      m.sliding_window = 128;
      m.yarn_orig_ctx = 4096;
      p.push_back(m);
    }
    {
      // A small qwen35 hybrid for tests: 4 layers (3 DeltaNet, 1 attention), 2 Q/K and 4 V
      // DeltaNet heads of 64.
      ModelPreset m = qwen35_base();
      m.name = "tiny-qwen35";
      m.n_layer = 4;
      m.n_embd = 256;
      m.n_ff = 512;
      m.n_head = 4;
      m.n_kv_head = 2;
      m.head_dim = 64;
      m.n_rot = 16;
      m.rope_sections = {3, 3, 2, 0};
      m.n_vocab = 512;
      m.n_ctx = 4096;
      m.recurrent.state_size = 64;
      m.recurrent.n_k_heads = 2;
      m.recurrent.n_v_heads = 4;
      p.push_back(m);
    }
    {
      // Qwen/Qwen3.5-2B (text): 24 layers, every 4th gated attention (8 x 2 heads of 256,
      // partial RoPE over 64 dims in sections 11/11/10), the rest Gated DeltaNet (16 Q/K and
      // 16 V heads of 128, conv 4); tied embeddings.
      ModelPreset m = qwen35_base();
      m.name = "qwen3.5-2b";
      m.n_layer = 24;
      m.n_embd = 2048;
      m.n_ff = 6144;
      m.n_head = 8;
      m.n_kv_head = 2;
      m.recurrent.n_v_heads = 16;
      m.tied_embeddings = true;
      p.push_back(m);
    }
    {
      // Qwen/Qwen3.5-9B (text): 32 layers (8 x (3 DeltaNet + 1 attention)), attention 16 x 4
      // heads of 256, DeltaNet 16 Q/K and 32 V heads of 128, FFN 12288.
      ModelPreset m = qwen35_base();
      m.name = "qwen3.5-9b";
      m.n_layer = 32;
      m.n_embd = 4096;
      m.n_ff = 12288;
      m.n_head = 16;
      m.n_kv_head = 4;
      m.recurrent.n_v_heads = 32;
      p.push_back(m);
    }
    {
      // Qwen/Qwen3.5-35B-A3B (text): 40 layers, attention 16 x 2 heads of 256, DeltaNet 16 Q/K
      // and 32 V heads of 128; 256 experts of width 512, 8 per token, a shared expert of 512.
      ModelPreset m = qwen35_base();
      m.name = "qwen3.5-35b-a3b";
      m.arch = "qwen35moe";
      m.n_layer = 40;
      m.n_embd = 2048;
      m.n_ff = 512;
      m.n_head = 16;
      m.n_kv_head = 2;
      m.recurrent.n_v_heads = 32;
      m.n_expert = 256;
      m.n_expert_used = 8;
      m.n_ff_exp = 512;
      m.n_ff_shexp = 512;
      p.push_back(m);
    }
    {
      ModelPreset m;  // Qwen/Qwen1.5-MoE-A2.7B: 60 experts of 1408, 4 per token, shared 5632
      m.name = "qwen1.5-moe-a2.7b";
      m.arch = "qwen2moe";
      m.n_layer = 24;
      m.n_embd = 2048;
      m.n_ff = 5632;
      m.n_head = 16;
      m.n_kv_head = 16;
      m.head_dim = 128;
      m.n_vocab = 151936;
      m.n_ctx = 8192;
      m.rope_theta = 1000000.0f;
      m.rms_eps = 1e-6f;
      m.qkv_bias = true;
      m.n_expert = 60;
      m.n_expert_used = 4;
      m.n_ff_exp = 1408;
      m.n_ff_shexp = 5632;
      p.push_back(m);
    }
    {
      // A tiny BERT encoder (mean pooling, as BGE): tests of the embedding path. Meant for the
      // WPM vocabulary of a real BERT (--vocab-from ggml-vocab-bert-bge.gguf).
      ModelPreset m;
      m.name = "tiny-bert";
      m.arch = "bert";
      m.n_layer = 2;
      m.n_embd = 128;
      m.n_ff = 256;
      m.n_head = 4;
      m.n_kv_head = 4;
      m.head_dim = 32;
      m.n_vocab = 512;
      m.n_ctx = 128;
      m.rms_eps = 1e-12f;  // written as bert.attention.layer_norm_epsilon
      m.tied_embeddings = true;
      m.pooling = 1;
      p.push_back(m);
    }
    {
      // "tiny-bert" as a reranker: rank pooling through a classifier head with one output.
      ModelPreset m = p.back();
      m.name = "tiny-bert-rank";
      m.pooling = 4;
      m.n_cls_out = 1;
      p.push_back(m);
    }
    {
      // A tiny Qwen3 embedding model (last-token pooling after the output norm, causal, as
      // Qwen3-Embedding).
      ModelPreset m;
      m.name = "tiny-qwen3-embed";
      m.arch = "qwen3";
      m.n_layer = 2;
      m.n_embd = 256;
      m.n_ff = 512;
      m.n_head = 8;
      m.n_kv_head = 2;
      m.head_dim = 64;
      m.n_vocab = 512;
      m.n_ctx = 512;
      m.rms_eps = 1e-6f;
      m.qk_norm = true;
      m.tied_embeddings = true;
      m.pooling = 3;
      p.push_back(m);
    }
    {
      ModelPreset m;  // BAAI/bge-small-en-v1.5: the embedding throughput benchmark's shape
      m.name = "bge-small";
      m.arch = "bert";
      m.n_layer = 12;
      m.n_embd = 384;
      m.n_ff = 1536;
      m.n_head = 12;
      m.n_kv_head = 12;
      m.head_dim = 32;
      m.n_vocab = 30522;
      m.n_ctx = 512;
      m.rms_eps = 1e-12f;
      m.tied_embeddings = true;
      m.pooling = 1;
      p.push_back(m);
    }
    // Which layers the window applies to is the architecture's (what the loader sets), where the
    // architecture has one period; gemma4's pattern is the file's (its presets set the period
    // that synth writes as sliding_window_pattern).
    for (ModelPreset& m : p) {
      const ArchFamily* f = find_arch_family(m.arch);
      if (f && f->swa_period > 0) m.swa_period = f->swa_period;
    }
    return p;
  }();
  return kPresets;
}

const ModelPreset* find_preset(std::string_view name) {
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string preset_names() {
  std::string s;
  for (const ModelPreset& p : model_presets()) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

}  // namespace sluice
