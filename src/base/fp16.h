// IEEE half (f16) and bfloat16 <-> f32 conversions, bit-exact with ggml's
// GGML_FP16_TO_FP32 / GGML_FP32_TO_FP16 (round to nearest even) and ggml_bf16 (RNE, NaN kept
// quiet).
#pragma once

#include <cstdint>
#include <cstring>

namespace sluice {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f16 -> f32, exact for every input (subnormals, inf, NaN).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: value = mant * 2^-24
    float v = float(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

// f32 -> f16 with round-to-nearest-even; overflow goes to inf, NaN stays NaN.
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  }
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {  // below the smallest normal f16 (2^-14): subnormal or zero
    // value in units of 2^-24, rounded to nearest even
    const float v = bits_f32(ax) * 16777216.0f;  // exact scaling by 2^24
    uint32_t m = uint32_t(v);
    const float rem = v - float(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
    return uint16_t(sign | m);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits (RNE)
  uint32_t h = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}

inline float bf16_to_f32(uint16_t b) {
  return bits_f32(uint32_t(b) << 16);
}

// f32 -> bf16 with round-to-nearest-even; NaN forced quiet (as ggml_compute_fp32_to_bf16).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 64);
  return uint16_t((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

}  // namespace sluice
