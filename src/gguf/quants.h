// Weight formats, bit-exact with the GGUF/ggml block layouts: row dequantization to f32 and a
// reference quantizer for each. These are the specifications that fast kernels are tested
// against; they favour clarity over speed.
//
// A row of n weights is n / block_size blocks stored back to back; every block is
// self-contained (its own scales), so rows can be split at block boundaries. All multi-byte
// fields are little-endian; "f16" fields hold IEEE half bits (see base/fp16.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/status.h"
#include "gguf/types.h"

namespace sluice {

// Types this module can dequantize / quantize.
bool can_dequantize(GgmlType type);
bool can_quantize(GgmlType type);

// Dequantizes `n` values (a multiple of the type's block size) from `src` into `dst`.
// `src` needs no particular alignment. Bit-exact with ggml's dequantize_row_* (scalar C).
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Reference quantizer: `n` floats (a multiple of the block size) into row_size(type, n) bytes
// at `dst`. Deterministic; matches ggml's quantize_row_*_ref output for the same input.
// Block types reject non-finite input, and a block whose f16 scale or offset would overflow
// (|x| beyond about 6.5e4 for Q4_1/Q5_1, whose f16 m holds the minimum, up to about 8e6 for
// Q8_0), with an error naming the element or block; `dst` may then be partly written. F16/BF16
// convert like ggml (overflow -> inf, NaN kept).
Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

// ---------------------------------------------------------------------------------------------
// Block layouts. Sizes are the type_size values of types.cpp (checked again at run time by the
// tests). "weight j" is element j of the block; f16 fields are raw half bits.
// ---------------------------------------------------------------------------------------------

// Q4_0: weight j = d * (q_j - 8), q_j in [0, 15].
//   qs[j] = q_j | q_{j+16} << 4    (j < 16: low nibbles hold weights 0..15, high 16..31)
struct BlockQ4_0 {
  static constexpr int64_t kElems = 32;
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // [16] nibbles, layout above
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: weight j = d * q_j + m, q_j in [0, 15]; nibbles as Q4_0.
struct BlockQ4_1 {
  static constexpr int64_t kElems = 32;
  uint16_t d;      // f16 scale
  uint16_t m;      // f16 offset (the block minimum)
  uint8_t qs[16];  // [16] nibbles, as Q4_0
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: weight j = d * (q_j - 16), q_j in [0, 31] = low nibble (as Q4_0) | bit j of qh << 4.
struct BlockQ5_0 {
  static constexpr int64_t kElems = 32;
  uint16_t d;      // f16 scale
  uint8_t qh[4];   // [32 bits] little-endian u32: bit j = bit 4 of q_j
  uint8_t qs[16];  // [16] low nibbles, as Q4_0
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: weight j = d * q_j + m, q_j in [0, 31]; bits as Q5_0.
struct BlockQ5_1 {
  static constexpr int64_t kElems = 32;
  uint16_t d;      // f16 scale
  uint16_t m;      // f16 offset (the block minimum)
  uint8_t qh[4];   // [32 bits] bit j = bit 4 of q_j
  uint8_t qs[16];  // [16] low nibbles, as Q4_0
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q8_0: weight j = d * qs[j].
struct BlockQ8_0 {
  static constexpr int64_t kElems = 32;
  uint16_t d;     // f16 scale
  int8_t qs[32];  // [32]
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q8_1: weight j = d * qs[j]; s caches d * sum(qs) for dot products with Q4_1/Q5_1.
struct BlockQ8_1 {
  static constexpr int64_t kElems = 32;
  uint16_t d;     // f16 scale
  uint16_t s;     // f16 d * sum_j qs[j]
  int8_t qs[32];  // [32]
};
static_assert(sizeof(BlockQ8_1) == 36);

// IQ4_NL: weight j = d * kIq4nlValues[q_j], a fixed non-linear 16-entry codebook; nibbles as
// Q4_0.
struct BlockIq4Nl {
  static constexpr int64_t kElems = 32;
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // [16] codebook indices, as Q4_0
};
static_assert(sizeof(BlockIq4Nl) == 18);

// MXFP4 (OCP microscaling FP4, gpt-oss's expert weights): weight j = E2M1(q_j) * 2^(e - 127),
// E2M1 = {0, 0.5, 1, 1.5, 2, 3, 4, 6} and their negatives (codes 8..15: sign bit 3); nibbles as
// Q4_0. kMxfp4Values holds the E2M1 values doubled (integers, ggml's kvalues_mxfp4), so weight
// j = kMxfp4Values[q_j] * mxfp4_half_scale(e) with mxfp4_half_scale(e) = 2^(e - 128).
struct BlockMxfp4 {
  static constexpr int64_t kElems = 32;
  uint8_t e;       // E8M0 shared exponent (bias 127; no sign, no mantissa)
  uint8_t qs[16];  // [16] E2M1 codes, as Q4_0
};
static_assert(sizeof(BlockMxfp4) == 17);

inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as an f32, exact for every e (e < 2 gives the subnormals 2^-128, 2^-127).
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The IQ4_NL codebook (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// K-quants: 256-weight super-blocks made of sub-blocks (16 or 32 weights) whose scales are
// themselves quantized against one or two f16 super-block scales.
//
// The 2-bit planes of Q2_K/Q3_K and the 4-bit planes of Q4_K/Q5_K/Q6_K interleave weights in
// 128-element halves (Q4_K/Q5_K: 64-element quarters). For weight e of a super-block:
//
//   2-bit (Q2_K, Q3_K low bits):  half = e / 128, r = e % 128
//     qs[32*half + r % 32] >> (2 * (r / 32)) & 3
//       byte  0..31 : weights   0..31 (bits 0-1), 32..63 (2-3), 64..95 (4-5), 96..127 (6-7)
//       byte 32..63 : the same for weights 128..255
//
//   4-bit (Q4_K, Q5_K low bits):  quarter = e / 64, r = e % 64
//     qs[32*quarter + r % 32] >> (4 * (r / 32)) & 15
//
//   Q6_K low 4 bits:              half = e / 128, r = e % 128
//     ql[64*half + r % 64] >> (4 * (r / 64)) & 15
//   Q6_K high 2 bits:             qh[32*half + r % 32] >> (2 * (r / 32)) & 3

// Q2_K: weight e = d * sc_s * q_e - dmin * m_s, s = e / 16, q_e in [0, 3];
// scales[s] = sc_s | m_s << 4 (both 4-bit).
struct BlockQ2K {
  static constexpr int64_t kElems = 256;
  uint8_t scales[16];  // [16 sub-blocks] low nibble: scale, high nibble: min
  uint8_t qs[64];      // [256 x 2 bits] 2-bit layout above
  uint16_t d;          // f16 super-scale of the sub-block scales
  uint16_t dmin;       // f16 super-scale of the sub-block mins
};
static_assert(sizeof(BlockQ2K) == 84);

// Q3_K: weight e = d * (sc_s - 32) * (q_e - 4), s = e / 16, q_e in [0, 7] where
// q_e = 2-bit value (layout above) | (bit e / 32 of hmask[e % 32]) << 2.
// The 16 6-bit scales sc_s live in 12 bytes:
//   low 4 bits:  s < 8 ? scales[s] & 15 : scales[s - 8] >> 4
//   high 2 bits: scales[8 + s % 4] >> (2 * (s / 4)) & 3
struct BlockQ3K {
  static constexpr int64_t kElems = 256;
  uint8_t hmask[32];   // [32 bytes x 8 bits] high bit of q_e at byte e % 32, bit e / 32
  uint8_t qs[64];      // [256 x 2 bits] 2-bit layout above
  uint8_t scales[12];  // [16 x 6 bits] packing above
  uint16_t d;          // f16 super-scale
};
static_assert(sizeof(BlockQ3K) == 110);

// Q4_K: weight e = d * sc_s * q_e - dmin * m_s, s = e / 32, q_e in [0, 15] (4-bit layout).
// The 8 6-bit scales and 8 6-bit mins live in 12 bytes:
//   s < 4:  sc = scales[s] & 63,                          m = scales[s + 4] & 63
//   s >= 4: sc = scales[s + 4] & 15 | scales[s - 4] >> 6 << 4,
//           m  = scales[s + 4] >> 4 | scales[s]     >> 6 << 4
struct BlockQ4K {
  static constexpr int64_t kElems = 256;
  uint16_t d;          // f16 super-scale of the sub-block scales
  uint16_t dmin;       // f16 super-scale of the sub-block mins
  uint8_t scales[12];  // [8 scales + 8 mins, 6 bits each] packing above
  uint8_t qs[128];     // [256 x 4 bits] 4-bit layout above
};
static_assert(sizeof(BlockQ4K) == 144);

// Q4_K / Q5_K: the 6-bit scale and min of sub-block s (0..7) from a block's 12 `scales` bytes.
void unpack_scale_min_k4(const uint8_t* scales, int s, uint8_t* sc, uint8_t* m);

// Q5_K: as Q4_K with q_e in [0, 31]; bit 4 of q_e is bit (e / 32) of qh[e % 32].
struct BlockQ5K {
  static constexpr int64_t kElems = 256;
  uint16_t d;          // f16 super-scale of the sub-block scales
  uint16_t dmin;       // f16 super-scale of the sub-block mins
  uint8_t scales[12];  // [8 scales + 8 mins, 6 bits each] as Q4_K
  uint8_t qh[32];      // [32 bytes x 8 bits] bit 4 of q_e at byte e % 32, bit e / 32
  uint8_t qs[128];     // [256 x 4 bits] low 4 bits, 4-bit layout above
};
static_assert(sizeof(BlockQ5K) == 176);

// Q6_K: weight e = d * scales[e / 16] * (q_e - 32), q_e in [0, 63] (Q6_K layouts above).
struct BlockQ6K {
  static constexpr int64_t kElems = 256;
  uint8_t ql[128];    // [256 x 4 bits] low 4 bits of q_e
  uint8_t qh[64];     // [256 x 2 bits] high 2 bits of q_e
  int8_t scales[16];  // [16 sub-blocks] signed 8-bit scales
  uint16_t d;         // f16 super-scale
};
static_assert(sizeof(BlockQ6K) == 210);

// Q8_K: weight e = d * qs[e]; an intermediate format for dot products (f32 scale, and
// bsums[s] = sum of qs[16 s .. 16 s + 15]).
struct BlockQ8K {
  static constexpr int64_t kElems = 256;
  float d;            // f32 scale
  int8_t qs[256];     // [256]
  int16_t bsums[16];  // [16 groups of 16]
};
static_assert(sizeof(BlockQ8K) == 292);

}  // namespace sluice
