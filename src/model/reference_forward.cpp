#include "model/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/fp16.h"
#include "gguf/quants.h"

namespace sluice {

ReferenceForward::~ReferenceForward() = default;

namespace {

Result<std::vector<float>> decode(const WeightMatrix& w) {
  std::vector<float> out(static_cast<size_t>(w.n_rows * w.n_cols));
  const size_t rb = row_size(w.type, w.n_cols);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    SLUICE_RETURN_IF_ERROR(
        dequantize_row(w.type, src + size_t(r) * rb, out.data() + r * w.n_cols, w.n_cols));
  }
  return out;
}

// y[r] = sum_j W[r, j] x[j] (+ b[r]), W [n_rows, n_cols].
std::vector<double> matvec(const std::vector<float>& w, const std::vector<double>& x,
                           int64_t n_rows, const std::vector<float>& bias = {}) {
  const int64_t n_cols = int64_t(x.size());
  std::vector<double> y(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    double acc = bias.empty() ? 0.0 : double(bias[size_t(r)]);
    const float* row = w.data() + r * n_cols;
    for (int64_t j = 0; j < n_cols; ++j) acc += double(row[j]) * x[size_t(j)];
    y[size_t(r)] = acc;
  }
  return y;
}

// RMSNorm of x[0, n) in place, scaled by w[n] (w empty: no weight).
void rms_norm(double* x, int64_t n, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * scale * (w.empty() ? 1.0 : double(w[size_t(i)]));
}

// Rotates one head at position `pos` (see kernels/ops.h for the conventions).
void rope(double* v, const ModelConfig& c, const std::vector<float>& all_factors, int pos,
          int layer) {
  const bool swa = c.layer_uses_swa_rope(layer);
  static const std::vector<float> kNone;
  const std::vector<float>& freq_factors =
      c.rope_freqs_global_only && c.layer_window(layer) > 0 ? kNone : all_factors;
  const int n_rot = c.layer_n_rot(layer);
  const double base = swa ? c.rope_theta_swa : c.rope_theta;
  const double scale = swa ? c.rope_freq_scale_swa : c.rope_freq_scale;
  // YaRN: pairs below `low` keep the unscaled angle, pairs from `high` on take the scaled one,
  // those between blend linearly; both rotated values times mscale.
  double low = 0, high = 0, mscale = 1;
  if (c.rope_yarn) {
    const double pi = 3.14159265358979323846;
    auto corr = [&](double turns) {
      return n_rot * std::log(c.yarn_n_ctx_orig / (turns * 2 * pi)) / (2 * std::log(base));
    };
    low = std::max(0.0, std::floor(corr(c.yarn_beta_fast)));
    high = std::min(double(n_rot - 1), std::ceil(corr(c.yarn_beta_slow)));
    mscale = 1.0 + 0.1 * std::log(1.0 / scale);
  }
  for (int i = 0; i < n_rot / 2; ++i) {
    const double ff = freq_factors.empty() ? 1.0 : double(freq_factors[size_t(i)]);
    const double theta_e = double(pos) / (std::pow(base, 2.0 * i / n_rot) * ff);
    double theta = double(pos) * scale / (std::pow(base, 2.0 * i / n_rot) * ff);
    if (c.rope_yarn) {
      const double ramp = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
      theta = theta_e * scale * (1 - ramp) + theta_e * ramp;
    }
    const int a = c.rope_style == RopeStyle::kNormal ? 2 * i : i;
    const int b = c.rope_style == RopeStyle::kNormal ? 2 * i + 1 : i + n_rot / 2;
    const double x0 = v[a], x1 = v[b];
    v[a] = (x0 * std::cos(theta) - x1 * std::sin(theta)) * mscale;
    v[b] = (x0 * std::sin(theta) + x1 * std::cos(theta)) * mscale;
  }
}

}  // namespace

namespace {

// x rounded as an MXFP4 matmul rounds its input: f32, then per block of 32 q = round(x * 127 /
// amax) (in f32) times the block scale amax / 127 rounded to f16.
std::vector<double> round_acts_8bit(const std::vector<double>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b + 32 <= x.size(); b += 32) {
    float xf[32], amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(xf[j] = float(x[b + size_t(j)])));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const double d16 = f16_to_f32(f32_to_f16(amax / 127.0f));
    for (int j = 0; j < 32; ++j) out[b + size_t(j)] = d16 * double(std::nearbyint(xf[j] * id));
  }
  return out;
}

// What one expert (or dense) FFN computes: the gate and up rows, their biases, the activation,
// the down rows and bias.
struct GluFfn {
  GluFfn(const std::vector<float>& g, const std::vector<float>& u, const std::vector<float>& d,
         int64_t n_ff, bool use_gelu = false)
      : gate(g), up(u), down(d), ff(n_ff), gelu(use_gelu) {}
  const std::vector<float>& gate;
  const std::vector<float>& up;
  const std::vector<float>& down;
  int64_t ff = 0;
  bool gelu = false;
  MoeActivation act = MoeActivation::kSwiglu;
  std::vector<float> gate_bias, up_bias, down_bias;  // empty: none
  bool round_acts = false;                           // round_acts_8bit before each matmul
};

// down(act(gate x + b) * (up x + b)) + b, act SiLU or tanh-GELU or gpt-oss's clamped SwiGLU.
std::vector<double> glu_ffn(const GluFfn& f, const std::vector<double>& x_in) {
  const std::vector<double> xn = f.round_acts ? round_acts_8bit(x_in) : x_in;
  const std::vector<double> g = matvec(f.gate, xn, f.ff, f.gate_bias);
  std::vector<double> u = matvec(f.up, xn, f.ff, f.up_bias);
  const double kc = std::sqrt(2.0 / 3.14159265358979323846);
  for (size_t i = 0; i < u.size(); ++i) {
    if (f.act == MoeActivation::kSwigluOai) {
      const double lim = kSwigluOaiLimit, gi = std::min(g[i], lim);
      u[i] =
          gi / (1.0 + std::exp(-double(kSwigluOaiAlpha) * gi)) * (std::clamp(u[i], -lim, lim) + 1);
      continue;
    }
    u[i] *= f.gelu ? 0.5 * g[i] * (1.0 + std::tanh(kc * (g[i] + 0.044715 * g[i] * g[i] * g[i])))
                   : g[i] / (1.0 + std::exp(-g[i]));
  }
  return matvec(f.down, f.round_acts ? round_acts_8bit(u) : u, int64_t(xn.size()), f.down_bias);
}

std::vector<float> slice(const std::vector<float>& v, int64_t i, int64_t n) {
  if (v.empty()) return {};
  return std::vector<float>(v.begin() + i * n, v.begin() + (i + 1) * n);
}

}  // namespace

std::vector<double> ReferenceForward::ffn(const Layer& l, const LayerWeights& lw,
                                          const std::vector<double>& xn) const {
  const ModelConfig& c = model_.config();
  if (!c.is_moe()) return glu_ffn(GluFfn(l.w_gate, l.w_up, l.w_down, c.n_ff, c.ffn_gelu), xn);
  // Router logits (+ bias), the top n_used (lowest index first among equals); their weights: the
  // softmax over all experts (optionally renormalized over the chosen) or over the chosen.
  const MoeWeights& m = lw.moe;
  const std::vector<double> logits = matvec(l.router, xn, c.n_expert, m.router_bias);
  std::vector<int> chosen;
  for (int k = 0; k < c.n_expert_used; ++k) {
    int best = -1;
    for (int e = 0; e < c.n_expert; ++e) {
      if (std::find(chosen.begin(), chosen.end(), e) != chosen.end()) continue;
      if (best < 0 || logits[size_t(e)] > logits[size_t(best)]) best = e;
    }
    chosen.push_back(best);
  }
  double mx = logits[0], sum = 0, total = 0;
  if (m.gating == MoeGating::kTopKSoftmax) {
    mx = logits[size_t(chosen[0])];
    for (int e : chosen) sum += std::exp(logits[size_t(e)] - mx);
    total = 1;
  } else {
    for (double v : logits) mx = std::max(mx, v);
    for (double v : logits) sum += std::exp(v - mx);
    for (int e : chosen) total += std::exp(logits[size_t(e)] - mx) / sum;
  }
  std::vector<double> out(xn.size(), 0.0);
  const int64_t ff = c.n_ff_exp, d = c.n_embd;
  for (int e : chosen) {
    double wt = std::exp(logits[size_t(e)] - mx) / sum;
    if (m.gating == MoeGating::kSoftmax && m.norm_topk) wt /= total;
    GluFfn f(l.e_gate[size_t(e)], l.e_up[size_t(e)], l.e_down[size_t(e)], ff);
    f.act = m.act;
    f.gate_bias = slice(m.gate_bias, e, ff);
    f.up_bias = slice(m.up_bias, e, ff);
    f.down_bias = slice(m.down_bias, e, d);
    f.round_acts = l.round_expert_acts;
    const std::vector<double> y = glu_ffn(f, xn);
    for (size_t i = 0; i < out.size(); ++i) out[i] += wt * y[i];
  }
  if (!l.sh_down.empty()) {
    const std::vector<double> y = glu_ffn(GluFfn(l.sh_gate, l.sh_up, l.sh_down, c.n_ff_shexp), xn);
    double g = 1.0;
    if (!l.sh_gate_inp.empty()) g = 1.0 / (1.0 + std::exp(-matvec(l.sh_gate_inp, xn, 1)[0]));
    for (size_t i = 0; i < out.size(); ++i) out[i] += g * y[i];
  }
  return out;
}

Result<std::unique_ptr<ReferenceForward>> ReferenceForward::create(
    const Model& model, const ReferenceOptions& options) {
  std::unique_ptr<ReferenceForward> r(new ReferenceForward(model, options));
  const ModelWeights& w = model.weights();
  SLUICE_ASSIGN_OR_RETURN(r->token_embd_, decode(w.token_embd));
  SLUICE_ASSIGN_OR_RETURN(r->output_, decode(w.output));
  for (const LayerWeights& lw : w.layers) {
    Layer l;
    SLUICE_ASSIGN_OR_RETURN(l.wq, decode(lw.wq));
    SLUICE_ASSIGN_OR_RETURN(l.wk, decode(lw.wk));
    SLUICE_ASSIGN_OR_RETURN(l.wv, decode(lw.wv));
    SLUICE_ASSIGN_OR_RETURN(l.wo, decode(lw.wo));
    if (!model.config().is_moe()) {
      SLUICE_ASSIGN_OR_RETURN(l.w_gate, decode(lw.w_gate));
      SLUICE_ASSIGN_OR_RETURN(l.w_up, decode(lw.w_up));
      SLUICE_ASSIGN_OR_RETURN(l.w_down, decode(lw.w_down));
    } else {
      const MoeWeights& m = lw.moe;
      l.round_expert_acts =
          !options.exact_mxfp4_acts && !m.gate.empty() && m.gate[0].type == GgmlType::MXFP4;
      SLUICE_ASSIGN_OR_RETURN(l.router, decode(m.router));
      for (size_t e = 0; e < m.gate.size(); ++e) {
        SLUICE_ASSIGN_OR_RETURN(std::vector<float> g, decode(m.gate[e]));
        SLUICE_ASSIGN_OR_RETURN(std::vector<float> u, decode(m.up[e]));
        SLUICE_ASSIGN_OR_RETURN(std::vector<float> dn, decode(m.down[e]));
        l.e_gate.push_back(std::move(g));
        l.e_up.push_back(std::move(u));
        l.e_down.push_back(std::move(dn));
      }
      if (m.has_shared()) {
        SLUICE_ASSIGN_OR_RETURN(l.sh_gate, decode(m.sh_gate));
        SLUICE_ASSIGN_OR_RETURN(l.sh_up, decode(m.sh_up));
        SLUICE_ASSIGN_OR_RETURN(l.sh_down, decode(m.sh_down));
        if (m.sh_gate_inp.data) {
          SLUICE_ASSIGN_OR_RETURN(l.sh_gate_inp, decode(m.sh_gate_inp));
        }
      }
    }
    if (lw.per_layer_gate.data) {
      SLUICE_ASSIGN_OR_RETURN(l.ple_gate, decode(lw.per_layer_gate));
      SLUICE_ASSIGN_OR_RETURN(l.ple_proj, decode(lw.per_layer_proj));
    }
    r->layers_.push_back(std::move(l));
  }
  if (model.config().n_embd_per_layer > 0) {
    SLUICE_ASSIGN_OR_RETURN(r->ple_embd_, decode(w.per_layer_token_embd));
    SLUICE_ASSIGN_OR_RETURN(r->ple_model_proj_, decode(w.per_layer_model_proj));
  }
  r->k_hist_.resize(w.layers.size());
  r->v_hist_.resize(w.layers.size());
  return r;
}

std::vector<double> ReferenceForward::per_layer_inputs(int32_t token,
                                                       const std::vector<double>& x) const {
  const ModelConfig& c = model_.config();
  const int64_t P = c.n_embd_per_layer, LP = int64_t(c.n_layer) * P;
  std::vector<double> pp = matvec(ple_model_proj_, x, LP);
  const double proj_scale = 1.0 / std::sqrt(double(c.n_embd));
  const double embd_scale = std::sqrt(double(P));
  for (double& v : pp) v *= proj_scale;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    rms_norm(pp.data() + il * P, P, model_.weights().per_layer_proj_norm, c.rms_eps);
  }
  for (int64_t i = 0; i < LP; ++i) {
    const double pe = double(ple_embd_[size_t(token * LP + i)]) * embd_scale;
    pp[size_t(i)] = (pp[size_t(i)] + pe) / std::sqrt(2.0);
  }
  return pp;
}

Result<std::vector<float>> ReferenceForward::step(int32_t token) {
  const ModelConfig& c = model_.config();
  const ModelWeights& mw = model_.weights();
  if (token < 0 || token >= c.n_vocab) {
    return make_error("token id ", token, " is out of range [0, ", c.n_vocab, ")");
  }
  if (n_past_ >= c.n_ctx) return make_error("context of ", c.n_ctx, " tokens is full");
  const int pos = n_past_;
  const int64_t d = c.n_embd;
  const double eps = c.rms_eps;

  std::vector<double> x(static_cast<size_t>(d));
  // The embedding scale is applied as the f32 the model defines (gemma: sqrtf(n_embd)).
  for (int64_t i = 0; i < d; ++i) {
    x[size_t(i)] = token_embd_[size_t(token * d + i)] * double(c.embd_scale);
  }
  const int64_t P = c.n_embd_per_layer;
  const std::vector<double> ple = P > 0 ? per_layer_inputs(token, x) : std::vector<double>{};

  for (size_t il = 0; il < layers_.size(); ++il) {
    const Layer& l = layers_[il];
    const LayerWeights& lw = mw.layers[il];
    const int64_t hd = c.layer_head_dim(int(il)), qd = c.layer_q_dim(int(il));
    const int64_t kvd = c.layer_kv_dim(int(il));
    const int n_kv_head = c.layer_n_kv_head(int(il));
    std::vector<double> xn = x;
    rms_norm(xn.data(), d, lw.attn_norm, eps);
    std::vector<double> q = matvec(l.wq, xn, qd, lw.bq);
    for (int h = 0; h < c.n_head; ++h) {
      if (c.qk_norm) rms_norm(q.data() + h * hd, hd, lw.q_norm, eps);
      rope(q.data() + h * hd, c, mw.rope_freqs, pos, int(il));
    }
    // A layer that shares K/V (gemma4) reads its source's history, which already holds this
    // position (sources come first).
    const size_t src = size_t(c.kv_source_layer(int(il)));
    if (src == il) {
      std::vector<double> k = matvec(l.wk, xn, kvd, lw.bk);
      std::vector<double> v = matvec(l.wv, xn, kvd, lw.bv);
      for (int h = 0; h < n_kv_head; ++h) {
        if (c.qk_norm) rms_norm(k.data() + h * hd, hd, lw.k_norm, eps);
        // gemma4: V RMS-normed per head without a weight.
        if (c.arch == Arch::kGemma4) rms_norm(v.data() + h * hd, hd, {}, eps);
        rope(k.data() + h * hd, c, mw.rope_freqs, pos, int(il));
      }
      k_hist_[il].insert(k_hist_[il].end(), k.begin(), k.end());
      v_hist_[il].insert(v_hist_[il].end(), v.begin(), v.end());
    }

    const int n_ctx = pos + 1;
    std::vector<double> att(static_cast<size_t>(qd), 0.0), score(static_cast<size_t>(n_ctx));
    const double scale = (c.attn_scale > 0 ? double(c.attn_scale) : 1.0 / std::sqrt(double(hd))) *
                         double(c.rope_attn_factor) * double(c.rope_attn_factor);
    const double cap = c.attn_softcap;
    const int window = c.layer_window(int(il));
    const int n_gqa = c.n_head / n_kv_head;
    for (int h = 0; h < c.n_head; ++h) {
      const int kvh = h / n_gqa;
      double mx = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < n_ctx; ++t) {
        const double* kt = k_hist_[src].data() + t * kvd + kvh * hd;
        double s = 0;
        for (int64_t i = 0; i < hd; ++i) s += q[size_t(h * hd + i)] * kt[i];
        s *= scale;
        if (cap > 0) s = cap * std::tanh(s / cap);
        // Outside a sliding window: weight 0.
        if (window > 0 && pos - t >= window) s = -std::numeric_limits<double>::infinity();
        score[size_t(t)] = s;
        mx = std::max(mx, score[size_t(t)]);
      }
      // A sink: one more logit in the max and the denominator, with no value.
      const bool sink = !lw.attn_sinks.empty();
      if (sink) mx = std::max(mx, double(lw.attn_sinks[size_t(h)]));
      double sum = sink ? std::exp(double(lw.attn_sinks[size_t(h)]) - mx) : 0.0;
      for (double& s : score) sum += (s = std::exp(s - mx));
      for (int t = 0; t < n_ctx; ++t) {
        const double* vt = v_hist_[src].data() + t * kvd + kvh * hd;
        for (int64_t i = 0; i < hd; ++i) att[size_t(h * hd + i)] += score[size_t(t)] / sum * vt[i];
      }
    }
    std::vector<double> o = matvec(l.wo, att, d, lw.bo);
    if (c.post_norms) rms_norm(o.data(), d, lw.attn_post_norm, eps);
    for (int64_t i = 0; i < d; ++i) x[size_t(i)] += o[size_t(i)];

    xn = x;
    rms_norm(xn.data(), d, lw.ffn_norm, eps);
    std::vector<double> down = ffn(l, lw, xn);
    if (c.post_norms) rms_norm(down.data(), d, lw.ffn_post_norm, eps);
    for (int64_t i = 0; i < d; ++i) x[size_t(i)] += down[size_t(i)];

    if (P > 0) {
      // gemma4: x += rmsnorm(proj . (gelu(inp_gate . x) * ple[il])) * post_norm.
      std::vector<double> g = matvec(l.ple_gate, x, P);
      const double kc = std::sqrt(2.0 / 3.14159265358979323846);
      for (int64_t i = 0; i < P; ++i) {
        const double a = g[size_t(i)];
        g[size_t(i)] = 0.5 * a * (1.0 + std::tanh(kc * (a + 0.044715 * a * a * a))) *
                       ple[size_t(int64_t(il) * P + i)];
      }
      std::vector<double> p = matvec(l.ple_proj, g, d);
      rms_norm(p.data(), d, lw.per_layer_post_norm, eps);
      for (int64_t i = 0; i < d; ++i) x[size_t(i)] += p[size_t(i)];
    }
    if (lw.out_scale != 1.0f) {
      for (double& xi : x) xi *= double(lw.out_scale);
    }
  }
  rms_norm(x.data(), d, mw.output_norm, eps);
  hidden_ = x;
  std::vector<double> logits = matvec(output_, x, c.n_vocab);
  if (c.final_softcap > 0) {
    const double fc = c.final_softcap;
    for (double& v : logits) v = fc * std::tanh(v / fc);
  }
  ++n_past_;
  return std::vector<float>(logits.begin(), logits.end());
}

}  // namespace sluice
