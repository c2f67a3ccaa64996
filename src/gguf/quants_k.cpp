// Reference codecs of the K-quant super-blocks: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
// Layouts are documented on the structs in quants.h; quantizers follow ggml's
// quantize_row_*_ref operation for operation (see quants_impl.h on bit-exactness).
//
// Every quantizer has the same three steps:
//   1. fit each sub-block on its own (scale, maybe min, levels L) with a search helper;
//   2. quantize the sub-block scales (and mins) against one f16 super-scale each;
//   3. re-round the weights against the scales actually stored, then pack the bit planes.
// A sub-block whose stored scale is zero keeps the levels of step 1 (as in ggml).
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "gguf/quants_impl.h"

namespace sluice::quant_ref {
namespace {

constexpr int kQkK = 256;  // weights per super-block

// --- Bit planes (index maps drawn in quants.h).

// Levels L[0..255] in [0, 3] -> qs[64]: byte 32 h + i holds weights 128 h + i + 32 k in bits 2k.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* l = L + 128 * half;
    for (int i = 0; i < 32; ++i) {
      qs[32 * half + i] = uint8_t(l[i] | l[i + 32] << 2 | l[i + 64] << 4 | l[i + 96] << 6);
    }
  }
}

int unpack_2bit(const uint8_t* qs, int e) {
  const int half = e / 128, r = e % 128;
  return qs[32 * half + r % 32] >> (2 * (r / 32)) & 3;
}

// Levels L[0..255] in [0, 15] -> qs[128]: byte 32 q + i holds weights 64 q + i (low nibble)
// and 64 q + i + 32 (high nibble).
void pack_4bit(const uint8_t* L, uint8_t* qs) {
  for (int quarter = 0; quarter < 4; ++quarter) {
    const uint8_t* l = L + 64 * quarter;
    for (int i = 0; i < 32; ++i) qs[32 * quarter + i] = uint8_t(l[i] | l[i + 32] << 4);
  }
}

int unpack_4bit(const uint8_t* qs, int e) {
  const int quarter = e / 64, r = e % 64;
  return qs[32 * quarter + r % 32] >> (4 * (r / 32)) & 15;
}

// One bit per weight: byte e % 32, bit e / 32 (the high-bit planes of Q3_K and Q5_K).
bool high_bit(const uint8_t* plane, int e) {
  return plane[e % 32] >> (e / 32) & 1;
}

// --- Q4_K / Q5_K scale packing: 8 6-bit scales and 8 6-bit mins in 12 bytes.
//
//   byte:   0..3            4..7            8..11
//   s<4:    sc_s (6 bits)   m_s (6 bits)    -
//   s>=4:   bits 6-7 of     bits 6-7 of     low 4 bits of sc_s | low 4 bits of m_s << 4
//           byte s-4 =      byte s =
//           sc_s >> 4       m_s >> 4

void pack_scale_min_k4(const uint8_t* sc, const uint8_t* m, uint8_t* scales) {
  for (int s = 0; s < 4; ++s) {
    scales[s] = sc[s];
    scales[s + 4] = m[s];
  }
  for (int s = 4; s < 8; ++s) {
    scales[s + 4] = uint8_t((sc[s] & 15) | (m[s] & 15) << 4);
    scales[s - 4] = uint8_t(scales[s - 4] | (sc[s] >> 4) << 6);
    scales[s] = uint8_t(scales[s] | (m[s] >> 4) << 6);
  }
}

// --- Q3_K scale packing: 16 6-bit scales in 12 bytes (layout in quants.h).

int unpack_scale_q3k(const uint8_t* scales, int s) {
  const int low = s < 8 ? scales[s] & 15 : scales[s - 8] >> 4;
  const int high = scales[8 + s % 4] >> (2 * (s / 4)) & 3;
  return low | high << 4;
}

void pack_scales_q3k(const int* sc, uint8_t* scales) {
  std::memset(scales, 0, 12);
  for (int s = 0; s < 16; ++s) {
    if (s < 8) {
      scales[s] = uint8_t(sc[s] & 15);
    } else {
      scales[s - 8] = uint8_t(scales[s - 8] | (sc[s] & 15) << 4);
    }
    scales[8 + s % 4] = uint8_t(scales[8 + s % 4] | (sc[s] >> 4) << (2 * (s / 4)));
  }
}

// Steps 1-3 shared by Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32 with affine fits
// weighted by rms(x) + |x|, 6-bit scales and mins against f16 d and dmin. Writes L[0..255].
void quantize_affine_k(const float* x, int nmax, const AffineSearch& search, uint16_t* d_out,
                       uint16_t* dmin_out, uint8_t* scales, uint8_t* L) {
  float sub_scale[8], sub_min[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0.0f;
    for (int i = 0; i < 32; ++i) sum_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    float weights[32];
    for (int i = 0; i < 32; ++i) weights[i] = av_x + std::fabs(xs[i]);
    sub_scale[s] = fit_affine(32, nmax, xs, weights, L + 32 * s, &sub_min[s], search);
    if (sub_scale[s] > max_scale) max_scale = sub_scale[s];
    if (sub_min[s] > max_min) max_min = sub_min[s];
  }

  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int s = 0; s < 8; ++s) {
    // uint8_t first, then clamp: a (theoretical) negative level wraps as in ggml.
    ls[s] = uint8_t(nearest_int(inv_scale * sub_scale[s]));
    lm[s] = uint8_t(nearest_int(inv_min * sub_min[s]));
    if (ls[s] > 63) ls[s] = 63;
    if (lm[s] > 63) lm[s] = 63;
  }
  pack_scale_min_k4(ls, lm, scales);
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);

  const float d_all = f16_to_f32(*d_out), dmin_all = f16_to_f32(*dmin_out);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    unpack_scale_min_k4(scales, s, &sc, &m);
    const float d = d_all * float(sc);
    if (d == 0.0f) continue;
    const float dm = dmin_all * float(m);
    for (int i = 0; i < 32; ++i) {
      L[32 * s + i] = uint8_t(clamp_int(nearest_int((x[32 * s + i] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

// --- Q2_K: 16 sub-blocks of 16, affine 2-bit levels fit by weighted least absolute deviation
// (weights |x|); 4-bit scales and mins against d and dmin.

void dequantize_block(const BlockQ2K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < kQkK; ++e) {
    const uint8_t sc = b.scales[e / 16];
    const float dl = d * float(sc & 15), ml = dmin * float(sc >> 4);
    y[e] = dl * float(unpack_2bit(b.qs, e)) - ml;
  }
}

void quantize_block(const float* x, BlockQ2K& b) {
  constexpr AffineSearch kSearch = {-0.5f, 0.1f, 15, true};
  uint8_t L[kQkK];
  float sub_scale[16], sub_min[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 16; ++s) {
    float weights[16];
    for (int i = 0; i < 16; ++i) weights[i] = std::fabs(x[16 * s + i]);
    sub_scale[s] = fit_affine(16, 3, x + 16 * s, weights, L + 16 * s, &sub_min[s], kSearch);
    if (sub_scale[s] > max_scale) max_scale = sub_scale[s];
    if (sub_min[s] > max_min) max_min = sub_min[s];
  }

  // Levels are stored as uint8_t before the nibbles are combined; a (theoretical) negative
  // level wraps exactly as in ggml.
  if (max_scale > 0.0f) {
    const float iscale = 15.0f / max_scale;
    for (int s = 0; s < 16; ++s) b.scales[s] = uint8_t(nearest_int(iscale * sub_scale[s]));
    b.d = f32_to_f16(max_scale / 15.0f);
  } else {
    std::memset(b.scales, 0, sizeof b.scales);
    b.d = f32_to_f16(0.0f);
  }
  if (max_min > 0.0f) {
    const float iscale = 15.0f / max_min;
    for (int s = 0; s < 16; ++s) {
      b.scales[s] = uint8_t(b.scales[s] | nearest_int(iscale * sub_min[s]) << 4);
    }
    b.dmin = f32_to_f16(max_min / 15.0f);
  } else {
    b.dmin = f32_to_f16(0.0f);
  }

  const float d_all = f16_to_f32(b.d), dmin_all = f16_to_f32(b.dmin);
  for (int s = 0; s < 16; ++s) {
    const float d = d_all * float(b.scales[s] & 15);
    if (d == 0.0f) continue;
    const float dm = dmin_all * float(b.scales[s] >> 4);
    for (int i = 0; i < 16; ++i) {
      L[16 * s + i] = uint8_t(clamp_int(nearest_int((x[16 * s + i] + dm) / d), 0, 3));
    }
  }
  pack_2bit(L, b.qs);
}

// --- Q3_K: 16 sub-blocks of 16, symmetric levels in [-4, 3] by fit_symmetric_descent; signed
// 6-bit scales against d (the largest-magnitude scale maps to -32).

void dequantize_block(const BlockQ3K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < kQkK; ++e) {
    const float dl = d * float(unpack_scale_q3k(b.scales, e / 16) - 32);
    const int q = unpack_2bit(b.qs, e) - (high_bit(b.hmask, e) ? 0 : 4);
    y[e] = dl * float(q);
  }
}

void quantize_block(const float* x, BlockQ3K& b) {
  int8_t L[kQkK];  // levels + 4, in [0, 7]
  float sub_scale[16];
  float max_scale = 0.0f, amax = 0.0f;
  for (int s = 0; s < 16; ++s) {
    sub_scale[s] = fit_symmetric_descent(16, 4, x + 16 * s, L + 16 * s);
    if (std::fabs(sub_scale[s]) > amax) {
      amax = std::fabs(sub_scale[s]);
      max_scale = sub_scale[s];
    }
  }

  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    int sc[16];
    for (int s = 0; s < 16; ++s) {
      sc[s] = clamp_int(nearest_int(iscale * sub_scale[s]), -32, 31) + 32;
    }
    pack_scales_q3k(sc, b.scales);
    b.d = f32_to_f16(1.0f / iscale);
  } else {
    std::memset(b.scales, 0, sizeof b.scales);
    b.d = f32_to_f16(0.0f);
  }

  const float d_all = f16_to_f32(b.d);
  for (int s = 0; s < 16; ++s) {
    const float d = d_all * float(unpack_scale_q3k(b.scales, s) - 32);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) {
      L[16 * s + i] = int8_t(clamp_int(nearest_int(x[16 * s + i] / d), -4, 3) + 4);
    }
  }

  uint8_t low[kQkK];
  std::memset(b.hmask, 0, sizeof b.hmask);
  for (int e = 0; e < kQkK; ++e) {
    if (L[e] > 3) b.hmask[e % 32] = uint8_t(b.hmask[e % 32] | 1 << (e / 32));
    low[e] = uint8_t(L[e] & 3);
  }
  pack_2bit(low, b.qs);
}

// --- Q4_K: 8 sub-blocks of 32, affine 4-bit levels (weighted least squares, weights
// rms(x) + |x|); 6-bit scales and mins.

void dequantize_block(const BlockQ4K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < kQkK; ++e) {
    uint8_t sc, m;
    unpack_scale_min_k4(b.scales, e / 32, &sc, &m);
    const float dl = d * float(sc), ml = dmin * float(m);
    y[e] = dl * float(unpack_4bit(b.qs, e)) - ml;
  }
}

void quantize_block(const float* x, BlockQ4K& b) {
  constexpr AffineSearch kSearch = {-1.0f, 0.1f, 20, false};
  uint8_t L[kQkK];
  quantize_affine_k(x, 15, kSearch, &b.d, &b.dmin, b.scales, L);
  pack_4bit(L, b.qs);
}

// --- Q5_K: Q4_K with 5-bit levels; bit 4 goes to the qh plane.

void dequantize_block(const BlockQ5K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < kQkK; ++e) {
    uint8_t sc, m;
    unpack_scale_min_k4(b.scales, e / 32, &sc, &m);
    const float dl = d * float(sc), ml = dmin * float(m);
    const int q = unpack_4bit(b.qs, e) + (high_bit(b.qh, e) ? 16 : 0);
    y[e] = dl * float(q) - ml;
  }
}

void quantize_block(const float* x, BlockQ5K& b) {
  constexpr AffineSearch kSearch = {-0.5f, 0.1f, 15, false};
  uint8_t L[kQkK];
  quantize_affine_k(x, 31, kSearch, &b.d, &b.dmin, b.scales, L);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int e = 0; e < kQkK; ++e) {
    if (L[e] > 15) b.qh[e % 32] = uint8_t(b.qh[e % 32] | 1 << (e / 32));
    L[e] &= 15;
  }
  pack_4bit(L, b.qs);
}

// --- Q6_K: 16 sub-blocks of 16, symmetric levels in [-32, 31] by fit_symmetric; int8 scales
// against d (the largest-magnitude scale maps to -128, clamped to 127 on the other side).

void dequantize_block(const BlockQ6K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < kQkK; ++e) {
    const int half = e / 128, r = e % 128;
    const int low = b.ql[64 * half + r % 64] >> (4 * (r / 64)) & 15;
    const int high = b.qh[32 * half + r % 32] >> (2 * (r / 32)) & 3;
    y[e] = d * float(b.scales[e / 16]) * float((low | high << 4) - 32);
  }
}

void quantize_block(const float* x, BlockQ6K& b) {
  std::memset(&b, 0, sizeof b);
  int8_t L[kQkK];  // levels + 32, in [0, 63]
  float sub_scale[16];
  float max_scale = 0.0f, max_abs_scale = 0.0f;
  for (int s = 0; s < 16; ++s) {
    sub_scale[s] = fit_symmetric(16, 32, x + 16 * s, L + 16 * s);
    if (std::fabs(sub_scale[s]) > max_abs_scale) {
      max_abs_scale = std::fabs(sub_scale[s]);
      max_scale = sub_scale[s];
    }
  }
  if (max_abs_scale < 1e-15f) return;  // all zero: d = 0

  const float iscale = -128.0f / max_scale;
  b.d = f32_to_f16(1.0f / iscale);
  for (int s = 0; s < 16; ++s) {
    const int sc = nearest_int(iscale * sub_scale[s]);
    b.scales[s] = int8_t(sc < 127 ? sc : 127);
  }

  const float d_all = f16_to_f32(b.d);
  for (int s = 0; s < 16; ++s) {
    const float d = d_all * float(b.scales[s]);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) {
      L[16 * s + i] = int8_t(clamp_int(nearest_int(x[16 * s + i] / d), -32, 31) + 32);
    }
  }

  for (int half = 0; half < 2; ++half) {
    const int8_t* l = L + 128 * half;
    uint8_t* ql = b.ql + 64 * half;
    uint8_t* qh = b.qh + 32 * half;
    for (int i = 0; i < 32; ++i) {
      ql[i] = uint8_t((l[i] & 15) | (l[i + 64] & 15) << 4);
      ql[i + 32] = uint8_t((l[i + 32] & 15) | (l[i + 96] & 15) << 4);
      qh[i] = uint8_t(l[i] >> 4 | (l[i + 32] >> 4) << 2 | (l[i + 64] >> 4) << 4 |
                      (l[i + 96] >> 4) << 6);
    }
  }
}

// --- Q8_K: symmetric int8 with an f32 scale; the largest-magnitude weight maps to -127.

void dequantize_block(const BlockQ8K& b, float* y) {
  for (int e = 0; e < kQkK; ++e) y[e] = b.d * float(b.qs[e]);
}

void quantize_block(const float* x, BlockQ8K& b) {
  std::memset(&b, 0, sizeof b);  // ggml leaves bsums unwritten for an all-zero block
  float max = 0.0f, amax = 0.0f;
  for (int e = 0; e < kQkK; ++e) {
    if (std::fabs(x[e]) > amax) {
      amax = std::fabs(x[e]);
      max = x[e];
    }
  }
  if (amax == 0.0f) return;

  const float iscale = -127.0f / max;
  for (int e = 0; e < kQkK; ++e) {
    const int q = nearest_int(iscale * x[e]);
    b.qs[e] = int8_t(q < 127 ? q : 127);
  }
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += b.qs[16 * g + i];
    b.bsums[g] = int16_t(sum);
  }
  b.d = 1.0f / iscale;
}

}  // namespace sluice::quant_ref

namespace sluice {

void unpack_scale_min_k4(const uint8_t* scales, int s, uint8_t* sc, uint8_t* m) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *m = scales[s + 4] & 63;
  } else {
    *sc = uint8_t((scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4);
    *m = uint8_t((scales[s + 4] >> 4) | (scales[s] >> 6) << 4);
  }
}

}  // namespace sluice
