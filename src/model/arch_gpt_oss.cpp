// gpt-oss (general.architecture = "gpt-oss"; OpenAI's open-weight MoE models, llama.cpp's
// openai-moe graph). The llama-shaped block (llama_forward) with:
//  - q/k/v biases and an attn_output bias;
//  - attention sinks: attn_sinks.weight holds one logit per query head that joins the
//    softmax's denominator (kernels/attention.h);
//  - a sliding window (attention.sliding_window, 128 in the real models) on the even layers,
//    the odd ones global (llama.cpp's default pattern: the file has no sliding_window_pattern);
//  - NeoX RoPE with YaRN scaling (rope.scaling.type = yarn, factor 32 over 4096 positions);
//  - the FFN norm is blk.N.post_attention_norm; the FFN a mixture of experts: router logits
//    plus ffn_gate_inp.bias, the top expert_used_count logits, a softmax over those; each
//    expert's gate / up / down with biases and the clamped SwiGLU
//    min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1); experts stored MXFP4.
#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"gpt-oss"};

Status configure_gpt_oss(const GgufFile& f, ModelConfig& c) {
  const std::string& a = c.arch_name;
  if (!c.is_moe()) return make_error("'", f.path(), "': ", a, ".expert_count is missing or 0");
  if (c.sliding_window <= 0) {
    return make_error("'", f.path(), "': ", a, ".attention.sliding_window is missing or 0");
  }
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = true;
  c.qk_norm = false;
  c.attn_out_bias = true;
  c.attn_sinks = true;
  c.ffn_norm_tensor = "post_attention_norm";
  c.moe_norm_topk = false;
  c.moe_gating = MoeGating::kTopKSoftmax;
  c.moe_act = MoeActivation::kSwigluOai;
  c.moe_biases = true;
  c.n_ff_shexp = 0;
  return {};
}

}  // namespace

const ArchFamily& gpt_oss_family() {
  // Layer il windowed when il % 2 == 0.
  static const ArchFamily f{Arch::kGptOss, kNames, configure_gpt_oss, llama_forward,
                            /*swa_period=*/2};
  return f;
}

}  // namespace sluice
