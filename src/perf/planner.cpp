#include "perf/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace sluice {

namespace {

// Qwen3.5's hybrid layout on a shape: every 4th layer gated attention, the rest Gated DeltaNet
// (16 Q/K heads and n_v_heads V heads of 128, conv 4).
ModelShape qwen35_hybrid(ModelShape s, int n_v_heads) {
  s.recurrent = RecurrentShape{4, 128, 16, n_v_heads};
  s.full_attention_interval = 4;
  return s;
}

}  // namespace

const std::vector<ModelShape>& planner_models() {
  // name, L, D, F, N, K, H, V, tied, n_mlp, E, k, source, F_exp, F_shared
  static const std::vector<ModelShape> models = {
      {"llama-2-13b", 40, 5120, 13824, 40, 40, 128, 32000, false, 3, 0, 0,
       "all-about-transformer-inference.md 'What about memory?' (F = 2.7 D)"},
      {"llama-3-8b", 32, 4096, 14336, 32, 8, 128, 128256, false, 3, 0, 0,
       "Meta's published config (how-to-scale-your-model.md: 32 Q heads, 8 KV heads)"},
      {"llama-3-70b", 80, 8192, 28672, 64, 8, 128, 128256, false, 3, 0, 0,
       "how-to-scale-your-model.md 'What does LLaMA 3 look like?'"},
      {"llama-3-405b", 126, 16384, 53248, 128, 8, 128, 128256, false, 3, 0, 0,
       "Meta's published config"},
      {"worked-18b", 64, 4096, 16384, 32, 8, 256, 32128, true, 3, 0, 0,
       "all-about-transformer-inference.md 'Worked Problems' (18.4B, shared embeddings)"},
      {"worked-18b-moe", 64, 4096, 16384, 32, 8, 256, 32128, true, 3, 16, 2,
       "all-about-transformer-inference.md 'Worked Problems' Q5 (E=16, k=2)"},
      {"mixtral-8x7b", 32, 4096, 14336, 32, 8, 128, 32000, false, 3, 8, 2,
       "mistralai/Mixtral-8x7B-v0.1 config (46.7B, 12.9B active)"},
      {"qwen3-30b-a3b", 48, 2048, 768, 32, 4, 128, 151936, false, 3, 128, 8,
       "Qwen/Qwen3-30B-A3B config (30.5B, 3.3B active; F = the expert width)"},
      qwen35_hybrid({"qwen3.5-9b", 32, 4096, 12288, 16, 4, 256, 248320, false, 3, 0, 0,
                     "Qwen/Qwen3.5-9B config (24 Gated DeltaNet + 8 gated attention layers)"},
                    32),
      qwen35_hybrid({"qwen3.5-35b-a3b", 40, 2048, 512, 16, 2, 256, 248320, false, 3, 256, 8,
                     "Qwen/Qwen3.5-35B-A3B config (30 Gated DeltaNet + 10 gated attention "
                     "layers; 256 experts of 512, 8 used, a shared expert of 512)",
                     0, 512},
                    32),
      // The seeds give PaLM 540B's 118 layers and multi-query attention; the other dimensions
      // are the PaLM paper's (Table 1), which reproduce the 62B / 540B parameter counts.
      {"palm-62b", 64, 8192, 32768, 32, 1, 256, 256000, true, 3, 0, 0,
       "PaLM paper Table 1 (multi-query attention, SwiGLU, shared embeddings)"},
      {"palm-540b", 118, 18432, 73728, 48, 1, 256, 256000, true, 3, 0, 0,
       "PaLM paper Table 1; 118 layers per paper-notes-efficiently-scaling-transformer-inference"},
  };
  return models;
}

const ModelShape* find_planner_model(std::string_view name) {
  auto lower = [](std::string_view s) {
    std::string out;
    for (char c : s) out.push_back(char(std::tolower(static_cast<unsigned char>(c))));
    return out;
  };
  const std::string want = lower(name);
  for (const ModelShape& m : planner_models()) {
    if (m.name == want) return &m;
  }
  return nullptr;
}

std::string planner_model_names() {
  std::string out;
  for (const ModelShape& m : planner_models()) out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

ModelCost model_cost(const ModelShape& s) {
  const double L = double(s.n_layer), D = double(s.n_embd), F = double(s.expert_ff());
  const double N = double(s.n_head), K = double(s.n_kv_head), H = double(s.head_dim);
  const double V = double(s.n_vocab);
  const double attn = D * H * (2 * N + 2 * K);  // W_Q, W_O: D x N*H; W_K, W_V: D x K*H
  const double expert = s.n_mlp_matrices * D * F;
  const double shared = s.n_mlp_matrices * D * double(s.n_ff_shexp);  // qwen2moe's shared expert
  const double embed = (s.tied_embeddings ? 1 : 2) * V * D;
  const double e = s.n_expert > 0 ? s.n_expert : 1;
  const double k = s.n_expert > 0 ? std::min(s.n_expert_used, s.n_expert) : 1;
  ModelCost m;
  m.name = s.name;
  m.n_params = L * (attn + shared + e * expert) + embed;
  m.n_params_active = L * (attn + shared + k * expert) + embed;
  if (s.n_expert > 0) {
    m.n_experts = s.n_expert;
    m.n_experts_used = s.n_expert_used;
    m.n_params_per_expert = L * expert;
  }
  m.kv_elems_per_token = 2 * L * K * H;
  m.attn_flops_per_pair = 4 * L * N * H;
  if (const int n_rec = s.n_recurrent_layers(); n_rec > 0) {
    // Hybrids (qwen35): attention layers are gated (W_Q also gives a gate: D x 2 N*H); the
    // recurrent ones hold no K/V but a state, with their own projections: qkv and z in, out.
    const RecurrentShape& r = s.recurrent;
    const double La = L - n_rec, Lr = n_rec;
    const double gated_attn = D * H * (3 * N + 2 * K);
    const double rec = D * (r.conv_channels() + 2.0 * r.v_dim() + 2.0 * r.n_v_heads);
    const double ffn = shared + e * expert, ffn_active = shared + k * expert;
    m.n_params = La * gated_attn + Lr * rec + L * ffn + embed;
    m.n_params_active = La * gated_attn + Lr * rec + L * ffn_active + embed;
    m.kv_elems_per_token = 2 * La * K * H;
    m.attn_flops_per_pair = 4 * La * N * H;
    add_recurrent_cost(m, r, n_rec);
  }
  // Sliding windows (ModelShape::layer_window: the loader's rule): the windowed attention layers'
  // share of the K/V and attention FLOPs.
  const int fai = s.full_attention_interval;
  int n_attn = 0, n_windowed = 0;
  for (int il = 0; il < s.n_layer; ++il) {
    if (fai > 0 && il % fai != fai - 1) continue;  // a recurrent layer
    ++n_attn;
    if (s.layer_window(il) > 0) ++n_windowed;
  }
  m.n_kv_layers = n_attn;
  if (n_windowed > 0) {
    m.n_kv_layers_windowed = n_windowed;
    m.kv_window = s.sliding_window;
    m.kv_elems_per_token_windowed = 2 * double(n_windowed) * K * H;
    m.attn_flops_per_pair_windowed = 4 * double(n_windowed) * N * H;
  }
  m.d_model = D;
  m.d_ff = F;
  return m;
}

std::vector<int64_t> sweep_batches(int64_t max_batch, double critical_batch) {
  const int64_t crit = int64_t(std::llround(critical_batch));
  const int64_t top = std::clamp<int64_t>(std::max(max_batch, crit), 1, 4096);
  std::vector<int64_t> out;
  int64_t b = 1;
  for (; b < top; b *= 2) out.push_back(b);
  out.push_back(b);
  if (crit >= 1 && crit <= 4096) out.push_back(crit);
  if (max_batch >= 1 && max_batch <= 4096) out.push_back(max_batch);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

bool valid_bits(int bits, bool allow_stored) {
  return bits == 16 || bits == 8 || bits == 4 || (allow_stored && bits == 0);
}

Status validate(const PlanParams& p) {
  if (p.model.n_params <= 0) return make_error("model '", p.model.name, "' has no parameters");
  if (p.chip.hbm_bytes_per_s <= 0 || peak_flops(p.chip, 16) <= 0) {
    return make_error("hardware '", p.chip.name, "' has no bandwidth or peak FLOP/s");
  }
  if (p.n_chips < 1) return make_error("chip count must be at least 1 (got ", p.n_chips, ")");
  if (!valid_bits(p.precision.weight_bits, p.model.stored_weight_bytes > 0)) {
    return make_error("weight bits must be 16, 8 or 4 (got ", p.precision.weight_bits, ")");
  }
  if (!valid_bits(p.precision.kv_bits, false)) {
    return make_error("KV bits must be 16, 8 or 4 (got ", p.precision.kv_bits, ")");
  }
  if (p.precision.act_bits != 16 && p.precision.act_bits != 8) {
    return make_error("activation bits must be 16 or 8 (got ", p.precision.act_bits, ")");
  }
  if (p.context < 1) return make_error("context must be at least 1 token (got ", p.context, ")");
  if (p.block_size < 1) {
    return make_error("block size must be at least 1 token (got ", p.block_size, ")");
  }
  if (!(p.mfu > 0 && p.mfu <= 1)) return make_error("MFU must be in (0, 1] (got ", p.mfu, ")");
  if (p.prompt_len < 0) return make_error("prompt length must be >= 0 (got ", p.prompt_len, ")");
  if (p.decode_len < 1) {
    return make_error("decode length must be at least 1 (got ", p.decode_len, ")");
  }
  for (int64_t b : p.batches) {
    if (b < 1) return make_error("batch sizes must be at least 1 (got ", b, ")");
  }
  return {};
}

PlanRow make_row(const Plan& plan, int64_t batch) {
  const PlanParams& p = plan.params;
  PlanRow r;
  r.batch = batch;
  r.step = generate_step(p.model, p.precision, plan.total, batch, p.context);
  r.kv_bytes = double(batch) * plan.kv_bytes_per_sequence;  // held (the step's traffic differs)
  r.total_bytes = plan.weight_bytes + r.kv_bytes;
  r.fits = r.total_bytes <= plan.total.memory_bytes;
  r.step_time_ms = r.step.seconds * 1e3;
  r.tokens_per_s = double(batch) / r.step.seconds;
  r.tokens_per_s_per_chip = r.tokens_per_s / p.n_chips;
  TpMatmul mm;
  mm.batch = double(batch);
  mm.d_model = p.model.d_model;
  mm.d_ff = p.model.d_ff;
  mm.axes = p.chip.link_axes;
  mm.bytes_per_weight = plan.weight_bytes / p.model.n_params;
  mm.bytes_per_act = p.precision.act_bits / 8.0;
  r.tp_comm_bound_shards = p.model.d_ff > 0 ? tp_comm_bound_shards(mm, p.chip) : 0;
  return r;
}

}  // namespace

Result<Plan> make_plan(const PlanParams& params) {
  SLUICE_RETURN_IF_ERROR(validate(params));
  Plan plan;
  plan.params = params;
  const PlanParams& p = plan.params;
  if (plan.params.prompt_len == 0) plan.params.prompt_len = p.context;
  plan.total = aggregate(p.chip, p.n_chips);
  plan.weight_bytes = weight_bytes(p.model, p.precision);
  plan.kv_bytes_per_token = kv_bytes_per_token(p.model, p.precision);
  plan.kv_bytes_per_sequence =
      kv_bytes_per_sequence(p.model, p.precision, double(p.context), p.block_size) +
      p.model.state_bytes_per_sequence;
  plan.critical_batch_hw =
      critical_batch(p.chip, plan.weight_bytes / p.model.n_params, p.precision.act_bits);
  plan.critical_batch = critical_batch(p.model, p.precision, p.chip);
  const double free_bytes = plan.total.memory_bytes - plan.weight_bytes;
  plan.max_batch = free_bytes <= 0 ? 0
                   : plan.kv_bytes_per_sequence > 0
                       ? int64_t(std::floor(free_bytes / plan.kv_bytes_per_sequence))
                       : int64_t(4096);
  plan.min_chips_weights =
      p.chip.memory_bytes > 0 ? int(std::ceil(plan.weight_bytes / p.chip.memory_bytes)) : 0;
  plan.min_step_ms = plan.weight_bytes / plan.total.hbm_bytes_per_s * 1e3;
  plan.kv_weight_crossover_tokens =
      plan.kv_bytes_per_token > 0 ? plan.weight_bytes / plan.kv_bytes_per_token : 0;
  plan.prefill_s =
      prefill_seconds(p.model, double(p.prompt_len), plan.total, p.mfu, p.precision.act_bits);
  if (p.kv_link_bytes_per_s > 0) {
    plan.kv_transfer_bytes = double(p.prompt_len) * plan.kv_bytes_per_token;
    plan.kv_transfer_s = plan.kv_transfer_bytes / p.kv_link_bytes_per_s;
  }
  if (p.model.d_ff > 0) {
    TpMatmul mm;
    mm.d_model = p.model.d_model;
    mm.d_ff = p.model.d_ff;
    mm.axes = p.chip.link_axes;
    mm.bytes_per_act = p.precision.act_bits / 8.0;
    plan.tp_compute_bound_shards = tp_compute_bound_shards(mm, p.chip);
  }

  const std::vector<int64_t> batches =
      p.batches.empty() ? sweep_batches(plan.max_batch, plan.critical_batch) : p.batches;
  for (int64_t b : batches) plan.rows.push_back(make_row(plan, b));

  if (p.batches.size() == 1) {
    plan.serving_batch = p.batches[0];
  } else if (plan.max_batch >= 1) {
    plan.serving_batch =
        std::clamp<int64_t>(int64_t(std::llround(plan.critical_batch)), 1, plan.max_batch);
  }
  if (p.n_chips > 1 && p.chip.link_bytes_per_s > 0 && p.model.d_ff > 0) {
    TpMatmul mm;
    mm.d_model = p.model.d_model;
    mm.d_ff = p.model.d_ff;
    mm.bytes_per_weight = plan.weight_bytes / p.model.n_params;
    mm.bytes_per_act = p.precision.act_bits / 8.0;
    const auto row = [&](const char* phase, int64_t tokens) {
      LayoutRow r;
      r.phase = phase;
      r.tokens = tokens;
      mm.batch = double(tokens);
      for (FfnLayout l : kFfnLayouts) {
        r.times[int(l)] = ffn_layout_times(l, mm, p.n_chips, p.chip);
        if (r.times[int(l)].bound_s() < r.times[int(r.best)].bound_s()) r.best = l;
      }
      plan.layouts.push_back(r);
    };
    if (plan.serving_batch) row("decode", *plan.serving_batch);
    row("prefill", plan.params.prompt_len);
    plan.layout_2d_beats_1d_chips = std::pow(1 + p.model.d_ff / p.model.d_model, 2);
    plan.layout_wg_beats_1d_tokens =
        ffn_layout_crossover(FfnLayout::k1dWeightStationary, mm, p.n_chips);
    plan.layout_wg_beats_2d_tokens =
        ffn_layout_crossover(FfnLayout::k2dWeightStationary, mm, p.n_chips);
  }

  if (plan.serving_batch) {
    const double b = double(*plan.serving_batch);
    const GenerateStep s =
        generate_step(p.model, p.precision, plan.total, *plan.serving_batch, p.context);
    plan.serving_step_ms = s.seconds * 1e3;
    plan.prefill_generate_ratio =
        prefill_to_generate_ratio(plan.prefill_s, s.seconds, b, double(p.decode_len));
    plan.sequences_finished_per_step = sequences_finished_per_step(b, double(p.decode_len));
    plan.kv_tokens_evicted_per_step =
        kv_tokens_evicted_per_step(b, double(plan.params.prompt_len), double(p.decode_len));
  }
  return plan;
}

}  // namespace sluice
