// Gated DeltaNet (kernels/delta_net.h) against a float64 reference written from the formulas,
// from random states: the recurrent form in calls of 1, 7, 64 tokens and the whole sequence (a
// state carried across calls must give what one call gives), and the chunked form on every ISA
// this CPU runs with chunks of 1, 7, 64 and the whole sequence, in calls split at odd points,
// channel blocks and head ranges.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/delta_net.h"
#include "kernels_test_util.h"

namespace sluice {
namespace {

struct Ref {
  int S, nk, nv, K;
  std::vector<double> conv_w, dt_bias, a, norm;
  double eps;
  int C() const { return (2 * nk + nv) * S; }
};

double silu(double x) {
  return x / (1 + std::exp(-x));
}

// One token in float64; state as in the kernel (conv inputs, then M[h][i][j]).
void ref_step(const Ref& p, const float* x, const float* z, const float* beta, const float* alpha,
              std::vector<double>& st, double* out) {
  const int S = p.S, C = p.C(), K = p.K;
  std::vector<double> u(static_cast<size_t>(C));
  for (int c = 0; c < C; ++c) {
    double acc = p.conv_w[size_t(c * K + K - 1)] * x[c];
    for (int j = 0; j < K - 1; ++j) acc += p.conv_w[size_t(c * K + j)] * st[size_t(j * C + c)];
    u[size_t(c)] = silu(acc);
  }
  for (int j = 0; j + 1 < K - 1; ++j) {
    for (int c = 0; c < C; ++c) st[size_t(j * C + c)] = st[size_t((j + 1) * C + c)];
  }
  for (int c = 0; c < C && K > 1; ++c) st[size_t((K - 2) * C + c)] = x[c];
  auto l2 = [&](double* v) {
    double ss = 0;
    for (int i = 0; i < S; ++i) ss += v[i] * v[i];
    const double s = 1 / std::max(std::sqrt(ss), p.eps);
    for (int i = 0; i < S; ++i) v[i] *= s;
  };
  for (int h = 0; h < p.nk; ++h) {
    l2(&u[size_t(h * S)]);
    l2(&u[size_t((p.nk + h) * S)]);
    for (int i = 0; i < S; ++i) u[size_t(h * S + i)] /= std::sqrt(double(S));
  }
  double* M0 = st.data() + size_t((K - 1) * C);
  for (int h = 0; h < p.nv; ++h) {
    const double* q = &u[size_t((h % p.nk) * S)];
    const double* k = &u[size_t((p.nk + h % p.nk) * S)];
    const double* v = &u[size_t((2 * p.nk + h) * S)];
    const double sp = std::log1p(std::exp(double(alpha[h]) + p.dt_bias[size_t(h)]));
    const double decay = std::exp(sp * p.a[size_t(h)]);
    const double b = 1 / (1 + std::exp(-double(beta[h])));
    double* M = M0 + size_t(h * S * S);
    for (int i = 0; i < S * S; ++i) M[i] *= decay;
    std::vector<double> d(static_cast<size_t>(S)), o(static_cast<size_t>(S), 0.0);
    for (int j = 0; j < S; ++j) {
      double mk = 0;
      for (int i = 0; i < S; ++i) mk += M[i * S + j] * k[i];
      d[size_t(j)] = (v[j] - mk) * b;
    }
    for (int i = 0; i < S; ++i) {
      for (int j = 0; j < S; ++j) M[i * S + j] += k[i] * d[size_t(j)];
    }
    for (int j = 0; j < S; ++j) {
      for (int i = 0; i < S; ++i) o[size_t(j)] += M[i * S + j] * q[i];
    }
    double ss = 0;
    for (int j = 0; j < S; ++j) ss += o[size_t(j)] * o[size_t(j)];
    const double r = 1 / std::sqrt(ss / S + p.eps);
    for (int j = 0; j < S; ++j) {
      out[h * S + j] = o[size_t(j)] * r * p.norm[size_t(j)] * silu(z[h * S + j]);
    }
  }
}

// One random problem: weights, n tokens of projections, a random starting state, and what the
// float64 reference gives for them.
struct Problem {
  Ref r;
  std::vector<float> conv_w, dt, a, norm, qkv, z, beta, alpha, state0;
  DeltaNetParams p;
  int n = 0;
  std::vector<double> want, want_state;

  Problem(int S, int nk, int nv, int K, int n_tokens, uint32_t seed) : n(n_tokens) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> N(0, 1);
    r = Ref{S, nk, nv, K, {}, {}, {}, {}, 1e-6};
    const int C = r.C();
    conv_w.resize(size_t(C * K));
    dt.resize(size_t(nv));
    a.resize(size_t(nv));
    norm.resize(size_t(S));
    for (float& w : conv_w) w = N(rng) * 0.5f;
    for (float& w : dt) w = N(rng) * 0.5f - 1;
    for (float& w : a) w = -std::exp(N(rng) * 0.5f);
    for (float& w : norm) w = 1 + 0.1f * N(rng);
    r.conv_w.assign(conv_w.begin(), conv_w.end());
    r.dt_bias.assign(dt.begin(), dt.end());
    r.a.assign(a.begin(), a.end());
    r.norm.assign(norm.begin(), norm.end());
    p.state_size = S;
    p.n_k_heads = nk;
    p.n_v_heads = nv;
    p.conv_kernel = K;
    p.conv_w = conv_w.data();
    p.dt_bias = dt.data();
    p.a = a.data();
    p.norm = norm.data();
    qkv.resize(size_t(n * C));
    z.resize(size_t(n * nv * S));
    beta.resize(size_t(n * nv));
    alpha.resize(size_t(n * nv));
    for (auto* v : {&qkv, &z, &beta, &alpha}) {
      for (float& x : *v) x = N(rng);
    }
    state0.resize(size_t(p.state_floats()));
    for (float& x : state0) x = 0.3f * N(rng);
    want_state.assign(state0.begin(), state0.end());
    want.resize(size_t(n * nv * S));
    for (int t = 0; t < n; ++t) {
      ref_step(r, &qkv[size_t(t * C)], &z[size_t(t * nv * S)], &beta[size_t(t * nv)],
               &alpha[size_t(t * nv)], want_state, &want[size_t(t * nv * S)]);
    }
  }

  // Largest relative error (|x - ref| / (1 + |ref|)) of out and of the state.
  std::pair<double, double> errors(const std::vector<float>& out,
                                   const std::vector<float>& state) const {
    double wo = 0, ws = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      wo = std::max(wo, std::abs(out[i] - want[i]) / (1 + std::abs(want[i])));
    }
    for (size_t i = 0; i < state.size(); ++i) {
      ws = std::max(ws, std::abs(state[i] - want_state[i]) / (1 + std::abs(want_state[i])));
    }
    return {wo, ws};
  }
};

TEST(DeltaNet, ChunkedFormOnEveryIsaEqualsAFloat64Reference) {
  for (const auto& [S, nk, nv, K] :
       {std::array{16, 2, 4, 4}, std::array{8, 1, 2, 3}, std::array{32, 1, 1, 4},
        std::array{128, 2, 4, 4}, std::array{64, 1, 2, 2}}) {
    SCOPED_TRACE(testing::Message() << "S " << S << " nk " << nk << " nv " << nv << " K " << K);
    const Problem pr(S, nk, nv, K, 97, uint32_t(S * 100 + nv + 7));
    const int C = pr.r.C(), n = pr.n;
    for (MatmulIsa isa : test::cpu_isas()) {
      for (int chunk : {1, 7, 64, n}) {
        DeltaNetParams p = pr.p;
        p.isa = isa;
        std::vector<float> state = pr.state0, qkv = pr.qkv, out(size_t(n * nv * S), -1.0f);
        std::vector<float> scratch(size_t(
            std::max(delta_net_conv_scratch_floats(p), delta_net_heads_scratch_floats(p, chunk))));
        const int block = delta_net_conv_block(p);
        float* ssm = state.data() + p.conv_floats();
        // Calls of 30, 1 and 66 tokens; channels in blocks, heads in two ranges.
        for (const auto& [t0, t1] : {std::pair{0, 30}, std::pair{30, 31}, std::pair{31, n}}) {
          float* u = qkv.data() + int64_t(t0) * C;
          for (int c0 = 0; c0 < C; c0 += block) {
            delta_net_conv(p, u, t1 - t0, state.data(), c0, std::min(C, c0 + block),
                           scratch.data());
          }
          const int hs = nv / 2;
          for (const auto& [h0, h1] : {std::pair{0, hs}, std::pair{hs, nv}}) {
            if (h0 == h1) continue;
            delta_net_heads(p, u, &pr.z[size_t(t0 * nv * S)], &pr.beta[size_t(t0 * nv)],
                            &pr.alpha[size_t(t0 * nv)], t1 - t0, ssm, h0, h1, chunk,
                            &out[size_t(t0 * nv * S)], scratch.data());
          }
        }
        const auto [wo, ws] = pr.errors(out, state);
        EXPECT_LT(wo, 2e-4) << matmul_isa_name(isa) << " chunk " << chunk;
        EXPECT_LT(ws, 2e-4) << matmul_isa_name(isa) << " chunk " << chunk;
      }
    }
  }
}

TEST(DeltaNet, ChunksOfAnySizeEqualAFloat64Reference) {
  for (const auto& [S, nk, nv, K] :
       {std::array{16, 2, 4, 4}, std::array{8, 1, 2, 3}, std::array{32, 1, 1, 4}}) {
    SCOPED_TRACE(testing::Message() << "S " << S << " nk " << nk << " nv " << nv << " K " << K);
    const Problem pr(S, nk, nv, K, 97, uint32_t(S * 100 + nv));
    const int C = pr.r.C(), n = pr.n;
    for (int chunk : {1, 7, 64, n}) {
      std::vector<float> state = pr.state0, out(size_t(n * nv * S)),
                         scratch(size_t(pr.p.scratch_floats()));
      for (int t0 = 0; t0 < n; t0 += chunk) {
        const int m = std::min(chunk, n - t0);
        delta_net_run(pr.p, &pr.qkv[size_t(t0 * C)], &pr.z[size_t(t0 * nv * S)],
                      &pr.beta[size_t(t0 * nv)], &pr.alpha[size_t(t0 * nv)], m, state.data(),
                      &out[size_t(t0 * nv * S)], scratch.data());
      }
      const auto [wo, ws] = pr.errors(out, state);
      EXPECT_LT(wo, 2e-4) << "chunk " << chunk;
      EXPECT_LT(ws, 2e-4) << "chunk " << chunk;
    }
  }
}

// With chunks of 1 and a capture buffer, the state after each token but the last is kept
// (speculative verification rolls back to one): each equals the float64 reference's state
// after that many tokens.
TEST(DeltaNet, CapturedStatesAreTheStatesAfterEachToken) {
  const int S = 16, nk = 2, nv = 4, K = 4, n = 9;
  for (MatmulIsa isa : test::cpu_isas()) {
    SCOPED_TRACE(matmul_isa_name(isa));
    const Problem pr(S, nk, nv, K, n, 99);
    DeltaNetParams p = pr.p;
    p.isa = isa;
    const int C = pr.r.C();
    std::vector<float> state = pr.state0, qkv = pr.qkv, out(size_t(n * nv * S));
    std::vector<float> scratch(
        size_t(std::max(delta_net_conv_scratch_floats(p), delta_net_heads_scratch_floats(p, 1))));
    const int64_t ssm_floats = int64_t(nv) * S * S;
    std::vector<float> captured(size_t((n - 1) * ssm_floats), -7.0f);
    delta_net_conv(p, qkv.data(), n, state.data(), 0, C, scratch.data());
    delta_net_heads(p, qkv.data(), pr.z.data(), pr.beta.data(), pr.alpha.data(), n,
                    state.data() + p.conv_floats(), 0, nv, 1, out.data(), scratch.data(),
                    captured.data(), ssm_floats);
    // The reference, token by token.
    std::vector<double> st(pr.state0.begin(), pr.state0.end());
    std::vector<double> o(size_t(nv * S));
    for (int t = 0; t + 1 < n; ++t) {
      ref_step(pr.r, &pr.qkv[size_t(t * C)], &pr.z[size_t(t * nv * S)], &pr.beta[size_t(t * nv)],
               &pr.alpha[size_t(t * nv)], st, o.data());
      double worst = 0;
      for (int64_t i = 0; i < ssm_floats; ++i) {
        const double want = st[size_t(p.conv_floats() + i)];
        worst = std::max(
            worst, std::abs(captured[size_t(t * ssm_floats + i)] - want) / (1 + std::abs(want)));
      }
      EXPECT_LT(worst, 2e-4) << "after token " << t;
    }
  }
}

}  // namespace
}  // namespace sluice
