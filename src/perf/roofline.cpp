#include "perf/roofline.h"

#include <algorithm>
#include <cmath>

namespace sluice {

double weight_bytes(const ModelCost& m, const Precision& p) {
  if (p.weight_bits <= 0 && m.stored_weight_bytes > 0) return m.stored_weight_bytes;
  const int bits = p.weight_bits > 0 ? p.weight_bits : 16;
  return m.n_params * bits / 8.0;
}

double weight_bytes_read(const ModelCost& m, const Precision& p, double n_tokens) {
  const double all = weight_bytes(m, p);
  if (m.n_experts <= 0 || m.n_experts_used <= 0 || m.n_params_per_expert <= 0 || m.n_params <= 0) {
    return all;
  }
  const double bytes_per_param = all / m.n_params;
  const double expert_bytes = m.n_params_per_expert * bytes_per_param;
  const double shared = all - m.n_experts * expert_bytes;
  // Each token picks k of E experts: an expert is missed by one token with probability 1 - k/E.
  const double e = m.n_experts, k = std::min<double>(m.n_experts_used, e);
  const double touched = e * (1.0 - std::pow(1.0 - k / e, std::max(n_tokens, 1.0)));
  return shared + touched * expert_bytes;
}

double kv_bytes_per_token(const ModelCost& m, const Precision& p) {
  return m.kv_elems_per_token * p.kv_bits / 8.0;
}

namespace {

// Bytes per position of the layers that keep every position, and of the windowed ones.
double global_bytes_per_token(const ModelCost& m, const Precision& p) {
  return (m.kv_elems_per_token - m.kv_elems_per_token_windowed) * p.kv_bits / 8.0;
}
double windowed_bytes_per_token(const ModelCost& m, const Precision& p) {
  return m.kv_elems_per_token_windowed * p.kv_bits / 8.0;
}

// Sum over query positions q = 0 .. n - 1 of the keys a windowed layer attends: min(q + 1, w).
double window_pairs_before(double n, double w) {
  if (n <= w) return n * (n + 1) / 2;
  return w * (w + 1) / 2 + (n - w) * w;
}

}  // namespace

double kv_window_positions_held(double context, int window, int block_size) {
  // KvCacheLayout::group_blocks_held: the next token (at `context`) attends from
  // context - window + 1 on; the blocks wholly before that one are released.
  if (window <= 0 || context < window) return context;
  const double bs = std::max(block_size, 1);
  return context - bs * std::floor((context - window + 1) / bs);
}

double kv_bytes_per_sequence(const ModelCost& m, const Precision& p, double context,
                             int block_size) {
  return global_bytes_per_token(m, p) * context +
         windowed_bytes_per_token(m, p) *
             kv_window_positions_held(context, m.kv_window, block_size);
}

double kv_bytes_read(const ModelCost& m, const Precision& p, double context, double n_new) {
  const double windowed =
      m.kv_window > 0 ? std::min(context, m.kv_window - 1 + std::max(n_new, 1.0)) : context;
  return global_bytes_per_token(m, p) * context + windowed_bytes_per_token(m, p) * windowed;
}

double critical_batch(const HardwareSpec& hw, double bytes_per_weight, int act_bits) {
  if (hw.hbm_bytes_per_s <= 0) return 0;
  return peak_flops(hw, act_bits) / hw.hbm_bytes_per_s * bytes_per_weight / 2.0;
}

double critical_batch(const ModelCost& m, const Precision& p, const HardwareSpec& hw) {
  const double bpw = m.n_params > 0 ? weight_bytes(m, p) / m.n_params : 2.0;
  double b = critical_batch(hw, bpw, p.act_bits);
  if (m.n_experts > 0 && m.n_experts_used > 0) b *= double(m.n_experts) / m.n_experts_used;
  return b;
}

GenerateStep generate_step(const ModelCost& m, const Precision& p, const HardwareSpec& hw,
                           int64_t batch, int64_t context) {
  GenerateStep s;
  const double b = double(batch);
  // Recurrent layers (hybrids): each sequence's state read and written once a step.
  s.kv_bytes = b * kv_bytes_read(m, p, double(context)) + 2.0 * b * m.state_bytes_per_sequence;
  s.weight_bytes = weight_bytes_read(m, p, b);
  s.kv_s = s.kv_bytes / hw.hbm_bytes_per_s;
  s.weight_s = s.weight_bytes / hw.hbm_bytes_per_s;
  s.flops_s = (2.0 * m.n_params_active + m.state_flops_per_token) * b / peak_flops(hw, p.act_bits);
  s.compute_bound = s.flops_s > s.weight_s;
  s.seconds = s.kv_s + std::max(s.flops_s, s.weight_s);
  return s;
}

double prefill_seconds(const ModelCost& m, double n_tokens, const HardwareSpec& hw, double mfu,
                       int act_bits) {
  return 2.0 * m.n_params_active * n_tokens / (peak_flops(hw, act_bits) * mfu);
}

double prefill_to_generate_ratio(double prefill_s, double step_s, double batch, double decode_len) {
  return prefill_s * batch / (step_s * decode_len);
}

double sequences_finished_per_step(double batch, double decode_len) {
  return batch / decode_len;
}

double kv_tokens_evicted_per_step(double batch, double prompt_len, double decode_len) {
  return batch * (prompt_len + decode_len) / decode_len;
}

TpTimes tp_matmul_times(const TpMatmul& mm, const HardwareSpec& chip) {
  TpTimes t;
  const double y = std::max(mm.shards, 1), axes = std::max(mm.axes, 1);
  const int act_bits = mm.bytes_per_act <= 1 ? 8 : 16;
  t.ici_s = chip.link_bytes_per_s > 0
                ? mm.bytes_per_act * mm.batch * mm.d_model / (axes * chip.link_bytes_per_s)
                : 0.0;
  t.hbm_s = mm.bytes_per_weight * mm.d_model * mm.d_ff / (y * chip.hbm_bytes_per_s);
  t.math_s = 2.0 * mm.batch * mm.d_model * mm.d_ff / (y * peak_flops(chip, act_bits));
  t.comm_bound = mm.shards > 1 && t.ici_s > std::max(t.hbm_s, t.math_s);
  return t;
}

double tp_compute_bound_shards(const TpMatmul& mm, const HardwareSpec& chip) {
  if (chip.link_bytes_per_s <= 0) return 1;
  const int act_bits = mm.bytes_per_act <= 1 ? 8 : 16;
  const double axes = std::max(mm.axes, 1);
  return 2.0 * mm.d_ff * axes * chip.link_bytes_per_s /
         (mm.bytes_per_act * peak_flops(chip, act_bits));
}

const char* ffn_layout_name(FfnLayout l) {
  switch (l) {
    case FfnLayout::k1dWeightStationary:
      return "1D weight-stationary";
    case FfnLayout::k2dWeightStationary:
      return "2D weight-stationary";
    case FfnLayout::kWeightGathered:
      return "weight-gathered";
  }
  return "?";
}

namespace {

// Bytes one chip sends for the layer's feed-forward collectives (see roofline.h).
double ffn_layout_bytes(FfnLayout l, const TpMatmul& mm, int n) {
  const double T = std::max(mm.batch, 1.0), D = mm.d_model, F = mm.d_ff;
  switch (l) {
    case FfnLayout::k1dWeightStationary:
      return n > 1 ? 2 * T * D * mm.bytes_per_act : 0;
    case FfnLayout::k2dWeightStationary:
      return n > 1 ? 2 * T * (D + F) * mm.bytes_per_act / std::sqrt(double(n)) : 0;
    case FfnLayout::kWeightGathered:
      return 2 * D * F * mm.bytes_per_weight * double(n - 1) / n;
  }
  return 0;
}

}  // namespace

FfnLayoutTimes ffn_layout_times(FfnLayout l, const TpMatmul& mm, int n, const HardwareSpec& chip) {
  const double T = std::max(mm.batch, 1.0), D = mm.d_model, F = mm.d_ff;
  const int act_bits = mm.bytes_per_act <= 1 ? 8 : 16;
  FfnLayoutTimes t;
  t.comm_s = chip.link_bytes_per_s > 0 ? ffn_layout_bytes(l, mm, n) / chip.link_bytes_per_s : 0;
  const double weights = 2 * D * F * mm.bytes_per_weight;
  t.hbm_s = (l == FfnLayout::kWeightGathered ? weights : weights / n) / chip.hbm_bytes_per_s;
  t.math_s = 2 * 2 * T * D * F / n / peak_flops(chip, act_bits);
  return t;
}

double ffn_layout_crossover(FfnLayout other, const TpMatmul& mm, int n) {
  if (n < 2 || other == FfnLayout::kWeightGathered) return 0;
  TpMatmul one = mm;
  one.batch = 1;
  const double per_token = ffn_layout_bytes(other, one, n);
  return ffn_layout_bytes(FfnLayout::kWeightGathered, mm, n) / per_token;
}

double tp_comm_bound_shards(const TpMatmul& mm, const HardwareSpec& chip) {
  if (chip.link_bytes_per_s <= 0) return 1;
  const double axes = std::max(mm.axes, 1);
  const double vs_hbm = mm.bytes_per_weight * mm.d_ff * axes * chip.link_bytes_per_s /
                        (mm.bytes_per_act * std::max(mm.batch, 1.0) * chip.hbm_bytes_per_s);
  return std::max(tp_compute_bound_shards(mm, chip), vs_hbm);
}

void add_recurrent_cost(ModelCost& m, const RecurrentShape& r, int n_layers) {
  const double S = double(r.state_size);
  m.state_bytes_per_sequence += double(n_layers) * double(r.state_floats()) * sizeof(float);
  m.state_flops_per_token += double(n_layers) * r.n_v_heads * 7.0 * S * S;
}

StepShape make_step_shape(const ModelCost& m, const Precision& p, std::span<const SeqWork> seqs) {
  StepShape s;
  s.act_bits = p.act_bits;
  s.n_seqs = int64_t(seqs.size());
  double pairs = 0;         // (query token, attended token) pairs under the causal mask
  double window_pairs = 0;  // of those, the ones a windowed layer attends (within its window)
  for (const SeqWork& w : seqs) {
    s.n_tokens += w.n_new_tokens;
    // A recurrent state is read and written once per chunk of new tokens.
    const int64_t passes = (w.n_new_tokens + kStateChunk - 1) / kStateChunk;
    s.kv_bytes += 2.0 * m.state_bytes_per_sequence * double(passes);
    // Cached tokens are read; new tokens are written (and attended from on-chip memory). A
    // windowed layer reads only its new tokens' windows.
    s.kv_bytes += kv_bytes_read(m, p, double(w.n_context), double(w.n_new_tokens));
    // New token i (0-based) sits at position n_context - n_new_tokens + i and attends to that many
    // + 1 (a windowed layer to at most kv_window of them).
    const double cached = double(w.n_context - w.n_new_tokens), n = double(w.n_new_tokens);
    pairs += n * cached + n * (n + 1) / 2;
    if (m.kv_window > 0) {
      window_pairs += window_pairs_before(double(w.n_context), m.kv_window) -
                      window_pairs_before(cached, m.kv_window);
    }
  }
  s.weight_bytes = weight_bytes_read(m, p, double(s.n_tokens));
  s.flops = 2.0 * m.n_params_active * double(s.n_tokens) +
            (m.attn_flops_per_pair - m.attn_flops_per_pair_windowed) * pairs +
            m.attn_flops_per_pair_windowed * window_pairs +
            m.state_flops_per_token * double(s.n_tokens);
  return s;
}

StepFloors step_floors(const StepShape& step, const HardwareSpec& hw) {
  return {(step.weight_bytes + step.kv_bytes) / hw.hbm_bytes_per_s,
          step.flops / peak_flops(hw, step.act_bits)};
}

double predicted_step_seconds(const StepShape& step, const HardwareSpec& hw) {
  return step_floors(step, hw).seconds();
}

}  // namespace sluice
