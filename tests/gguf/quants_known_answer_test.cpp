// Known-answer vectors derived by hand from the block layouts (ggml's ggml-common.h /
// ggml-quants.c): blocks built from chosen bytes must decode to exact floats, and inputs whose
// encoding follows directly from the reference algorithm must encode to exact bytes.
// f16 constants: 0x3c00 = 1, 0x3800 = 0.5, 0x3400 = 0.25, 0x3000 = 0.125, 0x2c00 = 1/16,
// 0x4000 = 2, 0xbc00 = -1, 0xc000 = -2, 0xa800 = -1/32, 0xa000 = -1/128.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/fp16.h"
#include "gguf/quants.h"
#include "quants_test_util.h"

namespace sluice {
namespace {

using test::block_from;
using test::bytes_of;
using test::dequantize;
using test::quantize;

template <class Block>
std::vector<float> decode(GgmlType type, const Block& b) {
  return dequantize(type, bytes_of(b), Block::kElems);
}

// ------------------------------------------------------------------------- dequantization

TEST(QuantsKnownAnswer, DequantizeQ4_0) {
  BlockQ4_0 b{};
  b.d = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
  const std::vector<float> y = decode(GgmlType::Q4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float(j - 8) * 0.5f) << j;       // low nibbles: weights 0..15
    EXPECT_EQ(y[16 + j], float(7 - j) * 0.5f) << j;  // high nibbles: weights 16..31
  }
}

TEST(QuantsKnownAnswer, DequantizeQ4_1) {
  BlockQ4_1 b{};
  b.d = 0x3400;  // 0.25
  b.m = 0xbc00;  // -1
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
  const std::vector<float> y = decode(GgmlType::Q4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float(j) * 0.25f - 1.0f) << j;
    EXPECT_EQ(y[16 + j], float(15 - j) * 0.25f - 1.0f) << j;
  }
}

TEST(QuantsKnownAnswer, DequantizeQ5_0) {
  // q_j = j: low nibble j & 15, fifth bit set for j >= 16 -> qh bits 16..31.
  BlockQ5_0 b{};
  b.d = 0x3c00;
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | j << 4);
  const uint8_t qh[4] = {0x00, 0x00, 0xff, 0xff};
  std::memcpy(b.qh, qh, 4);
  const std::vector<float> y = decode(GgmlType::Q5_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], float(j - 16)) << j;
}

TEST(QuantsKnownAnswer, DequantizeQ5_1) {
  // q_j = 31 - j: fifth bit set for j < 16 -> qh bits 0..15.
  BlockQ5_1 b{};
  b.d = 0x4000;  // 2
  b.m = 0x3800;  // 0.5
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t((15 - j) | (15 - j) << 4);
  const uint8_t qh[4] = {0xff, 0xff, 0x00, 0x00};
  std::memcpy(b.qh, qh, 4);
  const std::vector<float> y = decode(GgmlType::Q5_1, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], float(31 - j) * 2.0f + 0.5f) << j;
}

TEST(QuantsKnownAnswer, DequantizeQ8_0AndQ8_1) {
  BlockQ8_0 b{};
  b.d = 0x3000;  // 0.125
  for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(8 * j - 128);
  const std::vector<float> y = decode(GgmlType::Q8_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], float(j - 16)) << j;

  BlockQ8_1 c{};
  c.d = 0xc000;  // -2
  c.s = 0x1234;  // not used by dequantization
  for (int j = 0; j < 32; ++j) c.qs[j] = int8_t(j - 16);
  const std::vector<float> z = decode(GgmlType::Q8_1, c);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(z[j], float(j - 16) * -2.0f) << j;
}

TEST(QuantsKnownAnswer, DequantizeIq4Nl) {
  BlockIq4Nl b{};
  b.d = 0xc000;  // -2
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | j << 4);
  const std::vector<float> y = decode(GgmlType::IQ4_NL, b);
  const int codebook[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], -2.0f * float(codebook[j])) << j;
    EXPECT_EQ(y[16 + j], -2.0f * float(codebook[j])) << j;
  }
}

// MXFP4: e = 130 scales the doubled E2M1 codes by 2^(130 - 128) = 4, i.e. E2M1 x 8; byte j holds
// weight j (low nibble) and weight j + 16 (high nibble); codes 8..15 are the negatives.
TEST(QuantsKnownAnswer, DequantizeMxfp4) {
  BlockMxfp4 b{};
  b.e = 130;
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
  const std::vector<float> y = decode(GgmlType::MXFP4, b);
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 8.0f * e2m1[j]) << j;
    EXPECT_EQ(y[16 + j], 8.0f * e2m1[15 - j]) << j;
  }
  // The extreme exponents: 2^-127 (a subnormal half scale, e = 0 -> 2^-128 per doubled unit)
  // and 2^127.
  b.e = 0;
  b.qs[0] = 0x02;  // weight 0: code 2 = 1.0
  EXPECT_EQ(decode(GgmlType::MXFP4, b)[0], std::ldexp(1.0f, -127));
  b.e = 254;
  EXPECT_EQ(decode(GgmlType::MXFP4, b)[0], std::ldexp(1.0f, 127));
}

// Values that are E2M1 x 2^s encode exactly; the largest magnitude 6 x 2^-3 gives
// e = floor(log2 0.75) - 2 + 127 = 124 (units of 2^-3).
TEST(QuantsKnownAnswer, QuantizeMxfp4Representable) {
  std::vector<float> x(32);
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int j = 0; j < 32; ++j) x[j] = e2m1[j % 8] * 0.125f * (j % 3 == 0 ? -1.0f : 1.0f);
  const std::vector<uint8_t> q = quantize(GgmlType::MXFP4, x);
  const auto b = block_from<BlockMxfp4>(q, 0);
  EXPECT_EQ(b.e, 124);
  const std::vector<float> y = dequantize(GgmlType::MXFP4, q, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j] == 0.0f ? 0.0f : x[j]) << j;
  // Code 0 for the zeros (never the negative zero 8), code 7 (6) for weight 7, code 15 (-6)
  // for weight 15 (15 % 3 == 0); weight 16 (j = 0 of the high nibbles): 0 -> code 0.
  EXPECT_EQ(b.qs[0] & 0x0f, 0);
  EXPECT_EQ(b.qs[7] & 0x0f, 7);
  EXPECT_EQ(b.qs[15] & 0x0f, 15);
  EXPECT_EQ(b.qs[0] >> 4, 0);
}

// An outlier of 7.5 units at e0 would clip to 6 (ggml's reference); one exponent up it is 3.75
// units, which rounds to 4: 8 x 2^(e0 - 127) = 7.5 + 0.5, the smaller error for this block.
TEST(QuantsKnownAnswer, QuantizeMxfp4TriesTheNextExponent) {
  std::vector<float> x(32, 0.0f);
  x[5] = 7.5f;  // e0 = floor(log2 7.5) - 2 + 127 = 127: units of 1
  x[6] = 4.0f;  // exact either way
  const std::vector<uint8_t> q = quantize(GgmlType::MXFP4, x);
  EXPECT_EQ(block_from<BlockMxfp4>(q, 0).e, 128);
  const std::vector<float> y = dequantize(GgmlType::MXFP4, q, 32);
  EXPECT_EQ(y[5], 8.0f);
  EXPECT_EQ(y[6], 4.0f);
}

TEST(QuantsKnownAnswer, DequantizeQ2K) {
  // Every sub-block: scale 3, min 2; every qs byte 0xe4 = 2-bit fields 0,1,2,3 (bits 0-1 first),
  // so weight e has q = (e % 128) / 32 and value 0.5 * 3 * q - 0.25 * 2.
  BlockQ2K b{};
  std::memset(b.scales, 0x23, sizeof b.scales);
  std::memset(b.qs, 0xe4, sizeof b.qs);
  b.d = 0x3800;
  b.dmin = 0x3400;
  std::vector<float> y = decode(GgmlType::Q2_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 1.5f * float(e % 128 / 32) - 0.5f) << e;

  // Sub-block scales address weights 16 s .. 16 s + 15: scale s, min 0, q = 1.
  for (int s = 0; s < 16; ++s) b.scales[s] = uint8_t(s);
  std::memset(b.qs, 0x55, sizeof b.qs);
  b.d = 0x3c00;
  y = decode(GgmlType::Q2_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], float(e / 16)) << e;

  // One probe: byte 33 bits 6-7 = second half (weights 128..), position 1, plane 3 -> weight
  // 128 + 96 + 1.
  std::memset(b.scales, 0x01, sizeof b.scales);
  std::memset(b.qs, 0, sizeof b.qs);
  b.qs[33] = 0xc0;
  y = decode(GgmlType::Q2_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], e == 225 ? 3.0f : 0.0f) << e;
}

TEST(QuantsKnownAnswer, DequantizeQ3K) {
  // All 16 scales = 33 (stored 6-bit value; effective 33 - 32 = 1): low nibbles 1 in bytes
  // 0..7 (both halves), high bits 0b10 in every 2-bit field of bytes 8..11.
  BlockQ3K b{};
  std::memset(b.scales, 0x11, 8);
  std::memset(b.scales + 8, 0xaa, 4);
  b.d = 0x3c00;
  std::memset(b.qs, 0xe4, sizeof b.qs);        // low bits q2 = (e % 128) / 32
  std::memset(b.hmask, 0xff, sizeof b.hmask);  // high bit set: no -4
  std::vector<float> y = decode(GgmlType::Q3_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], float(e % 128 / 32)) << e;
  std::memset(b.hmask, 0, sizeof b.hmask);  // high bit clear: q - 4
  y = decode(GgmlType::Q3_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], float(e % 128 / 32 - 4)) << e;

  // Scale probe: byte 8 bits 4-5 are the high bits of scale 8 (s % 4 = 0, s / 4 = 2):
  // scale 8 = 48 -> +16, all others 0 -> -32. d = 1/16, q = 1.
  std::memset(b.scales, 0, sizeof b.scales);
  b.scales[8] = 0x30;
  b.d = 0x2c00;
  std::memset(b.qs, 0x55, sizeof b.qs);
  std::memset(b.hmask, 0xff, sizeof b.hmask);
  y = decode(GgmlType::Q3_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], e / 16 == 8 ? 1.0f : -2.0f) << e;

  // hmask probe: byte 5 bit 2 is weight 2 * 32 + 5 = 69.
  std::memset(b.scales, 0x11, 8);
  std::memset(b.scales + 8, 0xaa, 4);
  b.d = 0x3c00;
  std::memset(b.qs, 0, sizeof b.qs);
  std::memset(b.hmask, 0, sizeof b.hmask);
  b.hmask[5] = 0x04;
  y = decode(GgmlType::Q3_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], e == 69 ? 0.0f : -4.0f) << e;
}

TEST(QuantsKnownAnswer, DequantizeQ4K) {
  // All scales 2 (bytes 0..3, and low nibbles of 8..11), all mins 1 (bytes 4..7, high nibbles
  // of 8..11). qs 0x5a: q = 10 for the first 32 weights of each 64, q = 5 for the next 32.
  BlockQ4K b{};
  const uint8_t scales[12] = {2, 2, 2, 2, 1, 1, 1, 1, 0x12, 0x12, 0x12, 0x12};
  std::memcpy(b.scales, scales, 12);
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3c00;  // 1
  std::memset(b.qs, 0x5a, sizeof b.qs);
  std::vector<float> y = decode(GgmlType::Q4_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], e % 64 < 32 ? 9.0f : 4.0f) << e;

  // Top bits: byte 0 bits 6-7 are scale 4's high bits (2 + 16 = 18, weights 128..159, q = 10);
  // byte 5 bits 6-7 are min 5's high bits (1 + 32 = 33, weights 160..191, q = 5) while min 1
  // (byte 5, low 6 bits) stays 1.
  b.scales[0] |= 0x40;
  b.scales[5] |= 0x80;
  y = decode(GgmlType::Q4_K, b);
  for (int e = 0; e < 256; ++e) {
    const float want = e / 32 == 4   ? 0.5f * 18 * 10 - 1
                       : e / 32 == 5 ? 0.5f * 2 * 5 - 33
                                     : (e % 64 < 32 ? 9.0f : 4.0f);
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(QuantsKnownAnswer, DequantizeQ5K) {
  // Scales 1, mins 0, d = 1: value = q. Probes: qh[3] bit 4 -> weight 4 * 32 + 3 = 131 gets 16;
  // qs[40] high nibble 7 -> quarter 1, position 8, upper 32 -> weight 64 + 32 + 8 = 104.
  BlockQ5K b{};
  const uint8_t scales[12] = {1, 1, 1, 1, 0, 0, 0, 0, 0x01, 0x01, 0x01, 0x01};
  std::memcpy(b.scales, scales, 12);
  b.d = 0x3c00;
  b.qh[3] = 0x10;
  b.qs[40] = 0x70;
  std::vector<float> y = decode(GgmlType::Q5_K, b);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(y[e], e == 131 ? 16.0f : e == 104 ? 7.0f : 0.0f) << e;
  }

  // Mins 2 against dmin 0.5, all high bits set: value = q + 16 - 1.
  const uint8_t scales2[12] = {1, 1, 1, 1, 2, 2, 2, 2, 0x21, 0x21, 0x21, 0x21};
  std::memcpy(b.scales, scales2, 12);
  b.dmin = 0x3800;
  std::memset(b.qh, 0xff, sizeof b.qh);
  std::memset(b.qs, 0x93, sizeof b.qs);  // low nibble 3, high nibble 9
  y = decode(GgmlType::Q5_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], e % 64 < 32 ? 18.0f : 24.0f) << e;
}

TEST(QuantsKnownAnswer, DequantizeQ6K) {
  // d * scale = 0.5 * 2 = 1 and q = 0 everywhere -> -32; then single-field probes.
  BlockQ6K b{};
  b.d = 0x3800;
  std::memset(b.scales, 2, sizeof b.scales);
  b.ql[70] = 0x0f;    // half 1, position 6, low nibble          -> weight 128 + 6     q = 15
  b.ql[5] = 0xa0;     // half 0, position 5, high nibble (r + 64) -> weight 69         q = 10
  b.qh[40] = 0x0c;    // half 1, position 8, bits 2-3 (r + 32)   -> weight 128 + 40   q = 48
  b.qh[1] = 0x80;     // half 0, position 1, bits 6-7 (r + 96)   -> weight 97         q = 32
  b.scales[15] = -1;  // weights 240..255: d * scale = -0.5
  const std::vector<float> y = decode(GgmlType::Q6_K, b);
  for (int e = 0; e < 256; ++e) {
    float want = -32.0f;
    if (e == 134) want = -17.0f;
    if (e == 69) want = -22.0f;
    if (e == 168) want = 16.0f;
    if (e == 97) want = 0.0f;
    if (e >= 240) want = 16.0f;
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(QuantsKnownAnswer, DequantizeQ8K) {
  BlockQ8K b{};
  b.d = 0.25f;
  for (int e = 0; e < 256; ++e) b.qs[e] = int8_t(e - 128);
  const std::vector<float> y = decode(GgmlType::Q8_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], float(e - 128) * 0.25f) << e;
}

TEST(QuantsKnownAnswer, FloatFormats) {
  const std::vector<float> x = {1.0f, -2.5f, 65504.0f, 0.0f};
  const std::vector<uint8_t> f16 = quantize(GgmlType::F16, x);
  EXPECT_EQ(test::hex(f16.data(), f16.size()), "003c00c1ff7b0000");
  const std::vector<uint8_t> bf16 = quantize(GgmlType::BF16, x);
  EXPECT_EQ(test::hex(bf16.data(), bf16.size()), "803f20c080470000");
  EXPECT_EQ(dequantize(GgmlType::F16, f16, 4), x);
  EXPECT_EQ(dequantize(GgmlType::BF16, bf16, 4),
            (std::vector<float>{1.0f, -2.5f, 65536.0f, 0.0f}));  // 65504 rounds up in bf16
  EXPECT_EQ(dequantize(GgmlType::F32, quantize(GgmlType::F32, x), 4), x);
}

// --------------------------------------------------------------------------- quantization

TEST(QuantsKnownAnswer, QuantizeQ8_0MaxMapsTo127) {
  // max |x| = 127 -> d = 1 exactly, levels are the inputs; the sign of the max does not matter.
  for (float extreme : {127.0f, -127.0f}) {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = float(j - 16);
    x[5] = extreme;
    const auto b = block_from<BlockQ8_0>(quantize(GgmlType::Q8_0, x));
    EXPECT_EQ(b.d, 0x3c00);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], int8_t(x[j])) << j;
  }
}

TEST(QuantsKnownAnswer, QuantizeQ8_1CachesScaledSum) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = float(j - 16);
  x[5] = 127.0f;
  const auto b = block_from<BlockQ8_1>(quantize(GgmlType::Q8_1, x));
  EXPECT_EQ(b.d, 0x3c00);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], int8_t(x[j])) << j;
  // sum = (sum_{j<32} j - 16) - (5 - 16) + 127 = -16 + 11 + 127 = 122
  EXPECT_EQ(b.s, f32_to_f16(122.0f));
}

TEST(QuantsKnownAnswer, QuantizeQ4_0SignConvention) {
  // ggml uses the value of largest magnitude (the first on ties) and d = max / -8, so that
  // value lands exactly on level 0 (-8 d).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = float(j % 16 - 8);  // x[0] = -8 is the max: d = 1
  auto b = block_from<BlockQ4_0>(quantize(GgmlType::Q4_0, x));
  EXPECT_EQ(b.d, 0x3c00);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], uint8_t(j * 0x11)) << j;

  // A positive max gives a negative d: +8 -> level 0, and -8 (same magnitude, later) would
  // need level 16, so it clips to 15 = -7.
  x[0] = 8.0f;
  x[1] = -8.0f;
  const std::vector<uint8_t> q = quantize(GgmlType::Q4_0, x);
  b = block_from<BlockQ4_0>(q);
  EXPECT_EQ(b.d, 0xbc00);  // -1
  EXPECT_EQ(b.qs[0] & 15, 0);
  EXPECT_EQ(b.qs[1] & 15, 15);
  const std::vector<float> y = dequantize(GgmlType::Q4_0, q, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], j == 1 || j == 16 ? -7.0f : x[j]) << j;  // x[16] = -8 clips too
  }
}

TEST(QuantsKnownAnswer, QuantizeQ4_1) {
  // min -2, max 1.75: d = 3.75 / 15 = 0.25 exactly, levels (x - min) / d = j % 16.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = -2.0f + 0.25f * float(j % 16);
  const auto b = block_from<BlockQ4_1>(quantize(GgmlType::Q4_1, x));
  EXPECT_EQ(b.d, 0x3400);
  EXPECT_EQ(b.m, 0xc000);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], uint8_t(j * 0x11)) << j;
}

TEST(QuantsKnownAnswer, QuantizeQ5_0AndQ5_1) {
  // Q5_0: x_j = j - 16; max |x| = 16 at x[0] = -16 -> d = 1, q_j = j.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = float(j - 16);
  const auto b0 = block_from<BlockQ5_0>(quantize(GgmlType::Q5_0, x));
  EXPECT_EQ(b0.d, 0x3c00);
  // Q5_1: x_j = 1 + j / 2 -> d = 15.5 / 31 = 0.5, m = 1, q_j = j.
  for (int j = 0; j < 32; ++j) x[j] = 1.0f + 0.5f * float(j);
  const auto b1 = block_from<BlockQ5_1>(quantize(GgmlType::Q5_1, x));
  EXPECT_EQ(b1.d, 0x3800);
  EXPECT_EQ(b1.m, 0x3c00);
  const uint8_t qh[4] = {0x00, 0x00, 0xff, 0xff};  // fifth bit of q_j for j >= 16
  EXPECT_EQ(std::memcmp(b0.qh, qh, 4), 0);
  EXPECT_EQ(std::memcmp(b1.qh, qh, 4), 0);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(b0.qs[j], uint8_t(j * 0x11)) << j;
    EXPECT_EQ(b1.qs[j], uint8_t(j * 0x11)) << j;
  }
}

TEST(QuantsKnownAnswer, QuantizeIq4Nl) {
  // Half of each codebook entry: max |x| = 63.5 (entry -127) -> d = 0.5, indices j % 16, and
  // the least-squares refit returns exactly 0.5 (every term scales by the same power of two).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * float(kIq4nlValues[j % 16]);
  auto b = block_from<BlockIq4Nl>(quantize(GgmlType::IQ4_NL, x));
  EXPECT_EQ(b.d, 0x3800);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], uint8_t(j * 0x11)) << j;

  // A value exactly between entries -10 and 1 (x / d = -4.5) takes the larger entry. The refit
  // moves d by far less than an f16 ulp.
  x[7] = -2.25f;
  b = block_from<BlockIq4Nl>(quantize(GgmlType::IQ4_NL, x));
  EXPECT_EQ(b.d, 0x3800);
  EXPECT_EQ(b.qs[7], 0x78);  // weight 7 -> index 8, weight 23 -> index 7
}

TEST(QuantsKnownAnswer, RoundingTies) {
  // Q8_0 rounds half away from zero (roundf).
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 3.5f;
  const auto b8 = block_from<BlockQ8_0>(quantize(GgmlType::Q8_0, x));
  EXPECT_EQ(b8.qs[1], 3);
  EXPECT_EQ(b8.qs[2], -3);
  EXPECT_EQ(b8.qs[3], 4);

  // Q4_0 truncates x / d + 8.5: a tie goes up.
  for (int j = 0; j < 32; ++j) x[j] = j == 0 ? -8.0f : 0.0f;
  x[1] = -0.5f;
  x[2] = 0.5f;
  const auto b4 = block_from<BlockQ4_0>(quantize(GgmlType::Q4_0, x));
  EXPECT_EQ(b4.qs[1] & 15, 8);
  EXPECT_EQ(b4.qs[2] & 15, 9);
}

TEST(QuantsKnownAnswer, QuantizeQ8K) {
  // max |x| = 127 at x[0] = -127 -> iscale = 1: levels are the inputs, d = 1. Levels round
  // half to even (nearest_int): 2.5 -> 2, 3.5 -> 4, -2.5 -> -2.
  std::vector<float> x(256);
  std::vector<int> want(256);
  for (int e = 0; e < 256; ++e) {
    x[e] = e < 255 ? float(e - 127) : 0.0f;
    want[e] = int(x[e]);
  }
  x[1] = 2.5f, want[1] = 2;
  x[2] = 3.5f, want[2] = 4;
  x[3] = -2.5f, want[3] = -2;
  const auto b = block_from<BlockQ8K>(quantize(GgmlType::Q8_K, x));
  EXPECT_EQ(b.d, 1.0f);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(b.qs[e], want[e]) << e;
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += want[16 * g + i];
    EXPECT_EQ(b.bsums[g], sum) << g;
  }
}

// K-quants on inputs that are already on their grid: the first fit is exact (zero error), no
// trial scale can beat it, and the encoding follows by hand.

TEST(QuantsKnownAnswer, QuantizeQ2KOnGrid) {
  // x_e = e % 4: every sub-block fits scale 1, min 0 -> 4-bit scale 15 against d = 1/15.
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) x[e] = float(e % 4);
  const auto b = block_from<BlockQ2K>(quantize(GgmlType::Q2_K, x));
  EXPECT_EQ(b.d, f32_to_f16(1.0f / 15.0f));
  EXPECT_EQ(b.dmin, 0);
  for (int s = 0; s < 16; ++s) EXPECT_EQ(b.scales[s], 0x0f) << s;
  // byte i holds weights with e % 4 == i % 4 in all four planes
  for (int i = 0; i < 64; ++i) EXPECT_EQ(b.qs[i], uint8_t(i % 4 * 0x55)) << i;
}

TEST(QuantsKnownAnswer, QuantizeQ3KOnGrid) {
  // Levels -4..3 with -4 first in each sub-block: every sub-block scale is 1, the largest maps
  // to -32 -> all stored scales 0 (0 - 32 = -32) against d = 1 / -32.
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) x[e] = e % 16 == 0 ? -4.0f : float((e % 16 + e / 16) % 8 - 4);
  const auto b = block_from<BlockQ3K>(quantize(GgmlType::Q3_K, x));
  EXPECT_EQ(b.d, 0xa800);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b.scales[i], 0) << i;
  for (int e = 0; e < 256; ++e) {
    const int q = int(x[e]) + 4;  // stored level
    EXPECT_EQ(b.hmask[e % 32] >> (e / 32) & 1, q >> 2) << e;
    EXPECT_EQ(b.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32)) & 3, q & 3) << e;
  }
}

TEST(QuantsKnownAnswer, QuantizeQ4KAndQ5KOnGrid) {
  // x_e = e % 16 (Q4_K) or e % 32 (Q5_K): sub-block scale 1, min 0 -> 6-bit scale 63 against
  // d = 1/63; 6-bit mins 0. Scale bytes: 0..3 = 63 | (scale 4..7 >> 4) << 6 = 0xff,
  // 4..7 = mins 0, 8..11 = low nibble of scales 4..7 = 0x0f.
  const uint8_t scales[12] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x0f, 0x0f, 0x0f, 0x0f};
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) x[e] = float(e % 16);
  const auto b4 = block_from<BlockQ4K>(quantize(GgmlType::Q4_K, x));
  EXPECT_EQ(b4.d, f32_to_f16(1.0f / 63.0f));
  EXPECT_EQ(b4.dmin, 0);
  EXPECT_EQ(std::memcmp(b4.scales, scales, 12), 0);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(b4.qs[i], uint8_t(i % 16 * 0x11)) << i;

  for (int e = 0; e < 256; ++e) x[e] = float(e % 32);
  const auto b5 = block_from<BlockQ5K>(quantize(GgmlType::Q5_K, x));
  EXPECT_EQ(b5.d, f32_to_f16(1.0f / 63.0f));
  EXPECT_EQ(b5.dmin, 0);
  EXPECT_EQ(std::memcmp(b5.scales, scales, 12), 0);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(b5.qs[i], uint8_t(i % 16 * 0x11)) << i;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b5.qh[i], i >= 16 ? 0xff : 0x00) << i;
}

TEST(QuantsKnownAnswer, QuantizeQ6KOnGrid) {
  // Integer levels in [-32, 31] with -32 first in each sub-block: sub-block scale 1, int8
  // scales -128 against d = 1 / -128, stored q = x + 32.
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) {
    x[e] = e % 16 == 0 ? -32.0f : float((e % 16 * 5 + e / 16) % 63 - 31);
  }
  const auto b = block_from<BlockQ6K>(quantize(GgmlType::Q6_K, x));
  EXPECT_EQ(b.d, 0xa000);
  for (int s = 0; s < 16; ++s) EXPECT_EQ(b.scales[s], -128) << s;
  for (int e = 0; e < 256; ++e) {
    const int q = int(x[e]) + 32;
    const int half = e / 128, r = e % 128;
    EXPECT_EQ(b.ql[64 * half + r % 64] >> (4 * (r / 64)) & 15, q & 15) << e;
    EXPECT_EQ(b.qh[32 * half + r % 32] >> (2 * (r / 32)) & 3, q >> 4) << e;
  }
}

}  // namespace
}  // namespace sluice
