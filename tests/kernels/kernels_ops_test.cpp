// RMSNorm, RoPE, SwiGLU and softmax against their f64 references at odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/kernels_test_util.h"
#include "kernels/ops.h"

namespace sluice {
namespace {

using test::max_abs_diff;
using test::random_floats;
using test::rel_l2;

constexpr int64_t kSizes[] = {1, 3, 31, 33, 4097};

TEST(RmsNorm, MatchesReference) {
  std::mt19937 rng(1);
  for (int64_t n : kSizes) {
    for (bool weighted : {false, true}) {
      const std::vector<float> x = random_floats(rng, n, -3, 3);
      const std::vector<float> w = random_floats(rng, n, 0.5f, 1.5f);
      std::vector<float> y(x.size()), ref(x.size());
      rms_norm(x.data(), weighted ? w.data() : nullptr, y.data(), n, 1e-5f);
      rms_norm_ref(x.data(), weighted ? w.data() : nullptr, ref.data(), n, 1e-5f);
      EXPECT_LT(rel_l2(y.data(), ref.data(), n), 1e-6) << n;
      // In place gives the same values.
      std::vector<float> z = x;
      rms_norm(z.data(), weighted ? w.data() : nullptr, z.data(), n, 1e-5f);
      EXPECT_EQ(z, y);
    }
  }
}

TEST(RmsNorm, UnitRms) {
  std::vector<float> x = {3.0f, -4.0f};  // mean square 12.5
  std::vector<float> y(2);
  rms_norm_ref(x.data(), nullptr, y.data(), 2, 0.0f);
  EXPECT_NEAR(y[0], 3.0 / std::sqrt(12.5), 1e-7);
  EXPECT_NEAR(y[1], -4.0 / std::sqrt(12.5), 1e-7);
}

TEST(Rope, MatchesReferenceBothStylesWithFactors) {
  std::mt19937 rng(2);
  const std::vector<float> factors = random_floats(rng, 64, 1.0f, 8.0f);
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (int head_dim : {2, 6, 64, 128}) {
      for (int n_rot : {head_dim, head_dim / 2 - (head_dim / 2) % 2}) {
        if (n_rot == 0) continue;
        for (bool with_factors : {false, true}) {
          RopeParams p;
          p.head_dim = head_dim;
          p.n_rot = n_rot;
          p.style = style;
          p.theta_base = 500000.0f;
          p.freq_scale = with_factors ? 0.25f : 1.0f;
          p.freq_factors = with_factors ? factors.data() : nullptr;
          std::vector<float> inv(static_cast<size_t>(n_rot / 2));
          rope_inv_freq(p, inv.data());
          for (int32_t pos : {0, 1, 3, 31, 33, 4097, 131071}) {
            const int n_heads = 3;
            const std::vector<float> x = random_floats(rng, n_heads * head_dim);
            std::vector<float> y = x, ref = x;
            rope(y.data(), n_heads, pos, p, inv.data());
            rope_ref(ref.data(), n_heads, pos, p);
            // The angle is pos * inv_freq with inv_freq rounded to f32: relative error 6e-8 of
            // an angle up to ~1.3e5 radians -> up to ~1e-2 rad at the longest position.
            const double tol = 2e-6 + 1.2e-7 * double(pos);
            EXPECT_LT(max_abs_diff(y.data(), ref.data(), int64_t(x.size())), tol)
                << "style=" << int(style) << " hd=" << head_dim << " rot=" << n_rot
                << " pos=" << pos;
            // Dims past n_rot are untouched.
            for (int h = 0; h < n_heads; ++h) {
              for (int i = n_rot; i < head_dim; ++i) {
                EXPECT_EQ(y[size_t(h * head_dim + i)], x[size_t(h * head_dim + i)]);
              }
            }
          }
        }
      }
    }
  }
}

TEST(Rope, PairsFollowTheStyle) {
  // Position 1, theta 1 -> every pair turns by 1 radian (n_rot = 2: one pair).
  RopeParams p;
  p.head_dim = 4;
  p.n_rot = 4;
  p.theta_base = 1.0f;
  std::vector<float> x = {1, 0, 0, 0};
  p.style = RopeStyle::kNormal;  // pair (0, 1)
  rope_ref(x.data(), 1, 1, p);
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-7);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-7);
  EXPECT_EQ(x[2], 0.0f);
  x = {1, 0, 0, 0};
  p.style = RopeStyle::kNeox;  // pair (0, 2)
  rope_ref(x.data(), 1, 1, p);
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-7);
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_NEAR(x[2], std::sin(1.0), 1e-7);
}

// gpt-oss's YaRN (README of ../shared/testdata/models/arch): head 32, base 150000, factor 32,
// original context 4096, beta 32 / 1: the correction range is pairs 4 .. 9; pairs below 4 keep
// the unscaled frequency, pairs from 9 on are divided by 32, pairs between blend linearly; the
// rotated values are scaled by 1 + 0.1 ln 32.
TEST(Rope, YarnAsGptOss) {
  float corr[2];
  yarn_corr_dims(32, 4096, 150000.0f, 32.0f, 1.0f, corr);
  EXPECT_EQ(corr[0], 4.0f);
  EXPECT_EQ(corr[1], 9.0f);
  RopeParams p;
  p.head_dim = 32;
  p.n_rot = 32;
  p.style = RopeStyle::kNeox;
  p.theta_base = 150000.0f;
  p.freq_scale = 1.0f / 32.0f;
  p.yarn_ext = 1.0f;
  p.yarn_low = corr[0];
  p.yarn_high = corr[1];
  p.mscale = float(1.0 + 0.1 * std::log(32.0));
  std::vector<float> inv(16);
  rope_inv_freq(p, inv.data());
  for (int i = 0; i < 16; ++i) {
    const double e = std::pow(150000.0, -2.0 * i / 32);
    const double ramp = 1.0 - std::min(1.0, std::max(0.0, (i - 4.0) / 5.0));
    EXPECT_NEAR(inv[size_t(i)], e * (ramp + (1.0 - ramp) / 32.0), 1e-7 * e) << i;
  }
  std::mt19937 rng(8);
  for (int32_t pos : {0, 1, 7, 200}) {
    const std::vector<float> x = random_floats(rng, 2 * 32);
    std::vector<float> y = x, ref = x;
    rope(y.data(), 2, pos, p, inv.data());
    rope_ref(ref.data(), 2, pos, p);
    EXPECT_LT(max_abs_diff(y.data(), ref.data(), 64), 2e-6) << pos;
    // Position 0 only scales.
    if (pos == 0) {
      for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(y[size_t(i)], x[size_t(i)] * p.mscale);
    }
  }
}

// gpt-oss's clamped SwiGLU against its reference, and by hand at the clamps: gate 10 acts as 7,
// up 9 as 7 and -9 as -7.
TEST(SwiGluOai, MatchesReferenceAndClamps) {
  std::mt19937 rng(4);
  for (int64_t n : kSizes) {
    const std::vector<float> g = random_floats(rng, n, -12, 12), u = random_floats(rng, n, -12, 12);
    std::vector<float> y(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
    swiglu_oai(g.data(), u.data(), y.data(), n);
    swiglu_oai_ref(g.data(), u.data(), ref.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y[size_t(i)], ref[size_t(i)], 4e-6 * (1 + std::fabs(ref[size_t(i)])));
  }
  const float g[3] = {10.0f, 10.0f, -1.0f}, u[3] = {9.0f, -9.0f, 0.5f};
  float y[3];
  swiglu_oai(g, u, y, 3);
  const double s7 = 7.0 / (1.0 + std::exp(-1.702 * 7.0));
  EXPECT_NEAR(y[0], s7 * 8.0, 1e-5);
  EXPECT_NEAR(y[1], s7 * -6.0, 1e-5);
  EXPECT_NEAR(y[2], -1.0 / (1.0 + std::exp(1.702)) * 1.5, 1e-6);
}

TEST(SwiGlu, MatchesReference) {
  std::mt19937 rng(3);
  for (int64_t n : kSizes) {
    const std::vector<float> g = random_floats(rng, n, -20, 20), u = random_floats(rng, n, -2, 2);
    std::vector<float> ref(g.size());
    swiglu_ref(g.data(), u.data(), ref.data(), n);
    for (MatmulIsa isa : test::cpu_isas()) {
      std::vector<float> y(g.size());
      swiglu(g.data(), u.data(), y.data(), n, isa);
      EXPECT_LT(max_abs_diff(y.data(), ref.data(), n), 1e-5) << matmul_isa_name(isa) << " " << n;
      EXPECT_LT(rel_l2(y.data(), ref.data(), n), 1e-6) << matmul_isa_name(isa) << " " << n;
    }
  }
}

TEST(GeGlu, MatchesReferenceAndKnownValues) {
  std::mt19937 rng(5);
  for (int64_t n : kSizes) {
    const std::vector<float> g = random_floats(rng, n, -12, 12), u = random_floats(rng, n, -2, 2);
    std::vector<float> ref(g.size()), ones(g.size(), 1.0f), gelu_ref(g.size());
    geglu_ref(g.data(), u.data(), ref.data(), n);
    geglu_ref(g.data(), ones.data(), gelu_ref.data(), n);
    for (MatmulIsa isa : test::cpu_isas()) {
      std::vector<float> y(g.size());
      geglu(g.data(), u.data(), y.data(), n, isa);
      // (Absolute: gelu's negative tail is ~0, where relative errors mean nothing.)
      EXPECT_LT(max_abs_diff(y.data(), ref.data(), n), 1e-5) << matmul_isa_name(isa) << " " << n;
      std::vector<float> x = g;  // gelu alone, in place
      gelu(x.data(), n, isa);
      EXPECT_LT(max_abs_diff(x.data(), gelu_ref.data(), n), 1e-5)
          << matmul_isa_name(isa) << " " << n;
    }
  }
  // gelu_tanh(1) = 0.841192, gelu_tanh(-1) = -0.158808, gelu(0) = 0; in place (out == gate);
  // far tails: x and 0.
  for (MatmulIsa isa : test::cpu_isas()) {
    std::vector<float> g = {1.0f, -1.0f, 0.0f, 40.0f, -40.0f}, u = {1.0f, 1.0f, 5.0f, 1.0f, 1.0f};
    geglu(g.data(), u.data(), g.data(), 5, isa);
    EXPECT_NEAR(g[0], 0.841192f, 1e-6) << matmul_isa_name(isa);
    EXPECT_NEAR(g[1], -0.158808f, 1e-6) << matmul_isa_name(isa);
    EXPECT_EQ(g[2], 0.0f) << matmul_isa_name(isa);
    EXPECT_EQ(g[3], 40.0f) << matmul_isa_name(isa);
    EXPECT_NEAR(g[4], 0.0f, 1e-30) << matmul_isa_name(isa);
  }
}

// The vector math (exp, SiLU, GELU) is one source over each ISA's vector type, the same
// operations in the same order: every SIMD ISA gives the same bits, whatever the width and the
// tail, inside exp's clamped range and beyond it.
TEST(SimdMath, EverySimdIsaGivesTheSameBits) {
  std::vector<MatmulIsa> simd;
  for (MatmulIsa isa : test::cpu_isas()) {
    if (isa != MatmulIsa::kScalar) simd.push_back(isa);
  }
  if (simd.size() < 2) GTEST_SKIP() << "fewer than two SIMD ISAs on this CPU";
  SLUICE_FRESH_RNG(rng);
  for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 4097}) {
    const std::vector<float> g = random_floats(rng, n, -120, 120), u = random_floats(rng, n, -3, 3);
    // swiglu, geglu, gelu of each ISA.
    auto run = [&](MatmulIsa isa) {
      std::vector<float> out(size_t(3 * n));
      swiglu(g.data(), u.data(), out.data(), n, isa);
      geglu(g.data(), u.data(), out.data() + n, n, isa);
      std::copy(g.begin(), g.end(), out.begin() + 2 * n);
      gelu(out.data() + 2 * n, n, isa);
      return out;
    };
    const std::vector<float> want = run(simd[0]);
    for (size_t i = 1; i < simd.size(); ++i) {
      EXPECT_EQ(run(simd[i]), want) << matmul_isa_name(simd[i]) << " " << n;
    }
  }
}

TEST(Softmax, MatchesReference) {
  std::mt19937 rng(4);
  for (int64_t n : kSizes) {
    const std::vector<float> x = random_floats(rng, n, -30, 30);
    std::vector<float> y = x, ref = x;
    softmax(y.data(), n);
    softmax_ref(ref.data(), n);
    EXPECT_LT(max_abs_diff(y.data(), ref.data(), n), 1e-6) << n;
    double sum = 0;
    for (float v : y) sum += v;
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

}  // namespace
}  // namespace sluice
