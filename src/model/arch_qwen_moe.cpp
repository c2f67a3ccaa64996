// Qwen mixture-of-experts models: Qwen1.5-MoE / Qwen2-57B-A14B (general.architecture =
// "qwen2moe") and Qwen3-30B-A3B / 235B-A22B ("qwen3moe"). Attention as qwen2 (q/k/v biases) and
// qwen3 (q/k head norms) respectively, NeoX-style RoPE. The FFN is a mixture of experts
// (ForwardOps::moe): softmax over the router's logits, the top expert_used_count experts, each
// a SwiGLU FFN of width expert_feed_forward_length.
//  - qwen2moe: the chosen weights are used as they are (HF norm_topk_prob = false), plus a
//    shared expert of width expert_shared_feed_forward_length gated by
//    sigmoid(ffn_gate_inp_shexp . x).
//  - qwen3moe: the chosen weights renormalized to sum 1; no shared expert.
#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames2[] = {"qwen2moe"};
constexpr std::string_view kNames3[] = {"qwen3moe"};

Status need_experts(const GgufFile& f, const ModelConfig& c) {
  if (!c.is_moe()) {
    return make_error("'", f.path(), "': ", c.arch_name, ".expert_count is missing or 0");
  }
  return {};
}

Status configure_qwen2moe(const GgufFile& f, ModelConfig& c) {
  SLUICE_RETURN_IF_ERROR(need_experts(f, c));
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = true;
  c.qk_norm = false;
  c.sliding_window = 0;
  c.moe_norm_topk = false;
  // Older files leave out the shared width: the tensor has it.
  if (c.n_ff_shexp == 0) {
    if (const GgufTensorInfo* t = f.find_tensor("blk.0.ffn_up_shexp.weight")) {
      c.n_ff_shexp = int(t->ne[1]);
    }
  }
  return {};
}

Status configure_qwen3moe(const GgufFile& f, ModelConfig& c) {
  SLUICE_RETURN_IF_ERROR(need_experts(f, c));
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = false;
  c.qk_norm = true;
  c.sliding_window = 0;
  c.moe_norm_topk = true;
  c.n_ff_shexp = 0;
  return {};
}

}  // namespace

const ArchFamily& qwen2moe_family() {
  static const ArchFamily f{Arch::kQwen2Moe, kNames2, configure_qwen2moe, llama_forward};
  return f;
}

const ArchFamily& qwen3moe_family() {
  static const ArchFamily f{Arch::kQwen3Moe, kNames3, configure_qwen3moe, llama_forward};
  return f;
}

}  // namespace sluice
