// `sluice plan`: the seeds' back-of-the-envelope serving analysis for a model on some chips.
// Pure: make_plan() turns a PlanParams into numbers; plan_report.cpp and pareto_svg.cpp format
// them. The math lives in roofline.h; docs/planner.md has the formulas and reproduced numbers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/model_shape.h"
#include "base/status.h"
#include "perf/hardware.h"
#include "perf/roofline.h"

namespace sluice {

// Presets: llama-2-13b, llama-3-8b, llama-3-70b, llama-3-405b, worked-18b (the seeds' 18.4B
// worked-problem model), worked-18b-moe (its E=16, k=2 MoE variant), mixtral-8x7b,
// qwen3-30b-a3b, qwen3.5-9b and qwen3.5-35b-a3b (hybrids: recurrent layers hold a state, not
// K/V), palm-62b, palm-540b.
const std::vector<ModelShape>& planner_models();
const ModelShape* find_planner_model(std::string_view name);
std::string planner_model_names();

// Parameters counted as the seeds count them (matmul weights and embeddings; norms omitted):
//   L * (D * H * (2N + 2K) + E * n_mlp * D * F) + (tied ? 1 : 2) * V * D.
ModelCost model_cost(const ModelShape& s);

struct PlanParams {
  ModelCost model;
  HardwareSpec chip;  // one chip
  int n_chips = 1;
  Precision precision;
  int64_t context = 8192;  // KV tokens held per sequence
  // The K/V block (tokens): a windowed layer keeps the positions from the block its window starts
  // in (kv_bytes_per_sequence); the engine's default. Changes nothing without a window.
  int block_size = 16;
  std::vector<int64_t> batches;  // generate batch sizes; empty = sweep_batches()
  double mfu = 0.4;              // prefill model FLOPs utilization
  int64_t prompt_len = 0;        // prefill length; 0 = context
  int64_t decode_len = 512;      // median generated tokens per request
  // Disaggregated serving: the prefill -> decode link a prompt's K/V crosses (bytes/s, one
  // direction; e.g. 12.5e9 for 100 Gb/s Ethernet). 0: not reported.
  double kv_link_bytes_per_s = 0;
};

// One generate batch size.
struct PlanRow {
  int64_t batch = 0;
  double kv_bytes = 0;      // batch * kv_bytes_per_sequence (held)
  double total_bytes = 0;   // weights + kv_bytes
  bool fits = false;        // total_bytes <= memory of all chips
  GenerateStep step;        // the step-time breakdown
  double step_time_ms = 0;  // theoretical minimum step time
  double tokens_per_s = 0;  // batch / step time
  double tokens_per_s_per_chip = 0;
  double tp_comm_bound_shards = 0;  // tensor parallelism beyond this is ICI/NVLink-bound
};

// The feed-forward layouts over n_chips for one kind of step (roofline.h FfnLayout).
struct LayoutRow {
  std::string phase;        // "decode" (the serving batch) or "prefill" (the prompt)
  int64_t tokens = 0;       // tokens a step
  FfnLayoutTimes times[3];  // by FfnLayout
  FfnLayout best = FfnLayout::k1dWeightStationary;  // the smallest bound
};

struct Plan {
  PlanParams params;
  HardwareSpec total;  // aggregate(chip, n_chips)
  double weight_bytes = 0;
  double kv_bytes_per_token = 0;
  double kv_bytes_per_sequence = 0;       // at `context` (kv_bytes_per_sequence: windowed layers
                                          // their window) + the recurrent state
  double critical_batch_hw = 0;           // the hardware's, for these weight bytes and FLOPs
  double critical_batch = 0;              // the model's (MoE: times E/k)
  int64_t max_batch = 0;                  // largest batch whose KV fits next to the weights
  int min_chips_weights = 0;              // chips needed to hold the weights alone
  double min_step_ms = 0;                 // weights / bandwidth: the latency floor at batch 1
  double kv_weight_crossover_tokens = 0;  // KV tokens whose bytes equal the weights'
  double prefill_s = 0;                   // prompt_len tokens at `mfu`
  // Disaggregated serving (kv_link_bytes_per_s > 0): the prompt's K/V (prompt_len tokens of
  // kv_bytes_per_token, every layer: the transfer moves a prompt's full blocks, and only for a
  // model of one K/V group, docs/kv-cache.md) and its time over the link; overlappable with
  // nothing in sluice's pull-then-import design, so it adds to TTFT.
  double kv_transfer_bytes = 0;
  double kv_transfer_s = 0;
  double tp_compute_bound_shards = 0;  // batch-independent FLOPs-vs-ICI bound
  // Serving figures at `serving_batch` (the one --batch, else min(max_batch, critical batch));
  // absent when nothing fits.
  std::optional<int64_t> serving_batch;
  double serving_step_ms = 0;
  double prefill_generate_ratio = 0;  // prefill servers per generate server
  double sequences_finished_per_step = 0;
  double kv_tokens_evicted_per_step = 0;
  std::vector<PlanRow> rows;
  // n_chips > 1 with an interconnect: the layouts compared (1D / 2D weight-stationary,
  // weight-gathered), the chip count above which 2D communicates less than 1D ((1 + F/D)^2),
  // and the tokens a step above which weight-gathering communicates less than each.
  std::vector<LayoutRow> layouts;
  double layout_2d_beats_1d_chips = 0;
  double layout_wg_beats_1d_tokens = 0, layout_wg_beats_2d_tokens = 0;
};

// Batch sizes for a sweep: powers of two up to past max(max_batch, critical batch), plus both.
std::vector<int64_t> sweep_batches(int64_t max_batch, double critical_batch);

// Validates the parameters (bits 16|8|4, act 16|8, positive sizes, 0 < mfu <= 1).
Result<Plan> make_plan(const PlanParams& params);

// The JSON document of `sluice plan --output-format json` (see docs/planner.md).
nlohmann::ordered_json plan_to_json(const Plan& plan);
// The human-readable report.
std::string plan_to_text(const Plan& plan);
// Throughput per chip against step time, one point per batch, as a self-contained SVG.
std::string pareto_svg(const Plan& plan);

}  // namespace sluice
