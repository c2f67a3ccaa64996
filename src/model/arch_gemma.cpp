// Gemma (general.architecture = "gemma"): the llama block with the token embeddings scaled by
// sqrt(n_embd), a GELU-gated FFN (tanh approximation), NeoX-style RoPE, head_dim from
// attention.key_length (256 in the real models, not n_embd / n_head), no biases, and the output
// tied to token_embd. HF's RMSNorm multiplies by (1 + w); convert_hf_to_gguf stores 1 + w, so
// the norms are the ordinary ones here.
#include <cmath>

#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"gemma"};

Status configure_gemma(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = false;
  c.qk_norm = false;
  // llama.cpp scales by sqrtf(n_embd) in f32.
  c.embd_scale = std::sqrt(float(c.n_embd));
  if (file.find_tensor("blk.0.attn_q.bias") != nullptr) {
    return make_error("'", file.path(), "': gemma with attention biases is not a known variant");
  }
  return {};
}

}  // namespace

void gemma_forward(const ModelConfig& c, const ModelWeights& w, ForwardOps& ops) {
  const int64_t T = ops.n_tokens();
  const Act x = ops.buffer(ActBuf::kX, T, c.n_embd);
  const Act xn = ops.buffer(ActBuf::kXn, T, c.n_embd);
  const Act q = ops.buffer(ActBuf::kQ, T, c.q_dim());
  const Act k = ops.buffer(ActBuf::kK, T, c.kv_dim());
  const Act v = ops.buffer(ActBuf::kV, T, c.kv_dim());
  const Act att = ops.buffer(ActBuf::kAtt, T, c.q_dim());
  const Act proj = ops.buffer(ActBuf::kProj, T, c.n_embd);
  const Act gate = ops.buffer(ActBuf::kGate, T, c.n_ff);
  const Act up = ops.buffer(ActBuf::kUp, T, c.n_ff);

  ops.embed(w.token_embd, x);
  ops.scale(x, c.embd_scale);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    ops.rms_norm(x, l.attn_norm, c.rms_eps, xn, {&l.wq, &l.wk, &l.wv});
    ops.matmul(l.wq, xn, q);
    ops.matmul(l.wk, xn, k);
    ops.matmul(l.wv, xn, v);
    ops.rope_store_kv(il, q, k, v, {});
    ops.attention(il, q, att);
    ops.matmul(l.wo, att, proj);
    ops.add(x, proj);

    ops.rms_norm(x, l.ffn_norm, c.rms_eps, xn, {&l.w_gate, &l.w_up});
    ops.matmul(l.w_gate, xn, gate);
    ops.matmul(l.w_up, xn, up);
    ops.geglu(gate, up, gate);
    ops.matmul(l.w_down, gate, proj);
    ops.add(x, proj);
  }

  const Act rows = ops.logit_rows(x);
  if (rows.rows == 0) return;
  const Act rows_n = ops.buffer(ActBuf::kLogitRowsNorm, rows.rows, c.n_embd);
  ops.rms_norm(rows, w.output_norm, c.rms_eps, rows_n, {});
  ops.matmul(w.output, rows_n, ops.logits(rows.rows, c.n_vocab));
}

const ArchFamily& gemma_family() {
  static const ArchFamily f{Arch::kGemma, kNames, configure_gemma, gemma_forward};
  return f;
}

}  // namespace sluice
