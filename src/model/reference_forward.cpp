#include "model/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

// RMSNorm of x[0, n) in place, scaled by w[n].
void rms_norm(double* x, int64_t n, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * scale * double(w[size_t(i)]);
}

// Rotates one head at position `pos` (see kernels/ops.h for the conventions).
void rope(double* v, const ModelConfig& c, const std::vector<float>& freq_factors, int pos,
          int layer) {
  const bool swa = c.layer_uses_swa_rope(layer);
  const double base = swa ? c.rope_theta_swa : c.rope_theta;
  const double scale = swa ? c.rope_freq_scale_swa : c.rope_freq_scale;
  for (int i = 0; i < c.n_rot / 2; ++i) {
    const double ff = freq_factors.empty() ? 1.0 : double(freq_factors[size_t(i)]);
    const double theta = double(pos) * scale / (std::pow(base, 2.0 * i / c.n_rot) * ff);
    const int a = c.rope_style == RopeStyle::kNormal ? 2 * i : i;
    const int b = c.rope_style == RopeStyle::kNormal ? 2 * i + 1 : i + c.n_rot / 2;
    const double x0 = v[a], x1 = v[b];
    v[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
    v[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
}

}  // namespace

namespace {

// down(act(gate x) * up x), act SiLU or tanh-GELU.
std::vector<double> glu_ffn(const std::vector<float>& gate, const std::vector<float>& up,
                            const std::vector<float>& down, const std::vector<double>& xn,
                            int64_t ff, bool gelu) {
  const std::vector<double> g = matvec(gate, xn, ff);
  std::vector<double> u = matvec(up, xn, ff);
  const double kc = std::sqrt(2.0 / 3.14159265358979323846);
  for (size_t i = 0; i < u.size(); ++i) {
    u[i] *= gelu ? 0.5 * g[i] * (1.0 + std::tanh(kc * (g[i] + 0.044715 * g[i] * g[i] * g[i])))
                 : g[i] / (1.0 + std::exp(-g[i]));
  }
  return matvec(down, u, int64_t(xn.size()));
}

}  // namespace

std::vector<double> ReferenceForward::ffn(const Layer& l, const LayerWeights& lw,
                                          const std::vector<double>& xn) const {
  const ModelConfig& c = model_.config();
  if (!c.is_moe()) return glu_ffn(l.w_gate, l.w_up, l.w_down, xn, c.n_ff, c.ffn_gelu);
  // Router softmax, the top n_used (lowest index first among equals), optionally renormalized.
  const std::vector<double> logits = matvec(l.router, xn, c.n_expert);
  double mx = logits[0], sum = 0;
  for (double v : logits) mx = std::max(mx, v);
  for (double v : logits) sum += std::exp(v - mx);
  std::vector<int> chosen;
  double total = 0;
  for (int k = 0; k < c.n_expert_used; ++k) {
    int best = -1;
    for (int e = 0; e < c.n_expert; ++e) {
      if (std::find(chosen.begin(), chosen.end(), e) != chosen.end()) continue;
      if (best < 0 || logits[size_t(e)] > logits[size_t(best)]) best = e;
    }
    chosen.push_back(best);
    total += std::exp(logits[size_t(best)] - mx) / sum;
  }
  std::vector<double> out(xn.size(), 0.0);
  for (int e : chosen) {
    double wt = std::exp(logits[size_t(e)] - mx) / sum;
    if (lw.moe.norm_topk) wt /= total;
    const std::vector<double> y =
        glu_ffn(l.e_gate[size_t(e)], l.e_up[size_t(e)], l.e_down[size_t(e)], xn, c.n_ff_exp, false);
    for (size_t i = 0; i < out.size(); ++i) out[i] += wt * y[i];
  }
  if (!l.sh_down.empty()) {
    const std::vector<double> y = glu_ffn(l.sh_gate, l.sh_up, l.sh_down, xn, c.n_ff_shexp, false);
    double g = 1.0;
    if (!l.sh_gate_inp.empty()) g = 1.0 / (1.0 + std::exp(-matvec(l.sh_gate_inp, xn, 1)[0]));
    for (size_t i = 0; i < out.size(); ++i) out[i] += g * y[i];
  }
  return out;
}

Result<std::unique_ptr<ReferenceForward>> ReferenceForward::create(const Model& model) {
  std::unique_ptr<ReferenceForward> r(new ReferenceForward(model));
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
    r->layers_.push_back(std::move(l));
  }
  r->k_hist_.resize(w.layers.size());
  r->v_hist_.resize(w.layers.size());
  return r;
}

Result<std::vector<float>> ReferenceForward::step(int32_t token) {
  const ModelConfig& c = model_.config();
  const ModelWeights& mw = model_.weights();
  if (token < 0 || token >= c.n_vocab) {
    return make_error("token id ", token, " is out of range [0, ", c.n_vocab, ")");
  }
  if (n_past_ >= c.n_ctx) return make_error("context of ", c.n_ctx, " tokens is full");
  const int pos = n_past_;
  const int64_t d = c.n_embd, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim();
  const double eps = c.rms_eps;

  std::vector<double> x(static_cast<size_t>(d));
  // The embedding scale is applied as the f32 the model defines (gemma: sqrtf(n_embd)).
  for (int64_t i = 0; i < d; ++i) {
    x[size_t(i)] = token_embd_[size_t(token * d + i)] * double(c.embd_scale);
  }

  for (size_t il = 0; il < layers_.size(); ++il) {
    const Layer& l = layers_[il];
    const LayerWeights& lw = mw.layers[il];
    std::vector<double> xn = x;
    rms_norm(xn.data(), d, lw.attn_norm, eps);
    std::vector<double> q = matvec(l.wq, xn, qd, lw.bq);
    std::vector<double> k = matvec(l.wk, xn, kvd, lw.bk);
    std::vector<double> v = matvec(l.wv, xn, kvd, lw.bv);
    for (int h = 0; h < c.n_head; ++h) {
      if (c.qk_norm) rms_norm(q.data() + h * hd, hd, lw.q_norm, eps);
      rope(q.data() + h * hd, c, mw.rope_freqs, pos, int(il));
    }
    for (int h = 0; h < c.n_kv_head; ++h) {
      if (c.qk_norm) rms_norm(k.data() + h * hd, hd, lw.k_norm, eps);
      rope(k.data() + h * hd, c, mw.rope_freqs, pos, int(il));
    }
    k_hist_[il].insert(k_hist_[il].end(), k.begin(), k.end());
    v_hist_[il].insert(v_hist_[il].end(), v.begin(), v.end());

    const int n_ctx = pos + 1;
    std::vector<double> att(static_cast<size_t>(qd), 0.0), score(static_cast<size_t>(n_ctx));
    const double scale = (c.attn_scale > 0 ? double(c.attn_scale) : 1.0 / std::sqrt(double(hd))) *
                         double(c.rope_attn_factor) * double(c.rope_attn_factor);
    const double cap = c.attn_softcap;
    const int window = c.layer_window(int(il));
    for (int h = 0; h < c.n_head; ++h) {
      const int kvh = h / c.n_gqa();
      double mx = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < n_ctx; ++t) {
        const double* kt = k_hist_[il].data() + t * kvd + kvh * hd;
        double s = 0;
        for (int64_t i = 0; i < hd; ++i) s += q[size_t(h * hd + i)] * kt[i];
        s *= scale;
        if (cap > 0) s = cap * std::tanh(s / cap);
        // Outside a sliding window: weight 0.
        if (window > 0 && pos - t >= window) s = -std::numeric_limits<double>::infinity();
        score[size_t(t)] = s;
        mx = std::max(mx, score[size_t(t)]);
      }
      double sum = 0;
      for (double& s : score) sum += (s = std::exp(s - mx));
      for (int t = 0; t < n_ctx; ++t) {
        const double* vt = v_hist_[il].data() + t * kvd + kvh * hd;
        for (int64_t i = 0; i < hd; ++i) att[size_t(h * hd + i)] += score[size_t(t)] / sum * vt[i];
      }
    }
    std::vector<double> o = matvec(l.wo, att, d);
    if (c.post_norms) rms_norm(o.data(), d, lw.attn_post_norm, eps);
    for (int64_t i = 0; i < d; ++i) x[size_t(i)] += o[size_t(i)];

    xn = x;
    rms_norm(xn.data(), d, lw.ffn_norm, eps);
    std::vector<double> down = ffn(l, lw, xn);
    if (c.post_norms) rms_norm(down.data(), d, lw.ffn_post_norm, eps);
    for (int64_t i = 0; i < d; ++i) x[size_t(i)] += down[size_t(i)];
  }
  rms_norm(x.data(), d, mw.output_norm, eps);
  std::vector<double> logits = matvec(output_, x, c.n_vocab);
  if (c.final_softcap > 0) {
    const double fc = c.final_softcap;
    for (double& v : logits) v = fc * std::tanh(v / fc);
  }
  ++n_past_;
  return std::vector<float>(logits.begin(), logits.end());
}

}  // namespace sluice
