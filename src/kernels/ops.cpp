#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernel_table.h"

namespace sluice {

// ---- RMSNorm ----------------------------------------------------------------------------------

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  // Sum of squares in f64 as ggml does: for n in the thousands an f32 sum drifts.
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void rms_norm_ref(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const double scale = 1.0 / std::sqrt(ss / double(n) + double(eps));
  for (int64_t i = 0; i < n; ++i) y[i] = float(double(x[i]) * scale * (w ? double(w[i]) : 1.0));
}

// ---- RoPE -------------------------------------------------------------------------------------

namespace {

// The two dims of pair i inside a head.
inline void rope_pair(const RopeParams& p, int i, int& a, int& b) {
  if (p.style == RopeStyle::kNormal) {
    a = 2 * i;
    b = 2 * i + 1;
  } else {
    a = i;
    b = i + p.n_rot / 2;
  }
}

double inv_freq_f64(const RopeParams& p, int i) {
  const double ff = p.freq_factors ? double(p.freq_factors[i]) : 1.0;
  if (p.yarn_ext <= 0) {
    return double(p.freq_scale) / (std::pow(double(p.theta_base), 2.0 * i / p.n_rot) * ff);
  }
  const double e = 1.0 / (std::pow(double(p.theta_base), 2.0 * i / p.n_rot) * ff);
  const double y = (double(i) - p.yarn_low) / std::max(0.001, double(p.yarn_high - p.yarn_low));
  const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * double(p.yarn_ext);
  return e * (double(p.freq_scale) * (1.0 - ramp) + ramp);
}

// The dimension of n_rot whose wavelength fits n_rot_turns times in n_ctx_orig positions.
double yarn_corr_dim(int n_rot, int n_ctx_orig, double turns, double base) {
  constexpr double kPi = 3.14159265358979323846;
  return n_rot * std::log(double(n_ctx_orig) / (turns * 2.0 * kPi)) / (2.0 * std::log(base));
}

}  // namespace

void yarn_corr_dims(int n_rot, int n_ctx_orig, float theta_base, float beta_fast, float beta_slow,
                    float out[2]) {
  const double lo = std::floor(yarn_corr_dim(n_rot, n_ctx_orig, beta_fast, theta_base));
  const double hi = std::ceil(yarn_corr_dim(n_rot, n_ctx_orig, beta_slow, theta_base));
  out[0] = float(std::max(0.0, lo));
  out[1] = float(std::min(double(n_rot - 1), hi));
}

void rope_inv_freq(const RopeParams& p, float* inv_freq) {
  for (int i = 0; i < p.n_rot / 2; ++i) inv_freq[i] = float(inv_freq_f64(p, i));
}

void rope(float* x, int n_heads, int32_t pos, const RopeParams& p, const float* inv_freq) {
  for (int i = 0; i < p.n_rot / 2; ++i) {
    // The angle in f64: pos * inv_freq reaches 1e5 radians at long contexts, where an f32
    // product has already lost the low bits that cos/sin depend on.
    const double theta = double(pos) * double(inv_freq[i]);
    const float c = float(std::cos(theta)) * p.mscale, s = float(std::sin(theta)) * p.mscale;
    int a, b;
    rope_pair(p, i, a, b);
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + int64_t(h) * p.head_dim;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void rope_ref(float* x, int n_heads, int32_t pos, const RopeParams& p) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * p.head_dim;
    for (int i = 0; i < p.n_rot / 2; ++i) {
      const double theta = double(pos) * inv_freq_f64(p, i);
      int a, b;
      rope_pair(p, i, a, b);
      const double x0 = v[a], x1 = v[b], m = p.mscale;
      v[a] = float((x0 * std::cos(theta) - x1 * std::sin(theta)) * m);
      v[b] = float((x0 * std::sin(theta) + x1 * std::cos(theta)) * m);
    }
  }
}

// ---- SwiGLU -----------------------------------------------------------------------------------

void swiglu(const float* gate, const float* up, float* out, int64_t n, MatmulIsa isa) {
  if (const auto fn = kernel_table(isa).swiglu) {
    fn(gate, up, out, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = float(g / (1.0 + std::exp(-g)) * double(up[i]));
  }
}

// ---- gpt-oss's clamped SwiGLU ----

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kSwigluOaiLimit);
    const float u = std::clamp(up[i], -kSwigluOaiLimit, kSwigluOaiLimit);
    out[i] = g / (1.0f + std::exp(kSwigluOaiAlpha * -g)) * (u + 1.0f);
  }
}

void swiglu_oai_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = std::min(double(gate[i]), double(kSwigluOaiLimit));
    const double u = std::clamp(double(up[i]), -double(kSwigluOaiLimit), double(kSwigluOaiLimit));
    out[i] = float(g / (1.0 + std::exp(-double(kSwigluOaiAlpha) * g)) * (u + 1.0));
  }
}

// ---- GeGLU ----

void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void gelu(float* x, int64_t n, MatmulIsa isa) {
  if (const auto fn = kernel_table(isa).gelu) {
    fn(x, n);
    return;
  }
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float g = x[i];
    x[i] = 0.5f * g * (1.0f + std::tanh(kC * (g + 0.044715f * g * g * g)));
  }
}

void geglu(const float* gate, const float* up, float* out, int64_t n, MatmulIsa isa) {
  if (const auto fn = kernel_table(isa).geglu) {
    fn(gate, up, out, n);
    return;
  }
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kC * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void geglu_ref(const float* gate, const float* up, float* out, int64_t n) {
  const double c = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = float(0.5 * g * (1.0 + std::tanh(c * (g + 0.044715 * g * g * g))) * double(up[i]));
  }
}

// ---- Softmax ----------------------------------------------------------------------------------

void softmax(float* x, int64_t n) {
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void softmax_ref(float* x, int64_t n) {
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, double(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  for (int64_t i = 0; i < n; ++i) x[i] = float(std::exp(double(x[i]) - mx) / sum);
}

}  // namespace sluice
