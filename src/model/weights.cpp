#include "model/weights.h"

#include <limits>

#include "gguf/quants.h"
#include "kernels/matmul.h"

namespace sluice {
namespace {

std::string shape_str(int64_t ne0, int64_t ne1) {
  return ne1 > 0 ? "[" + std::to_string(ne0) + ", " + std::to_string(ne1) + "]"
                 : "[" + std::to_string(ne0) + "]";
}

// Finds `name` and checks its shape: [ne0] when ne1 == 0, else [ne0, ne1]. ne1 < 0 accepts
// any row count (token_embd before the vocab size is known).
Result<const GgufTensorInfo*> find_checked(const GgufFile& f, const std::string& name, int64_t ne0,
                                           int64_t ne1) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) return make_error("'", f.path(), "': required tensor '", name, "' is missing");
  const int want_dims = ne1 == 0 ? 1 : 2;
  bool ok = t->ne[0] == ne0 && (ne1 < 0 || t->ne[1] == (ne1 == 0 ? 1 : ne1));
  for (int d = want_dims; d < kGgufMaxDims; ++d) ok = ok && t->ne[d] == 1;
  if (!ok) {
    return make_error("'", f.path(), "': tensor '", name, "' has shape ", t->shape_string(),
                      ", expected ",
                      ne1 < 0 ? "[" + std::to_string(ne0) + ", n_vocab]" : shape_str(ne0, ne1));
  }
  if (!matmul_supports(t->type)) {
    return make_error("'", f.path(), "': tensor '", name, "' has type ", type_name(t->type),
                      ", which sluice cannot compute with yet");
  }
  if (t->ne[0] % type_traits(t->type).block_size != 0) {
    return make_error("'", f.path(), "': tensor '", name, "' rows of ", t->ne[0],
                      " elements are not a whole number of ", type_name(t->type), " blocks");
  }
  return t;
}

Result<WeightMatrix> bind_matrix(const GgufFile& f, const std::string& name, int64_t n_cols,
                                 int64_t n_rows) {
  SLUICE_ASSIGN_OR_RETURN(const GgufTensorInfo* t, find_checked(f, name, n_cols, n_rows));
  return WeightMatrix{t->data, t->type, t->ne[0], t->ne[1]};
}

Result<std::vector<float>> bind_vector(const GgufFile& f, const std::string& name, int64_t n) {
  SLUICE_ASSIGN_OR_RETURN(const GgufTensorInfo* t, find_checked(f, name, n, 0));
  std::vector<float> v(static_cast<size_t>(n));
  SLUICE_RETURN_IF_ERROR(dequantize_row(t->type, t->data, v.data(), n));
  return v;
}

// A small 2-D tensor [ne0, ne1] decoded to f32, row after row.
Result<std::vector<float>> bind_table(const GgufFile& f, const std::string& name, int64_t ne0,
                                      int64_t ne1) {
  SLUICE_ASSIGN_OR_RETURN(const GgufTensorInfo* t, find_checked(f, name, ne0, ne1));
  std::vector<float> v(size_t(ne0 * ne1));
  const size_t row = row_size(t->type, ne0);
  for (int64_t r = 0; r < ne1; ++r) {
    SLUICE_RETURN_IF_ERROR(dequantize_row(t->type, static_cast<const uint8_t*>(t->data) + r * row,
                                          v.data() + r * ne0, ne0));
  }
  return v;
}

Status check_vocab(const GgufFile& f, const ModelConfig& c) {
  if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens")) {
    const GgufArray* arr = tokens->get_if<GgufArray>();
    if (!arr) {
      return make_error("'", f.path(), "': metadata key 'tokenizer.ggml.tokens' is not an array");
    }
    if (int64_t(arr->items.size()) != c.n_vocab) {
      return make_error("'", f.path(), "': vocabulary mismatch: tensor 'token_embd.weight' has ",
                        c.n_vocab, " rows but 'tokenizer.ggml.tokens' has ", arr->items.size(),
                        " tokens");
    }
  }
  const std::string key = c.arch_name + ".vocab_size";
  if (f.has(key)) {
    SLUICE_ASSIGN_OR_RETURN(const int64_t v, f.get_int(key));
    if (v != c.n_vocab) {
      return make_error("'", f.path(), "': vocabulary mismatch: tensor 'token_embd.weight' has ",
                        c.n_vocab, " rows but '", key, "' is ", v);
    }
  }
  return {};
}

// Q, K and V: separate tensors, or views of the fused attn_qkv rows [Q; K; V].
Status bind_qkv(const GgufFile& f, const ModelConfig& c, const std::string& b, LayerWeights& l) {
  const int64_t d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim();
  if (!c.fused_qkv) {
    SLUICE_ASSIGN_OR_RETURN(l.wq, bind_matrix(f, b + "attn_q.weight", d, qd));
    SLUICE_ASSIGN_OR_RETURN(l.wk, bind_matrix(f, b + "attn_k.weight", d, kvd));
    SLUICE_ASSIGN_OR_RETURN(l.wv, bind_matrix(f, b + "attn_v.weight", d, kvd));
    return {};
  }
  SLUICE_ASSIGN_OR_RETURN(const WeightMatrix qkv,
                          bind_matrix(f, b + "attn_qkv.weight", d, qd + 2 * kvd));
  l.wq = qkv.rows(0, qd);
  l.wk = qkv.rows(qd, kvd);
  l.wv = qkv.rows(qd + kvd, kvd);
  return {};
}

// Gate and up: separate tensors, or views of the fused ffn_up rows [gate; up].
Status bind_gate_up(const GgufFile& f, const ModelConfig& c, const std::string& b,
                    LayerWeights& l) {
  const int64_t d = c.n_embd, ff = c.n_ff;
  if (!c.fused_gate_up) {
    SLUICE_ASSIGN_OR_RETURN(l.w_gate, bind_matrix(f, b + "ffn_gate.weight", d, ff));
    SLUICE_ASSIGN_OR_RETURN(l.w_up, bind_matrix(f, b + "ffn_up.weight", d, ff));
    return {};
  }
  SLUICE_ASSIGN_OR_RETURN(const WeightMatrix gate_up,
                          bind_matrix(f, b + "ffn_up.weight", d, 2 * ff));
  l.w_gate = gate_up.rows(0, ff);
  l.w_up = gate_up.rows(ff, ff);
  return {};
}

// A 3-D expert tensor [n_cols, n_rows, n_expert] as one matrix view per expert.
Result<std::vector<WeightMatrix>> bind_experts(const GgufFile& f, const std::string& name,
                                               int64_t n_cols, int64_t n_rows, int n_expert) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) return make_error("'", f.path(), "': required tensor '", name, "' is missing");
  bool ok = t->ne[0] == n_cols && t->ne[1] == n_rows && t->ne[2] == n_expert;
  for (int d = 3; d < kGgufMaxDims; ++d) ok = ok && t->ne[d] == 1;
  if (!ok) {
    return make_error("'", f.path(), "': tensor '", name, "' has shape ", t->shape_string(),
                      ", expected [", n_cols, ", ", n_rows, ", ", n_expert, "]");
  }
  if (!matmul_supports(t->type) || n_cols % type_traits(t->type).block_size != 0) {
    return make_error("'", f.path(), "': tensor '", name, "' has type ", type_name(t->type),
                      " with rows of ", n_cols, " elements, which sluice cannot compute with");
  }
  const WeightMatrix all{t->data, t->type, n_cols, n_rows * n_expert};
  std::vector<WeightMatrix> out;
  for (int e = 0; e < n_expert; ++e) out.push_back(all.rows(int64_t(e) * n_rows, n_rows));
  return out;
}

// The router, the experts and the shared expert of a MoE layer.
Result<MoeWeights> bind_moe(const GgufFile& f, const ModelConfig& c, const std::string& b) {
  const int64_t d = c.n_embd, ff = c.n_ff_exp;
  MoeWeights m;
  m.n_used = c.n_expert_used;
  m.norm_topk = c.moe_norm_topk;
  m.gating = c.moe_gating;
  m.act = c.moe_act;
  SLUICE_ASSIGN_OR_RETURN(m.router, bind_matrix(f, b + "ffn_gate_inp.weight", d, c.n_expert));
  if (c.moe_biases) {
    const int ne = c.n_expert;
    SLUICE_ASSIGN_OR_RETURN(m.router_bias, bind_vector(f, b + "ffn_gate_inp.bias", ne));
    SLUICE_ASSIGN_OR_RETURN(m.gate_bias, bind_table(f, b + "ffn_gate_exps.bias", ff, ne));
    SLUICE_ASSIGN_OR_RETURN(m.up_bias, bind_table(f, b + "ffn_up_exps.bias", ff, ne));
    SLUICE_ASSIGN_OR_RETURN(m.down_bias, bind_table(f, b + "ffn_down_exps.bias", d, ne));
  }
  SLUICE_ASSIGN_OR_RETURN(m.gate, bind_experts(f, b + "ffn_gate_exps.weight", d, ff, c.n_expert));
  SLUICE_ASSIGN_OR_RETURN(m.up, bind_experts(f, b + "ffn_up_exps.weight", d, ff, c.n_expert));
  SLUICE_ASSIGN_OR_RETURN(m.down, bind_experts(f, b + "ffn_down_exps.weight", ff, d, c.n_expert));
  if (c.n_ff_shexp > 0) {
    const int64_t sf = c.n_ff_shexp;
    SLUICE_ASSIGN_OR_RETURN(m.sh_gate, bind_matrix(f, b + "ffn_gate_shexp.weight", d, sf));
    SLUICE_ASSIGN_OR_RETURN(m.sh_up, bind_matrix(f, b + "ffn_up_shexp.weight", d, sf));
    SLUICE_ASSIGN_OR_RETURN(m.sh_down, bind_matrix(f, b + "ffn_down_shexp.weight", sf, d));
    if (f.find_tensor(b + "ffn_gate_inp_shexp.weight")) {
      SLUICE_ASSIGN_OR_RETURN(m.sh_gate_inp, bind_matrix(f, b + "ffn_gate_inp_shexp.weight", d, 1));
    }
  }
  return m;
}

// A qwen35 layer: a Gated DeltaNet or a gated attention mixer, then the FFN (whose norm the
// file calls post_attention_norm).
Result<LayerWeights> bind_hybrid_layer(const GgufFile& f, const ModelConfig& c, int il) {
  const std::string b = "blk." + std::to_string(il) + ".";
  const int64_t d = c.n_embd, ff = c.n_ff;
  const RecurrentShape& r = c.recurrent;
  LayerWeights l;
  SLUICE_ASSIGN_OR_RETURN(l.attn_norm, bind_vector(f, b + "attn_norm.weight", d));
  if (c.layer_kind(il) == LayerKind::kRecurrent) {
    DeltaNetWeights& n = l.delta;
    SLUICE_ASSIGN_OR_RETURN(n.qkv, bind_matrix(f, b + "attn_qkv.weight", d, r.conv_channels()));
    SLUICE_ASSIGN_OR_RETURN(n.z, bind_matrix(f, b + "attn_gate.weight", d, r.v_dim()));
    SLUICE_ASSIGN_OR_RETURN(n.beta, bind_matrix(f, b + "ssm_beta.weight", d, r.n_v_heads));
    SLUICE_ASSIGN_OR_RETURN(n.alpha, bind_matrix(f, b + "ssm_alpha.weight", d, r.n_v_heads));
    SLUICE_ASSIGN_OR_RETURN(n.out, bind_matrix(f, b + "ssm_out.weight", r.v_dim(), d));
    SLUICE_ASSIGN_OR_RETURN(
        n.conv, bind_table(f, b + "ssm_conv1d.weight", r.conv_kernel, r.conv_channels()));
    SLUICE_ASSIGN_OR_RETURN(n.dt_bias, bind_vector(f, b + "ssm_dt.bias", r.n_v_heads));
    SLUICE_ASSIGN_OR_RETURN(n.a, bind_vector(f, b + "ssm_a", r.n_v_heads));
    SLUICE_ASSIGN_OR_RETURN(n.norm, bind_vector(f, b + "ssm_norm.weight", r.state_size));
  } else {
    const int64_t qd = c.q_dim(), kvd = c.kv_dim();
    SLUICE_ASSIGN_OR_RETURN(l.wq, bind_matrix(f, b + "attn_q.weight", d, 2 * qd));
    SLUICE_ASSIGN_OR_RETURN(l.wk, bind_matrix(f, b + "attn_k.weight", d, kvd));
    SLUICE_ASSIGN_OR_RETURN(l.wv, bind_matrix(f, b + "attn_v.weight", d, kvd));
    SLUICE_ASSIGN_OR_RETURN(l.wo, bind_matrix(f, b + "attn_output.weight", qd, d));
    SLUICE_ASSIGN_OR_RETURN(l.q_norm, bind_vector(f, b + "attn_q_norm.weight", c.head_dim));
    SLUICE_ASSIGN_OR_RETURN(l.k_norm, bind_vector(f, b + "attn_k_norm.weight", c.head_dim));
  }
  SLUICE_ASSIGN_OR_RETURN(l.ffn_norm, bind_vector(f, b + "post_attention_norm.weight", d));
  if (c.is_moe()) {
    SLUICE_ASSIGN_OR_RETURN(l.moe, bind_moe(f, c, b));
    return l;
  }
  SLUICE_RETURN_IF_ERROR(bind_gate_up(f, c, b, l));
  SLUICE_ASSIGN_OR_RETURN(l.w_down, bind_matrix(f, b + "ffn_down.weight", ff, d));
  return l;
}

// A bert layer (llama.cpp's names): q/k/v/output with biases, attn_output_norm, ffn_up/down
// with biases, layer_output_norm (LayerNorms with biases).
Result<LayerWeights> bind_bert_layer(const GgufFile& f, const ModelConfig& c, int il) {
  const std::string b = "blk." + std::to_string(il) + ".";
  const int64_t d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.n_ff;
  LayerWeights l;
  SLUICE_RETURN_IF_ERROR(bind_qkv(f, c, b, l));
  SLUICE_ASSIGN_OR_RETURN(l.wo, bind_matrix(f, b + "attn_output.weight", qd, d));
  SLUICE_ASSIGN_OR_RETURN(l.bq, bind_vector(f, b + "attn_q.bias", qd));
  SLUICE_ASSIGN_OR_RETURN(l.bk, bind_vector(f, b + "attn_k.bias", kvd));
  SLUICE_ASSIGN_OR_RETURN(l.bv, bind_vector(f, b + "attn_v.bias", kvd));
  SLUICE_ASSIGN_OR_RETURN(l.bo, bind_vector(f, b + "attn_output.bias", d));
  SLUICE_ASSIGN_OR_RETURN(l.attn_norm, bind_vector(f, b + "attn_output_norm.weight", d));
  SLUICE_ASSIGN_OR_RETURN(l.attn_norm_b, bind_vector(f, b + "attn_output_norm.bias", d));
  SLUICE_ASSIGN_OR_RETURN(l.w_up, bind_matrix(f, b + "ffn_up.weight", d, ff));
  SLUICE_ASSIGN_OR_RETURN(l.b_up, bind_vector(f, b + "ffn_up.bias", ff));
  SLUICE_ASSIGN_OR_RETURN(l.w_down, bind_matrix(f, b + "ffn_down.weight", ff, d));
  SLUICE_ASSIGN_OR_RETURN(l.b_down, bind_vector(f, b + "ffn_down.bias", d));
  SLUICE_ASSIGN_OR_RETURN(l.ffn_norm, bind_vector(f, b + "layer_output_norm.weight", d));
  SLUICE_ASSIGN_OR_RETURN(l.ffn_norm_b, bind_vector(f, b + "layer_output_norm.bias", d));
  return l;
}

// The classifier head of a reranker (Pooling::kRank): cls (+ bias) and/or cls.output (+ bias).
Status bind_cls_head(const GgufFile& f, ModelConfig& c, ModelWeights& w) {
  const int64_t d = c.n_embd;
  if (f.find_tensor("cls.weight")) {
    SLUICE_ASSIGN_OR_RETURN(w.cls, bind_matrix(f, "cls.weight", d, d));
    if (f.find_tensor("cls.bias")) {
      SLUICE_ASSIGN_OR_RETURN(w.cls_b, bind_vector(f, "cls.bias", d));
    }
  }
  c.n_cls_out = int(d);
  if (const GgufTensorInfo* t = f.find_tensor("cls.output.weight")) {
    if (t->ne[1] < 1 || t->ne[1] > d) {
      return make_error("'", f.path(), "': tensor 'cls.output.weight' has shape ",
                        t->shape_string(), ", expected [", d, ", 1 .. ", d, "]");
    }
    c.n_cls_out = int(t->ne[1]);
    SLUICE_ASSIGN_OR_RETURN(w.cls_out, bind_matrix(f, "cls.output.weight", d, c.n_cls_out));
    if (f.find_tensor("cls.output.bias")) {
      SLUICE_ASSIGN_OR_RETURN(w.cls_out_b, bind_vector(f, "cls.output.bias", c.n_cls_out));
    }
  }
  if (!w.cls.data && !w.cls_out.data) {
    return make_error("'", f.path(), "': rank pooling needs a classifier head (tensor ",
                      "'cls.weight' or 'cls.output.weight'), which the file lacks");
  }
  return {};
}

// A gemma4 layer: its kind's head size and KV heads; K/V projections only on the layers that
// store K/V (the shared ones read an earlier layer's); the per-layer input's gate, projection
// and norm; the layer's output scale.
Result<LayerWeights> bind_gemma4_layer(const GgufFile& f, const ModelConfig& c, int il) {
  const std::string b = "blk." + std::to_string(il) + ".";
  const int64_t d = c.n_embd, hd = c.layer_head_dim(il), qd = c.layer_q_dim(il);
  const int64_t kvd = c.layer_kv_dim(il), ff = c.n_ff, P = c.n_embd_per_layer;
  LayerWeights l;
  SLUICE_ASSIGN_OR_RETURN(l.attn_norm, bind_vector(f, b + "attn_norm.weight", d));
  SLUICE_ASSIGN_OR_RETURN(l.wq, bind_matrix(f, b + "attn_q.weight", d, qd));
  SLUICE_ASSIGN_OR_RETURN(l.wo, bind_matrix(f, b + "attn_output.weight", qd, d));
  SLUICE_ASSIGN_OR_RETURN(l.q_norm, bind_vector(f, b + "attn_q_norm.weight", hd));
  if (c.layer_stores_kv(il)) {
    SLUICE_ASSIGN_OR_RETURN(l.wk, bind_matrix(f, b + "attn_k.weight", d, kvd));
    // Without attn_v the values are the keys' projection (llama.cpp: use_alternative_attention).
    if (f.find_tensor(b + "attn_v.weight")) {
      SLUICE_ASSIGN_OR_RETURN(l.wv, bind_matrix(f, b + "attn_v.weight", d, kvd));
    } else {
      l.wv = l.wk;
    }
    SLUICE_ASSIGN_OR_RETURN(l.k_norm, bind_vector(f, b + "attn_k_norm.weight", hd));
  }
  SLUICE_ASSIGN_OR_RETURN(l.attn_post_norm, bind_vector(f, b + "post_attention_norm.weight", d));
  SLUICE_ASSIGN_OR_RETURN(l.ffn_norm, bind_vector(f, b + "ffn_norm.weight", d));
  SLUICE_ASSIGN_OR_RETURN(l.ffn_post_norm, bind_vector(f, b + "post_ffw_norm.weight", d));
  if (f.find_tensor(b + "ffn_gate_inp.weight")) {
    return make_error("'", f.path(), "': tensor '", b,
                      "ffn_gate_inp.weight': gemma4's mixture-of-experts layers (26B-A4B) are "
                      "not supported yet");
  }
  SLUICE_RETURN_IF_ERROR(bind_gate_up(f, c, b, l));
  SLUICE_ASSIGN_OR_RETURN(l.w_down, bind_matrix(f, b + "ffn_down.weight", ff, d));
  if (P > 0) {
    SLUICE_ASSIGN_OR_RETURN(l.per_layer_gate, bind_matrix(f, b + "inp_gate.weight", d, P));
    SLUICE_ASSIGN_OR_RETURN(l.per_layer_proj, bind_matrix(f, b + "proj.weight", P, d));
    SLUICE_ASSIGN_OR_RETURN(l.per_layer_post_norm, bind_vector(f, b + "post_norm.weight", d));
  }
  if (f.find_tensor(b + "layer_output_scale.weight")) {
    SLUICE_ASSIGN_OR_RETURN(const std::vector<float> s,
                            bind_vector(f, b + "layer_output_scale.weight", 1));
    l.out_scale = s[0];
  }
  return l;
}

// gemma4's per-layer input tables: per_layer_token_embd [n_layer * P, n_vocab],
// per_layer_model_proj [n_embd, n_layer * P], per_layer_proj_norm [P].
Status bind_per_layer_inputs(const GgufFile& f, const ModelConfig& c, ModelWeights& w) {
  const int64_t P = c.n_embd_per_layer, LP = int64_t(c.n_layer) * P;
  SLUICE_ASSIGN_OR_RETURN(const GgufTensorInfo* t,
                          find_checked(f, "per_layer_token_embd.weight", LP, -1));
  if (t->ne[1] != c.n_vocab) {
    return make_error("'", f.path(), "': tensor 'per_layer_token_embd.weight' has shape ",
                      t->shape_string(), ", expected [", LP, ", ", c.n_vocab,
                      "] (n_layer x embedding_length_per_layer_input, n_vocab)");
  }
  w.per_layer_token_embd = WeightMatrix{t->data, t->type, t->ne[0], t->ne[1]};
  SLUICE_ASSIGN_OR_RETURN(w.per_layer_model_proj,
                          bind_matrix(f, "per_layer_model_proj.weight", c.n_embd, LP));
  SLUICE_ASSIGN_OR_RETURN(w.per_layer_proj_norm, bind_vector(f, "per_layer_proj_norm.weight", P));
  return {};
}

Result<LayerWeights> bind_layer(const GgufFile& f, const ModelConfig& c, int il) {
  if (c.arch == Arch::kQwen35) return bind_hybrid_layer(f, c, il);
  if (c.arch == Arch::kGemma4) return bind_gemma4_layer(f, c, il);
  if (c.arch == Arch::kBert) return bind_bert_layer(f, c, il);
  const std::string b = "blk." + std::to_string(il) + ".";
  const int64_t d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.n_ff;
  LayerWeights l;
  SLUICE_ASSIGN_OR_RETURN(l.attn_norm, bind_vector(f, b + "attn_norm.weight", d));
  SLUICE_RETURN_IF_ERROR(bind_qkv(f, c, b, l));
  SLUICE_ASSIGN_OR_RETURN(l.wo, bind_matrix(f, b + "attn_output.weight", qd, d));
  if (c.qkv_bias) {
    SLUICE_ASSIGN_OR_RETURN(l.bq, bind_vector(f, b + "attn_q.bias", qd));
    SLUICE_ASSIGN_OR_RETURN(l.bk, bind_vector(f, b + "attn_k.bias", kvd));
    SLUICE_ASSIGN_OR_RETURN(l.bv, bind_vector(f, b + "attn_v.bias", kvd));
  }
  if (c.attn_out_bias) {
    SLUICE_ASSIGN_OR_RETURN(l.bo, bind_vector(f, b + "attn_output.bias", d));
  }
  if (c.attn_sinks) {
    SLUICE_ASSIGN_OR_RETURN(l.attn_sinks, bind_vector(f, b + "attn_sinks.weight", c.n_head));
  }
  if (c.qk_norm) {
    SLUICE_ASSIGN_OR_RETURN(l.q_norm, bind_vector(f, b + "attn_q_norm.weight", c.head_dim));
    SLUICE_ASSIGN_OR_RETURN(l.k_norm, bind_vector(f, b + "attn_k_norm.weight", c.head_dim));
  }
  SLUICE_ASSIGN_OR_RETURN(l.ffn_norm, bind_vector(f, b + c.ffn_norm_tensor + ".weight", d));
  if (c.post_norms) {
    SLUICE_ASSIGN_OR_RETURN(l.attn_post_norm, bind_vector(f, b + "post_attention_norm.weight", d));
    SLUICE_ASSIGN_OR_RETURN(l.ffn_post_norm, bind_vector(f, b + "post_ffw_norm.weight", d));
  }
  if (c.is_moe()) {
    SLUICE_ASSIGN_OR_RETURN(l.moe, bind_moe(f, c, b));
    return l;
  }
  SLUICE_RETURN_IF_ERROR(bind_gate_up(f, c, b, l));
  SLUICE_ASSIGN_OR_RETURN(l.w_down, bind_matrix(f, b + "ffn_down.weight", ff, d));
  return l;
}

}  // namespace

WeightMatrix WeightMatrix::rows(int64_t r0, int64_t n) const {
  WeightMatrix m = *this;
  m.data = static_cast<const uint8_t*>(data) + size_t(r0) * row_size(type, n_cols);
  m.n_rows = n;
  return m;
}

Result<ModelWeights> bind_weights(const GgufFile& f, ModelConfig& c) {
  ModelWeights w;
  SLUICE_ASSIGN_OR_RETURN(const GgufTensorInfo* embd,
                          find_checked(f, "token_embd.weight", c.n_embd, -1));
  if (embd->ne[1] > std::numeric_limits<int32_t>::max()) {
    return make_error("'", f.path(), "': tensor 'token_embd.weight' has too many rows");
  }
  c.n_vocab = int(embd->ne[1]);
  SLUICE_RETURN_IF_ERROR(check_vocab(f, c));
  w.token_embd = WeightMatrix{embd->data, embd->type, embd->ne[0], embd->ne[1]};

  if (c.has_rope_freqs) {
    SLUICE_ASSIGN_OR_RETURN(w.rope_freqs, bind_vector(f, c.rope_factors_tensor, c.n_rot / 2));
  }
  // Every layer has tensors of its own: a block_count beyond the file's tensor count is a lie
  // (and reserving for it could exhaust memory before the first missing tensor is noticed).
  if (size_t(c.n_layer) > f.tensors().size()) {
    return make_error("'", f.path(), "': block_count ", c.n_layer, " exceeds the ",
                      f.tensors().size(), " tensors in the file");
  }
  w.layers.reserve(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    SLUICE_ASSIGN_OR_RETURN(LayerWeights l, bind_layer(f, c, il));
    w.layers.push_back(std::move(l));
  }
  if (c.pooling == Pooling::kRank) SLUICE_RETURN_IF_ERROR(bind_cls_head(f, c, w));
  if (c.n_embd_per_layer > 0) SLUICE_RETURN_IF_ERROR(bind_per_layer_inputs(f, c, w));
  if (c.arch == Arch::kBert) {
    const int64_t d = c.n_embd;
    SLUICE_ASSIGN_OR_RETURN(w.position_embd,
                            bind_matrix(f, "position_embd.weight", d, c.n_ctx_train));
    SLUICE_ASSIGN_OR_RETURN(const GgufTensorInfo* types,
                            find_checked(f, "token_types.weight", d, -1));
    w.token_type0.resize(size_t(d));
    SLUICE_RETURN_IF_ERROR(dequantize_row(types->type, types->data, w.token_type0.data(), d));
    SLUICE_ASSIGN_OR_RETURN(w.embd_norm, bind_vector(f, "token_embd_norm.weight", d));
    SLUICE_ASSIGN_OR_RETURN(w.embd_norm_b, bind_vector(f, "token_embd_norm.bias", d));
    return w;  // an encoder: no output norm, no output matrix
  }
  SLUICE_ASSIGN_OR_RETURN(w.output_norm, bind_vector(f, "output_norm.weight", c.n_embd));
  if (c.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    SLUICE_ASSIGN_OR_RETURN(w.output, bind_matrix(f, "output.weight", c.n_embd, c.n_vocab));
  }
  return w;
}

}  // namespace sluice
