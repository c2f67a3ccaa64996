// Llama family: Llama 2 / 3 / 3.1 / 3.2, Mistral 7B, TinyLlama, SmolLM and llama2.c checkpoints
// converted by llama.cpp (all written as general.architecture = "llama").
//
// RoPE rotates adjacent pairs (2i, 2i+1): the HF converters permute q/k rows so that the HF
// "rotate_half" layout becomes this one, and llama2.c models already use it. Llama 3.x files
// carry a rope_freqs.weight tensor (frequency factors); biases on q/k/v are optional (some
// fine-tunes and ports add them), so they are used when blk.0 has them.
#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"llama"};

Status configure_llama(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNormal;
  c.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = false;
  return {};
}

}  // namespace

const ArchFamily& llama_family() {
  static const ArchFamily f{Arch::kLlama, kNames, configure_llama};
  return f;
}

}  // namespace sluice
