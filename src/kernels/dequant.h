// Row dequantization for the hot path of matmul / get_rows / f16 K/V reads: the same values as
// gguf/quants.h's dequantize_row (bit for bit: the tests compare every type and all 65536 f16
// bit patterns) with plain loops the compiler vectorizes for the common weight types (F16,
// BF16, Q8_0, Q4_0). Other types go through quants.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "gguf/types.h"

namespace sluice {

// f16 bits -> f32, exact for every input, without branches (selects), so loops vectorize.
// Subnormals: o + 2^-14 bias, minus 2^-14 (F. Giesen's "half to float" construction).
inline float f16_to_f32_fast(uint16_t h) {
  const uint32_t o = uint32_t(h & 0x7fffu) << 13;  // exponent and mantissa, f32 position
  const uint32_t e = o & 0x0f800000u;              // the f16 exponent field
  const uint32_t normal = o + 0x38000000u;         // rebias exponent by 127 - 15
  const uint32_t inf_nan = o + 0x70000000u;        // exponent all ones
  float sub_f;
  const uint32_t sub_in = o + 0x38800000u;
  std::memcpy(&sub_f, &sub_in, 4);
  sub_f -= 6.103515625e-05f;  // 2^-14
  uint32_t sub;
  std::memcpy(&sub, &sub_f, 4);
  uint32_t r = e == 0x0f800000u ? inf_nan : (e == 0 ? sub : normal);
  r |= uint32_t(h & 0x8000u) << 16;
  float f;
  std::memcpy(&f, &r, 4);
  return f;
}

// n elements (a multiple of the type's block size) of `type` at `src` -> f32 `dst`. The type
// must satisfy matmul_supports().
void dequantize_row_fast(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace sluice
