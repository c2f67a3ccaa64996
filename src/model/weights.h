// Weights of a model bound to a GGUF file. Matrices point into the file mapping (no copy; a
// fused tensor such as phi3's attn_qkv is bound as views of its row ranges); the small 1-D tensors
// (norms, biases, rope factors) are decoded to f32 once. Binding checks every required tensor for
// presence, type and exact shape before anything runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace sluice {

// A weight matrix in GGUF layout: n_rows rows of n_cols (= ne[0]) elements of `type`.
struct WeightMatrix {
  const void* data = nullptr;  // into the file mapping
  GgmlType type = GgmlType::F32;
  int64_t n_cols = 0;  // ne[0]: input features
  int64_t n_rows = 0;  // ne[1]: output features
  // A tensor-parallel column slice (model/shard.h): x W^T is this rank's term of a sum over
  // the ranks, which the executor all-reduces before anything reads it.
  bool partial = false;

  // Rows [r0, r0 + n) as a matrix of their own (a view of the same memory).
  WeightMatrix rows(int64_t r0, int64_t n) const;
};

// One layer's experts (config.h: n_expert ...). The 3-D GGUF tensors ffn_{gate,up,down}_exps
// hold expert e's matrix as the e-th slab; bound as one view per expert.
struct MoeWeights {
  WeightMatrix router;                 // ffn_gate_inp [n_expert rows, n_embd]
  std::vector<WeightMatrix> gate, up;  // [n_expert] of [n_ff_exp rows, n_embd]
  std::vector<WeightMatrix> down;      // [n_expert] of [n_embd rows, n_ff_exp]
  // The shared expert (n_ff_shexp > 0) and its gate ([1 row, n_embd]; empty: ungated).
  WeightMatrix sh_gate, sh_up, sh_down, sh_gate_inp;
  int n_used = 0;         // experts per token
  bool norm_topk = true;  // renormalize the chosen experts' weights to sum to 1 (kSoftmax)
  MoeGating gating = MoeGating::kSoftmax;
  MoeActivation act = MoeActivation::kSwiglu;
  // config.moe_biases: the router's [n_expert] and expert e's gate / up bias at
  // [e * n_ff_exp, (e + 1) * n_ff_exp), down bias at [e * n_embd, (e + 1) * n_embd); else empty.
  std::vector<float> router_bias;
  std::vector<float> gate_bias, up_bias;  // [n_expert * n_ff_exp]
  std::vector<float> down_bias;           // [n_expert * n_embd]
  // Tensor parallel (model/shard.h): every expert holds a slice of its FFN columns, so the
  // layer's output is this rank's term of a sum over the ranks (all-reduced by the executor).
  bool partial = false;
  bool has_shared() const { return sh_down.data != nullptr; }
};

// A Gated DeltaNet layer (config.recurrent: S, nk, nv, K).
struct DeltaNetWeights {
  WeightMatrix qkv;            // attn_qkv [conv_channels rows, n_embd]
  WeightMatrix z;              // attn_gate [v_dim rows, n_embd]
  WeightMatrix beta;           // ssm_beta [nv rows, n_embd]
  WeightMatrix alpha;          // ssm_alpha [nv rows, n_embd]
  WeightMatrix out;            // ssm_out [n_embd rows, v_dim]
  std::vector<float> conv;     // ssm_conv1d [conv_channels][K]: channel c's taps, oldest first
  std::vector<float> dt_bias;  // ssm_dt.bias [nv]
  std::vector<float> a;        // ssm_a [nv] (-exp(A_log): negative)
  std::vector<float> norm;     // ssm_norm [S], one weight for every head
};

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  WeightMatrix wq;                    // [q_dim rows, n_embd]
  WeightMatrix wk;                    // [kv_dim rows, n_embd]
  WeightMatrix wv;                    // [kv_dim rows, n_embd]
  WeightMatrix wo;                    // [n_embd rows, q_dim]
  std::vector<float> bq;              // [q_dim]  (qkv_bias only)
  std::vector<float> bk;              // [kv_dim] (qkv_bias only)
  std::vector<float> bv;              // [kv_dim] (qkv_bias only)
  std::vector<float> bo;              // [n_embd] (attn_out_bias only)
  std::vector<float> attn_sinks;      // [n_head] (attn_sinks only)
  std::vector<float> q_norm;          // [head_dim] (qk_norm only)
  std::vector<float> k_norm;          // [head_dim] (qk_norm only)
  std::vector<float> attn_post_norm;  // [n_embd] (post_norms only)
  std::vector<float> ffn_norm;        // [n_embd]
  std::vector<float> ffn_post_norm;   // [n_embd] (post_norms only)
  WeightMatrix w_gate;                // [n_ff rows, n_embd]
  WeightMatrix w_up;                  // [n_ff rows, n_embd]
  WeightMatrix w_down;                // [n_embd rows, n_ff]
  MoeWeights moe;                     // instead of w_gate / w_up / w_down when config.is_moe()
  DeltaNetWeights delta;              // a recurrent layer's mixer (instead of wq .. wo)
  // Encoders (bert, post-LN): attn_norm is attn_output_norm and ffn_norm layer_output_norm,
  // each a LayerNorm with these biases ([n_embd]); the FFN is up -> GELU -> down with biases.
  std::vector<float> attn_norm_b;  // [n_embd]
  std::vector<float> ffn_norm_b;   // [n_embd]
  std::vector<float> b_up;         // [n_ff]
  std::vector<float> b_down;       // [n_embd]
  // Per-layer inputs (config.n_embd_per_layer = P > 0, gemma4): x += rmsnorm(per_layer_proj .
  // (gelu(per_layer_gate . x) * ple[il])) * per_layer_post_norm, then x *= out_scale.
  WeightMatrix per_layer_gate;             // inp_gate [P rows, n_embd]
  WeightMatrix per_layer_proj;             // proj [n_embd rows, P]
  std::vector<float> per_layer_post_norm;  // post_norm [n_embd]
  float out_scale = 1.0f;                  // layer_output_scale.weight [1] (1: absent)
};

struct ModelWeights {
  WeightMatrix token_embd;  // [n_vocab rows, n_embd]
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [n_embd]
  WeightMatrix output;             // [n_vocab rows, n_embd]; token_embd when tied
  std::vector<float> rope_freqs;   // [n_rot / 2] frequency factors; empty when absent
  // Per-layer inputs (gemma4, config.n_embd_per_layer = P): token rows of n_layer slices of P,
  // the projection of the scaled embedding into the same, and the norm of each slice.
  WeightMatrix per_layer_token_embd;       // [n_vocab rows, n_layer * P]
  WeightMatrix per_layer_model_proj;       // [n_layer * P rows, n_embd]
  std::vector<float> per_layer_proj_norm;  // [P]
  // Encoders (bert): learned positions, the token type 0 row (every token is type 0, as
  // llama.cpp runs bert), the embeddings' LayerNorm; no output norm or output matrix.
  WeightMatrix position_embd;      // [n_ctx_train rows, n_embd]
  std::vector<float> token_type0;  // [n_embd]
  std::vector<float> embd_norm;    // [n_embd]
  std::vector<float> embd_norm_b;  // [n_embd]
  // Rank pooling's classifier head: cls [n_embd rows, n_embd] + bias, tanh, then cls_out
  // [n_cls_out rows, n_embd] + bias (either may be absent: data null, bias empty).
  WeightMatrix cls;
  std::vector<float> cls_b;
  WeightMatrix cls_out;
  std::vector<float> cls_out_b;
};

// What a matrix is to the layer that reads it.
enum class MatrixRole {
  kDense,   // read by every token: attention or DeltaNet projections, a dense or shared FFN
  kRouter,  // a MoE router or shared-expert gate (kept f32: the expert choice is sensitive)
  kExpert,  // a routed expert's: read only when chosen
};

// Every matrix a layer's matmuls read, once each, in a fixed order: the one list that
// repacking, the step roofline and the tests walk (matrices a layer lacks are skipped).
template <class F>
void for_each_matrix(const LayerWeights& l, F&& f) {
  const DeltaNetWeights& d = l.delta;
  const MoeWeights& m = l.moe;
  for (const WeightMatrix* x :
       {&l.wq, &l.wk, &l.wv, &l.wo, &d.qkv, &d.z, &d.beta, &d.alpha, &d.out, &l.w_gate, &l.w_up,
        &l.w_down, &m.sh_gate, &m.sh_up, &m.sh_down, &l.per_layer_gate, &l.per_layer_proj}) {
    if (x->data) f(*x, MatrixRole::kDense);
  }
  for (const WeightMatrix* x : {&m.router, &m.sh_gate_inp}) {
    if (x->data) f(*x, MatrixRole::kRouter);
  }
  for (const std::vector<WeightMatrix>* experts : {&m.gate, &m.up, &m.down}) {
    for (const WeightMatrix& x : *experts) {
      if (x.data) f(x, MatrixRole::kExpert);
    }
  }
}

// Binds every tensor `config` calls for and sets config.n_vocab from token_embd.weight. Fails,
// naming the tensor or key, on: a missing tensor, a wrong shape, a type matmul cannot read, a
// vocabulary size that differs from tokenizer.ggml.tokens or <arch>.vocab_size.
Result<ModelWeights> bind_weights(const GgufFile& file, ModelConfig& config);

}  // namespace sluice
