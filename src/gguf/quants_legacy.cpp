// Reference codecs of the 32-weight block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL,
// MXFP4.
// Layouts are documented on the structs in quants.h; quantizers follow ggml's
// quantize_row_*_ref operation for operation (see quants_impl.h on bit-exactness).
#include <cfloat>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "gguf/quants_impl.h"

namespace sluice::quant_ref {
namespace {

constexpr int kQk = 32;         // weights per block
constexpr int kHalf = kQk / 2;  // byte j of qs holds weights j and j + kHalf

// The value of largest magnitude (the first one on ties), sign kept.
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQk; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, float* min_out, float* max_out) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < kQk; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  *min_out = min;
  *max_out = max;
}

// ggml's MIN(hi, (int8_t)v) for v = scaled value + 0.5 offset, i.e. truncation toward zero,
// clamped first so that out-of-range or NaN input cannot hit an undefined conversion.
int truncate_level(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  if (v >= float(hi)) return hi;
  return int(v);
}

// ggml's (int8_t)roundf(v): half away from zero, clamped to the int8 range.
int8_t round_to_int8(float v) {
  if (std::isnan(v)) return 0;
  if (v <= -128.0f) return -128;
  if (v >= 127.0f) return 127;
  return int8_t(std::round(v));
}

uint8_t pack_nibbles(int lo, int hi) {
  return uint8_t(lo | hi << 4);
}

// 5-bit levels q[0..31] into low nibbles (as Q4_0) and the qh bit plane.
void pack_5bit(const int* q, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = pack_nibbles(q[j] & 15, q[j + kHalf] & 15);
    high |= uint32_t(q[j] >> 4 & 1) << j;
    high |= uint32_t(q[j + kHalf] >> 4 & 1) << (j + kHalf);
  }
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(high >> (8 * k));
}

// Level j of a 5-bit block: low nibble from qs, bit 4 from qh.
int unpack_5bit(const uint8_t* qs, const uint8_t* qh, int j) {
  const uint32_t high =
      uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
  const int low = j < kHalf ? qs[j] & 15 : qs[j - kHalf] >> 4;
  return low | int(high >> j & 1) << 4;
}

int unpack_nibble(const uint8_t* qs, int j) {
  return j < kHalf ? qs[j] & 15 : qs[j - kHalf] >> 4;
}

// Index of the IQ4_NL codebook entry nearest to v; ties go to the larger entry. Comparing
// 2v against the sum of neighbours keeps the midpoint test exact (ggml's best_index_int8).
int nearest_iq4nl_index(float v) {
  const float v2 = v + v;
  int index = 0;
  for (int k = 1; k < 16; ++k) {
    if (v2 >= float(kIq4nlValues[k - 1] + kIq4nlValues[k])) index = k;
  }
  return index;
}

}  // namespace

// --- Q4_0: symmetric, 16 levels. The largest-magnitude weight maps to level -8 exactly, so d
// carries its sign (d = max / -8) and the range [-8 d, 7 d] is used without waste.

void dequantize_block(const BlockQ4_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQk; ++j) y[j] = float(unpack_nibble(b.qs, j) - 8) * d;
}

void quantize_block(const float* x, BlockQ4_0& b) {
  const float d = signed_absmax(x) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  for (int j = 0; j < kHalf; ++j) {
    b.qs[j] = pack_nibbles(truncate_level(x[j] * id + 8.5f, 15),
                           truncate_level(x[j + kHalf] * id + 8.5f, 15));
  }
}

// --- Q4_1: affine, 16 levels spanning [min, max].

void dequantize_block(const BlockQ4_1& b, float* y) {
  const float d = f16_to_f32(b.d);
  const float m = f16_to_f32(b.m);
  for (int j = 0; j < kQk; ++j) y[j] = float(unpack_nibble(b.qs, j)) * d + m;
}

void quantize_block(const float* x, BlockQ4_1& b) {
  float min, max;
  min_max(x, &min, &max);
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(min);
  for (int j = 0; j < kHalf; ++j) {
    b.qs[j] = pack_nibbles(truncate_level((x[j] - min) * id + 0.5f, 15),
                           truncate_level((x[j + kHalf] - min) * id + 0.5f, 15));
  }
}

// --- Q5_0: as Q4_0 with 32 levels, max -> -16.

void dequantize_block(const BlockQ5_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQk; ++j) y[j] = float(unpack_5bit(b.qs, b.qh, j) - 16) * d;
}

void quantize_block(const float* x, BlockQ5_0& b) {
  const float d = signed_absmax(x) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  int q[kQk];
  for (int j = 0; j < kQk; ++j) q[j] = truncate_level(x[j] * id + 16.5f, 31);
  pack_5bit(q, b.qs, b.qh);
}

// --- Q5_1: as Q4_1 with 32 levels.

void dequantize_block(const BlockQ5_1& b, float* y) {
  const float d = f16_to_f32(b.d);
  const float m = f16_to_f32(b.m);
  for (int j = 0; j < kQk; ++j) y[j] = float(unpack_5bit(b.qs, b.qh, j)) * d + m;
}

void quantize_block(const float* x, BlockQ5_1& b) {
  float min, max;
  min_max(x, &min, &max);
  const float d = (max - min) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(min);
  int q[kQk];
  for (int j = 0; j < kQk; ++j) q[j] = truncate_level((x[j] - min) * id + 0.5f, 31);
  pack_5bit(q, b.qs, b.qh);
}

// --- Q8_0 / Q8_1: symmetric, d = max|x| / 127, levels rounded half away from zero.
// The f32 d (not its f16 rounding) scales the levels, as in ggml.

void dequantize_block(const BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQk; ++j) y[j] = float(b.qs[j]) * d;
}

void quantize_block(const float* x, BlockQ8_0& b) {
  float amax = 0.0f;
  for (int j = 0; j < kQk; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  for (int j = 0; j < kQk; ++j) b.qs[j] = round_to_int8(x[j] * id);
}

void dequantize_block(const BlockQ8_1& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQk; ++j) y[j] = float(b.qs[j]) * d;
}

void quantize_block(const float* x, BlockQ8_1& b) {
  float amax = 0.0f;
  for (int j = 0; j < kQk; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_f16(d);
  int sum = 0;
  for (int j = 0; j < kQk; ++j) {
    b.qs[j] = round_to_int8(x[j] * id);
    sum += b.qs[j];
  }
  b.s = f32_to_f16(float(sum) * d);
}

// --- IQ4_NL: the largest-magnitude weight maps to codebook entry -127 (d = max / -127), the
// others to their nearest entry; then d is refit by least squares with weights x^2,
//   d = sum x^2 q x / sum x^2 q^2,
// keeping the indices. (ggml's reference, ntry = -1: no scale sweep.)

void dequantize_block(const BlockIq4Nl& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQk; ++j) y[j] = d * float(kIq4nlValues[unpack_nibble(b.qs, j)]);
}

void quantize_block(const float* x, BlockIq4Nl& b) {
  std::memset(&b, 0, sizeof b);
  const float max = signed_absmax(x);
  if (std::fabs(max) < 1e-15f) return;  // all zero: d = 0, indices 0

  const float id = 1.0f / (max / float(kIq4nlValues[0]));
  int index[kQk];
  float sumqx = 0.0f, sumq2 = 0.0f;
  for (int j = 0; j < kQk; ++j) {
    index[j] = nearest_iq4nl_index(id * x[j]);
    const float q = float(kIq4nlValues[index[j]]);
    const float w = x[j] * x[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
  b.d = f32_to_f16(sumq2 > 0.0f ? sumqx / sumq2 : 0.0f);
  for (int j = 0; j < kHalf; ++j) b.qs[j] = pack_nibbles(index[j], index[j + kHalf]);
}

// --- MXFP4: ggml's reference takes the shared exponent that puts the block's largest magnitude
// in [4, 8) units of 2^(e - 127) (e0 = floor(log2 amax) - 2 + 127), so magnitudes of (6, 8)
// units clip to 6 (a lone outlier loses up to a quarter of itself). This quantizer also tries
// e0 + 1 and keeps whichever of the two encodes the block with the smaller squared error (e0 on
// a tie); each weight takes the nearest E2M1 value (the lowest code among equals). Values of the
// form E2M1 * 2^s come back exactly (e0 encodes them with error 0).

namespace {

// Codes of x at exponent e into index[]; returns the squared error.
float encode_mxfp4(const float* x, uint8_t e, int* index) {
  const float d = mxfp4_half_scale(e);
  float sq = 0.0f;
  for (int j = 0; j < kQk; ++j) {
    int best = 0;
    float best_err = std::fabs(float(kMxfp4Values[0]) * d - x[j]);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(float(kMxfp4Values[i]) * d - x[j]);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    index[j] = best;
    sq += best_err * best_err;
  }
  return sq;
}

}  // namespace

void dequantize_block(const BlockMxfp4& b, float* y) {
  const float d = mxfp4_half_scale(b.e);
  for (int j = 0; j < kQk; ++j) y[j] = float(kMxfp4Values[unpack_nibble(b.qs, j)]) * d;
}

void quantize_block(const float* x, BlockMxfp4& b) {
  std::memset(&b, 0, sizeof b);
  float amax = 0.0f;
  for (int j = 0; j < kQk; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  if (amax == 0.0f) return;  // e = 0, codes 0: all zero
  const int e0 = clamp_int(int(std::floor(std::log2(amax))) - 2 + 127, 0, 254);
  int index[kQk], index1[kQk];
  const float err0 = encode_mxfp4(x, uint8_t(e0), index);
  b.e = uint8_t(e0);
  if (e0 < 254 && encode_mxfp4(x, uint8_t(e0 + 1), index1) < err0) {
    b.e = uint8_t(e0 + 1);
    std::memcpy(index, index1, sizeof index);
  }
  for (int j = 0; j < kHalf; ++j) b.qs[j] = pack_nibbles(index[j], index[j + kHalf]);
}

}  // namespace sluice::quant_ref
