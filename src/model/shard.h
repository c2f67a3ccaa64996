// Tensor-parallel shards of a model (Megatron 1D): rank r of N holds
//   * Q and its K/V heads: rows of attn_q / attn_k / attn_v (heads n_head / N; K/V heads
//     n_kv_head / N, or one replicated K/V head when N exceeds n_kv_head);
//   * the matching columns of attn_output, so x W_o^T is this rank's partial sum;
//   * FFN columns: rows of ffn_gate / ffn_up and the same columns of ffn_down (split in whole
//     quantization blocks; the last ranks may get one block fewer), partial sums again; every
//     expert of a MoE layer is split the same way (the router stays whole on every rank);
//   * a slice of the vocabulary: rows [vocab_begin, vocab_end) of token_embd and output;
//   * its Gated DeltaNet heads (delta_net_split below): their rows of attn_qkv (q | k | v),
//     attn_gate, ssm_alpha and ssm_beta, their conv channels, ssm_a and ssm_dt entries, and their
//     columns of ssm_out (partial, as attn_output); ssm_norm (per head dim) stays whole.
//
// Row slices are views into the file mapping (a rank only ever touches its rows); column slices
// (attn_output, ffn_down, ssm_out) and rows in several runs (attn_qkv; the DeltaNet rows when a
// rank's V heads are strided) are copied once, whole blocks per row. Gated attention's attn_q
// (qwen35: per head the query rows, then the gate rows) splits by heads the same way, both halves
// of each. Norms, RoPE factors and the router are whole on every rank. The shard's ModelConfig is
// the local one (n_head, n_kv_head, n_ff, n_ff_exp, n_ff_shexp, n_vocab, recurrent.n_k_heads and
// recurrent.n_v_heads of this rank), so an executor sizes its activations, KV cache and recurrent
// state slots (only its heads' conv and SSM state) from it unchanged; what it must add is in
// ShardInfo and WeightMatrix::partial: the all-reduce after each partial product and the
// vocabulary-parallel embedding and logits.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/huge_alloc.h"
#include "base/status.h"
#include "model/config.h"
#include "model/weights.h"

namespace sluice {

// Items [begin, end).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Which shard to load (ModelOptions): rank tp_rank of tp_size within pipeline stage pp_rank of
// pp_size.
struct ShardSpec {
  int tp_rank = 0;
  int tp_size = 1;
  int pp_rank = 0;
  int pp_size = 1;
};

// What a Model holds of the whole (Model::shard()).
struct ShardInfo {
  int tp_rank = 0;
  int tp_size = 1;
  int32_t n_vocab = 0;  // the whole vocabulary (token ids, logits rows of the step)
  int64_t vocab_begin = 0, vocab_end = 0;  // rows of token_embd / output held here
  // The whole model's shape, before sharding (KV heads and FFN width of one replica).
  int n_head = 0, n_kv_head = 0, n_ff = 0;
  // Pipeline parallel: stage pp_rank of pp_size holds the layers ModelConfig's layer_begin ..
  // stage_layer_end() names, token_embd only on the first stage and output only on the last.
  int pp_rank = 0;
  int pp_size = 1;
  bool sharded() const { return tp_size > 1; }
  bool pipelined() const { return pp_size > 1; }
};

// How N ranks split the model: an error naming the dimension that does not divide (heads),
// or nothing. `c` is the whole model's config.
Status check_shardable(const ModelConfig& c, const ModelWeights& w, int tp_size);

// The layers of pipeline stage `stage` of `n_stages`, balanced by cost: `layer_cost[l]` is layer
// l's (its weight bytes: decode streams them, prefill's FLOPs follow them) and the last stage also
// pays `last_extra` (the output projection, as large as 4 layers of Llama-3.2-1B). Contiguous
// stages of at least one layer each whose largest cost is the least possible; among those, the most
// even, the earlier stages taking more (equal layers without an extra: the first n_layer % n_stages
// stages one more). Every rank finds the same split.
Range stage_layers(std::span<const double> layer_cost, double last_extra, int stage, int n_stages);
// The weight bytes of layer l (every matrix of it) and of the output projection.
std::vector<double> layer_weight_bytes(const ModelWeights& w);
double output_weight_bytes(const ModelWeights& w);

// Turns the whole model's config and weights into rank spec.tp_rank's shard of stage
// spec.pp_rank's layers, in place (the other layers' weights are dropped, never read). Column
// copies go to `owned` (keep it alive with the weights).
Result<ShardInfo> shard_model(const ShardSpec& spec, ModelConfig& c, ModelWeights& w,
                              std::vector<StreamedBuffer>& owned);

// The Gated DeltaNet heads of tensor-parallel rank `rank` of `size` (a shape check_shardable
// accepts). V head h reads K head h mod nk (the file's tiled order; kernels/delta_net.h), so a
// rank's V heads are those that read its K heads, strided through the whole:
//
//   nk = 2, nv = 4:  V head 0 1 2 3     --tp 2:  rank 0: K 0, V 0 2   rank 1: K 1, V 1 3
//                    reads  0 1 0 1     --tp 4:  rank 0: K 0, V 0     rank 1: K 0, V 2
//                                                rank 2: K 1, V 1     rank 3: K 1, V 3
//
// With size <= nk a rank holds nk / size K heads; with size > nk (a multiple of nk) each K head
// is replicated on size / nk ranks, which split the V heads that read it. In the rank's order (the
// runs one after another) its V head i reads its K head i mod k.size(), as the kernels expect of
// a whole model, so a shard runs the same kernels over RecurrentShape{.., k.size(), n_v()}.
struct DeltaNetSplit {
  Range k;               // K heads [k.begin, k.end)
  std::vector<Range> v;  // runs of V heads, in the rank's order
  int n_v() const {
    int64_t n = 0;
    for (const Range& r : v) n += r.size();
    return int(n);
  }
};
DeltaNetSplit delta_net_split(const RecurrentShape& s, int rank, int size);

// [begin, end) of `n` items split in `n_units` units of `unit` items over `size` ranks: rank r
// gets units [r * n_units / size, (r + 1) * n_units / size).
Range split_range(int64_t n, int64_t unit, int rank, int size);

}  // namespace sluice
