// matmul's scalar path (threaded, f32 dot on dequantized rows) against matmul_ref (f64) for every
// weight type at odd shapes; get_rows against dequantize_row.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "gguf/quants.h"
#include "kernels/kernels_test_util.h"
#include "kernels/matmul.h"

namespace sluice {
namespace {

using test::random_floats;

constexpr GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,   GgmlType::BF16, GgmlType::Q4_0,
                               GgmlType::Q4_1, GgmlType::Q5_0,  GgmlType::Q5_1, GgmlType::Q8_0,
                               GgmlType::Q2_K, GgmlType::Q3_K,  GgmlType::Q4_K, GgmlType::Q5_K,
                               GgmlType::Q6_K, GgmlType::IQ4_NL};

std::vector<uint8_t> encode(GgmlType type, const std::vector<float>& w, int64_t m, int64_t k) {
  const size_t rb = row_size(type, k);
  std::vector<uint8_t> out(rb * size_t(m));
  for (int64_t r = 0; r < m; ++r) {
    EXPECT_TRUE(quantize_row(type, w.data() + r * k, out.data() + size_t(r) * rb, k).ok());
  }
  return out;
}

// |y - y_ref| within a few f32 ulps of the sum of |terms| (the f32 dot's error bound).
void expect_close(const MatmulParams& p, const std::vector<float>& y, const std::vector<float>& ref,
                  const std::vector<float>& wf) {
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t r = 0; r < p.m; ++r) {
      double mag = 0;
      for (int64_t j = 0; j < p.k; ++j) {
        mag += std::fabs(double(wf[size_t(r * p.k + j)]) * p.x[i * p.k + j]);
      }
      const double tol = 4e-7 * std::sqrt(double(p.k)) * mag + 1e-30;
      ASSERT_NEAR(y[size_t(i * p.m + r)], ref[size_t(i * p.m + r)], tol)
          << type_name(p.type) << " m=" << p.m << " k=" << p.k << " n=" << p.n << " at " << i << ","
          << r;
    }
  }
}

void check(GgmlType type, int64_t m, int64_t k, int64_t n, ThreadPool& pool, std::mt19937& rng) {
  const std::vector<float> w = random_floats(rng, m * k);
  const std::vector<uint8_t> wq = encode(type, w, m, k);
  // The weights as the kernel sees them (after quantization), for the error bound.
  std::vector<float> wf(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) {
    ASSERT_TRUE(
        dequantize_row(type, wq.data() + size_t(r) * row_size(type, k), wf.data() + r * k, k).ok());
  }
  const std::vector<float> x = random_floats(rng, n * k);
  std::vector<float> y(static_cast<size_t>(n * m), -1.0f), ref(static_cast<size_t>(n * m), -2.0f);
  MatmulParams p;
  p.type = type;
  p.w = wq.data();
  p.k = k;
  p.m = m;
  p.x = x.data();
  p.n = n;
  p.y = y.data();
  p.isa = MatmulIsa::kScalar;  // the SIMD paths: kernels_matmul_simd_test.cpp
  matmul(p, &pool);
  MatmulParams pr = p;
  pr.y = ref.data();
  matmul_ref(pr);
  expect_close(p, y, ref, wf);
  // Serial path gives the same result bit for bit.
  std::vector<float> y1(y.size());
  p.y = y1.data();
  matmul(p, nullptr);
  EXPECT_EQ(y, y1) << type_name(type);
}

TEST(Matmul, EveryTypeOddShapes) {
  ThreadPool pool(3);
  SLUICE_FRESH_RNG(rng);
  for (GgmlType type : kTypes) {
    ASSERT_TRUE(matmul_supports(type)) << type_name(type);
    const int64_t bs = type_traits(type).block_size;
    std::vector<int64_t> ks = {bs, 3 * bs};
    if (bs == 1) ks = {1, 3, 31, 33, 4097};
    if (bs == 32) ks.push_back(33 * bs);
    for (int64_t k : ks) {
      for (int64_t m : {1, 3, 31, 33}) {
        for (int64_t n : {1, 3, 33}) check(type, m, k, n, pool, rng);
      }
    }
  }
}

TEST(Matmul, ManyRowsThreaded) {
  ThreadPool pool(4);
  SLUICE_FRESH_RNG(rng);
  for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    check(type, 4097, 256, 1, pool, rng);
    check(type, 257, 512, 7, pool, rng);
  }
}

// MXFP4 takes 8-bit activations on every ISA (scalar included): the activations are rounded to
// blocks of 32 with f16 scales, as ggml's Q8_0, then integer dots. Against matmul_act_ref at odd
// shapes (odd block counts: the AVX-512 kernel's pairs end on a single block; activation rows
// past its tiles of 4); scalar and AVX2 the same bits (one block-by-block f32 order), AVX-512
// within the tolerance (its scaled sums stay in vector lanes).
TEST(Matmul, Mxfp4AgainstActRefEveryIsa) {
  ThreadPool pool(3);
  SLUICE_FRESH_RNG(rng);
  for (int64_t k : {32, 96, 1056, 2880}) {
    for (int64_t m : {1, 3, 31, 33}) {
      for (int64_t n : {1, 3, 5, 33}) {
        const std::vector<float> w = random_floats(rng, m * k);
        const std::vector<uint8_t> wq = encode(GgmlType::MXFP4, w, m, k);
        const std::vector<float> x = random_floats(rng, n * k);
        std::vector<float> ref(size_t(n * m)), first;
        MatmulParams p;
        p.type = GgmlType::MXFP4;
        p.w = wq.data();
        p.k = k;
        p.m = m;
        p.x = x.data();
        p.n = n;
        p.y = ref.data();
        matmul_act_ref(p);
        for (MatmulIsa isa : test::cpu_isas()) {
          std::vector<float> y(size_t(n * m), -1.0f);
          p.y = y.data();
          p.isa = isa;
          matmul(p, &pool);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], ref[i], 2e-6 * std::sqrt(double(k)) * (1 + std::fabs(ref[i])))
                << matmul_isa_name(isa) << " m=" << m << " k=" << k << " n=" << n << " at " << i;
          }
          if (isa == MatmulIsa::kAvx512) continue;
          if (first.empty()) first = y;
          EXPECT_EQ(y, first) << matmul_isa_name(isa);
        }
      }
    }
  }
}

// By hand: every weight E2M1 1.0 (code 2, e = 127), so y = the sum of the rounded activations.
// With max |x| = 100 the block scale is 100 / 127, rounded to f16 (0x3a4d = 0.787597...), and
// each x becomes round(x * 127 / 100).
TEST(Matmul, Mxfp4HandComputedBlock) {
  BlockMxfp4 b{};
  b.e = 127;
  for (uint8_t& q : b.qs) q = 0x22;
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j * j % 37) - 18.0f;
  x[9] = 100.0f;
  int32_t sum_q = 0;
  for (float v : x) sum_q += int32_t(std::nearbyint(v * (127.0f / 100.0f)));
  const float d16 = mxfp4_act_scale(100.0f / 127.0f);
  EXPECT_EQ(d16, 0.78759765625f);
  for (MatmulIsa isa : test::cpu_isas()) {
    float y = 0;
    MatmulParams p;
    p.type = GgmlType::MXFP4;
    p.w = &b;
    p.k = 32;
    p.m = 1;
    p.x = x.data();
    p.n = 1;
    p.y = &y;
    p.isa = isa;
    matmul(p, nullptr);
    EXPECT_EQ(y, d16 * float(sum_q)) << matmul_isa_name(isa);
  }
}

TEST(Matmul, UnsupportedTypesAreReported) {
  EXPECT_FALSE(matmul_supports(GgmlType::I32));
  EXPECT_FALSE(matmul_supports(GgmlType::IQ2_XXS));
}

TEST(GetRows, MatchesDequantizeRow) {
  SLUICE_FRESH_RNG(rng);
  for (GgmlType type : kTypes) {
    const int64_t k = type_traits(type).block_size == 1 ? 33 : 2 * type_traits(type).block_size;
    const int64_t rows = 9;
    const std::vector<float> t = random_floats(rng, rows * k);
    const std::vector<uint8_t> tq = encode(type, t, rows, k);
    const std::vector<int32_t> ids = {8, 0, 3, 3};
    std::vector<float> got(ids.size() * size_t(k)), want(static_cast<size_t>(k));
    get_rows(type, tq.data(), k, ids.data(), int64_t(ids.size()), got.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(
          dequantize_row(type, tq.data() + size_t(ids[i]) * row_size(type, k), want.data(), k)
              .ok());
      for (int64_t j = 0; j < k; ++j) ASSERT_EQ(got[i * size_t(k) + size_t(j)], want[size_t(j)]);
    }
  }
}

}  // namespace
}  // namespace sluice
