// Tensor-parallel shards of a model (Megatron 1D): rank r of N holds
//   * Q and its K/V heads: rows of attn_q / attn_k / attn_v (heads n_head / N; K/V heads
//     n_kv_head / N, or one replicated K/V head when N exceeds n_kv_head);
//   * the matching columns of attn_output, so x W_o^T is this rank's partial sum;
//   * FFN columns: rows of ffn_gate / ffn_up and the same columns of ffn_down (split in whole
//     quantization blocks; the last ranks may get one block fewer), partial sums again; every
//     expert of a MoE layer is split the same way (the router stays whole on every rank);
//   * a slice of the vocabulary: rows [vocab_begin, vocab_end) of token_embd and output.
//
// Row slices are views into the file mapping (a rank only ever touches its rows); column slices
// (attn_output, ffn_down) are copied once, whole blocks per row. Norms, RoPE factors and the
// router are whole on every rank. The shard's ModelConfig is the local one (n_head, n_kv_head,
// n_ff, n_ff_exp, n_ff_shexp, n_vocab of this rank), so an executor sizes its activations and
// KV cache from it unchanged; what it must add is in ShardInfo and WeightMatrix::partial:
// the all-reduce after each partial product and the vocabulary-parallel embedding and logits.
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

// [begin, end) of `n` items split in `n_units` units of `unit` items over `size` ranks: rank r
// gets units [r * n_units / size, (r + 1) * n_units / size).
Range split_range(int64_t n, int64_t unit, int rank, int size);

}  // namespace sluice
