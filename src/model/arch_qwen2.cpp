// Qwen2 / Qwen2.5 (general.architecture = "qwen2"): the llama block with biases on the q, k and
// v projections (always present) and NeoX-style RoPE, which rotates dims (i, i + n_rot/2):
// the converter keeps HF's rotate_half layout instead of permuting rows.
#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"qwen2"};

Status configure_qwen2(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = true;
  c.sliding_window = 0;  // HF's use_sliding_window is off in every released model
  c.qk_norm = false;
  return {};
}

}  // namespace

const ArchFamily& qwen2_family() {
  static const ArchFamily f{Arch::kQwen2, kNames, configure_qwen2, llama_forward};
  return f;
}

}  // namespace sluice
