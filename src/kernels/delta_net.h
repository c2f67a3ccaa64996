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
//
// Two forms compute it. delta_net_run is the recurrent form, token after token (the
// reference). The engine runs the chunked form in two phases: delta_net_conv (the conv, SiLU
// and the q/k norms of every token, in place) and delta_net_heads (the delta rule of some V
// heads, `chunk` tokens at a time). Within a chunk, with G_t = g_1 + ... + g_t (t = 1..m) and
// M0 the state before it, unrolling the recurrence gives
//   d_t = b_t (v_t - e^G_t M0^T k_t - sum_{s<t} e^(G_t - G_s) (k_t . k_s) d_s)
//   o_t = e^G_t M0^T q_t + sum_{s<=t} e^(G_t - G_s) (q_t . k_s) d_s
//   M_m = e^G_m M0 + sum_s e^(G_m - G_s) k_s d_s^T
// so a chunk is two products with M0 ([2m x S] . [S x S]), a unit lower-triangular solve for
// the d's and one rank-m update of M: the state is read and written once per chunk instead of
// once per token, and every exponent is <= 0. A chunk of 1 is the recurrent form's decode step.
// The SIMD kernels (delta_net_<isa>.cpp, S a multiple of the vector width) and the portable
// loops compute the same formulas; tests check both forms against a float64 reference.
#pragma once

#include <cstdint>

#include "kernels/matmul_isa.h"

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
  MatmulIsa isa = MatmulIsa::kAuto;

  int channels() const { return (2 * n_k_heads + n_v_heads) * state_size; }
  int64_t conv_floats() const { return int64_t(conv_kernel - 1) * channels(); }
  int64_t state_floats() const {
    return conv_floats() + int64_t(n_v_heads) * state_size * state_size;
  }
  // Scratch floats delta_net_run needs.
  int64_t scratch_floats() const { return 2 * int64_t(channels()) + 2 * state_size; }
};

// n tokens of one sequence: qkv [n, C], z [n, nv S], beta and alpha [n, nv] (the projections,
// before their activations), state [p.state_floats()] (read and updated), out [n, nv S]. The
// recurrent form, token after token, scalar (the reference the chunked form must equal).
void delta_net_run(const DeltaNetParams& p, const float* qkv, const float* z, const float* beta,
                   const float* alpha, int64_t n, float* state, float* out, float* scratch);

// The chunked form's channel blocks: delta_net_conv takes channels [c0, c1) with c0 and c1
// multiples of this (or c1 = C), so a block holds whole q/k heads.
int delta_net_conv_block(const DeltaNetParams& p);
// Scratch floats of one delta_net_conv call.
int64_t delta_net_conv_scratch_floats(const DeltaNetParams& p);
// Phase 1 over channels [c0, c1) of n tokens: qkv [n, C] is replaced by u (conv, SiLU, q and k
// L2-normalized, q scaled by 1/sqrt(S)); conv_state [(K-1) x C] (the state's first
// p.conv_floats()) is read and updated for those channels.
void delta_net_conv(const DeltaNetParams& p, float* qkv, int64_t n, float* conv_state, int c0,
                    int c1, float* scratch);

// Scratch floats of one delta_net_heads call with chunks of `chunk` tokens.
int64_t delta_net_heads_scratch_floats(const DeltaNetParams& p, int chunk);
// Phase 2 for V heads [h0, h1): u [n, C] (delta_net_conv's output), z [n, nv S], beta and alpha
// [n, nv], ssm [nv x S x S] (the state after its conv part; those heads' matrices are read and
// updated), out [n, nv S] (those heads' columns written). Chunks of `chunk` >= 1 tokens.
// capture (null: none): after every chunk but the last, chunk c's matrices of those heads are
// copied to capture + c * capture_stride (laid out as ssm): with chunks of 1, the state after
// each token but the last (speculative verification rolls a rejected draft back to one).
void delta_net_heads(const DeltaNetParams& p, const float* u, const float* z, const float* beta,
                     const float* alpha, int64_t n, float* ssm, int h0, int h1, int chunk,
                     float* out, float* scratch, float* capture = nullptr,
                     int64_t capture_stride = 0);

// The chunk length the engine uses.
constexpr int kDeltaNetChunk = 64;

}  // namespace sluice
