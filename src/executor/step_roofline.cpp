#include "executor/step_roofline.h"

#include <algorithm>
#include <cstdio>

#include "kernels/matmul_isa.h"

namespace sluice {

namespace {

double stored_bytes(const WeightMatrix& w) {
  return double(row_size(w.type, w.n_cols)) * double(w.n_rows);
}
double params(const WeightMatrix& w) {
  return double(w.n_cols) * double(w.n_rows);
}

}  // namespace

ModelCost model_cost(const ModelConfig& c) {
  ModelCost m;
  int n_rec = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    if (c.layer_kind(il) == LayerKind::kRecurrent) {
      ++n_rec;
      continue;
    }
    const bool windowed = c.layer_window(il) > 0;
    const double flops = 4.0 * double(c.n_head) * double(c.layer_head_dim(il));
    m.attn_flops_per_pair += flops;
    if (windowed) m.attn_flops_per_pair_windowed += flops;
    if (c.kv_source_layer(il) != il) continue;  // shared K/V (gemma4): stores none
    const double elems = 2.0 * double(c.layer_kv_dim(il));
    m.kv_elems_per_token += elems;
    ++m.n_kv_layers;
    if (windowed) {
      m.kv_elems_per_token_windowed += elems;
      ++m.n_kv_layers_windowed;
      m.kv_window = c.sliding_window;
    }
  }
  if (n_rec > 0) add_recurrent_cost(m, c.recurrent, n_rec);
  m.d_model = double(c.n_embd);
  m.d_ff = double(c.is_moe() ? c.n_ff_exp : c.n_ff);
  if (c.is_moe()) {
    m.n_experts = c.n_expert;
    m.n_experts_used = c.n_expert_used;
  }
  return m;
}

StepCostModel make_step_cost_model(const Model& model, const MachineRoofline& machine,
                                   KvType kv_type) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  StepCostModel out;
  ModelCost& m = out.model;
  m = model_cost(c);
  m.name = "loaded model";
  // The weights every step reads: the matmuls (the embedding lookup reads one row per token).
  m.n_params = params(w.output);
  m.stored_weight_bytes = stored_bytes(w.output);
  auto add = [&m](const WeightMatrix& x) {
    m.n_params += params(x);
    m.stored_weight_bytes += stored_bytes(x);
  };
  double expert_params = 0, expert_bytes = 0;
  // The router and the shared expert are read every step; each expert only when chosen.
  for (const LayerWeights& l : w.layers) {
    for_each_matrix(l, [&](const WeightMatrix& x, MatrixRole role) {
      add(x);
      if (role == MatrixRole::kExpert) {
        expert_params += params(x);
        expert_bytes += stored_bytes(x);
      }
    });
  }
  m.n_params_active = m.n_params;
  if (c.is_moe() && c.n_layer > 0) {
    m.n_params_per_expert = expert_params / c.n_expert;
    m.n_params_active = m.n_params - expert_params + m.n_params_per_expert * c.n_expert_used;
    out.expert_layer_bytes = expert_bytes / (double(c.n_expert) * c.n_layer);
  }
  const GgmlType wt = w.layers.empty() ? GgmlType::F32
                      : c.is_moe()     ? w.layers[0].moe.gate[0].type
                                       : w.layers[0].w_gate.type;
  out.precision.weight_bits = 0;  // as stored
  out.precision.kv_bits = kv_type_size(kv_type) * 8;
  const bool int8 = matmul_uses_int8_acts(wt) && matmul_isa_best() != MatmulIsa::kScalar &&
                    machine.peak_gops_int8 > 0;
  out.precision.act_bits = int8 ? 8 : 16;

  out.hw = hardware_from_roofline(machine, 0);
  out.read_origin = machine.read_origin();
  // The 16-bit peak the matmuls actually run at: bf16 dot products only for BF16 weights.
  if (wt != GgmlType::BF16 || machine.peak_gflops_bf16 <= 0) {
    out.hw.flops_bf16 = machine.peak_gflops_f32 * 1e9;
  }
  return out;
}

StepShape StepRoofline::shape(const Batch& batch, int64_t expert_reads) {
  work_.clear();
  for (const BatchSequence& s : batch.seqs) work_.push_back({s.n_new_tokens, s.context_len});
  StepShape shape = make_step_shape(cost_.model, cost_.precision, work_);
  const ModelCost& m = cost_.model;
  if (expert_reads >= 0 && cost_.expert_layer_bytes > 0) {
    const double all_experts =
        m.n_params_per_expert * m.n_experts * (m.stored_weight_bytes / std::max(m.n_params, 1.0));
    const double shared = m.stored_weight_bytes - all_experts;
    shape.weight_bytes = shared + double(expert_reads) * cost_.expert_layer_bytes;
  }
  return shape;
}

double StepRoofline::predict(const Batch& batch, bool* compute_bound, int64_t expert_reads) {
  const StepFloors f = step_floors(shape(batch, expert_reads), cost_.hw);
  if (compute_bound) *compute_bound = f.compute_bound();
  return f.seconds();
}

double StepRoofline::predict_comm(const Batch& batch) const {
  const CommSpec& c = cost_.comm;
  if (!c.any()) return 0;
  const double f = sizeof(float), bw = c.link_bytes_per_s, lat = c.link_latency_s;
  const double T = batch.n_tokens(), R = batch.n_logit_rows();
  double s = 0;
  if (c.tp > 1) {
    const double stream = (c.tp - 1) * T * double(c.n_embd) * f;  // one all-reduce's sends
    s += (2.0 * c.n_layer + 1) * (lat + stream / bw);
    s += lat + (c.tp - 1) * R * double(c.n_vocab) / c.tp * f / bw;  // logits gather
  }
  if (c.pp > 1) {
    const int micro = std::max(1, std::min<int>(c.n_micro, batch.n_seqs()));
    s += (c.pp - 1) * (micro * lat + T * double(c.n_embd) * f / bw);  // stage boundaries
    s += micro * lat + R * double(c.n_vocab) * f / bw;                // logits to rank 0
  }
  return s;
}

void StepRoofline::record(const Batch& batch, double seconds, int64_t expert_reads,
                          const CommStats& comm) {
  const StepShape sh = shape(batch, expert_reads);
  const double bytes = sh.weight_bytes + sh.kv_bytes;
  // One process only: with ranks, each reads its shard and the step's time includes the link.
  if (!cost_.comm.any() && seconds > 0 && bytes / seconds > cost_.hw.hbm_bytes_per_s) {
    cost_.hw.hbm_bytes_per_s = bytes / seconds;
    const bool past_caches = bytes >= cost_.persist_min_bytes;
    char what[256];
    std::snprintf(what, sizeof what,
                  "raised by an engine step at %s (%d tokens, %.1f MB in %.2f ms%s; first: %s)",
                  now_iso8601_utc().c_str(), int(sh.n_tokens), bytes / 1e6, seconds * 1e3,
                  past_caches ? "" : ", within the caches: not saved", first_origin_.c_str());
    cost_.read_origin = what;
    stats_.read_bytes_per_s = cost_.hw.hbm_bytes_per_s;
    stats_.read_origin = cost_.read_origin;
    ++stats_.read_raises;
    // Persist raises of 1% or more (a run of slightly faster steps writes the file once).
    if (past_caches && !cost_.roofline_path.empty() &&
        cost_.hw.hbm_bytes_per_s > 1.01 * persisted_bytes_per_s_) {
      persist_raised_read_gbps(cost_.roofline_path, cost_.hw.hbm_bytes_per_s / 1e9, "engine step");
      persisted_bytes_per_s_ = cost_.hw.hbm_bytes_per_s;
    }
  }
  const StepFloors f = step_floors(sh, cost_.hw);
  const bool compute = f.compute_bound();
  const double predicted = f.seconds();
  stats_.last_seconds = seconds;
  stats_.last_predicted = predicted;
  if (cost_.comm.any()) {
    stats_.last_comm_seconds = comm.seconds;
    stats_.last_comm_predicted = predict_comm(batch);
    stats_.comm_seconds += comm.seconds;
    stats_.comm_predicted += stats_.last_comm_predicted;
    stats_.comm_bytes += double(comm.bytes);
  }
  if (compute) {
    ++stats_.compute_bound_steps;
    stats_.compute_bound_seconds += seconds;
    stats_.compute_bound_predicted += predicted;
  } else {
    ++stats_.memory_bound_steps;
    stats_.memory_bound_seconds += seconds;
    stats_.memory_bound_predicted += predicted;
    stats_.memory_bound_bytes += bytes;
  }
}

}  // namespace sluice
