// dequantize_row_fast is bit-identical to quants.h's dequantize_row for every weight type, and
// the branchless f16 conversion to base/fp16.h's for all 65536 bit patterns.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "gguf/quants.h"
#include "kernels/dequant.h"
#include "kernels/kernels_test_util.h"

namespace sluice {
namespace {

TEST(Dequant, F16ConversionExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = f16_to_f32(uint16_t(h)), got = f16_to_f32_fast(uint16_t(h));
    uint32_t a, b;
    std::memcpy(&a, &want, 4);
    std::memcpy(&b, &got, 4);
    ASSERT_EQ(a, b) << std::hex << "h=0x" << h;
  }
}

TEST(Dequant, RowsBitIdenticalToQuants) {
  std::mt19937 rng(9);
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,   GgmlType::BF16, GgmlType::Q4_0,
                            GgmlType::Q4_1, GgmlType::Q5_0,  GgmlType::Q5_1, GgmlType::Q8_0,
                            GgmlType::Q2_K, GgmlType::Q3_K,  GgmlType::Q4_K, GgmlType::Q5_K,
                            GgmlType::Q6_K, GgmlType::IQ4_NL};
  for (GgmlType type : types) {
    const int64_t bs = type_traits(type).block_size;
    for (int64_t n : {bs, 3 * bs, bs == 1 ? int64_t(4097) : 33 * bs}) {
      // Random bytes cover every code, scale and special value the format can hold.
      std::vector<uint8_t> raw(row_size(type, n));
      for (uint8_t& b : raw) b = uint8_t(rng());
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      ASSERT_TRUE(dequantize_row(type, raw.data(), want.data(), n).ok());
      dequantize_row_fast(type, raw.data(), got.data(), n);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), size_t(n) * 4), 0)
          << type_name(type) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace sluice
