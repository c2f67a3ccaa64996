// Per-ISA matmul kernel entry points (internal to kernels/; matmul.cpp dispatches to them).
// Each computes y[i * m + r] = dot(W row r, activation row i) for rows r in [r0, r1) and all
// activation rows; the caller threads over disjoint row ranges.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/types.h"
#include "kernels/matmul_isa.h"

namespace sluice {

class PackedWeights;

// Packed MXFP4 (packed.h): a code's doubled E2M1 value + 12 (kMxfp4Values + 12, in [0, 24]), the
// unsigned operand of the int8 dots; the offset returns through the activation bias.
alignas(16) inline constexpr uint8_t kMxfp4Lut[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                      12, 11, 10, 9,  8,  6,  4,  0};

// The per-block sums of a quantized activation block b (matmul_isa.h, QuantizedActs) from its
// amax and the sums h0, h1 of its two 16-value halves: every quantizer writes them the same way.
inline void finish_act_block(float amax, int32_t h0, int32_t h1, int64_t b, float* d, float* s,
                             int32_t* bias, int32_t* bias16) {
  bias16[2 * b] = -32 * h0;
  bias16[2 * b + 1] = -32 * h1;
  const int32_t sum = h0 + h1;
  d[b] = amax / 127.0f;
  s[b] = d[b] * float(sum);
  bias[b] = -128 * sum;
}

// Software prefetch of a packed weight stream for a register tile of NX activation rows; `p` is
// the line the tile is about to read. One or two rows (decode) compute little per weight byte:
// into L1 4 KiB ahead keeps the stream flowing. From 3 rows on a block takes longer to compute,
// and 64 lines in flight into L1 starved the stream (the L1 tracks few misses); into L2 8 KiB
// ahead the stream and the compute overlap (measured on Zen 4: faster from 3 rows, slower for
// one row, even for two; docs/perf-log.md, "The weight stream prefetched into L2 for 3+ rows").
// Every packed kernel, every ISA, uses this one policy.
template <int NX>
inline void prefetch_weights(const uint8_t* p) {
  if constexpr (NX <= 2) {
    __builtin_prefetch(p + 4096, 0, 3);  // prefetcht0
  } else {
    __builtin_prefetch(p + 8192, 0, 2);  // prefetcht1
  }
}

// Pointers to activation rows i0 .. i0 + NX of `a` (the packed kernels' register tiles).
template <int NX>
struct ActRows {
  const int8_t* q[NX];
  const float* d[NX];
  const float* s[NX];
  const int32_t* bias[NX];
  const int32_t* bias16[NX];
  ActRows(const QuantizedActs& a, int64_t i0) {
    const int64_t nb = a.k / 32;
    for (int i = 0; i < NX; ++i) {
      q[i] = a.qs + (i0 + i) * a.stride;
      d[i] = a.d + (i0 + i) * nb;
      s[i] = a.s + (i0 + i) * nb;
      bias[i] = a.bias + (i0 + i) * nb;
      bias16[i] = a.bias16 + (i0 + i) * 2 * nb;
    }
  }
};

#define SLUICE_KERNEL_DECLS                                                                      \
  /* Q8_0, Q4_0, Q4_K, Q6_K weights against 8-bit activation blocks. */                          \
  void gemm_int8(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,      \
                 const QuantizedActs& a, float* y, int64_t m);                                   \
  /* F16 (bf16 = false) or BF16 weights against f32 activations [n, k], exact products. */       \
  void gemm_half(bool bf16, const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n, \
                 int64_t k, float* y, int64_t m);

namespace kern_avx2 {
SLUICE_KERNEL_DECLS
// MXFP4 rows [r0, r1) against 8-bit activation blocks with f16-rounded scales d16 [n, k / 32]:
// bit for bit the portable kernel (matmul.cpp), the integer dots in AVX2.
void gemm_mxfp4(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1, const QuantizedActs& a,
                const float* d16, float* y, int64_t m);
// As kern_avx512::quantize_rows (bit for bit quantize_acts_ref).
void quantize_rows(const float* x, int64_t n, int64_t k, int8_t* qs, float* d, float* s,
                   int32_t* bias, int32_t* bias16);
// Packed Q8_0 / Q4_0 / Q4_K / Q6_K weights (packed.h, the AVX-512 layout read as 256-bit
// halves), groups [g0, g1), against every quantized activation row; y [n, m].
void gemm_packed(const PackedWeights& w, int64_t g0, int64_t g1, const QuantizedActs& a, float* y,
                 int64_t m);
// F16 weights, f32 activations, k % 16 == 0: register tiles of up to 4 weight rows x 3
// activation rows in 256-bit f32 FMA.
void gemm_f16_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n, int64_t k,
                    float* y, int64_t m);
// The same tiles over BF16 rows (k % 16 == 0; each bf16 widened to f32 exactly).
void gemm_bf16_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n, int64_t k,
                     float* y, int64_t m);
// Packed F16 weights (packed.h's kColumns16), groups [g0, g1): each output is the fused
// multiply-add chain over its row's columns in order from 0 (bit for bit a scalar fmaf loop,
// whatever n, the tiles or the threads); not gemm_f16_tiled's sums.
void gemm_f16_packed(const PackedWeights& w, int64_t g0, int64_t g1, const float* x, int64_t n,
                     float* y, int64_t m);
// The same over packed BF16 weights (kColumns16; each bf16 widened to f32 exactly).
void gemm_bf16_packed(const PackedWeights& w, int64_t g0, int64_t g1, const float* x, int64_t n,
                      float* y, int64_t m);
// F32 weights, any k: the same register tiles (the last k % 8 columns scalar). AVX-512 hosts
// use it too.
void gemm_f32_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n, int64_t k,
                    float* y, int64_t m);
}  // namespace kern_avx2

// kern_avx2::gemm_packed with vpdpbusd, bit for bit its results: AVX-VNNI's VEX encoding (the
// avx2 table's choice where CPUID has AVX-VNNI), and the EVEX one (AVX512-VNNI + VL: the tests
// and kernels_bench run the VNNI code there).
namespace kern_avx2_vnni {
void gemm_packed(const PackedWeights& w, int64_t g0, int64_t g1, const QuantizedActs& a, float* y,
                 int64_t m);
}  // namespace kern_avx2_vnni
namespace kern_avx2_vnni512 {
void gemm_packed(const PackedWeights& w, int64_t g0, int64_t g1, const QuantizedActs& a, float* y,
                 int64_t m);
}  // namespace kern_avx2_vnni512

namespace kern_avx512 {
SLUICE_KERNEL_DECLS
// n rows of x [n, k] -> qs [n, k], d, s, bias [n, k / 32], bias16 [n, k / 16], as
// quantize_acts_ref (bit for bit).
void quantize_rows(const float* x, int64_t n, int64_t k, int8_t* qs, float* d, float* s,
                   int32_t* bias, int32_t* bias16);
// F16 weights, f32 activations, k % 16 == 0: register tiles of up to 4 weight rows x 6
// activation rows in 512-bit f32 FMA.
void gemm_f16_tiled(const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n, int64_t k,
                    float* y, int64_t m);
// Packed F16 weights (kColumns16, 512-bit vectors), groups [g0, g1): bit for bit
// kern_avx2::gemm_f16_packed (each output one FMA chain over its columns in order).
void gemm_f16_packed(const PackedWeights& w, int64_t g0, int64_t g1, const float* x, int64_t n,
                     float* y, int64_t m);
// BF16 weights, activations rounded to bf16 `xb` [n, k] (k % 32 == 0), vdpbf16ps (needs
// AVX512-BF16). Products are exact, sums f32.
void gemm_bf16_dp(const uint8_t* w, int64_t r0, int64_t r1, const uint16_t* xb, int64_t n,
                  int64_t k, float* y, int64_t m);
// Packed Q8_0 / Q4_0 weights (packed.h), groups [g0, g1) (rows 16 g0 .. min(m, 16 g1)), against
// every quantized activation row; y [n, m].
void gemm_packed(const PackedWeights& w, int64_t g0, int64_t g1, const QuantizedActs& a, float* y,
                 int64_t m);
// x [n, k] f32 -> bf16 round-to-nearest-even, k % 32 == 0.
void to_bf16(const float* x, int64_t count, uint16_t* out);
// MXFP4 rows [r0, r1) against 8-bit activation blocks with f16-rounded scales d16 [n, k / 32]
// (kern_avx2::gemm_mxfp4's arithmetic: the same integer dots and per-block scale products),
// two blocks per 512-bit step (VNNI), each row decoded once for up to 4 activation rows, the
// blocks' scaled sums kept in vector lanes: the f32 sums differ from the portable kernel's
// block-by-block order in the last bits.
void gemm_mxfp4(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1, const QuantizedActs& a,
                const float* d16, float* y, int64_t m);
}  // namespace kern_avx512

#undef SLUICE_KERNEL_DECLS

}  // namespace sluice
