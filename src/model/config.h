// ModelConfig: the hyperparameters a forward pass needs, read from GGUF metadata and checked
// once. Architecture-specific rules (which keys, rope style, extra tensors) live in one file per
// family: arch_llama.cpp, arch_qwen2.cpp, arch_qwen3.cpp, arch_gemma.cpp (gemma, gemma2),
// arch_phi3.cpp, arch_qwen_moe.cpp (qwen2moe, qwen3moe; Mixtral is llama with experts),
// arch_gpt_oss.cpp, arch_qwen35.cpp, arch_bert.cpp, arch_gemma4.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/cache_layout.h"
#include "base/model_shape.h"
#include "base/status.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"

namespace sluice {

enum class Arch {
  kLlama,
  kQwen2,
  kQwen3,
  kGemma,
  kGemma2,
  kGemma3,
  kPhi3,
  kQwen2Moe,
  kQwen3Moe,
  kQwen35,
  kGptOss,
  kBert,
  kGemma4,
};

// How an embedding model turns a sequence's final hidden states into one vector (llama.cpp's
// enum llama_pooling_type, the GGUF key <arch>.pooling_type): kNone (a generation model),
// kMean (mean over the tokens), kCls (the first token), kLast (the last token, after the output
// norm: Qwen3-Embedding), kRank (the first token through the classifier head: a reranker's
// relevance score).
enum class Pooling : int { kNone = 0, kMean = 1, kCls = 2, kLast = 3, kRank = 4 };
// "none", "mean", "cls", "last", "rank"; parse_pooling is its inverse (nullopt: unknown).
const char* pooling_name(Pooling p);
std::optional<Pooling> parse_pooling(std::string_view name);

// How a MoE router's logits become the chosen experts' weights:
//   kSoftmax:      softmax over every expert, the top k of it (optionally renormalized)
//   kTopKSoftmax:  the top k logits, then a softmax over those k (gpt-oss; llama.cpp's
//                  SOFTMAX_WEIGHT gating)
enum class MoeGating { kSoftmax, kTopKSoftmax };

// The expert FFN's gated activation of g = gate x, u = up x:
//   kSwiglu:     silu(g) * u
//   kSwigluOai:  gpt-oss's clamped form: g' = min(g, 7), u' = clamp(u, -7, 7),
//                g' * sigmoid(1.702 g') * (u' + 1)
enum class MoeActivation { kSwiglu, kSwigluOai };

// The shape part (base/model_shape.h, shared with the synth presets and the planner): n_layer,
// n_embd, n_ff, n_head, n_kv_head, head_dim (attention.key_length, or n_embd / n_head), n_vocab
// (rows of token_embd.weight, set when weights are bound), tied_embeddings (output.weight
// absent: logits use token_embd.weight), n_expert, n_expert_used, n_ff_exp, n_ff_shexp.
struct ModelConfig : ModelShape {
  std::string arch_name;  // general.architecture
  Arch arch = Arch::kLlama;

  int n_ctx_train = 0;  // context_length the model was trained with
  int n_ctx = 0;        // longest sequence this instance accepts (ModelOptions::n_ctx)

  // RoPE: see kernels/ops.h. n_rot = rope.dimension_count (default head_dim).
  int n_rot = 0;
  RopeStyle rope_style = RopeStyle::kNormal;
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  // YaRN (rope.scaling.type = yarn; gpt-oss): rope_freq_scale = 1 / rope.scaling.factor on the
  // long-wavelength pairs only, blended by a ramp over the pairs between the beta_fast and
  // beta_slow corrections of rope.scaling.original_context_length; q and k scaled by
  // 1 + 0.1 ln(factor). kernels/ops.h has the formula.
  bool rope_yarn = false;
  int yarn_n_ctx_orig = 0;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  bool has_rope_freqs = false;  // a frequency-factor tensor is bound (rope_factors_tensor)
  // The tensor of per-dimension frequency divisors: rope_freqs.weight (llama 3), or LongRoPE's
  // rope_factors_long.weight when n_ctx exceeds rope.scaling.original_context_length, else
  // rope_factors_short.weight (phi3); empty: none.
  std::string rope_factors_tensor;

  float rms_eps = 1e-5f;
  bool qkv_bias = false;       // attn_{q,k,v}.bias (qwen2; optional for llama)
  bool qk_norm = false;        // per-head RMSNorm of q and k before RoPE (qwen3)
  bool attn_gated = false;     // attn_q holds per head the query rows, then as many gate rows;
                               // the attention output is multiplied by sigmoid(gate) (qwen35)
  float embd_scale = 1.0f;     // token embeddings are multiplied by it (gemma: sqrt(n_embd))
  bool ffn_gelu = false;       // GeGLU (tanh GELU) FFN instead of SwiGLU (gemma)
  bool post_norms = false;     // RMSNorm of the attention and FFN outputs before the residual
                               // adds (gemma2: post_attention_norm, post_ffw_norm)
  bool fused_qkv = false;      // attn_qkv holds Q, K, V rows (phi3); bound as three views
  bool fused_gate_up = false;  // ffn_up holds the gate rows, then the up rows (phi3)
  bool attn_out_bias = false;  // attn_output.bias (gpt-oss)
  bool attn_sinks = false;     // attn_sinks.weight: one softmax sink logit per head (gpt-oss)
  // Encoders (bert): every query sees the whole sequence (so a sequence runs in one step), no
  // RoPE (learned position embeddings instead), LayerNorms with biases (eps: rms_eps, read from
  // attention.layer_norm_epsilon).
  bool causal = true;
  bool rope = true;
  // Embedding models: how a sequence's hidden states are pooled (<arch>.pooling_type, or
  // ModelOptions::pooling). kRank: n_cls_out scores from the classifier head (cls.output).
  Pooling pooling = Pooling::kNone;
  int n_cls_out = 0;
  // The norm before the FFN: blk.N.<ffn_norm_tensor>.weight (gpt-oss: post_attention_norm).
  std::string ffn_norm_tensor = "ffn_norm";

  // Sliding-window attention: sliding_window, swa_period, layer_swa and layer_window(il) are the
  // shape's (base/model_shape.h); config.cpp sets swa_period from the family (ArchFamily).
  float attn_softcap = 0;         // scores -> cap * tanh(score / cap) (gemma2); 0: none
  float final_softcap = 0;        // the same on the logits (gemma2)
  float attn_scale = 0;           // score scale; 0: 1 / sqrt(head_dim)
  float rope_attn_factor = 1.0f;  // LongRoPE magnitude scaling of q and k (phi3)
  // RoPE of the windowed layers when it differs (gemma3: base 10000, no scaling, while the
  // global layers use rope.freq_base 1e6 and the file's scaling); 0: as the others.
  float rope_theta_swa = 0;
  float rope_freq_scale_swa = 1.0f;

  // Pipeline parallel (model/shard.h): this stage runs layers [layer_begin, layer_end) of the
  // n_layer; layer_end 0 means n_layer (one stage: every layer). The first stage embeds the
  // tokens, the last computes the logits; the others take and pass on the residual stream.
  int layer_begin = 0;
  int layer_end = 0;
  int stage_layer_end() const { return layer_end > 0 ? layer_end : n_layer; }
  int n_stage_layers() const { return stage_layer_end() - layer_begin; }
  bool first_stage() const { return layer_begin == 0; }
  bool last_stage() const { return stage_layer_end() == n_layer; }

  // Recurrent layers (qwen35: Gated DeltaNet): layer_recurrent[il] != 0; empty: none.
  std::vector<uint8_t> layer_recurrent;  // (ModelShape::recurrent: their shape)
  bool any_recurrent() const {
    for (uint8_t r : layer_recurrent) {
      if (r) return true;
    }
    return false;
  }
  // Per-layer attention shapes (gemma4: the windowed layers have their own head size, rotary
  // dims and KV head count). head_dim / n_rot are the global layers' (with the fields below
  // unset, every layer's); n_kv_head is the largest count of any layer, so q_dim() / kv_dim()
  // bound every layer's width (the windowed head size may not exceed head_dim). YaRN's
  // correction range is computed over n_rot for every layer.
  int head_dim_swa = 0;                 // attention.key_length_swa; 0: head_dim
  int n_rot_swa = 0;                    // rope.dimension_count_swa; 0: n_rot
  std::vector<int> layer_n_kv_heads;    // [n_layer] attention.head_count_kv as an array; empty
  bool rope_freqs_global_only = false;  // rope_freqs divide the global layers' frequencies only
  int layer_head_dim(int il) const {
    return head_dim_swa > 0 && layer_window(il) > 0 ? head_dim_swa : head_dim;
  }
  int layer_n_rot(int il) const {
    return n_rot_swa > 0 && layer_window(il) > 0 ? n_rot_swa : n_rot;
  }
  int layer_n_kv_head(int il) const {
    return layer_n_kv_heads.empty() ? n_kv_head : layer_n_kv_heads[size_t(il)];
  }
  int layer_q_dim(int il) const { return n_head * layer_head_dim(il); }
  int layer_kv_dim(int il) const { return layer_n_kv_head(il) * layer_head_dim(il); }
  // Shared K/V (gemma4: attention.shared_kv_layers): layer il reads the K/V of layer
  // layer_kv_source[il] (an earlier layer of the same kind) and stores none; empty, or
  // layer_kv_source[il] == il: its own.
  std::vector<int32_t> layer_kv_source;
  int kv_source_layer(int il) const {
    return layer_kv_source.empty() ? il : layer_kv_source[size_t(il)];
  }
  bool layer_stores_kv(int il) const {
    return layer_kind(il) != LayerKind::kRecurrent && kv_source_layer(il) == il;
  }
  // Elements of one token's K (or V) in one K/V slot: the widest layer_kv_dim of the layers
  // that store K/V (a slot is shared by the groups' layers at that slot; narrower layers use a
  // prefix of each block: KvLayout::block_stride).
  int kv_slot_width() const {
    int w = 0;
    for (int il = 0; il < n_layer; ++il) {
      if (layer_stores_kv(il)) w = std::max(w, layer_kv_dim(il));
    }
    return w > 0 ? w : kv_dim();
  }
  // Per-layer inputs (gemma4: embedding_length_per_layer_input): each layer adds
  // proj(gelu(inp_gate x) * ple[il]) of its n_embd_per_layer-wide slice of the per-layer
  // inputs (arch_gemma4.cpp); 0: none.
  int n_embd_per_layer = 0;

  // What cache state layer il keeps (base/cache_layout.h).
  LayerKind layer_kind(int il) const {
    if (size_t(il) < layer_recurrent.size() && layer_recurrent[size_t(il)]) {
      return LayerKind::kRecurrent;
    }
    return layer_window(il) > 0 ? LayerKind::kWindowed : LayerKind::kGlobal;
  }
  // How the layers' K/V map onto blocks: one group per window kind of gcd-many layers (every
  // layer of the model, whatever stage this instance runs; KvCacheLayout::from_windows).
  KvCacheLayout kv_cache_layout() const;
  // The factor applied to q.k: attn_scale (default 1 / sqrt(head_dim)) times the square of
  // rope_attn_factor (the rotation scales both q and k by it).
  float attention_scale() const {
    const double s = attn_scale > 0 ? double(attn_scale) : 1.0 / std::sqrt(double(head_dim));
    return float(s * double(rope_attn_factor) * double(rope_attn_factor));
  }

  // Mixture of experts (n_expert > 0): each token's FFN is the sum of its top n_expert_used
  // experts' SwiGLU FFNs (width n_ff_exp, always set when loaded), weighted by the softmax of the
  // router's logits (renormalized over the chosen experts when moe_norm_topk), plus, with
  // n_ff_shexp > 0, a shared expert gated by sigmoid(ffn_gate_inp_shexp . x).
  static constexpr int kMaxExpertsUsed = 64;  // per token (real models: 2 to 8)
  bool moe_norm_topk = true;
  MoeGating moe_gating = MoeGating::kSoftmax;
  MoeActivation moe_act = MoeActivation::kSwiglu;
  // Biases on the router (ffn_gate_inp.bias) and on every expert's gate, up and down
  // (ffn_{gate,up,down}_exps.bias, [n_ff_exp or n_embd, n_expert]) (gpt-oss).
  bool moe_biases = false;

  RopeParams rope_params(const float* freq_factors) const {
    RopeParams p;
    p.head_dim = head_dim;
    p.n_rot = n_rot;
    p.style = rope_style;
    p.theta_base = rope_theta;
    p.freq_scale = rope_freq_scale;
    p.freq_factors = freq_factors;
    if (rope_yarn) {
      float corr[2];
      yarn_corr_dims(n_rot, yarn_n_ctx_orig, rope_theta, yarn_beta_fast, yarn_beta_slow, corr);
      p.yarn_ext = 1.0f;
      p.yarn_low = corr[0];
      p.yarn_high = corr[1];
      // ggml's rope_yarn: the magnitude correction in f32.
      p.mscale = 1.0f + 0.1f * std::log(1.0f / rope_freq_scale);
    }
    return p;
  }
  // Whether layer il rotates with the windowed layers' own RoPE (rope_theta_swa).
  bool layer_uses_swa_rope(int il) const { return rope_theta_swa > 0 && layer_window(il) > 0; }
  // The RoPE of layer il (its head size, rotary dims, base and scaling; the frequency factors
  // only where they apply: rope_freqs_global_only).
  RopeParams layer_rope_params(int il, const float* freq_factors) const {
    const bool swa = layer_window(il) > 0;
    RopeParams p = rope_params(rope_freqs_global_only && swa ? nullptr : freq_factors);
    p.head_dim = layer_head_dim(il);
    p.n_rot = layer_n_rot(il);
    if (layer_uses_swa_rope(il)) {
      p.theta_base = rope_theta_swa;
      p.freq_scale = rope_freq_scale_swa;
    }
    return p;
  }
};

struct ModelOptions {
  // Longest sequence (prompt + generated) to accept; 0: the trained context_length.
  int n_ctx = 0;
  // Accept n_ctx beyond the trained context (quality degrades past it): logs a warning.
  bool allow_context_beyond_trained = false;
  // Tensor parallel: load only rank tp_rank's shard of tp_size (model/shard.h).
  int tp_rank = 0;
  int tp_size = 1;
  // Pipeline parallel: load only stage pp_rank's layers of pp_size stages (model/shard.h).
  int pp_rank = 0;
  int pp_size = 1;
  // Overrides the file's <arch>.pooling_type (embedding models; --pooling).
  std::optional<Pooling> pooling{};
};

// Reads and checks the metadata of `file` (the architecture must be supported). n_vocab stays
// 0 until weights are bound. Errors name the file and the key.
Result<ModelConfig> read_model_config(const GgufFile& file, const ModelOptions& options);

// "llama, qwen2, qwen3, gemma, gemma2, gemma3, phi3, qwen2moe, qwen3moe, ..., gemma4"
std::string supported_architectures();

}  // namespace sluice
