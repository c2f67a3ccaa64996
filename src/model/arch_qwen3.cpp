// Qwen3 dense models (general.architecture = "qwen3"): no q/k/v biases, but a per-head RMSNorm
// of q and k (attn_q_norm / attn_k_norm, [head_dim] weights) applied before RoPE, NeoX-style
// RoPE, and head_dim taken from attention.key_length (128, which need not be n_embd / n_head).
#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"qwen3"};

Status configure_qwen3(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = false;
  c.sliding_window = 0;  // HF's use_sliding_window is off in every released model
  c.qk_norm = true;
  return {};
}

}  // namespace

const ArchFamily& qwen3_family() {
  static const ArchFamily f{Arch::kQwen3, kNames, configure_qwen3, llama_forward};
  return f;
}

}  // namespace sluice
