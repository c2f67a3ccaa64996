// Gemma (general.architecture = "gemma"): the llama block with the token embeddings scaled by
// sqrt(n_embd), a GELU-gated FFN (tanh approximation), NeoX-style RoPE, head_dim from
// attention.key_length (256 in the real models, not n_embd / n_head), no biases, and the output
// tied to token_embd. HF's RMSNorm multiplies by (1 + w); convert_hf_to_gguf stores 1 + w, so
// the norms are the ordinary ones here. The block is llama's (llama_forward) with those flags.
#include <cmath>

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

}  // namespace

const ArchFamily& gemma_family() {
  static const ArchFamily f{Arch::kGemma, kNames, configure_gemma, llama_forward};
  return f;
}

}  // namespace sluice
