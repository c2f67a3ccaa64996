// BERT encoders (general.architecture = "bert"): BGE, MiniLM, the bge/ms-marco rerankers, as
// llama.cpp's converter writes them. Token + learned position + token type 0 embeddings, a
// LayerNorm, then post-LN layers:
//
//   x = LN(x + Wo attn(Wq x + bq, Wk x + bk, Wv x + bv) + bo)        attention over every token
//   x = LN(x + W_down gelu(W_up x + b_up) + b_down)
//
// with biases everywhere, no RoPE, no output norm. Every token is token type 0 (as llama.cpp
// runs bert, rerank pairs included). The sequence's vector is pooled (config.pooling: mean for
// BGE, cls, or rank through the classifier head) by forward_output.
#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"bert"};

Status configure_bert(const GgufFile& file, ModelConfig& c) {
  c.causal = false;
  c.rope = false;
  c.qkv_bias = true;
  c.attn_out_bias = true;
  c.qk_norm = false;
  c.sliding_window = 0;
  if (file.find_tensor("blk.0.attn_qkv.weight")) {
    return make_error("'", file.path(), "': bert with a fused attn_qkv (nomic-bert, jina) is ",
                      "not supported; expected attn_q / attn_k / attn_v");
  }
  return {};
}

}  // namespace

void bert_forward(const ModelConfig& c, const ModelWeights& w, ForwardOps& ops) {
  const int64_t T = ops.n_tokens();
  const Act x = ops.buffer(ActBuf::kX, T, c.n_embd);
  const Act q = ops.buffer(ActBuf::kQ, T, c.q_dim());
  const Act k = ops.buffer(ActBuf::kK, T, c.kv_dim());
  const Act v = ops.buffer(ActBuf::kV, T, c.kv_dim());
  const Act att = ops.buffer(ActBuf::kAtt, T, c.q_dim());
  const Act proj = ops.buffer(ActBuf::kProj, T, c.n_embd);
  const Act up = ops.buffer(ActBuf::kUp, T, c.n_ff);

  ops.embed(w.token_embd, x);
  ops.add_positions(w.position_embd, x);
  ops.add_bias(x, w.token_type0);
  ops.layer_norm(x, w.embd_norm, w.embd_norm_b, c.rms_eps, x);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    ops.matmul(l.wq, x, q);
    ops.matmul(l.wk, x, k);
    ops.matmul(l.wv, x, v);
    ops.add_bias(q, l.bq);
    ops.add_bias(k, l.bk);
    ops.add_bias(v, l.bv);
    ops.rope_store_kv(il, q, k, v, {});  // config.rope false: stores K/V only
    ops.attention(il, q, att, {});       // config.causal false: the whole sequence
    ops.matmul(l.wo, att, proj);
    ops.add_bias(proj, l.bo);
    ops.add(x, proj);
    ops.layer_norm(x, l.attn_norm, l.attn_norm_b, c.rms_eps, x);

    ops.matmul(l.w_up, x, up);
    ops.add_bias(up, l.b_up);
    ops.gelu(up);
    ops.matmul(l.w_down, up, proj);
    ops.add_bias(proj, l.b_down);
    ops.add(x, proj);
    ops.layer_norm(x, l.ffn_norm, l.ffn_norm_b, c.rms_eps, x);
  }
  forward_output(c, w, ops, x);
}

const ArchFamily& bert_family() {
  static const ArchFamily f{Arch::kBert, kNames, configure_bert, bert_forward};
  return f;
}

}  // namespace sluice
