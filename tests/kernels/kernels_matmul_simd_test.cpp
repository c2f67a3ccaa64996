// The SIMD matmul paths (AVX2, AVX-512 VNNI/BF16: every ISA this CPU runs) against the scalar
// specifications on fresh random data at odd shapes:
//   8-bit activation types (Q8_0, Q4_0, Q4_K, Q6_K): against matmul_act_ref (W . dequantized
//   quantized x) within f32 rounding, and against matmul_ref (exact x) within the activation
//   rounding bound sum_j |w_j| * d_block(j) / 2;
//   F16 / BF16: against matmul_ref within f32 rounding (plus bf16 rounding of x for the BF16
//   GEMM);
//   quantize_acts: the SIMD version equals quantize_acts_ref bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "kernels/kernels_test_util.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/packed.h"

namespace sluice {
namespace {

using test::random_floats;

std::vector<MatmulIsa> simd_isas() {
  std::vector<MatmulIsa> out;
  const MatmulIsa best = matmul_isa_best();
  if (best == MatmulIsa::kAvx2 || best == MatmulIsa::kAvx512) out.push_back(MatmulIsa::kAvx2);
  if (best == MatmulIsa::kAvx512) out.push_back(MatmulIsa::kAvx512);
  return out;
}

struct MatmulCase {
  std::vector<float> wf;    // [m, k] the quantized weights, dequantized
  std::vector<uint8_t> wq;  // [m, row_size]
  std::vector<float> x;     // [n, k]
};

MatmulCase make_case(GgmlType type, int64_t m, int64_t k, int64_t n, std::mt19937& rng) {
  MatmulCase c;
  const std::vector<float> w = random_floats(rng, m * k);
  const size_t rb = row_size(type, k);
  c.wq.resize(rb * size_t(m));
  c.wf.resize(size_t(m * k));
  for (int64_t r = 0; r < m; ++r) {
    EXPECT_TRUE(quantize_row(type, w.data() + r * k, c.wq.data() + size_t(r) * rb, k).ok());
    EXPECT_TRUE(dequantize_row(type, c.wq.data() + size_t(r) * rb, c.wf.data() + r * k, k).ok());
  }
  // Activations with a spread of magnitudes, as residual streams have.
  c.x = random_floats(rng, n * k, -2.0f, 2.0f);
  for (int64_t j = 0; j < n * k; j += 37) c.x[size_t(j)] *= 8.0f;
  return c;
}

// W [m, k] of `c` against its activations [n, k], on `isa`.
MatmulParams params_of(const MatmulCase& c, GgmlType type, int64_t m, int64_t k, int64_t n,
                       MatmulIsa isa = MatmulIsa::kAuto) {
  MatmulParams p;
  p.type = type;
  p.w = c.wq.data();
  p.k = k;
  p.m = m;
  p.x = c.x.data();
  p.n = n;
  p.isa = isa;
  return p;
}

void check_int8(GgmlType type, MatmulIsa isa, int64_t m, int64_t k, int64_t n, ThreadPool& pool,
                std::mt19937& rng, bool packed = false) {
  const MatmulCase c = make_case(type, m, k, n, rng);
  Result<PackedWeights> pw = make_error("not packed");
  if (packed) {
    pw = PackedWeights::pack(type, c.wq.data(), m, k, &pool);
    ASSERT_TRUE(pw.ok()) << pw.status().message();
  }
  std::vector<float> y(size_t(n * m), -1.0f), y1(size_t(n * m)), ref_q(size_t(n * m)),
      ref(size_t(n * m));
  MatmulParams p = params_of(c, type, m, k, n, isa);
  p.packed = packed ? &*pw : nullptr;
  p.y = y.data();
  matmul(p, &pool);
  p.y = y1.data();
  matmul(p, nullptr);
  EXPECT_EQ(y, y1) << "thread count changed the result";
  p.packed = nullptr;
  p.y = ref_q.data();
  matmul_act_ref(p);
  p.y = ref.data();
  matmul_ref(p);

  ActBuffer a;
  quantize_acts_ref(c.x.data(), n, k, a);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < m; ++r) {
      double mag = 0, act_err = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double wj = c.wf[size_t(r * k + j)];
        mag += std::fabs(wj * a.d()[(i * k + j) / 32] * a.qs()[i * a.stride() + j]) +
               std::fabs(wj * c.x[size_t(i * k + j)]);
        act_err += std::fabs(wj) * a.d()[(i * k + j) / 32] * 0.5;
      }
      // Q4_K's minimums are summed separately from the scaled quants: allow for the larger
      // intermediate terms (|d sc q x| <= |w x| + |dmin m x|, both bounded by ~2 mag).
      const double tol = 4e-7 * std::sqrt(double(k)) * 4 * mag + 1e-30;
      const size_t at = size_t(i * m + r);
      ASSERT_NEAR(y[at], ref_q[at], tol)
          << type_name(type) << " " << matmul_isa_name(isa) << " m=" << m << " k=" << k
          << " n=" << n << " at " << i << "," << r;
      ASSERT_NEAR(y[at], ref[at], act_err * 1.0001 + tol) << type_name(type) << " vs exact x";
    }
  }
}

TEST(MatmulSimd, Int8ActivationTypesOddShapes) {
  ThreadPool pool(3);
  SLUICE_FRESH_RNG(rng);
  for (MatmulIsa isa : simd_isas()) {
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
      const int64_t bs = type_traits(type).block_size;
      std::vector<int64_t> ks = {bs, 3 * bs};
      if (bs == 32) ks.push_back(33 * bs);
      for (int64_t k : ks) {
        for (int64_t m : {1, 3, 31, 33}) {
          for (int64_t n : {1, 2, 3, 4, 5, 9, 33}) check_int8(type, isa, m, k, n, pool, rng);
        }
      }
    }
  }
}

// Q8_0 / Q4_0 / Q4_K / Q6_K repacked 16 rows at a time (packed.h), on every SIMD ISA this CPU
// runs (AVX2 reads the 16-row vectors as two 8-row halves): every tail of the 16-row groups, of
// the activation-row tiles, the decode path (n = 1, 2) and long rows.
TEST(MatmulSimd, PackedWeightsOddShapes) {
  if (!PackedWeights::supported(GgmlType::Q8_0)) GTEST_SKIP() << "no SIMD ISA on this CPU";
  ThreadPool pool(3);
  SLUICE_FRESH_RNG(rng);
  for (MatmulIsa isa : simd_isas()) {
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
      const int64_t unit = type_traits(type).block_size;
      for (int64_t k : {unit, 3 * unit, 33 * 32 * unit / 32}) {
        for (int64_t m : {1, 3, 8, 9, 16, 31, 33}) {
          for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 15, 33}) {
            check_int8(type, isa, m, k, n, pool, rng, /*packed=*/true);
          }
        }
      }
      check_int8(type, isa, 4097, 256, 1, pool, rng, true);
      check_int8(type, isa, 67, 4096, 7, pool, rng, true);
      check_int8(type, isa, 50, 512, 300, pool, rng, true);  // several L2 chunks
      // Rows padded apart (act_row_stride), through the 8-row AVX2 tiles and their tails.
      check_int8(type, isa, 40, 2048, 19, pool, rng, true);
    }
  }
}

// The AVX2 packed kernels' vpdpbusd copies (AVX-VNNI where the CPU has it; its EVEX twin on
// AVX-512 hosts) against the vpmaddubsw one: the same integer sums and float steps, so equal bit
// for bit, on every tile shape (decode pairs, 4-row prefill tiles and their tails, a second
// L2 chunk of activation rows) and on Q8_0 weights of -128.
TEST(MatmulSimd, PackedVnniCopiesEqualTheAvx2KernelBitForBit) {
  using Gemm =
      void (*)(const PackedWeights&, int64_t, int64_t, const QuantizedActs&, float*, int64_t);
  std::vector<std::pair<const char*, Gemm>> copies;
  if (cpu_has_avx_vnni()) copies.emplace_back("avx-vnni", &kern_avx2_vnni::gemm_packed);
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) {
    copies.emplace_back("avx512-vnni ymm", &kern_avx2_vnni512::gemm_packed);
  }
  if (copies.empty() || !cpu_runs_isa(MatmulIsa::kAvx2)) GTEST_SKIP() << "no VNNI on this CPU";
  SLUICE_FRESH_RNG(rng);
  for (GgmlType type :
       {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4}) {
    const int64_t unit = type_traits(type).block_size;
    for (int64_t k : {unit, 5 * unit, 2048 + 3 * unit}) {
      for (int64_t m : {9, 16, 33}) {
        for (int64_t n : {1, 2, 3, 4, 7, 130}) {
          MatmulCase c = make_case(type, m, k, n, rng);
          if (type == GgmlType::Q8_0) {
            const size_t rb = row_size(type, k);
            for (int64_t r = 0; r < m; ++r) {
              auto* q = reinterpret_cast<int8_t*>(c.wq.data() + size_t(r) * rb + 2);
              q[r % 32] = -128;
            }
          }
          Result<PackedWeights> pw = PackedWeights::pack(type, c.wq.data(), m, k);
          ASSERT_TRUE(pw.ok()) << pw.status().message();
          ActBuffer a;
          quantize_acts(c.x.data(), n, k, a, MatmulIsa::kAvx2);
          std::vector<float> want(size_t(n * m), -1.0f);
          kern_avx2::gemm_packed(*pw, 0, pw->n_groups(), a.view(), want.data(), m);
          for (const auto& [name, gemm] : copies) {
            std::vector<float> got(size_t(n * m), -2.0f);
            gemm(*pw, 0, pw->n_groups(), a.view(), got.data(), m);
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                  << name << " " << type_name(type) << " m=" << m << " k=" << k << " n=" << n
                  << " at " << i << ": " << got[i] << " vs " << want[i];
            }
          }
        }
      }
    }
  }
}

// MXFP4 repacked 16 rows at a time (packed.h) on every SIMD ISA this CPU runs: the same integer
// dots and the same f32 steps per block as the scalar kernel over the file's rows, so equal to it
// bit for bit; every group and tile tail, the decode path, long rows, block exponents at both
// ends (the subnormal scales 2^-128, 2^-127 and 2^126), and equal whatever the thread count.
TEST(MatmulSimd, PackedMxfp4EqualsTheScalarKernelBitForBit) {
  if (!PackedWeights::supported(GgmlType::MXFP4)) GTEST_SKIP() << "no SIMD ISA on this CPU";
  ThreadPool pool(3);
  SLUICE_FRESH_RNG(rng);
  const auto run = [&](MatmulIsa isa, int64_t m, int64_t k, int64_t n) {
    MatmulCase c = make_case(GgmlType::MXFP4, m, k, n, rng);
    const size_t rb = row_size(GgmlType::MXFP4, k);
    for (int64_t r = 0; r < m; ++r) {  // a few blocks at the exponent's ends
      uint8_t* row = c.wq.data() + size_t(r) * rb;
      const int64_t nb = k / 32;
      row[size_t(r % nb) * sizeof(BlockMxfp4)] = uint8_t(r % 3 == 0 ? 0 : r % 3 == 1 ? 1 : 254);
    }
    Result<PackedWeights> pw =
        PackedWeights::pack(GgmlType::MXFP4, c.wq.data(), m, k, &pool, nullptr, isa);
    ASSERT_TRUE(pw.ok()) << pw.status().message();
    std::vector<float> want(size_t(n * m), -1.0f), got(size_t(n * m), -2.0f),
        got1(size_t(n * m), -3.0f);
    MatmulParams p = params_of(c, GgmlType::MXFP4, m, k, n, MatmulIsa::kScalar);
    p.y = want.data();
    matmul(p, nullptr);
    p.isa = isa;
    p.packed = &*pw;
    p.y = got.data();
    matmul(p, &pool);
    p.y = got1.data();
    matmul(p, nullptr);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
          << matmul_isa_name(isa) << " m=" << m << " k=" << k << " n=" << n << " at " << i << ": "
          << got[i] << " vs " << want[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(got1[i]), std::bit_cast<uint32_t>(got[i])) << "threads";
    }
  };
  for (MatmulIsa isa : simd_isas()) {
    for (int64_t k : {32, 96, 1056, 2880}) {
      for (int64_t m : {1, 3, 8, 9, 16, 31, 33}) {
        for (int64_t n : {1, 2, 3, 5, 8, 9, 33}) run(isa, m, k, n);
      }
    }
    run(isa, 2880, 2880, 1);  // gpt-oss's expert shape, decode
    run(isa, 50, 512, 300);   // several L2 chunks of activation rows
  }
}

// Q8_0 weights of -128 (GGUF allows them; quantizers never write them) on the packed path: AVX2
// reads the stored q + 128 back as signed q through the sign trick.
TEST(MatmulSimd, PackedQ8_0TakesTheWholeInt8Range) {
  if (!PackedWeights::supported(GgmlType::Q8_0)) GTEST_SKIP() << "no SIMD ISA on this CPU";
  SLUICE_FRESH_RNG(rng);
  const int64_t m = 19, k = 96, n = 3;
  MatmulCase c = make_case(GgmlType::Q8_0, m, k, n, rng);
  const size_t rb = row_size(GgmlType::Q8_0, k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < k / 32; ++b) {
      auto* q = reinterpret_cast<int8_t*>(c.wq.data() + size_t(r) * rb + size_t(b) * 34 + 2);
      q[(r + b) % 32] = -128;
      q[(r + b + 7) % 32] = 127;
    }
  }
  for (int64_t r = 0; r < m; ++r) {
    ASSERT_TRUE(
        dequantize_row(GgmlType::Q8_0, c.wq.data() + size_t(r) * rb, c.wf.data() + r * k, k).ok());
  }
  Result<PackedWeights> pw = PackedWeights::pack(GgmlType::Q8_0, c.wq.data(), m, k);
  ASSERT_TRUE(pw.ok());
  std::vector<float> ref(size_t(n * m));
  MatmulParams p = params_of(c, GgmlType::Q8_0, m, k, n);
  p.y = ref.data();
  matmul_act_ref(p);
  for (MatmulIsa isa : simd_isas()) {
    std::vector<float> y(size_t(n * m));
    p.isa = isa;
    p.packed = &*pw;
    p.y = y.data();
    matmul(p, nullptr);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << matmul_isa_name(isa) << " " << i;
    }
  }
}

// Packed F16 and BF16 on every SIMD ISA, for every tail of the tiles and groups, several
// k-blocks, every decode tile and several prefill chunks. Packed in columns of 16 rows (F16
// everywhere, BF16 on AVX2) they give, bit for bit, each output's fused multiply-add chain over
// its columns in order, the scalar loop below, whatever the ISA, the batch (row i of an n-row
// product is the product of row i alone) and the threads. AVX-512's BF16 (the rows copied into
// huge pages) gives the row kernels' results bit for bit. Weights packed in a layout the other
// ISA does not read are read from their rows there: that ISA's unpacked result.
TEST(MatmulSimd, PackedHalfTypesGiveTheirSpecifiedResults) {
  if (simd_isas().empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  ThreadPool pool(2);
  SLUICE_FRESH_RNG(rng);
  struct Shape {
    int64_t m, k, n;
  };
  const Shape shapes[] = {{37, 96, 1},   {37, 96, 5},    {37, 96, 13},   {1, 16, 1},
                          {3, 32, 2},    {16, 48, 6},    {17, 64, 7},    {33, 2064, 1},
                          {31, 3072, 4}, {4097, 32, 1},  {300, 1040, 9}, {130, 256, 33},
                          {100, 64, 1},  {100, 64, 2},   {100, 64, 3},   {100, 48, 5},
                          {4097, 32, 7}, {64, 2064, 12}, {129, 80, 2},   {37, 96, 0}};
  for (MatmulIsa isa : simd_isas()) {
    for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
      for (const Shape& sh : shapes) {
        const MatmulCase c = make_case(type, sh.m, sh.k, sh.n, rng);
        Result<PackedWeights> pw =
            PackedWeights::pack(type, c.wq.data(), sh.m, sh.k, &pool, nullptr, isa);
        ASSERT_TRUE(pw.ok()) << pw.status().message();
        const bool chain = isa == MatmulIsa::kAvx2 || type == GgmlType::F16;
        EXPECT_EQ(pw->half_packing(), chain ? HalfPacking::kColumns16 : HalfPacking::kRows);
        const size_t rows =
            pw->is_copy() ? size_t(sh.m) : size_t(pw->n_groups() * PackedWeights::kRows);
        EXPECT_EQ(pw->bytes(), rows * size_t(sh.k) * 2);
        std::vector<float> y(size_t(sh.n * sh.m)), yp(size_t(sh.n * sh.m), -1.0f), y1(yp);
        MatmulParams p = params_of(c, type, sh.m, sh.k, sh.n, isa);
        if (chain) {
          for (int64_t i = 0; i < sh.n; ++i) {
            for (int64_t r = 0; r < sh.m; ++r) {
              float acc = 0;
              for (int64_t j = 0; j < sh.k; ++j) {
                acc = std::fma(c.wf[size_t(r * sh.k + j)], c.x[size_t(i * sh.k + j)], acc);
              }
              y[size_t(i * sh.m + r)] = acc;
            }
          }
        } else {
          p.y = y.data();
          matmul(p, &pool);
        }
        p.packed = &*pw;
        p.y = yp.data();
        matmul(p, &pool);
        p.y = y1.data();
        matmul(p, nullptr);
        const std::string what = std::string(matmul_isa_name(isa)) + " " +
                                 std::string(type_name(type)) + " m=" + std::to_string(sh.m) +
                                 " k=" + std::to_string(sh.k) + " n=" + std::to_string(sh.n);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(yp[i]), std::bit_cast<uint32_t>(y[i]))
              << what << " at " << i << ": " << yp[i] << " vs " << y[i];
        }
        EXPECT_EQ(yp, y1) << what << ": thread count changed the result";
        for (MatmulIsa other : simd_isas()) {
          if (other == isa) continue;
          p.isa = other;
          const bool reads_it = type == GgmlType::F16;  // both read F16's columns
          if (!reads_it) {
            p.packed = nullptr;
            p.y = y.data();
            matmul(p, &pool);
          }
          p.packed = &*pw;
          p.y = yp.data();
          matmul(p, &pool);
          EXPECT_EQ(yp, y) << what << " run on " << matmul_isa_name(other);
        }
      }
    }
  }
  const std::vector<uint8_t> w(64 * 2);
  EXPECT_FALSE(PackedWeights::pack(GgmlType::F16, w.data(), 2, 24).ok()) << "k % 16 != 0";
}

TEST(MatmulSimd, PackingRejectsBadShapesAndTypes) {
  const std::vector<uint8_t> w(4096);  // >= 17 rows x 2 blocks x 34 bytes
  EXPECT_FALSE(PackedWeights::pack(GgmlType::Q5_K, w.data(), 1, 256).ok());
  EXPECT_FALSE(PackedWeights::pack(GgmlType::Q4_K, w.data(), 1, 32).ok());
  EXPECT_FALSE(PackedWeights::pack(GgmlType::Q8_0, w.data(), 1, 33).ok());
  EXPECT_FALSE(PackedWeights::pack(GgmlType::Q8_0, w.data(), 0, 32).ok());
  Result<PackedWeights> p = PackedWeights::pack(GgmlType::Q8_0, w.data(), 17, 64);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_groups(), 2);
  EXPECT_EQ(p->bytes(), size_t(2 * 2 * (512 + 32)));
}

TEST(MatmulSimd, Int8ManyRowsAndLongRows) {
  ThreadPool pool(2);
  SLUICE_FRESH_RNG(rng);
  for (MatmulIsa isa : simd_isas()) {
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
      check_int8(type, isa, 4097, 256, 1, pool, rng);
      check_int8(type, isa, 67, 4096, 7, pool, rng);
    }
  }
}

void check_half(GgmlType type, MatmulIsa isa, int64_t m, int64_t k, int64_t n, ThreadPool& pool,
                std::mt19937& rng) {
  const MatmulCase c = make_case(type, m, k, n, rng);
  std::vector<float> y(size_t(n * m), -1.0f), y1(size_t(n * m)), ref(size_t(n * m));
  MatmulParams p = params_of(c, type, m, k, n, isa);
  p.y = y.data();
  matmul(p, &pool);
  p.y = y1.data();
  matmul(p, nullptr);
  EXPECT_EQ(y, y1);
  p.y = ref.data();
  matmul_ref(p);
  // The BF16 GEMM rounds x to bf16 (relative error <= 2^-9).
  const bool bf16_x = type == GgmlType::BF16 && isa == MatmulIsa::kAvx512 && n >= 4 &&
                      k % 32 == 0 && cpu_has_avx512_bf16();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < m; ++r) {
      double mag = 0;
      for (int64_t j = 0; j < k; ++j) {
        mag += std::fabs(double(c.wf[size_t(r * k + j)]) * c.x[size_t(i * k + j)]);
      }
      const double tol = 4e-7 * std::sqrt(double(k)) * mag + (bf16_x ? mag / 512 : 0) + 1e-30;
      ASSERT_NEAR(y[size_t(i * m + r)], ref[size_t(i * m + r)], tol)
          << type_name(type) << " " << matmul_isa_name(isa) << " m=" << m << " k=" << k
          << " n=" << n;
    }
  }
}

// F32, F16, BF16 (f32 activations).
TEST(MatmulSimd, HalfTypesOddShapes) {
  ThreadPool pool(3);
  SLUICE_FRESH_RNG(rng);
  for (MatmulIsa isa : simd_isas()) {
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
      for (int64_t k : {1, 3, 31, 33, 64, 96, 172, 4097, 4096}) {
        for (int64_t m : {1, 3, 31, 33}) {
          for (int64_t n : {1, 3, 4, 5, 9}) check_half(type, isa, m, k, n, pool, rng);
        }
      }
    }
  }
}

TEST(MatmulSimd, QuantizeActsMatchesReferenceBitForBit) {
  SLUICE_FRESH_RNG(rng);
  for (MatmulIsa isa : simd_isas()) {
    for (int64_t k : {32, 96, 1056, 2048, 4096}) {
      for (int64_t n : {1, 3, 33}) {
        std::vector<float> x = random_floats(rng, n * k, -3.0f, 3.0f);
        for (int64_t j = 0; j < 32 && j < n * k; ++j) x[size_t(j)] = 0.0f;  // an all-zero block
        x[size_t(n * k - 1)] = 1e-30f;                                      // tiny values
        ActBuffer got, want;
        quantize_acts(x.data(), n, k, got, isa);
        quantize_acts_ref(x.data(), n, k, want);
        ASSERT_EQ(got.stride(), act_row_stride(k));
        ASSERT_EQ(want.stride(), act_row_stride(k));
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = 0; j < k; ++j) {
            ASSERT_EQ(got.qs()[i * got.stride() + j], want.qs()[i * want.stride() + j])
                << i << "," << j;
          }
        }
        for (int64_t b = 0; b < n * k / 32; ++b) {
          ASSERT_EQ(got.d()[b], want.d()[b]);
          ASSERT_EQ(got.s()[b], want.s()[b]);
          ASSERT_EQ(got.bias()[b], want.bias()[b]);
          ASSERT_EQ(got.bias16()[2 * b], want.bias16()[2 * b]);
          ASSERT_EQ(got.bias16()[2 * b + 1], want.bias16()[2 * b + 1]);
          int32_t sum = 0;
          const int64_t row = 32 * b / k, col = 32 * b % k;
          for (int j = 0; j < 32; ++j) sum += want.qs()[row * want.stride() + col + j];
          ASSERT_EQ(want.bias()[b], -128 * sum);
          ASSERT_EQ(want.bias16()[2 * b] + want.bias16()[2 * b + 1], -32 * sum);
        }
      }
    }
  }
}

TEST(MatmulSimd, PrequantizedActivationsGiveTheSameResult) {
  SLUICE_FRESH_RNG(rng);
  const int64_t m = 40, k = 512, n = 6;
  const MatmulCase c = make_case(GgmlType::Q4_K, m, k, n, rng);
  ActBuffer a;
  quantize_acts(c.x.data(), n, k, a);
  const QuantizedActs view = a.view();
  std::vector<float> y0(size_t(n * m)), y1(size_t(n * m));
  MatmulParams p = params_of(c, GgmlType::Q4_K, m, k, n);
  p.y = y0.data();
  matmul(p, nullptr);
  p.xq = &view;
  p.y = y1.data();
  matmul(p, nullptr);
  EXPECT_EQ(y0, y1);
}

}  // namespace
}  // namespace sluice
