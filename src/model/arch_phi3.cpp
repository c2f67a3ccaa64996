// Phi-3 / Phi-3.5 mini and medium (general.architecture = "phi3"): the llama block with Q, K
// and V in one fused tensor (attn_qkv: rows [Q; K; V]) and the FFN's gate and up in another
// (ffn_up: rows [gate; up], SwiGLU), both bound as row views so the block is llama's;
// NeoX-style RoPE; a separate output matrix; a sliding window on every layer
// (attention.sliding_window: 2047 in the 4k models, none in the 128k ones, which use LongRoPE:
// rope_factors_long / rope_factors_short and rope.scaling.attn_factor, read in config.cpp).
// Files that split Q/K/V (older converters) bind the separate tensors.
#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"phi3"};

Status configure_phi3(const GgufFile& f, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = false;
  c.qk_norm = false;
  c.fused_qkv = f.find_tensor("blk.0.attn_qkv.weight") != nullptr;
  c.fused_gate_up = f.find_tensor("blk.0.ffn_gate.weight") == nullptr;
  return {};
}

}  // namespace

const ArchFamily& phi3_family() {
  static const ArchFamily f{Arch::kPhi3, kNames, configure_phi3, llama_forward};
  return f;
}

}  // namespace sluice
