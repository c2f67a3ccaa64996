// Round trips, error paths and edge cases for every supported type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "quants_test_util.h"

namespace sluice {
namespace {

using test::dequantize;
using test::quantize;

// ---------------------------------------------------------------------------- layout / API

template <class Block>
void expect_layout(GgmlType type) {
  EXPECT_EQ(sizeof(Block), type_traits(type).type_size) << type_name(type);
  EXPECT_EQ(Block::kElems, type_traits(type).block_size) << type_name(type);
}

TEST(Quants, BlockStructsMatchTypeTable) {
  expect_layout<BlockQ4_0>(GgmlType::Q4_0);
  expect_layout<BlockQ4_1>(GgmlType::Q4_1);
  expect_layout<BlockQ5_0>(GgmlType::Q5_0);
  expect_layout<BlockQ5_1>(GgmlType::Q5_1);
  expect_layout<BlockQ8_0>(GgmlType::Q8_0);
  expect_layout<BlockQ8_1>(GgmlType::Q8_1);
  expect_layout<BlockQ2K>(GgmlType::Q2_K);
  expect_layout<BlockQ3K>(GgmlType::Q3_K);
  expect_layout<BlockQ4K>(GgmlType::Q4_K);
  expect_layout<BlockQ5K>(GgmlType::Q5_K);
  expect_layout<BlockQ6K>(GgmlType::Q6_K);
  expect_layout<BlockQ8K>(GgmlType::Q8_K);
  expect_layout<BlockIq4Nl>(GgmlType::IQ4_NL);
  expect_layout<BlockMxfp4>(GgmlType::MXFP4);
}

TEST(Quants, SupportedTypes) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    EXPECT_TRUE(can_dequantize(t) && can_quantize(t)) << type_name(t);
  }
  for (GgmlType t : test::kBlockTypes) {
    EXPECT_TRUE(can_dequantize(t) && can_quantize(t)) << type_name(t);
  }
  for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ4_XS, GgmlType::I8, GgmlType::I32,
                     GgmlType::F64, GgmlType::TQ1_0, GgmlType(99)}) {
    EXPECT_FALSE(can_dequantize(t) || can_quantize(t)) << uint32_t(t);
  }
}

// ------------------------------------------------------------------------------ error paths

TEST(Quants, RejectsLengthNotMultipleOfBlock) {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> q(2048);
  for (GgmlType t : test::kBlockTypes) {
    const int64_t bs = type_traits(t).block_size;
    for (int64_t n : {bs - 1, bs + 1, 3 * bs / 2, int64_t(-bs)}) {
      Status s = quantize_row(t, x.data(), q.data(), n);
      ASSERT_FALSE(s.ok()) << type_name(t) << " n=" << n;
      EXPECT_NE(s.message().find("block size " + std::to_string(bs)), std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find(std::string(type_name(t))), std::string::npos) << s.message();
      EXPECT_FALSE(dequantize_row(t, q.data(), x.data(), n).ok()) << type_name(t) << " n=" << n;
    }
  }
  EXPECT_FALSE(quantize_row(GgmlType::F16, x.data(), q.data(), -1).ok());
  EXPECT_TRUE(quantize_row(GgmlType::Q4_K, x.data(), q.data(), 0).ok());  // empty row
}

TEST(Quants, RejectsUnsupportedType) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> q(1024);
  Status s = quantize_row(GgmlType::IQ2_XXS, x.data(), q.data(), 256);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unsupported type iq2_xxs"), std::string::npos) << s.message();
  s = dequantize_row(GgmlType(99), q.data(), x.data(), 256);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("type id 99"), std::string::npos) << s.message();
}

TEST(Quants, RejectsNonFiniteInput) {
  std::vector<uint8_t> q(1024);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (GgmlType t : test::kBlockTypes) {
      std::vector<float> x(256, 0.5f);
      x[37] = bad;
      Status s = quantize_row(t, x.data(), q.data(), 256);
      ASSERT_FALSE(s.ok()) << type_name(t);
      EXPECT_NE(s.message().find("element 37"), std::string::npos) << s.message();
    }
  }
  // Float formats convert like ggml: NaN stays NaN.
  std::vector<float> x(4, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(quantize_row(GgmlType::F16, x.data(), q.data(), 4).ok());
}

TEST(Quants, RejectsBlockWhoseScaleOverflowsF16) {
  // max |x| / 127 > 65504: Q8_0's f16 d would be inf. The error names the block.
  std::vector<float> x(64, 1.0f);
  x[40] = 1e7f;
  std::vector<uint8_t> q(row_size(GgmlType::Q8_0, 64));
  Status s = quantize_row(GgmlType::Q8_0, x.data(), q.data(), 64);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("block 1 (elements 32..63"), std::string::npos) << s.message();
  // 1e4 is fine for every block type.
  std::vector<float> y(256, 1.0f);
  y[3] = -1e4f;
  for (GgmlType t : test::kBlockTypes) {
    std::vector<uint8_t> out(row_size(t, 256));
    EXPECT_TRUE(quantize_row(t, y.data(), out.data(), 256).ok()) << type_name(t);
  }
}

// ---------------------------------------------------------------------------- round trips

enum class Idempotence {
  kBytes,        // quantize(dequantize(q)) == q byte for byte
  kQ8_1,         // d and qs identical; s differs (see below)
  kDecodedDrift  // bytes may differ; the decoded values move by at most drift_pct
};

struct RoundTripCase {
  GgmlType type;
  double max_rel_rms_pct;  // relative RMS error on N(0, 1) input
  Idempotence idempotence;
  double drift_pct;  // kDecodedDrift only
};

// Bounds: measured on 8192 values of N(0, 1) (printed by the test) plus ~10% headroom.
// Idempotence:
//  - Q4_0/Q5_0/Q8_0/IQ4_NL: the largest decoded magnitude is -8 d / -16 d / 127 d / -127 d
//    exactly, so the re-derived f32 scale equals the stored f16 scale and every level rounds
//    back to itself. Q4_1/Q5_1 hold too unless |min| / (max - min) is extreme (~2^12), where
//    (max - min) recomputed from decoded values can round d to a neighbouring f16.
//  - Q8_1: s = f16(sum * d) uses the f32 d of the first pass, and the stored f16 d on the
//    second, so only s can change.
//  - K-quants: the scale searches re-fit already-quantized values and may pick a different
//    but equally good (Q6_K, Q8_K: same decoded values) or slightly different encoding; Q8_K's
//    f32 d can move by an ulp.
const RoundTripCase kRoundTripCases[] = {
    {GgmlType::F16, 0.025, Idempotence::kBytes, 0},
    {GgmlType::BF16, 0.19, Idempotence::kBytes, 0},
    {GgmlType::Q4_0, 9.5, Idempotence::kBytes, 0},
    {GgmlType::Q4_1, 8.7, Idempotence::kBytes, 0},
    {GgmlType::Q5_0, 4.7, Idempotence::kBytes, 0},
    {GgmlType::Q5_1, 4.2, Idempotence::kBytes, 0},
    {GgmlType::Q8_0, 0.6, Idempotence::kBytes, 0},
    {GgmlType::Q8_1, 0.6, Idempotence::kQ8_1, 0},
    {GgmlType::IQ4_NL, 8.7, Idempotence::kBytes, 0},
    {GgmlType::Q2_K, 33.0, Idempotence::kDecodedDrift, 1.5},
    {GgmlType::Q3_K, 16.5, Idempotence::kDecodedDrift, 4.0},
    {GgmlType::Q4_K, 7.9, Idempotence::kDecodedDrift, 0.5},
    {GgmlType::Q5_K, 4.0, Idempotence::kDecodedDrift, 0.5},
    {GgmlType::Q6_K, 2.0, Idempotence::kDecodedDrift, 0.5},
    {GgmlType::Q8_K, 0.8, Idempotence::kDecodedDrift, 0.05},
    // MXFP4: re-encoding decoded values may pick the other of its two exponents for the same
    // (exactly representable) values: no drift at all.
    {GgmlType::MXFP4, 12.3, Idempotence::kDecodedDrift, 1e-9},
};

TEST(Quants, RoundTripErrorWithinBound) {
  const int64_t n = 8192;  // 256 blocks of 32, 32 super-blocks of 256
  const std::vector<float> x = test::normal_floats(n, 42);
  for (const RoundTripCase& c : kRoundTripCases) {
    const std::vector<uint8_t> q = quantize(c.type, x);
    const std::vector<float> y = dequantize(c.type, q, n);
    const double err_pct = 100.0 * test::rel_rms_error(x, y);
    std::printf("  %-7s rel RMS error %8.4f%%  (bound %.3f%%)\n",
                std::string(type_name(c.type)).c_str(), err_pct, c.max_rel_rms_pct);
    EXPECT_LT(err_pct, c.max_rel_rms_pct) << type_name(c.type);
  }
}

TEST(Quants, RequantizingDecodedValues) {
  const int64_t n = 8192;
  const std::vector<float> x = test::normal_floats(n, 7);
  for (const RoundTripCase& c : kRoundTripCases) {
    const std::vector<uint8_t> q = quantize(c.type, x);
    const std::vector<float> y = dequantize(c.type, q, n);
    const std::vector<uint8_t> q2 = quantize(c.type, y);
    switch (c.idempotence) {
      case Idempotence::kBytes:
        EXPECT_EQ(q, q2) << type_name(c.type);
        break;
      case Idempotence::kQ8_1:
        for (int64_t i = 0; i < n / 32; ++i) {
          const auto a = test::block_from<BlockQ8_1>(q, size_t(i));
          const auto b = test::block_from<BlockQ8_1>(q2, size_t(i));
          EXPECT_EQ(a.d, b.d) << i;
          EXPECT_EQ(std::memcmp(a.qs, b.qs, 32), 0) << i;
        }
        break;
      case Idempotence::kDecodedDrift: {
        const std::vector<float> y2 = dequantize(c.type, q2, n);
        double drift = 0.0, ref = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          drift += double(y2[i] - y[i]) * double(y2[i] - y[i]);
          ref += double(x[i]) * double(x[i]);
        }
        EXPECT_LT(100.0 * std::sqrt(drift / ref), c.drift_pct) << type_name(c.type);
        break;
      }
    }
  }
}

// Blocks are independent: a row of k blocks encodes as the k blocks encoded one by one, at
// several sizes. (Later SIMD kernels may split rows anywhere on block boundaries.)
TEST(Quants, RowsSplitAtBlockBoundaries) {
  for (GgmlType t : test::kBlockTypes) {
    const int64_t bs = type_traits(t).block_size;
    const size_t ts = type_traits(t).type_size;
    for (int64_t n_blocks : {1, 3, 16}) {
      const int64_t n = n_blocks * bs;
      const std::vector<float> x = test::mixed_floats(size_t(((n + 255) / 256) * 256), 3);
      const std::vector<float> row(x.begin(), x.begin() + n);
      const std::vector<uint8_t> whole = quantize(t, row);
      for (int64_t i = 0; i < n_blocks; ++i) {
        const std::vector<float> one(row.begin() + i * bs, row.begin() + (i + 1) * bs);
        const std::vector<uint8_t> q = quantize(t, one);
        EXPECT_EQ(std::memcmp(q.data(), whole.data() + size_t(i) * ts, ts), 0)
            << type_name(t) << " block " << i << " of " << n_blocks;
      }
    }
  }
}

TEST(Quants, UnalignedBuffers) {
  for (GgmlType t : test::kBlockTypes) {
    const int64_t n = 512;
    const std::vector<float> x = test::normal_floats(n, 11);
    const std::vector<uint8_t> q = quantize(t, x);
    std::vector<uint8_t> shifted(q.size() + 1);
    ASSERT_TRUE(quantize_row(t, x.data(), shifted.data() + 1, n).ok());
    EXPECT_EQ(std::memcmp(shifted.data() + 1, q.data(), q.size()), 0) << type_name(t);
    std::vector<float> y(n);
    ASSERT_TRUE(dequantize_row(t, shifted.data() + 1, y.data(), n).ok());
    EXPECT_EQ(y, dequantize(t, q, n)) << type_name(t);
  }
}

// ------------------------------------------------------------------------------ edge cases

TEST(Quants, AllZeroBlocks) {
  for (GgmlType t : test::kBlockTypes) {
    const int64_t n = 512;
    const std::vector<uint8_t> q = quantize(t, std::vector<float>(n, 0.0f));
    for (float v : dequantize(t, q, n)) ASSERT_EQ(v, 0.0f) << type_name(t);
    // Q4_0/Q5_0 compute d = 0 / -8 = -0 and store the mid level (8 / 16); every other format
    // writes zero bytes.
    std::vector<uint8_t> want(q.size(), 0);
    const size_t ts = type_traits(t).type_size;
    for (size_t b = 0; b < q.size() / ts; ++b) {
      uint8_t* block = want.data() + b * ts;
      if (t == GgmlType::Q4_0) {
        block[1] = 0x80;                   // d = -0
        std::memset(block + 2, 0x88, 16);  // levels 8
      } else if (t == GgmlType::Q5_0) {
        block[1] = 0x80;                  // d = -0
        std::memset(block + 2, 0xff, 4);  // fifth bit of level 16
      }
    }
    EXPECT_EQ(q, want) << type_name(t);
  }
}

TEST(Quants, OneHugeValue) {
  // 1000 among values ~0.01: the block scale follows the outlier, which survives to within a
  // few percent; the small values collapse toward zero but stay finite.
  for (GgmlType t : test::kBlockTypes) {
    std::vector<float> x = test::normal_floats(512, 5, 0.01f);
    x[300] = 1000.0f;
    x[40] = -1000.0f;
    const std::vector<float> y = dequantize(t, quantize(t, x), 512);
    EXPECT_NEAR(y[300], 1000.0f, 30.0f) << type_name(t);
    EXPECT_NEAR(y[40], -1000.0f, 30.0f) << type_name(t);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << type_name(t) << " " << i;
      if (i != 300 && i != 40) {
        EXPECT_LT(std::fabs(y[i]), 40.0f) << type_name(t) << " " << i;
      }
    }
  }
}

TEST(Quants, NegativeOnlyBlocks) {
  std::vector<float> x = test::normal_floats(1024, 9);
  for (float& v : x) v = -std::fabs(v) - 0.05f;
  for (const RoundTripCase& c : kRoundTripCases) {
    const std::vector<float> y = dequantize(c.type, quantize(c.type, x), 1024);
    for (float v : y) {
      ASSERT_TRUE(std::isfinite(v)) << type_name(c.type);
      // Decoded values stay (essentially) non-positive: at most one quantization step above 0.
      EXPECT_LT(v, 0.25f) << type_name(c.type);
    }
    // Offset formats get close to their N(0,1) error; a one-signed block is easier for them.
    EXPECT_LT(100.0 * test::rel_rms_error(x, y), c.max_rel_rms_pct) << type_name(c.type);
  }
}

TEST(Quants, OutputIsFiniteAcrossMagnitudes) {
  // From subnormal f32 input (f16 scales flush to 0) up to magnitudes of 5e4 (the mixed row
  // has a 500x outlier), for every format.
  for (float scale : {1e-40f, 1e-30f, 1e-8f, 1e-4f, 1.0f, 1e2f}) {
    const std::vector<float> x = test::mixed_floats(1024, 13);
    std::vector<float> xs(x.size());
    for (size_t i = 0; i < x.size(); ++i) xs[i] = x[i] * scale;
    for (const RoundTripCase& c : kRoundTripCases) {
      const std::vector<float> y = dequantize(c.type, quantize(c.type, xs), 1024);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << type_name(c.type) << " scale " << scale << " " << i;
      }
    }
  }
}

TEST(Quants, ConstantBlocks) {
  // A constant is reproduced up to the f16 rounding of the scales: 1%. At 1e-3 the K-quant
  // super-scales (constant / (nmax * 63 or 128)) fall in the f16 subnormal range, whose
  // spacing (6e-8) costs a few percent.
  struct Case {
    float value;
    float tolerance;
  };
  for (const Case& k : {Case{0.75f, 0.01f}, Case{-3.0f, 0.01f}, Case{1e-3f, 0.05f}}) {
    for (const RoundTripCase& c : kRoundTripCases) {
      const std::vector<float> y =
          dequantize(c.type, quantize(c.type, std::vector<float>(256, k.value)), 256);
      float worst = 0.0f;
      for (float got : y) worst = std::fmax(worst, std::fabs(got - k.value));
      EXPECT_LE(worst, std::fabs(k.value) * k.tolerance) << type_name(c.type) << " " << k.value;
    }
  }
}

}  // namespace
}  // namespace sluice
