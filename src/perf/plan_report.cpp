// Formatting of a Plan: the JSON document and the text report of `sluice plan`.
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "perf/planner.h"

namespace sluice {
namespace {

// printf into a std::string.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// Decimal units, as the seeds write them: 819.2 kB, 6.71 GB.
std::string si(double v, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  while (std::fabs(v) >= 1000.0 && i < 6) {
    v /= 1000.0;
    ++i;
  }
  return strf(i == 0 ? "%.0f %s%s" : "%.3g %s%s", v, prefixes[i], unit);
}

std::string count(double n) {
  if (n >= 1e12) return strf("%.2fT", n / 1e12);
  if (n >= 1e9) return strf("%.2fB", n / 1e9);
  if (n >= 1e6) return strf("%.2fM", n / 1e6);
  if (n >= 1e3) return strf("%.2fK", n / 1e3);
  return strf("%.0f", n);
}

std::string weight_desc(const Plan& plan) {
  const Precision& pr = plan.params.precision;
  if (pr.weight_bits == 0) {
    return strf("weights as stored (%.2f bits/weight)",
                plan.weight_bytes * 8 / plan.params.model.n_params);
  }
  return strf("%d-bit weights", pr.weight_bits);
}

}  // namespace

nlohmann::ordered_json plan_to_json(const Plan& plan) {
  using json = nlohmann::ordered_json;
  const PlanParams& p = plan.params;
  const ModelCost& m = p.model;
  json model = {{"name", m.name},
                {"params", m.n_params},
                {"params_active", m.n_params_active},
                {"weight_bytes", plan.weight_bytes},
                {"kv_bytes_per_token", plan.kv_bytes_per_token},
                {"context", p.context},
                {"kv_bytes_per_sequence", plan.kv_bytes_per_sequence},
                {"critical_batch", plan.critical_batch}};
  if (m.state_bytes_per_sequence > 0)
    model["state_bytes_per_sequence"] = m.state_bytes_per_sequence;
  if (m.kv_window > 0) {
    model["kv_window"] = m.kv_window;
    model["kv_layers"] = m.n_kv_layers;
    model["kv_windowed_layers"] = m.n_kv_layers_windowed;
    model["block_size"] = p.block_size;
  }
  if (m.n_experts > 0) {
    model["experts"] = m.n_experts;
    model["experts_used"] = m.n_experts_used;
  }
  json hw = {{"name", p.chip.name},
             {"chips", p.n_chips},
             {"hbm_bytes_per_s", p.chip.hbm_bytes_per_s},
             {"flops_bf16", p.chip.flops_bf16},
             {"ops_int8", p.chip.ops_int8},
             {"memory_bytes", p.chip.memory_bytes},
             {"link_bytes_per_s", p.chip.link_bytes_per_s},
             {"link_axes", p.chip.link_axes},
             {"critical_batch", plan.critical_batch_hw},
             {"source", p.chip.source}};
  json out = {{"model", model},
              {"hardware", hw},
              {"precision",
               {{"weight_bits", p.precision.weight_bits},
                {"kv_bits", p.precision.kv_bits},
                {"act_bits", p.precision.act_bits}}}};
  out["limits"] = {{"max_batch", plan.max_batch},
                   {"min_chips_for_weights", plan.min_chips_weights},
                   {"min_step_time_ms", plan.min_step_ms},
                   {"kv_weight_crossover_tokens", plan.kv_weight_crossover_tokens},
                   {"tp_compute_bound_shards", plan.tp_compute_bound_shards}};
  out["prefill"] = {{"tokens", p.prompt_len}, {"mfu", p.mfu}, {"seconds", plan.prefill_s}};
  if (p.kv_link_bytes_per_s > 0) {
    out["kv_transfer"] = {{"link_bytes_per_s", p.kv_link_bytes_per_s},
                          {"bytes", plan.kv_transfer_bytes},
                          {"seconds", plan.kv_transfer_s}};
  }
  if (plan.serving_batch) {
    out["serving"] = {{"batch", *plan.serving_batch},
                      {"step_time_ms", plan.serving_step_ms},
                      {"prompt_len", p.prompt_len},
                      {"decode_len", p.decode_len},
                      {"prefill_generate_ratio", plan.prefill_generate_ratio},
                      {"sequences_finished_per_step", plan.sequences_finished_per_step},
                      {"kv_tokens_evicted_per_step", plan.kv_tokens_evicted_per_step}};
  } else {
    out["serving"] = nullptr;
  }
  json rows = json::array();
  for (const PlanRow& r : plan.rows) {
    rows.push_back({{"batch", r.batch},
                    {"kv_bytes", r.kv_bytes},
                    {"total_bytes", r.total_bytes},
                    {"fits", r.fits},
                    {"step_time_ms", r.step_time_ms},
                    {"tokens_per_s", r.tokens_per_s},
                    {"tokens_per_s_per_chip", r.tokens_per_s_per_chip},
                    {"kv_ms", r.step.kv_s * 1e3},
                    {"weights_ms", r.step.weight_s * 1e3},
                    {"flops_ms", r.step.flops_s * 1e3},
                    {"mlp_bound", r.step.compute_bound ? "compute" : "memory"},
                    {"tp_comm_bound_shards", r.tp_comm_bound_shards}});
  }
  out["batches"] = rows;
  if (!plan.layouts.empty()) {
    json layouts = json::array();
    for (const LayoutRow& r : plan.layouts) {
      json t = json::object();
      for (FfnLayout l : kFfnLayouts) {
        const FfnLayoutTimes& x = r.times[int(l)];
        t[ffn_layout_name(l)] = {{"comm_ms", x.comm_s * 1e3},
                                 {"weights_ms", x.hbm_s * 1e3},
                                 {"flops_ms", x.math_s * 1e3}};
      }
      layouts.push_back({{"phase", r.phase},
                         {"tokens", r.tokens},
                         {"best", ffn_layout_name(r.best)},
                         {"per_layer", t}});
    }
    out["ffn_layouts"] = {
        {"steps", layouts},
        {"2d_beats_1d_above_chips", plan.layout_2d_beats_1d_chips},
        {"weight_gathered_beats_1d_above_tokens", plan.layout_wg_beats_1d_tokens},
        {"weight_gathered_beats_2d_above_tokens", plan.layout_wg_beats_2d_tokens}};
  }
  return out;
}

std::string plan_to_text(const Plan& plan) {
  const PlanParams& p = plan.params;
  const ModelCost& m = p.model;
  std::string s;
  s += strf("model     %s: %s params", m.name.c_str(), count(m.n_params).c_str());
  if (m.n_experts > 0) {
    s += strf(" (%s active, %d of %d experts)", count(m.n_params_active).c_str(), m.n_experts_used,
              m.n_experts);
  }
  s += strf(", %s of %s\n", si(plan.weight_bytes, "B").c_str(), weight_desc(plan).c_str());
  s += strf("          KV cache %s/token at %d bits, %s per %lld-token sequence",
            si(plan.kv_bytes_per_token, "B").c_str(), p.precision.kv_bits,
            si(plan.kv_bytes_per_sequence, "B").c_str(), (long long)p.context);
  if (m.state_bytes_per_sequence > 0) {
    s += strf(" (with %s of recurrent state)", si(m.state_bytes_per_sequence, "B").c_str());
  }
  if (m.kv_window > 0) {
    s += strf(" (%d of %d layers windowed: %d tokens, blocks of %d)", m.n_kv_layers_windowed,
              m.n_kv_layers, m.kv_window, p.block_size);
  }
  s += "\n";
  s += strf("hardware  %d x %s: %s/s memory bandwidth, %s/s %s, %s memory\n", p.n_chips,
            p.chip.name.c_str(), si(plan.total.hbm_bytes_per_s, "B").c_str(),
            si(peak_flops(plan.total, p.precision.act_bits), "FLOP").c_str(),
            p.precision.act_bits == 8 && p.chip.ops_int8 > 0 ? "int8" : "bf16",
            si(plan.total.memory_bytes, "B").c_str());
  s += strf("          (%s)\n\n", p.chip.source.c_str());

  s += strf("critical batch      %.0f tokens/step: above it the weight matmuls are compute-bound\n",
            plan.critical_batch);
  if (plan.max_batch > 0) {
    s += strf("largest batch       %lld sequences of %lld tokens fit next to the weights\n",
              (long long)plan.max_batch, (long long)p.context);
  } else {
    s += strf("largest batch       none: the weights alone need %d chips' memory\n",
              plan.min_chips_weights);
  }
  s += strf("latency floor       %.3g ms/step (loading the weights once)\n", plan.min_step_ms);
  // Windowed layers: a sequence holds less than context tokens' worth (kv_bytes_per_sequence).
  const double crossover_batch =
      m.kv_window > 0
          ? plan.weight_bytes / (plan.kv_bytes_per_sequence - m.state_bytes_per_sequence)
          : plan.kv_weight_crossover_tokens / double(p.context);
  s += strf("KV = weights at     %.0f tokens (batch %.1f at this context)\n",
            plan.kv_weight_crossover_tokens, crossover_batch);
  s += strf("prefill             %.3g s for %lld tokens at %.0f%% MFU\n", plan.prefill_s,
            (long long)p.prompt_len, p.mfu * 100);
  if (p.kv_link_bytes_per_s > 0) {
    s += strf(
        "K/V transfer        %.3g MB of the prompt's K/V in %.3g ms over %.3g GB/s "
        "(%.2g%% of the prefill)\n",
        plan.kv_transfer_bytes / 1e6, plan.kv_transfer_s * 1e3, p.kv_link_bytes_per_s / 1e9,
        plan.prefill_s > 0 ? 100 * plan.kv_transfer_s / plan.prefill_s : 0.0);
  }
  if (plan.serving_batch) {
    s += strf("serving at batch %lld (step %.3g ms), prompt %lld, decode %lld tokens:\n",
              (long long)*plan.serving_batch, plan.serving_step_ms, (long long)p.prompt_len,
              (long long)p.decode_len);
    s += strf("  prefill:generate servers  %.2f : 1 (disaggregated, both saturated)\n",
              plan.prefill_generate_ratio);
    s += strf("  sequences finished/step   %.3g\n", plan.sequences_finished_per_step);
    s += strf("  KV tokens evicted/step    %.3g\n", plan.kv_tokens_evicted_per_step);
  }
  if (p.chip.link_bytes_per_s > 0 && p.model.d_ff > 0) {
    const char* axes = p.chip.link_axes == 1 ? "axis" : "axes";
    if (plan.tp_compute_bound_shards >= 2) {
      s += strf(
          "tensor parallelism  communication-bound beyond %.1f-way once compute-bound "
          "(%d interconnect %s); per batch below\n",
          plan.tp_compute_bound_shards, p.chip.link_axes, axes);
    } else {
      s += strf(
          "tensor parallelism  communication-bound at any degree once compute-bound "
          "(%d interconnect %s); per batch below\n",
          p.chip.link_axes, axes);
    }
  }

  s += strf("\n%7s %10s %10s %4s %9s %9s %9s %9s %11s %9s %7s %6s\n", "batch", "KV", "total", "fit",
            "KV ms", "wts ms", "FLOPs ms", "step ms", "tok/s", "tok/s/ch", "MLP", "TP<=");
  const bool has_tp = p.chip.link_bytes_per_s > 0 && p.model.d_ff > 0;
  for (const PlanRow& r : plan.rows) {
    s += strf("%7lld %10s %10s %4s %9.3f %9.3f %9.3f %9.3f %11.1f %9.1f %7s %6s\n",
              (long long)r.batch, si(r.kv_bytes, "B").c_str(), si(r.total_bytes, "B").c_str(),
              r.fits ? "yes" : "no", r.step.kv_s * 1e3, r.step.weight_s * 1e3, r.step.flops_s * 1e3,
              r.step_time_ms, r.tokens_per_s, r.tokens_per_s_per_chip,
              r.step.compute_bound ? "compute" : "memory",
              has_tp ? strf("%.1f", r.tp_comm_bound_shards).c_str() : "-");
  }
  s += "\nstep = B*KV/BW + max(2*B*params/FLOP/s, weights/BW): the seeds' theoretical minimum; "
       "real steps are slower.\n";
  if (!plan.layouts.empty()) {
    s += strf(
        "\nfeed-forward layouts over %d chips, per layer (comm / weights / FLOPs ms; the "
        "largest bounds the layer):\n",
        p.n_chips);
    s += strf("%8s %8s  %-28s %-28s %-28s %s\n", "step", "tokens", "1D weight-stationary",
              "2D weight-stationary", "weight-gathered", "best");
    for (const LayoutRow& r : plan.layouts) {
      std::string cells[3];
      for (int l = 0; l < 3; ++l) {
        const FfnLayoutTimes& x = r.times[l];
        cells[l] = strf("%.3g / %.3g / %.3g", x.comm_s * 1e3, x.hbm_s * 1e3, x.math_s * 1e3);
      }
      s += strf("%8s %8lld  %-28s %-28s %-28s %s\n", r.phase.c_str(), (long long)r.tokens,
                cells[0].c_str(), cells[1].c_str(), cells[2].c_str(), ffn_layout_name(r.best));
    }
    s += strf(
        "2D weight-stationary communicates less than 1D beyond %.0f chips ((1 + F/D)^2); "
        "weight-gathering less than 1D beyond %.0f tokens a step and less than 2D beyond %.0f "
        "(sluice runs 1D: --tp)\n",
        plan.layout_2d_beats_1d_chips, plan.layout_wg_beats_1d_tokens,
        plan.layout_wg_beats_2d_tokens);
  }
  return s;
}

}  // namespace sluice
