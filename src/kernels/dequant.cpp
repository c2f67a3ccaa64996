#include "kernels/dequant.h"

#include <cassert>

#include "gguf/quants.h"

namespace sluice {
namespace {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void f16_row(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32_fast(load_u16(src + 2 * i));
}

void bf16_row(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(load_u16(src + 2 * i)) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

// Block layouts: gguf/quants.h (BlockQ8_0: f16 d, int8 qs[32]; BlockQ4_0: f16 d, qs[16]).
void q8_0_row(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = src + b * int64_t(sizeof(BlockQ8_0));
    const float d = f16_to_f32_fast(load_u16(blk));
    const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2);
    float* y = dst + b * 32;
    for (int j = 0; j < 32; ++j) y[j] = float(qs[j]) * d;
  }
}

void q4_0_row(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = src + b * int64_t(sizeof(BlockQ4_0));
    const float d = f16_to_f32_fast(load_u16(blk));
    const uint8_t* qs = blk + 2;
    float* y = dst + b * 32;
    for (int j = 0; j < 16; ++j) {
      y[j] = float(int(qs[j] & 0x0f) - 8) * d;
      y[j + 16] = float(int(qs[j] >> 4) - 8) * d;
    }
  }
}

}  // namespace

void dequantize_row_fast(GgmlType type, const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, s, size_t(n) * sizeof(float));
      return;
    case GgmlType::F16:
      f16_row(s, dst, n);
      return;
    case GgmlType::BF16:
      bf16_row(s, dst, n);
      return;
    case GgmlType::Q8_0:
      q8_0_row(s, dst, n);
      return;
    case GgmlType::Q4_0:
      q4_0_row(s, dst, n);
      return;
    default: {
      [[maybe_unused]] const Status st = dequantize_row(type, src, dst, n);
      assert(st.ok());
    }
  }
}

}  // namespace sluice
