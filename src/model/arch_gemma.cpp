// Gemma, Gemma 2 and Gemma 3 (text).
//
// Gemma (general.architecture = "gemma"): the llama block with the token embeddings scaled by
// sqrt(n_embd), a GELU-gated FFN (tanh approximation), NeoX-style RoPE, head_dim from
// attention.key_length (256 in the real models, not n_embd / n_head), no biases, and the output
// tied to token_embd. HF's RMSNorm multiplies by (1 + w); convert_hf_to_gguf stores 1 + w, so
// the norms are the ordinary ones here. The block is llama's (llama_forward) with those flags.
//
// Gemma 2 ("gemma2"): Gemma plus an RMSNorm of the attention output and of the FFN output before
// each residual add (post_attention_norm, post_ffw_norm), attention-score soft-capping
// (attn_logit_softcapping: s -> cap tanh(s / cap) after the scale), final-logit soft-capping
// (final_logit_softcapping), and a sliding window (attention.sliding_window, 4096) on the even
// layers, the odd ones global. The query scale is HF's query_pre_attn_scalar, which the GGUF
// does not carry: llama.cpp derives it from the layer count (26 or 42 layers, 2B / 9B:
// 1 / sqrt(head_dim); 46, 27B: 1 / sqrt(n_embd / n_head)); so does this.
//
// Gemma 3 ("gemma3", the text model): Gemma 2's block without soft-capping, plus per-head RMSNorm
// of q and k (attn_q_norm / attn_k_norm, stored as 1 + w); 5 windowed layers to 1 global (layer
// il global when il % 6 == 5), the windowed layers rotating with base 10000 and no scaling, the
// global ones with rope.freq_base (1e6) and the file's linear scaling (8 in 4B and up); query
// scale 1 / sqrt(head_dim), 1 / sqrt(n_embd / n_head) for the 62-layer 27B (as llama.cpp).
#include <cmath>
#include <utility>

#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"gemma"};

Status configure_gemma(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = false;
  c.qk_norm = false;
  // llama.cpp scales by sqrtf(n_embd) in f32.
  c.embd_scale = std::sqrt(float(c.n_embd));
  c.ffn_gelu = true;
  return {};
}

constexpr std::string_view kNames2[] = {"gemma2"};

Status configure_gemma2(const GgufFile& f, ModelConfig& c) {
  SLUICE_RETURN_IF_ERROR(configure_gemma(f, c));
  c.post_norms = true;
  const std::string& a = c.arch_name;
  if (c.sliding_window <= 0) {
    return make_error("'", f.path(), "': ", a, ".attention.sliding_window is missing or 0");
  }
  for (auto [key, cap] : {std::pair{a + ".attn_logit_softcapping", &c.attn_softcap},
                          std::pair{a + ".final_logit_softcapping", &c.final_softcap}}) {
    if (!f.has(key)) continue;  // llama.cpp's defaults are 50 and 30, but files carry them
    SLUICE_ASSIGN_OR_RETURN(const double v, f.get_float(key));
    if (!std::isfinite(v) || v < 0) {
      return make_error("'", f.path(), "': metadata key '", key, "' = ", v,
                        " must be a finite number >= 0");
    }
    *cap = float(v);
  }
  if (c.n_layer == 46) c.attn_scale = float(1.0 / std::sqrt(double(c.n_embd / c.n_head)));
  return {};
}

constexpr std::string_view kNames3[] = {"gemma3"};

Status configure_gemma3(const GgufFile& f, ModelConfig& c) {
  SLUICE_RETURN_IF_ERROR(configure_gemma(f, c));
  c.post_norms = true;
  c.qk_norm = true;
  if (c.sliding_window <= 0) {
    return make_error("'", f.path(), "': ", c.arch_name,
                      ".attention.sliding_window is missing or 0");
  }
  c.rope_theta_swa = 10000.0f;
  c.rope_freq_scale_swa = 1.0f;
  if (c.n_layer == 62) c.attn_scale = float(1.0 / std::sqrt(double(c.n_embd / c.n_head)));
  return {};
}

}  // namespace

const ArchFamily& gemma3_family() {
  static const ArchFamily f{Arch::kGemma3, kNames3, configure_gemma3, llama_forward,
                            /*swa_period=*/6};
  return f;
}

const ArchFamily& gemma2_family() {
  static const ArchFamily f{Arch::kGemma2, kNames2, configure_gemma2, llama_forward,
                            /*swa_period=*/2};
  return f;
}

const ArchFamily& gemma_family() {
  static const ArchFamily f{Arch::kGemma, kNames, configure_gemma, llama_forward};
  return f;
}

}  // namespace sluice
