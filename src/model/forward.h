// The forward pass of each architecture family (arch_<family>.cpp), written against ForwardOps:
// the operations an executor provides for one step. The CPU executor implements them with
// kernels/ (executor/cpu_executor.cpp); a CUDA or sharded executor implements the same list, so
// an architecture is written once.
//
// A step is a ragged batch of new tokens (prompt chunks, decode tokens, 1 + k verification
// tokens of several sequences): the ops know its token ids, positions, cache slots and
// sequences; the forward pass sees only "n_tokens rows" and calls, per layer, e.g. for llama:
//
//   ops.rms_norm(x, attn_norm, eps, xn, {&wq, &wk, &wv});
//   ops.matmul(wq, xn, q); ...; ops.rope_store_kv(layer, q, k, v, {});
//   ops.attention(layer, q, att); ops.matmul(wo, att, proj); ops.add(x, proj); ...
//
// Activations are [rows, cols] f32 buffers owned by the ops (host memory here, device memory
// for a GPU executor): the forward pass asks for them by role and only passes them along.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace sluice {

// An activation buffer: rows x cols floats, row-major.
struct Act {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Buffers by role (each one distinct memory; contents undefined until written).
enum class ActBuf {
  kX,
  kXn,
  kQ,
  kK,
  kV,
  kAtt,
  kProj,
  kGate,
  kUp,
  kLogitRows,
  kLogitRowsNorm,
  kPerLayer,  // gemma4's per-layer inputs [n_tokens, n_layer * n_embd_per_layer]
  kCount
};

// Per-head RMSNorm weights of q and k ([head_dim] each; empty: none), and whether V is
// RMS-normed per head without a weight (gemma4).
struct HeadNorms {
  const std::vector<float>* q = nullptr;
  const std::vector<float>* k = nullptr;
  float eps = 0;
  bool v_unit = false;
};

class ForwardOps {
 public:
  virtual ~ForwardOps() = default;

  // New tokens in this step (rows of the residual stream).
  virtual int64_t n_tokens() const = 0;
  // A buffer of `rows` x `cols` for `role`, valid until the step ends.
  virtual Act buffer(ActBuf role, int64_t rows, int64_t cols) = 0;

  // x[t] = row token_ids[t] of `table` (as f32).
  virtual void embed(const WeightMatrix& table, Act x) = 0;
  // out[t] = x[t] / rms(x[t]) * w. `next` lists the matmuls that read `out` before it changes:
  // the ops may prepare their input once for all of them (8-bit blocks fused with the norm).
  virtual void rms_norm(Act x, const std::vector<float>& w, float eps, Act out,
                        std::initializer_list<const WeightMatrix*> next) = 0;
  // y = x W^T ([rows, n_rows of w]).
  virtual void matmul(const WeightMatrix& w, Act x, Act y) = 0;
  // y[t] += b for every row (b empty: nothing).
  virtual void add_bias(Act y, const std::vector<float>& b) = 0;
  // Per token: q/k head norms when given, RoPE of q and k at the token's position, then k and v
  // written to the token's cache slot of `layer`.
  // Heads have the layer's shape (ModelConfig::layer_head_dim, layer_n_kv_head, its RoPE).
  virtual void rope_store_kv(int layer, Act q, Act k, Act v, const HeadNorms& norms) = 0;
  // A layer that reads another layer's K/V (ModelConfig::kv_source_layer, gemma4): q's head
  // norm and RoPE only; attention(layer, ..) then reads the source's cache.
  virtual void rope_q(int layer, Act q, const HeadNorms& norms) = 0;
  // Causal attention of every sequence's new queries over its cached keys and values of
  // `layer` (paged): out [n_tokens, n_head * head_dim]. The scores are scaled, soft-capped and
  // windowed as the config says for the layer (attention_scale, attn_softcap, layer_window);
  // `sinks` ([n_head] or empty) adds one logit per head to the softmax's denominator.
  virtual void attention(int layer, Act q, Act out, const std::vector<float>& sinks) = 0;
  // Mixture-of-experts FFN of every row of xn (config.h: n_expert ...) into out [rows, n_embd]:
  // router logits (+ bias), top-k with the weights' gating (MoeGating), each chosen expert's
  // gated FFN (MoeActivation, optional biases) run once over all the rows routed to it (a batch
  // reads each expert once), the weighted sum, plus the gated shared expert.
  virtual void moe(const MoeWeights& w, Act xn, Act out) = 0;
  // Gated DeltaNet (qwen35) of layer `layer` over every sequence's new tokens, each resuming
  // from its recurrent state (zero at a sequence's first token) and leaving it updated: the
  // causal conv over qkv [rows, conv_channels] (its last conv_kernel - 1 inputs are state) and
  // SiLU; q, k L2-normed per head, q scaled by 1 / sqrt(state_size); per V head j (reading Q/K
  // head j mod n_k_heads), with g = softplus(alpha + dt_bias) * a and b = sigmoid(beta):
  //   M <- exp(g) M;  d = (v - M^T k) b;  M <- M + k d^T;  o = M^T q
  // then out = rmsnorm(o) * ssm_norm * silu(z) per head: out [rows, v_dim]. qkv is scratch
  // afterwards (the CPU executor computes the conv in place).
  virtual void delta_net(int layer, const DeltaNetWeights& w, Act qkv, Act z, Act beta, Act alpha,
                         Act out) = 0;
  // src rows hold per head `head_dim` values of a, then `head_dim` of b: split them.
  virtual void split_halves(Act src, int64_t head_dim, Act a, Act b) = 0;
  // x *= sigmoid(g), element-wise.
  virtual void sigmoid_gate(Act x, Act g) = 0;
  // out = silu(gate) * up, element-wise (out may be gate).
  virtual void swiglu(Act gate, Act up, Act out) = 0;
  // out = gelu_tanh(gate) * up, element-wise (out may be gate).
  virtual void geglu(Act gate, Act up, Act out) = 0;
  // x *= s.
  virtual void scale(Act x, float s) = 0;
  // dst[t] = src[t][col0, col0 + dst.cols) (a column range of every row, made contiguous).
  virtual void slice_cols(Act src, int64_t col0, Act dst) = 0;
  // Encoders (bert): x[t] += row positions[t] of `table` (learned position embeddings).
  virtual void add_positions(const WeightMatrix& table, Act x) = 0;
  // out[t] = (x[t] - mean) / sqrt(var + eps) * w + b (LayerNorm; out may be x).
  virtual void layer_norm(Act x, const std::vector<float>& w, const std::vector<float>& b,
                          float eps, Act out) = 0;
  // x = gelu_tanh(x), element-wise; x = tanh(x), element-wise.
  virtual void gelu(Act x) = 0;
  virtual void tanh(Act x) = 0;
  // dst = src (same shape).
  virtual void copy(Act src, Act dst) = 0;
  // Whether this step asks for pooled hidden states (LogitsMode::kPooled: an embedding step)
  // instead of logits. Then forward_output pools and writes them through logits().
  virtual bool pooled() const = 0;
  // One row per sequence of the step: its rows of x pooled as `how` says (kMean: mean over its
  // tokens; kCls, kRank: its first token; kLast: its last), into a buffer of their own.
  virtual Act pool(Act x, Pooling how) = 0;
  // x = cap * tanh(x / cap), element-wise (logit soft-capping).
  virtual void softcap(Act x, float cap) = 0;
  // x += y.
  virtual void add(Act x, Act y) = 0;
  // Pipeline parallel (config.h layer_begin/layer_end): a stage after the first takes the
  // residual stream x [n_tokens, n_embd] from the stage before instead of embedding the tokens;
  // a stage before the last hands x on instead of computing logits.
  virtual void stage_input(Act x) = 0;
  virtual void stage_output(Act x) = 0;
  // The rows of x the step wants logits for, in order, copied to a buffer of their own.
  virtual Act logit_rows(Act x) = 0;
  // The logits [logit rows, n_vocab] to write (the step's result).
  virtual Act logits(int64_t rows, int64_t n_vocab) = 0;
};

// One step of the llama-shaped block (llama, mistral, qwen2, qwen3, gemma, gemma2, phi3: pre-norm
// attention with optional q/k/v biases and q/k head norms; SwiGLU, or GeGLU with
// config.ffn_gelu; the embeddings scaled by config.embd_scale; with config.post_norms the
// attention and FFN outputs normed before the residual adds), then the logits rows
// (soft-capped with config.final_softcap). A pipeline stage runs only its layers
// (config.layer_begin ..): see ForwardOps::stage_input / stage_output.
void llama_forward(const ModelConfig& config, const ModelWeights& weights, ForwardOps& ops);

// The end of every family's step: a stage before the last hands the residual stream x on;
// the last computes the logits of the rows that asked (the output norm, the output matrix,
// config.final_softcap), or in a pooled step (ops.pooled()) one row per sequence: the output
// norm (when the model has one) of every token, pooled per config.pooling, and for kRank the
// classifier head (cls + bias, tanh, cls_out + bias): [n_seqs, n_embd] or [n_seqs, n_cls_out].
void forward_output(const ModelConfig& config, const ModelWeights& weights, ForwardOps& ops, Act x);

// Encoders (arch_bert.cpp): learned positions, post-LN layers with biases, GELU FFN, attention
// over the whole sequence (config.causal false), then forward_output (pooling).
void bert_forward(const ModelConfig& config, const ModelWeights& weights, ForwardOps& ops);

// Qwen3.5 hybrids (arch_qwen35.cpp): Gated DeltaNet layers and gated attention layers.
void qwen35_forward(const ModelConfig& config, const ModelWeights& weights, ForwardOps& ops);

// Gemma 4 (arch_gemma4.cpp): per-layer-kind head shapes, K/V shared by the last layers,
// per-layer inputs, a scale per layer.
void gemma4_forward(const ModelConfig& config, const ModelWeights& weights, ForwardOps& ops);

}  // namespace sluice
