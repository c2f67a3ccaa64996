// Internal to src/gguf: per-block reference codecs behind dequantize_row / quantize_row, and the
// scale-search helpers the K-quant quantizers share. One overload pair per block type:
//   dequantize_block(block, y)  -> y[0 .. Block::kElems)
//   quantize_block(x, block)    <- x[0 .. Block::kElems), finite values
//
// Bit-exactness with ggml depends on doing the same f32 operations in the same order (and on
// the compiler not contracting a*b+c into FMA; x86-64 without -mfma never does). Expressions
// in these files are therefore written in ggml's evaluation order, with the grouping spelled
// out where it matters.
#pragma once

#include <cstdint>
#include <cstring>

#include "gguf/quants.h"

namespace sluice::quant_ref {

void dequantize_block(const BlockQ4_0& b, float* y);
void dequantize_block(const BlockQ4_1& b, float* y);
void dequantize_block(const BlockQ5_0& b, float* y);
void dequantize_block(const BlockQ5_1& b, float* y);
void dequantize_block(const BlockQ8_0& b, float* y);
void dequantize_block(const BlockQ8_1& b, float* y);
void dequantize_block(const BlockIq4Nl& b, float* y);
void dequantize_block(const BlockMxfp4& b, float* y);
void dequantize_block(const BlockQ2K& b, float* y);
void dequantize_block(const BlockQ3K& b, float* y);
void dequantize_block(const BlockQ4K& b, float* y);
void dequantize_block(const BlockQ5K& b, float* y);
void dequantize_block(const BlockQ6K& b, float* y);
void dequantize_block(const BlockQ8K& b, float* y);

void quantize_block(const float* x, BlockQ4_0& b);
void quantize_block(const float* x, BlockQ4_1& b);
void quantize_block(const float* x, BlockQ5_0& b);
void quantize_block(const float* x, BlockQ5_1& b);
void quantize_block(const float* x, BlockQ8_0& b);
void quantize_block(const float* x, BlockQ8_1& b);
void quantize_block(const float* x, BlockIq4Nl& b);
void quantize_block(const float* x, BlockMxfp4& b);
void quantize_block(const float* x, BlockQ2K& b);
void quantize_block(const float* x, BlockQ3K& b);
void quantize_block(const float* x, BlockQ4K& b);
void quantize_block(const float* x, BlockQ5K& b);
void quantize_block(const float* x, BlockQ6K& b);
void quantize_block(const float* x, BlockQ8K& b);

// Round to nearest, ties to even, via the 1.5 * 2^23 trick (ggml's nearest_int). Exact for
// |v| < 2^22; larger or non-finite inputs give a meaningless but defined int that callers clamp.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;  // 1.5 * 2^23: the integer lands in the low mantissa
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// Scale searches, each fitting the n values x[] with integer levels and returning the scale
// (see quants_search.cpp for the objective each one minimizes).

// Symmetric levels l in [-nmax, nmax - 1] minimizing sum x^2 (x - scale l)^2; tries 18 scales
// around nmax / max|x|. Writes L[i] = l + nmax. ggml's make_qx_quants(rmse_type = 1, no qw).
float fit_symmetric(int n, int nmax, const float* x, int8_t* L);

// As fit_symmetric, refined by coordinate descent on single levels instead of a scale sweep.
// ggml's make_q3_quants(do_rmse = true).
float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L);

// Asymmetric levels l in [0, nmax] minimizing sum w |x - (scale l - min_out)|^p (p = 1 with
// use_mad, else 2), min_out >= 0, over nstep + 1 trial scales (nmax + rmin + rdelta * k) /
// (max - min). ggml's make_qkx2_quants.
struct AffineSearch {
  float rmin;
  float rdelta;
  int nstep;
  bool use_mad;
};
float fit_affine(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* min_out,
                 const AffineSearch& search);

}  // namespace sluice::quant_ref
