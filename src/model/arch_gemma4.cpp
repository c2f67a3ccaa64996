// Gemma 4 (general.architecture = "gemma4", the text model; dense E2B / E4B style, read as
// llama.cpp reads it).
//
// Gemma 3's block (q/k head norms, post-attention and post-FFN norms, GeGLU, embeddings times
// sqrt(n_embd), tied output) with:
//
//   * layer kinds from attention.sliding_window_pattern (one bool per layer, true: windowed);
//     each kind has its own head size (key_length_swa / key_length), KV heads (head_count_kv is
//     an array), rotary dims (rope.dimension_count_swa / rope.dimension_count) and RoPE base
//     (rope.freq_base_swa / rope.freq_base); rope_freqs.weight divides the global layers'
//     frequencies only ("proportional" RoPE: factors of 1e30 leave those pairs unrotated);
//   * V RMS-normed per head without a weight; attention scale 1 (no 1 / sqrt(head_dim));
//   * shared K/V: the last attention.shared_kv_layers layers compute only q and attend over
//     the cache of an earlier layer of their kind, llama.cpp's rule: with n_kv = n_layer -
//     shared, a windowed layer reads layer n_kv - 2, a global one layer n_kv - 1 (the last
//     layers of each kind before the shared ones in Gemma 4's patterns). They own no K/V slot
//     (ModelConfig::layer_kv_source, KvCacheLayout);
//   * per-layer inputs (P = embedding_length_per_layer_input, L = n_layer), once per step:
//       pe  = per_layer_token_embd[tok] * sqrt(P)                     [L * P]
//       pp  = rmsnorm_P(per_layer_model_proj . x0 / sqrt(n_embd)) * per_layer_proj_norm
//       ple = (pp + pe) / sqrt(2)          (x0: the scaled embedding; rmsnorm over each P)
//     and per layer, after the FFN's residual add:
//       x += rmsnorm(proj . (gelu(inp_gate . x) * ple[il])) * post_norm;  x *= layer_output_scale
//   * the final logits soft-capped (final_logit_softcapping).
//
// Not supported yet (refused naming the tensor): the MoE layers of 26B-A4B (ffn_gate_inp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "model/arch.h"

namespace sluice {
namespace {

constexpr std::string_view kNames[] = {"gemma4"};

Result<int64_t> read_int(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  SLUICE_ASSIGN_OR_RETURN(const int64_t v, f.get_int(key));
  if (v < lo || v > hi) {
    return make_error("'", f.path(), "': metadata key '", key, "' = ", v, " must be in [", lo, ", ",
                      hi, "]");
  }
  return v;
}

// Which layers are windowed, and the per-kind head shapes and RoPE.
Status configure_layer_kinds(const GgufFile& f, ModelConfig& c) {
  const std::string& a = c.arch_name;
  if (c.sliding_window <= 0) {
    return make_error("'", f.path(), "': ", a, ".attention.sliding_window is missing or 0");
  }
  const std::string pattern_key = a + ".attention.sliding_window_pattern";
  SLUICE_ASSIGN_OR_RETURN(const std::vector<int64_t> pattern, f.get_int_array(pattern_key));
  if (int64_t(pattern.size()) != c.n_layer) {
    return make_error("'", f.path(), "': ", pattern_key, " has ", pattern.size(), " entries for ",
                      c.n_layer, " layers (", a, ".block_count)");
  }
  c.layer_swa.assign(pattern.size(), 0);
  for (size_t il = 0; il < pattern.size(); ++il) c.layer_swa[il] = pattern[il] != 0;

  const int64_t max_dim = 1 << 16;
  SLUICE_ASSIGN_OR_RETURN(const int64_t hd_swa,
                          read_int(f, a + ".attention.key_length_swa", 1, max_dim));
  SLUICE_ASSIGN_OR_RETURN(const int64_t v_swa,
                          read_int(f, a + ".attention.value_length_swa", 1, max_dim));
  if (v_swa != hd_swa) {
    return make_error("'", f.path(), "': ", a, ".attention.value_length_swa (", v_swa,
                      ") differs from key_length_swa (", hd_swa, "); not supported");
  }
  c.head_dim_swa = int(hd_swa);
  c.n_rot_swa = c.head_dim_swa;
  const std::string rot_key = a + ".rope.dimension_count_swa";
  if (f.has(rot_key)) {
    SLUICE_ASSIGN_OR_RETURN(const int64_t r, read_int(f, rot_key, 2, hd_swa));
    if (r % 2 != 0) {
      return make_error("'", f.path(), "': ", rot_key, " (", r, ") must be even");
    }
    c.n_rot_swa = int(r);
  }
  const std::string base_key = a + ".rope.freq_base_swa";
  c.rope_theta_swa = c.rope_theta;
  if (f.has(base_key)) {
    SLUICE_ASSIGN_OR_RETURN(const double base, f.get_float(base_key));
    if (!std::isfinite(base) || base <= 0) {
      return make_error("'", f.path(), "': ", base_key, " = ", base, " must be positive");
    }
    c.rope_theta_swa = float(base);
  }
  c.rope_freq_scale_swa = c.rope_freq_scale;
  c.rope_freqs_global_only = true;
  int64_t widest = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    widest = std::max<int64_t>(widest, int64_t(c.n_head) * c.layer_head_dim(il));
  }
  if (widest > std::numeric_limits<int32_t>::max()) {
    return make_error("'", f.path(), "': ", a, ".attention.head_count x ", a,
                      ".attention.key_length_swa is beyond a 32-bit width");
  }
  // n_kv_head (the largest count) bounds every layer's K/V width only if no windowed layer is
  // wider than the global head size (q_dim / kv_dim are the buffer sizes).
  if (c.head_dim_swa > c.head_dim) {
    return make_error("'", f.path(), "': ", a, ".attention.key_length_swa (", c.head_dim_swa,
                      ") exceeds key_length (", c.head_dim, "); not supported");
  }
  return {};
}

// attention.shared_kv_layers: the last ones read an earlier layer's K/V (llama.cpp's rule).
Status configure_shared_kv(const GgufFile& f, ModelConfig& c) {
  const std::string& a = c.arch_name;
  const std::string key = a + ".attention.shared_kv_layers";
  int64_t shared = 0;
  if (f.has(key)) {
    SLUICE_ASSIGN_OR_RETURN(shared, read_int(f, key, 0, c.n_layer - 1));
  }
  if (shared == 0) return {};
  const int n_kv = c.n_layer - int(shared);
  if (n_kv < 2) {
    return make_error("'", f.path(), "': ", key, " = ", shared, " leaves ", n_kv,
                      " layers with K/V of their own; at least 2 are needed");
  }
  c.layer_kv_source.resize(size_t(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il) {
    const bool windowed = c.layer_window(il) > 0;
    const int src = il < n_kv ? il : n_kv - (windowed ? 2 : 1);
    c.layer_kv_source[size_t(il)] = src;
    if (src == il) continue;
    if ((c.layer_window(src) > 0) != windowed || c.layer_n_kv_head(src) != c.layer_n_kv_head(il)) {
      return make_error("'", f.path(), "': ", key, " = ", shared, ": layer ", il, " (",
                        windowed ? "sliding" : "global", ", ", c.layer_n_kv_head(il),
                        " KV heads) would read the K/V of layer ", src, " (",
                        c.layer_window(src) > 0 ? "sliding" : "global", ", ",
                        c.layer_n_kv_head(src), " KV heads): ", a,
                        ".attention.sliding_window_pattern or head_count_kv disagrees");
    }
  }
  return {};
}

Status configure_gemma4(const GgufFile& f, ModelConfig& c) {
  const std::string& a = c.arch_name;
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = false;
  c.qk_norm = true;
  c.post_norms = true;
  c.ffn_gelu = true;
  c.embd_scale = std::sqrt(float(c.n_embd));  // llama.cpp: sqrtf(n_embd) in f32
  c.attn_scale = 1.0f;                        // Gemma 4's attention scaling is 1
  if (c.is_moe()) {
    return make_error("'", f.path(), "': ", a, ".expert_count: gemma4's mixture-of-experts ",
                      "layers (26B-A4B) are not supported yet");
  }
  SLUICE_RETURN_IF_ERROR(configure_layer_kinds(f, c));
  SLUICE_RETURN_IF_ERROR(configure_shared_kv(f, c));
  const std::string ple_key = a + ".embedding_length_per_layer_input";
  if (f.has(ple_key)) {
    SLUICE_ASSIGN_OR_RETURN(const int64_t p, read_int(f, ple_key, 0, 1 << 16));
    if (p > 0 && int64_t(p) * c.n_layer > std::numeric_limits<int32_t>::max()) {
      return make_error("'", f.path(), "': ", ple_key, " x ", a, ".block_count is too large");
    }
    c.n_embd_per_layer = int(p);
  }
  const std::string cap_key = a + ".final_logit_softcapping";
  if (f.has(cap_key)) {
    SLUICE_ASSIGN_OR_RETURN(const double cap, f.get_float(cap_key));
    if (!std::isfinite(cap) || cap < 0) {
      return make_error("'", f.path(), "': metadata key '", cap_key, "' = ", cap,
                        " must be a finite number >= 0");
    }
    c.final_softcap = float(cap);
  }
  return {};
}

}  // namespace

void gemma4_forward(const ModelConfig& c, const ModelWeights& w, ForwardOps& ops) {
  const int64_t T = ops.n_tokens(), d = c.n_embd, P = c.n_embd_per_layer;
  const int64_t LP = int64_t(c.n_layer) * P;
  const float eps = c.rms_eps;
  const Act x = ops.buffer(ActBuf::kX, T, d);
  const Act xn = ops.buffer(ActBuf::kXn, T, d);
  // The widest layer's q / k / v (each layer takes a prefix of its shape).
  const Act q = ops.buffer(ActBuf::kQ, T, c.q_dim());
  const Act k = ops.buffer(ActBuf::kK, T, c.kv_dim());
  const Act v = ops.buffer(ActBuf::kV, T, c.kv_dim());
  const Act att = ops.buffer(ActBuf::kAtt, T, c.q_dim());
  // proj: a layer's outputs [T, d], or the per-layer projection [T, L * P] before the layers.
  const Act proj = ops.buffer(ActBuf::kProj, T, std::max(d, LP));
  const Act gate = ops.buffer(ActBuf::kGate, T, std::max<int64_t>(c.n_ff, P));
  const Act up = ops.buffer(ActBuf::kUp, T, std::max<int64_t>(c.n_ff, P));
  const Act o{proj.data, T, d};

  ops.embed(w.token_embd, x);
  ops.scale(x, c.embd_scale);
  Act ple{};  // [T, L * P]: layer il's inputs are columns [il * P, il * P + P)
  if (P > 0) {
    ple = ops.buffer(ActBuf::kPerLayer, T, LP);
    ops.embed(w.per_layer_token_embd, ple);
    ops.scale(ple, std::sqrt(float(P)));
    const Act pp{proj.data, T, LP};
    ops.matmul(w.per_layer_model_proj, x, pp);
    ops.scale(pp, 1.0f / std::sqrt(float(d)));
    const Act slices{pp.data, T * c.n_layer, P};  // one row per (token, layer)
    ops.rms_norm(slices, w.per_layer_proj_norm, eps, slices, {});
    ops.add(ple, pp);
    ops.scale(ple, 1.0f / std::sqrt(2.0f));
  }

  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = w.layers[size_t(il)];
    const int64_t qd = c.layer_q_dim(il), kvd = c.layer_kv_dim(il);
    const Act ql{q.data, T, qd}, attl{att.data, T, qd};
    if (c.layer_stores_kv(il)) {
      ops.rms_norm(x, l.attn_norm, eps, xn, {&l.wq, &l.wk, &l.wv});
      const Act kl{k.data, T, kvd}, vl{v.data, T, kvd};
      ops.matmul(l.wq, xn, ql);
      ops.matmul(l.wk, xn, kl);
      ops.matmul(l.wv, xn, vl);
      ops.rope_store_kv(il, ql, kl, vl, {&l.q_norm, &l.k_norm, eps, /*v_unit=*/true});
    } else {
      ops.rms_norm(x, l.attn_norm, eps, xn, {&l.wq});
      ops.matmul(l.wq, xn, ql);
      ops.rope_q(il, ql, {&l.q_norm, nullptr, eps});
    }
    ops.attention(il, ql, attl, {});
    ops.matmul(l.wo, attl, o);
    ops.rms_norm(o, l.attn_post_norm, eps, xn, {});
    ops.add(x, xn);

    ops.rms_norm(x, l.ffn_norm, eps, xn, {&l.w_gate, &l.w_up});
    const Act g{gate.data, T, c.n_ff}, u{up.data, T, c.n_ff};
    ops.matmul(l.w_gate, xn, g);
    ops.matmul(l.w_up, xn, u);
    ops.geglu(g, u, g);
    ops.matmul(l.w_down, g, o);
    ops.rms_norm(o, l.ffn_post_norm, eps, xn, {});
    ops.add(x, xn);

    if (P > 0) {
      const Act pg{gate.data, T, P}, pin{up.data, T, P};
      ops.matmul(l.per_layer_gate, x, pg);
      ops.slice_cols(ple, int64_t(il) * P, pin);
      ops.geglu(pg, pin, pg);
      ops.matmul(l.per_layer_proj, pg, o);
      ops.rms_norm(o, l.per_layer_post_norm, eps, xn, {});
      ops.add(x, xn);
    }
    if (l.out_scale != 1.0f) ops.scale(x, l.out_scale);
  }

  forward_output(c, w, ops, x);
}

const ArchFamily& gemma4_family() {
  static const ArchFamily f{Arch::kGemma4, kNames, configure_gemma4, gemma4_forward};
  return f;
}

}  // namespace sluice
