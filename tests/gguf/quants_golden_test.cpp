// Golden hashes of ggml's reference quantizers and dequantizers on fixed, portable inputs
// (quants_test_util.h). They were produced by an independent harness outside this repository:
// a line-by-line transcription of llama.cpp's ggml-quants.c (quantize_row_*_ref,
// dequantize_row_*, make_qx_quants, make_q3_quants, make_qkx2_quants, quantize_row_iq4_nl_ref)
// compiled as C11 with -ffp-contract=off and F16C f16 conversions. Matching them means
// byte-identical output to ggml on these inputs. (One deliberate difference: ggml leaves the
// bsums of an all-zero Q8_K block unwritten; both sides zero them here.)
//
// A mismatch after a refactor means the output is no longer ggml's, even if every round trip
// still looks fine. Building with FMA contraction (-march=native with -ffp-contract=fast) can
// also break bit-exactness.
#include <gtest/gtest.h>

#include <vector>

#include "gguf/quants.h"
#include "quants_test_util.h"

namespace sluice {
namespace {

struct Golden {
  GgmlType type;
  uint64_t quantized_normal;  // quantize_row of normal_floats(4096, 2024)
  uint64_t quantized_mixed;   // quantize_row of mixed_floats(4096, 77)
  uint64_t dequantized;       // dequantize_row of random_blocks(type, 16, 99), f32 bits
};

const Golden kGolden[] = {
    {GgmlType::Q4_0, 0x2f66d1596113095aull, 0xc72bf1ec4c02e6a8ull, 0x432af7232ea7cab8ull},
    {GgmlType::Q4_1, 0xa1317b0742c4bcc5ull, 0x185f52d58274ec33ull, 0xf7c0f00c573b9d41ull},
    {GgmlType::Q5_0, 0xfb2d1db864607b10ull, 0xe9b133b707e342ecull, 0x866d4d5150083f4aull},
    {GgmlType::Q5_1, 0x76868c733821b6faull, 0x8710d91e523f0fbfull, 0xb579158a9008bcb1ull},
    {GgmlType::Q8_0, 0x677ebf11c8bef343ull, 0xb1bea64e31417e20ull, 0x36c2d6086ba4b251ull},
    {GgmlType::Q8_1, 0x7a79cdbd0a351940ull, 0xbe839f6251c05dd0ull, 0x5219e08aebcfa7caull},
    {GgmlType::Q2_K, 0x6e9e26fd3533614eull, 0x0ed750d880cec5e1ull, 0x7cbe6476d12ca8afull},
    {GgmlType::Q3_K, 0xbc851a38729e12f2ull, 0x6867618c503749c8ull, 0xa6b267ca75f3c0b2ull},
    {GgmlType::Q4_K, 0x2e8ca786b80587c0ull, 0xb212a222ea683281ull, 0x4f399571976ef985ull},
    {GgmlType::Q5_K, 0x01c9de301258ffa4ull, 0x5f0720ca720ba2c3ull, 0x417c6a7b7e73090bull},
    {GgmlType::Q6_K, 0x1f9923cf2586a2bbull, 0xac4af55f293fbd48ull, 0x2d7f2e06664f747cull},
    {GgmlType::Q8_K, 0x6599636ffebc59d8ull, 0xfb0cfef901de1b5aull, 0xe390824619de2243ull},
    {GgmlType::IQ4_NL, 0x6da3ed24362d67a0ull, 0x4bb071c222e5bdd8ull, 0x40e0f38f214848ebull},
};

TEST(QuantsGolden, QuantizeMatchesGgmlReference) {
  const int64_t n = 4096;
  const std::vector<float> normal = test::normal_floats(n, 2024);
  const std::vector<float> mixed = test::mixed_floats(n, 77);
  for (const Golden& g : kGolden) {
    const std::vector<uint8_t> a = test::quantize(g.type, normal);
    const std::vector<uint8_t> b = test::quantize(g.type, mixed);
    EXPECT_EQ(test::fnv1a(a.data(), a.size()), g.quantized_normal) << type_name(g.type);
    EXPECT_EQ(test::fnv1a(b.data(), b.size()), g.quantized_mixed) << type_name(g.type);
  }
}

TEST(QuantsGolden, DequantizeMatchesGgmlReference) {
  for (const Golden& g : kGolden) {
    const int64_t n = 16 * type_traits(g.type).block_size;
    const std::vector<float> y = test::dequantize(g.type, test::random_blocks(g.type, 16, 99), n);
    EXPECT_EQ(test::fnv1a(y.data(), y.size() * sizeof(float)), g.dequantized) << type_name(g.type);
  }
}

}  // namespace
}  // namespace sluice
