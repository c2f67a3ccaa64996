// The seeds' roofline cost model of transformer inference, as pure functions.
//
// Sources (shared/seeds/): all-about-transformer-inference.md "Linear operations: what
// bottlenecks us?" (critical batch), "Theoretical estimates for LLM latency and throughput"
// (step time), "What about memory?" (KV size), "Generation" (tensor-parallel bound);
// how-to-scale-your-model.md "Serving LLaMA 3-70B" (prefill time, eviction, P:G ratio).
// docs/planner.md lists every formula with its seed reference and the numbers reproduced.
//
// Units: bytes, seconds, FLOPs and FLOP/s; decimal prefixes (1 GB = 1e9 B) as in the seeds.
#pragma once

#include <algorithm>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/model_shape.h"
#include "perf/hardware.h"

namespace sluice {

// Bits per stored value. weight_bits 0 means "as stored in the model file" (ModelCost's
// stored_weight_bytes), e.g. a GGUF's mix of quantized types.
struct Precision {
  int weight_bits = 16;  // 16 | 8 | 4 | 0
  int kv_bits = 16;      // 16 | 8 | 4
  int act_bits = 16;     // 16 -> bf16 FLOPs, 8 -> int8 FLOPs (the peak the matmuls run at)
};

// What the roofline needs to know about a model: counts, not shapes. Built from a shape
// (planner.h model_cost) or a GGUF tensor directory, or filled in directly for the seeds'
// shape-less examples ("a 30B model with 100 kB/token KV caches").
struct ModelCost {
  std::string name;
  double n_params = 0;             // all parameters: the seeds' "Parameter Count"
  double n_params_active = 0;      // used per token (MoE: k of E experts), for FLOPs
  double n_params_per_expert = 0;  // one expert's parameters summed over layers (MoE), else 0
  int n_experts = 0;               // MoE experts per layer, 0 for dense
  int n_experts_used = 0;          // experts per token (k)
  double kv_elems_per_token = 0;   // K and V values a token writes: 2 * L * K * H
  double attn_flops_per_pair = 0;  // FLOPs per (query, attended token) pair: 4 * L * N * H
  // Sliding-window layers (gemma2/3/4, gpt-oss, phi3's window): their share of the two above. A
  // sequence keeps their K/V for its last `kv_window` positions only (and the block those start
  // in), and their attention reads at most kv_window keys a query; the rest (the global layers)
  // keep and read every position. 0 without a window: the seeds' model, unchanged.
  double kv_elems_per_token_windowed = 0;
  double attn_flops_per_pair_windowed = 0;
  int kv_window = 0;
  // Layers that store K/V, and how many of them are windowed (the K/V groups the engine cuts
  // them into: base/cache_layout.h; `sluice sim` lays out its cache so).
  int n_kv_layers = 0;
  int n_kv_layers_windowed = 0;
  double d_model = 0;  // for the tensor-parallel bound
  double d_ff = 0;
  double stored_weight_bytes = 0;  // weights as stored in a file; 0 = derive from Precision
  // Recurrent layers (hybrids): the f32 state each sequence holds whatever its context (read and
  // written once per step and chunk of kStateChunk tokens), and its update's FLOPs per token
  // (Gated DeltaNet: about 7 S^2 per V head and layer: decay, M^T k, the rank-1 update, M^T q).
  double state_bytes_per_sequence = 0;
  double state_flops_per_token = 0;
};

// Tokens a recurrent layer's chunked form takes per pass over the state (kDeltaNetChunk).
constexpr int64_t kStateChunk = 64;

// A recurrent shape's per-sequence state bytes (f32) and per-token FLOPs over `n_layers` layers.
void add_recurrent_cost(ModelCost& m, const RecurrentShape& r, int n_layers);

// ---- bytes ----

// Weight bytes: n_params * weight_bits / 8, or the stored bytes when weight_bits == 0.
double weight_bytes(const ModelCost& m, const Precision& p);
// Weight bytes read by a step over `n_tokens` tokens. Dense: all of them. MoE: the shared part
// plus the experts the tokens are expected to touch, E * (1 - (1 - k/E)^n_tokens) per layer.
double weight_bytes_read(const ModelCost& m, const Precision& p, double n_tokens);
// 2 * L * K * H * kv_bits / 8 ("KV cache size = 2 * bytes per float * H * K * L * T"): what
// one token writes, over every layer (what a prompt's K/V transfer moves a token).
double kv_bytes_per_token(const ModelCost& m, const Precision& p);

// Positions a windowed layer holds for a decoding sequence of `context` positions: those from the
// block (of `block_size` positions) holding position context - window on, i.e.
// context - block_size * floor((context - window) / block_size), and all of them while
// context <= window (block_size 1: min(context, window)). docs/kv-cache.md's kept(C).
double kv_window_positions_held(double context, int window, int block_size);
// K/V bytes a sequence of `context` positions holds (docs/kv-cache.md "Memory: what a sequence
// holds", before rounding to blocks):
//   (global elems x context + windowed elems x kv_window_positions_held) x kv_bits / 8.
// Without a window: context x kv_bytes_per_token, the seeds' KV size. Exactly the engine's
// KvCacheLayout::blocks_held bytes when `context` is a multiple of `block_size`. Recurrent state
// (state_bytes_per_sequence) not included.
double kv_bytes_per_sequence(const ModelCost& m, const Precision& p, double context,
                             int block_size);
// K/V bytes one sequence's step reads and writes when it computes `n_new` tokens ending at
// `context` positions: every position in the global layers; in the windowed ones the positions
// its new tokens' windows reach, min(context, kv_window - 1 + n_new) (a decode step: the window).
double kv_bytes_read(const ModelCost& m, const Precision& p, double context, double n_new = 1);

// ---- critical batch ----

// Tokens per step above which the weight matmuls are compute-bound on `hw` (one chip or an
// aggregate; the ratio is the same): B_crit = peak / bandwidth * bytes_per_weight / 2, i.e. the
// seeds' 240 for bf16 on TPU v5e, 120 for int8 weights with bf16 FLOPs, 240 again for int8 x
// int8. (The seeds' shorthand beta = weight bits / activation bits gives the first two; the
// third follows from 2 FLOPs per weight byte read, as the seeds' own answer states.)
double critical_batch(const HardwareSpec& hw, double bytes_per_weight, int act_bits);
// The model's critical batch: the hardware's, times E / k for an MoE (each expert sees k/E of
// the tokens), with the model's effective bytes per weight.
double critical_batch(const ModelCost& m, const Precision& p, const HardwareSpec& hw);

// ---- one generate step (the seeds' "Theoretical Step Time (General)") ----

// step = B * KV_bytes / BW  +  max(2 * B * params / FLOP/s, weight_bytes / BW)
//        (attention: always bandwidth-bound)   (MLP: can be compute-bound)
struct GenerateStep {
  double kv_bytes = 0;         // B * kv_bytes_read(context): B * context * KV bytes per token
  double weight_bytes = 0;     // weights read this step
  double kv_s = 0;             // kv_bytes / bandwidth
  double weight_s = 0;         // weight_bytes / bandwidth
  double flops_s = 0;          // 2 * B * active params / peak
  double seconds = 0;          // kv_s + max(flops_s, weight_s)
  bool compute_bound = false;  // the MLP term is FLOPs-bound
};
// `hw` is everything the step runs on (aggregate() for several chips); every sequence holds
// `context` tokens of KV.
GenerateStep generate_step(const ModelCost& m, const Precision& p, const HardwareSpec& hw,
                           int64_t batch, int64_t context);

// ---- prefill ----

// 2 * active params * n_tokens / (peak * mfu): compute-bound prefill at a given MFU (the seeds'
// 0.91 s for 8192 tokens of LLaMA 3-70B on 16 TPU v5e at 40%). Ignores attention FLOPs, as the
// seeds do.
double prefill_seconds(const ModelCost& m, double n_tokens, const HardwareSpec& hw, double mfu,
                       int act_bits);

// ---- serving ----

// Disaggregated serving: prefill servers P and generate servers G are both saturated when
// P / prefill_s = batch * G / (step_s * decode_len); returns P / G (the seeds' P = 3G).
double prefill_to_generate_ratio(double prefill_s, double step_s, double batch, double decode_len);
// Sequences finishing per generate step at a median decode length: batch / decode_len.
double sequences_finished_per_step(double batch, double decode_len);
// KV tokens freed per generate step: batch * (prompt_len + decode_len) / decode_len.
double kv_tokens_evicted_per_step(double batch, double prompt_len, double decode_len);

// ---- tensor parallelism (1D Megatron sharding of a [D, F] matmul over Y chips) ----

struct TpMatmul {
  double batch = 1;    // tokens per step
  double d_model = 0;  // D
  double d_ff = 0;     // F
  int shards = 1;      // Y
  int axes = 1;        // interconnect axes the Y chips span (comms split over them)
  double bytes_per_weight = 2;
  double bytes_per_act = 2;
};
struct TpTimes {
  double ici_s = 0;   // activation collective: bytes_per_act * B * D / (axes * link bandwidth)
  double hbm_s = 0;   // weight loading: bytes_per_weight * D * F / (Y * HBM bandwidth)
  double math_s = 0;  // 2 * B * D * F / (Y * peak)
  bool comm_bound = false;  // ici_s > max(hbm_s, math_s)
};
// Per-chip times of one sharded matmul; `chip` is ONE chip.
TpTimes tp_matmul_times(const TpMatmul& mm, const HardwareSpec& chip);
// Shard count Y above which the matmul becomes communication-bound, i.e. ici_s exceeds both the
// weight loading and the FLOPs:
//   vs FLOPs: Y > 2 * F * axes * W_ici / (bytes_per_act * C)      (bf16: axes * F / (C / W_ici))
//   vs HBM:   Y > bytes_per_weight * F * axes * W_ici / (bytes_per_act * B * W_hbm)
//                                                                 (bf16: F / (B * W_hbm / W_ici))
// The larger of the two: at small batch, memory-bound generation tolerates more sharding.
// Returns 1 when the chip has no interconnect.
double tp_comm_bound_shards(const TpMatmul& mm, const HardwareSpec& chip);
// The batch-independent FLOPs bound alone (the seeds' "Y > n_axes * F / 2550" on TPU v5p).
double tp_compute_bound_shards(const TpMatmul& mm, const HardwareSpec& chip);

// ---- layouts of the feed-forward weights over n chips (paper notes, "Partitioning the
// feed-forward layer"): per layer and chip, T tokens a step, the two matrices [D, F] and
// [F, D], a bytes per activation, w per weight, link bandwidth W per chip ----
//   1D weight-stationary (Megatron: weights split on F, activations whole): an all-gather and a
//     reduce-scatter of [T, D]:           comm = 2 T D a / W,  weights read 2 D F w / n
//   2D weight-stationary (E over X, F over Y, X = Y = sqrt(n)): all-gather(y) and
//     reduce-scatter(y) of [T, D / X], reduce-scatter(x) and all-gather(x) of [T, F / Y]:
//                                         comm = 2 T (D + F) a / sqrt(n),  weights 2 D F w / n
//     (the notes' 8 T D / sqrt(n) counts F = 4D as 3 D; this counts each collective's output)
//   weight-gathered (xyz: the batch split over the chips, the weights all-gathered before use):
//                                         comm = 2 D F w (n - 1) / n / W,  weights 2 D F w
//   math = 2 * 2 T D F / n in every layout.
// 2D beats 1D in communication once sqrt(n) > 1 + F / D; weight-gathered beats a layout once T
// passes the point where its activation traffic exceeds the weights' (ffn_layout_crossover).
enum class FfnLayout { k1dWeightStationary, k2dWeightStationary, kWeightGathered };
inline constexpr FfnLayout kFfnLayouts[] = {
    FfnLayout::k1dWeightStationary, FfnLayout::k2dWeightStationary, FfnLayout::kWeightGathered};
const char* ffn_layout_name(FfnLayout l);
struct FfnLayoutTimes {
  double comm_s = 0, hbm_s = 0, math_s = 0;
  double bound_s() const { return std::max(comm_s, std::max(hbm_s, math_s)); }
};
FfnLayoutTimes ffn_layout_times(FfnLayout layout, const TpMatmul& mm, int n_chips,
                                const HardwareSpec& chip);
// Tokens a step above which weight-gathering communicates less than `other` (inf: never).
double ffn_layout_crossover(FfnLayout other, const TpMatmul& mm, int n_chips);

// ---- one engine step, exactly (what the engine asks every step) ----

// One sequence's share of a step: `n_new_tokens` tokens computed, attending to `n_context` tokens
// in total (those already cached plus the new ones; a decode step is {1, len}).
struct SeqWork {
  int64_t n_new_tokens = 0;
  int64_t n_context = 0;
};

// The work of one ragged batch, as the roofline sees it.
struct StepShape {
  int64_t n_tokens = 0;     // sum of n_new_tokens
  int64_t n_seqs = 0;       // sequences in the step (no per-step allocation)
  double weight_bytes = 0;  // weights read
  double kv_bytes = 0;      // KV read (every attended token) + written (new tokens)
  double flops = 0;         // 2 * active params * n_tokens + causal attention FLOPs
  int act_bits = 16;        // picks the peak
};

// Bytes and FLOPs of a step from the model and the sequences' work.
StepShape make_step_shape(const ModelCost& m, const Precision& p, std::span<const SeqWork> seqs);

// The two floors of one step on `hw` (everything the step runs on; aggregate() for several
// chips): moving its bytes at the bandwidth and doing its FLOPs at the peak.
struct StepFloors {
  double bytes_s = 0;  // (weight + KV bytes) / bandwidth
  double flops_s = 0;  // FLOPs / peak at the step's activation precision
  double seconds() const { return bytes_s > flops_s ? bytes_s : flops_s; }
  bool compute_bound() const { return flops_s > bytes_s; }
};
StepFloors step_floors(const StepShape& step, const HardwareSpec& hw);

// The roofline time of one step: max(bytes / bandwidth, flops / peak), perfect overlap of
// loading and compute. Its ratio to the measured step time is the step's MBU / MFU.
double predicted_step_seconds(const StepShape& step, const HardwareSpec& hw);

}  // namespace sluice
