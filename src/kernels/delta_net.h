// Gated DeltaNet (Qwen3.5's linear attention) over one sequence's new tokens, resuming from its
// recurrent state. Raw pointers and sizes only (no model types), as every kernel here.
//
// Per token t, with C = 2 nk S + nv S channels of qkv[t] and K conv taps:
//   u[c]  = silu(sum_j w[c][j] x[t-K+1+j][c])      causal depthwise conv; x before the
//                                                    sequence's first token: 0 (the state)
//   q, k  = u's first nk S and next nk S values, per head x / max(|x|, eps); q /= sqrt(S)
//   v     = u's last nv S values
//   per V head h (Q/K head h mod nk), g = softplus(alpha[h] + dt_bias[h]) a[h], b =
//   sigmoid(beta[h]):
//     M <- exp(g) M;   d = (v_h - M^T k) b;   M <- M + k d^T;   o_h = M^T q
//   out[t] per head = o_h / rms(o_h) * norm * silu(z[t] of head h)
//
// State of one sequence in one layer: conv [(K-1) x C] (the last K-1 inputs, oldest first)
// then ssm [nv x S x S] (M[h][i][j], i over key dims, j over value dims).
#pragma once

#include <cstdint>

namespace sluice {

struct DeltaNetParams {
  int state_size = 0;              // S
  int n_k_heads = 0;               // nk
  int n_v_heads = 0;               // nv
  int conv_kernel = 0;             // K
  const float* conv_w = nullptr;   // [C][K] channel c's taps, oldest first
  const float* dt_bias = nullptr;  // [nv]
  const float* a = nullptr;        // [nv] (negative)
  const float* norm = nullptr;     // [S]
  float eps = 1e-6f;               // of the L2 norms and the output RMSNorm

  int channels() const { return (2 * n_k_heads + n_v_heads) * state_size; }
  int64_t state_floats() const {
    return int64_t(conv_kernel - 1) * channels() + int64_t(n_v_heads) * state_size * state_size;
  }
  // Scratch floats delta_net_run needs.
  int64_t scratch_floats() const { return 2 * int64_t(channels()) + 2 * state_size; }
};

// n tokens of one sequence: qkv [n, C], z [n, nv S], beta and alpha [n, nv] (the projections,
// before their activations), state [p.state_floats()] (read and updated), out [n, nv S]. The
// recurrent form, token after token (the reference; a chunked form must equal it).
void delta_net_run(const DeltaNetParams& p, const float* qkv, const float* z, const float* beta,
                   const float* alpha, int64_t n, float* state, float* out, float* scratch);

}  // namespace sluice
