// Llama family: Llama 2 / 3 / 3.1 / 3.2, Mistral 7B, TinyLlama, SmolLM and llama2.c checkpoints
// converted by llama.cpp (all written as general.architecture = "llama").
//
// RoPE rotates adjacent pairs (2i, 2i+1): the HF converters permute q/k rows so that the HF
// "rotate_half" layout becomes this one, and llama2.c models already use it. Llama 3.x files
// carry a rope_freqs.weight tensor (frequency factors); biases on q/k/v are optional (some
// fine-tunes and ports add them), so they are used when blk.0 has them. Mistral's sliding window
// (llama.attention.sliding_window, when a converter writes it) applies to every layer. Mixtral is
// llama with experts (expert_count, expert_used_count; ffn_*_exps): softmax router, top-k
// weights renormalized to sum 1, SwiGLU experts of width feed_forward_length.
#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"llama"};

Status configure_llama(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNormal;
  c.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = false;
  c.moe_norm_topk = true;
  return {};
}

}  // namespace

void llama_forward(const ModelConfig& c, const ModelWeights& w, ForwardOps& ops) {
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

  if (c.first_stage()) {
    ops.embed(w.token_embd, x);
    if (c.embd_scale != 1.0f) ops.scale(x, c.embd_scale);
  } else {
    ops.stage_input(x);
  }
  for (int il = c.layer_begin; il < c.stage_layer_end(); ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    ops.rms_norm(x, l.attn_norm, c.rms_eps, xn, {&l.wq, &l.wk, &l.wv});
    ops.matmul(l.wq, xn, q);
    ops.matmul(l.wk, xn, k);
    ops.matmul(l.wv, xn, v);
    ops.add_bias(q, l.bq);
    ops.add_bias(k, l.bk);
    ops.add_bias(v, l.bv);
    HeadNorms norms;
    if (c.qk_norm) norms = {&l.q_norm, &l.k_norm, c.rms_eps};
    ops.rope_store_kv(il, q, k, v, norms);
    ops.attention(il, q, att, l.attn_sinks);
    ops.matmul(l.wo, att, proj);
    ops.add_bias(proj, l.bo);
    if (c.post_norms) {
      ops.rms_norm(proj, l.attn_post_norm, c.rms_eps, xn, {});
      ops.add(x, xn);
    } else {
      ops.add(x, proj);
    }

    if (c.is_moe()) {
      ops.rms_norm(x, l.ffn_norm, c.rms_eps, xn, {});
      ops.moe(l.moe, xn, proj);
    } else {
      ops.rms_norm(x, l.ffn_norm, c.rms_eps, xn, {&l.w_gate, &l.w_up});
      ops.matmul(l.w_gate, xn, gate);
      ops.matmul(l.w_up, xn, up);
      if (c.ffn_gelu) {
        ops.geglu(gate, up, gate);
      } else {
        ops.swiglu(gate, up, gate);
      }
      ops.matmul(l.w_down, gate, proj);
    }
    if (c.post_norms) {
      ops.rms_norm(proj, l.ffn_post_norm, c.rms_eps, xn, {});
      ops.add(x, xn);
    } else {
      ops.add(x, proj);
    }
  }

  forward_output(c, w, ops, x);
}

void forward_output(const ModelConfig& c, const ModelWeights& w, ForwardOps& ops, Act x) {
  if (!c.last_stage()) {
    ops.stage_output(x);
    return;
  }
  if (ops.pooled()) {
    Act h = x;
    if (!w.output_norm.empty()) {
      h = ops.buffer(ActBuf::kXn, x.rows, x.cols);
      ops.rms_norm(x, w.output_norm, c.rms_eps, h, {});
    }
    const Act pooled = ops.pool(h, c.pooling);
    if (c.pooling != Pooling::kRank) {
      ops.copy(pooled, ops.logits(pooled.rows, c.n_embd));
      return;
    }
    Act cur = pooled;
    if (w.cls.data) {
      cur = ops.buffer(ActBuf::kLogitRowsNorm, pooled.rows, c.n_embd);
      ops.matmul(w.cls, pooled, cur);
      ops.add_bias(cur, w.cls_b);
      ops.tanh(cur);
    }
    const Act out = ops.logits(pooled.rows, c.n_cls_out);
    if (w.cls_out.data) {
      ops.matmul(w.cls_out, cur, out);
      ops.add_bias(out, w.cls_out_b);
    } else {
      ops.copy(cur, out);
    }
    return;
  }
  const Act rows = ops.logit_rows(x);
  if (rows.rows == 0) return;
  const Act rows_n = ops.buffer(ActBuf::kLogitRowsNorm, rows.rows, c.n_embd);
  ops.rms_norm(rows, w.output_norm, c.rms_eps, rows_n, {});
  const Act logits = ops.logits(rows.rows, c.n_vocab);
  ops.matmul(w.output, rows_n, logits);
  if (c.final_softcap > 0) ops.softcap(logits, c.final_softcap);
}

const ArchFamily& llama_family() {
  static const ArchFamily f{Arch::kLlama, kNames, configure_llama, llama_forward};
  return f;
}

}  // namespace sluice
