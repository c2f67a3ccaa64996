#include "kernels/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernel_table.h"

namespace sluice {

// The chunked form in portable loops (one float per "vector"): the scalar ISA's kernels, and
// every ISA's where S is not a multiple of its vector width.
namespace kern_portable {
#define SLUICE_TARGET
namespace {
struct V {
  using T = float;
  static constexpr int W = 1;
  static constexpr int J = 4;
  static T zero() { return 0.0f; }
  static T set1(float x) { return x; }
  static T load(const float* p) { return *p; }
  static void store(float* p, T x) { *p = x; }
  static T fma(T a, T b, T c) { return a * b + c; }
  static T mul(T a, T b) { return a * b; }
  static T add(T a, T b) { return a + b; }
  static float sum(T x) { return x; }
  static T silu(T x) { return x / (1.0f + std::exp(-x)); }
};
}  // namespace
#include "kernels/delta_net_simd.inc"
#undef SLUICE_TARGET
}  // namespace kern_portable

namespace {

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
// ggml's softplus: log(1 + exp(x)), x itself past 20.
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

void l2_normalize(float* x, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float s = 1.0f / std::max(float(std::sqrt(ss)), eps);
  for (int i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace

void delta_net_run(const DeltaNetParams& p, const float* qkv, const float* z, const float* beta,
                   const float* alpha, int64_t n, float* state, float* out, float* scratch) {
  const int S = p.state_size, nk = p.n_k_heads, nv = p.n_v_heads, K = p.conv_kernel;
  const int C = p.channels();
  float* conv = state;                      // [(K-1), C]
  float* ssm = state + int64_t(K - 1) * C;  // [nv, S, S]
  float* u = scratch;                       // [C] conv output
  float* d = scratch + C;                   // [S]
  float* o = d + S;                         // [S]
  const float q_scale = 1.0f / std::sqrt(float(S));
  for (int64_t t = 0; t < n; ++t) {
    const float* x = qkv + t * C;
    // Causal conv: taps 0..K-2 over the state, tap K-1 over this token; then SiLU.
    for (int c = 0; c < C; ++c) {
      const float* w = p.conv_w + int64_t(c) * K;
      float acc = w[K - 1] * x[c];
      for (int j = 0; j < K - 1; ++j) acc += w[j] * conv[int64_t(j) * C + c];
      u[c] = silu(acc);
    }
    // The state keeps the last K - 1 inputs.
    if (K > 1) {
      std::memmove(conv, conv + C, sizeof(float) * size_t(K - 2) * size_t(C));
      std::memcpy(conv + int64_t(K - 2) * C, x, sizeof(float) * size_t(C));
    }
    float* q = u;
    float* k = u + nk * S;
    const float* v = u + 2 * nk * S;
    for (int h = 0; h < nk; ++h) {
      l2_normalize(q + h * S, S, p.eps);
      l2_normalize(k + h * S, S, p.eps);
      for (int i = 0; i < S; ++i) q[h * S + i] *= q_scale;
    }
    for (int h = 0; h < nv; ++h) {
      const float* qh = q + (h % nk) * S;
      const float* kh = k + (h % nk) * S;
      const float* vh = v + h * S;
      const float g = softplus(alpha[t * nv + h] + p.dt_bias[h]) * p.a[h];
      const float decay = std::exp(g);
      const float b = sigmoid(beta[t * nv + h]);
      float* M = ssm + int64_t(h) * S * S;  // M[i * S + j]
      // d = (v - M^T k) b with M already decayed: (v - decay M^T k) b.
      for (int j = 0; j < S; ++j) d[j] = 0;
      for (int i = 0; i < S; ++i) {
        float* row = M + int64_t(i) * S;
        const float ki = kh[i];
        for (int j = 0; j < S; ++j) {
          row[j] *= decay;
          d[j] += row[j] * ki;
        }
      }
      for (int j = 0; j < S; ++j) d[j] = (vh[j] - d[j]) * b;
      for (int j = 0; j < S; ++j) o[j] = 0;
      for (int i = 0; i < S; ++i) {
        float* row = M + int64_t(i) * S;
        const float ki = kh[i], qi = qh[i];
        for (int j = 0; j < S; ++j) {
          row[j] += ki * d[j];
          o[j] += row[j] * qi;
        }
      }
      // Gated RMSNorm of the head's output.
      double ss = 0;
      for (int j = 0; j < S; ++j) ss += double(o[j]) * o[j];
      const float r = 1.0f / std::sqrt(float(ss / S) + p.eps);
      const float* zh = z + t * int64_t(nv) * S + int64_t(h) * S;
      float* dst = out + t * int64_t(nv) * S + int64_t(h) * S;
      for (int j = 0; j < S; ++j) dst[j] = o[j] * r * p.norm[j] * silu(zh[j]);
    }
  }
}

int delta_net_conv_block(const DeltaNetParams& p) {
  return p.state_size * std::max(1, 512 / p.state_size);
}

int64_t delta_net_conv_scratch_floats(const DeltaNetParams& p) {
  return int64_t(2 * p.conv_kernel - 1) * delta_net_conv_block(p);
}

void delta_net_conv(const DeltaNetParams& p, float* qkv, int64_t n, float* conv_state, int c0,
                    int c1, float* scratch) {
  const KernelTable& kt = kernel_table(p.isa);
  if (kt.delta_net_conv && p.state_size % kt.delta_net_multiple == 0) {
    kt.delta_net_conv(p, qkv, n, conv_state, c0, c1, scratch);
  } else {
    kern_portable::delta_net_conv(p, qkv, n, conv_state, c0, c1, scratch);
  }
}

int64_t delta_net_heads_scratch_floats(const DeltaNetParams& p, int chunk) {
  return 4 * int64_t(chunk) * p.state_size + 2 * int64_t(chunk) * chunk + 3 * int64_t(chunk);
}

void delta_net_heads(const DeltaNetParams& p, const float* u, const float* z, const float* beta,
                     const float* alpha, int64_t n, float* ssm, int h0, int h1, int chunk,
                     float* out, float* scratch, float* capture, int64_t capture_stride) {
  const KernelTable& kt = kernel_table(p.isa);
  if (kt.delta_net_heads && p.state_size % kt.delta_net_multiple == 0) {
    kt.delta_net_heads(p, u, z, beta, alpha, n, ssm, h0, h1, chunk, out, scratch, capture,
                       capture_stride);
  } else {
    kern_portable::delta_net_heads(p, u, z, beta, alpha, n, ssm, h0, h1, chunk, out, scratch,
                                   capture, capture_stride);
  }
}

}  // namespace sluice
