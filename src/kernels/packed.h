// Weights repacked once, at load time, for the SIMD kernels (AVX-512 VNNI; AVX2 reads the same
// layout as 256-bit halves, matmul_packed_avx2.cpp).
//
// GGUF stores a quantized matrix row by row (row r: its blocks of 32, each an f16 scale and 32
// quants). The packed form interleaves 16 rows so one 512-bit vpdpbusd multiplies 4 bytes of
// each of 16 rows by the same 4 activation bytes (an embedded broadcast): lane r of the
// accumulator is row r's partial dot, and no horizontal sums or sign tricks are needed.
//
//   group g = rows [16g, 16g + 16); a row is cut into units (Q8_0, Q4_0: blocks of 32 columns;
//   Q4_K: super-blocks of 256), nu = k / unit_cols() per row:
//   quants  [n_groups][nu][unit_quant_bytes()]   64-byte vectors of [16 rows][4 bytes]
//   meta    [n_groups][nu][unit_meta_bytes()]    the unit's scales for the 16 rows
//
// Quants are stored unsigned so they can be vpdpbusd's u8 operand against the int8
// activations:
//   Q8_0: 8 vectors of q + 128 (columns 4j .. 4j + 3 in vector j); meta: 16 f16 scales.
//   Q4_0: 4 vectors of the raw nibble bytes: low nibbles are columns 4j .. 4j + 3, high nibbles
//         columns 16 + 4j .. 16 + 4j + 3, values q in [0, 15] (the weight is q - 8); meta: 16
//         f16 scales.
//   Q4_K: per pair p of 32-column sub-blocks, 8 vectors of the raw bytes qs[32p + 4j ..]: low
//         nibbles are sub-block 2p, high nibbles sub-block 2p + 1, columns 4j .. 4j + 3;
//         meta: d[16], dmin[16] (f16), then the 6-bit scales sc[8][16] and mins m[8][16] as
//         bytes (weight = d * sc_s * q - dmin * m_s).
//   MXFP4: 4 vectors of the raw code bytes, laid out as Q4_0's: low nibbles are columns 4j ..
//         4j + 3, high nibbles columns 16 + 4j .. 16 + 4j + 3, each an E2M1 code (bit 3 the
//         sign); the kernels look the codes up as the doubled values + 12, in [0, 24] (the
//         offset comes back through the activations' bias: 12 / 128 of it); meta: the 16 rows'
//         E8M0 exponent bytes (the block scale 2^(e - 128) of the doubled values).
//   Q6_K: per 16-column scale group g, 3 vectors: two of low nibbles (lo/hi nibbles of the
//         first are columns 16g + 0..3 / 4..7, of the second 8..11 / 12..15) and one of high
//         bit pairs (bits 2s, 2s + 1 of byte t: column 16g + 4s + t), q in [0, 63]; meta:
//         d[16] (f16), then the int8 scales sc[16][16] (weight = d * sc_g * (q - 32)); the
//         offset 32 comes back through the activations' 16-column sums.
//   F16 and BF16 (k % 16 == 0), in the layout the ISA's kernels read (half_packing()):
//     kColumns16 (F16; BF16 on AVX2): per group, column by column, the 16 rows' halves:
//         F16: column j of row 16g + r at half_group(g) + 32 j + 2 r; BF16: rows r and r + 8
//         (r < 8) share a 32-bit lane, at half_group(g) + 32 j + 4 r (+ 2). The kernel turns a
//         column into vectors of rows (AVX-512 F16: one conversion; AVX2 F16: two; AVX2 BF16:
//         a shift and a mask) and multiplies them by one broadcast activation, so an output
//         row is a lane: no horizontal sums (matmul_cols16.inc).
//         Group g is 32k contiguous bytes at half_group(g).
//     kRows (BF16 on AVX-512): the rows unchanged (a copy into huge pages: decode streams them
//         without a page walk every 4 KiB, which the file mapping cannot avoid); raw() is the
//         [m, k] matrix.
// Both are in huge pages.
// The offsets come back exactly through the activation blocks' `bias` = -128 * sum(x_q)
// (matmul_isa.h): dot(q + 128, x) + bias = dot(q, x), and bias / 16 for the 4-bit offset 8;
// Q4_K's minimums through the activation block sums `s`.
// The packed matrix has the bytes of the original (Q4_K: 148 instead of 144 per 256 weights),
// so decode reads about as much memory as before; rows past m in the last group are zero.
#pragma once

#include <cstdint>
#include <memory>

#include "base/huge_alloc.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/types.h"
#include "kernels/matmul_isa.h"

namespace sluice {

// How F16 / BF16 weights are packed (the comment above has the layouts).
enum class HalfPacking : uint8_t { kColumns16, kRows };

class PackedWeights {
 public:
  static constexpr int64_t kRows = 16;  // rows per group

  // Whether `type` has a packed form (Q8_0, Q4_0, Q4_K, Q6_K, MXFP4, F16, BF16) and `isa` (kAuto:
  // the process's) has kernels for it (kernel_table.h).
  static bool supported(GgmlType type, MatmulIsa isa = MatmulIsa::kAuto);

  // Bytes pack() writes for W [m, k] of `type` (the quants, then the scales 64-byte aligned),
  // or why that shape or type has no packed form (k must be a multiple of the unit; F16: 16).
  static Result<size_t> bytes_needed(GgmlType type, int64_t m, int64_t k,
                                     MatmulIsa isa = MatmulIsa::kAuto);

  // Repacks W [m, k] of `type` (GGUF row layout) for the kernels of `isa` (kAuto: the
  // process's; F16's and BF16's layouts depend on it: matmul() on a table whose kernels read
  // another layout reads the rows at MatmulParams::w instead).
  // Threads over groups. Into `dst` when given (bytes_needed bytes, 64-byte aligned, kept alive
  // by the caller: one mapping for a whole model), else into huge-page memory of its own.
  static Result<PackedWeights> pack(GgmlType type, const void* w, int64_t m, int64_t k,
                                    ThreadPool* pool = nullptr, uint8_t* dst = nullptr,
                                    MatmulIsa isa = MatmulIsa::kAuto);

  GgmlType type() const { return type_; }
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }
  int64_t n_groups() const { return (m_ + kRows - 1) / kRows; }
  int64_t unit_cols() const { return k_quant() ? 256 : 32; }
  int64_t n_units() const { return k_ / unit_cols(); }  // per row
  int64_t unit_quant_bytes() const {
    switch (type_) {
      case GgmlType::Q8_0:
        return 512;
      case GgmlType::Q4_0:
      case GgmlType::MXFP4:
        return 256;
      case GgmlType::Q4_K:
        return 2048;
      default:
        return 3072;  // Q6_K
    }
  }
  int64_t unit_meta_bytes() const {
    return type_ == GgmlType::Q4_K    ? 320
           : type_ == GgmlType::Q6_K  ? 288
           : type_ == GgmlType::MXFP4 ? 16
                                      : 32;
  }
  const uint8_t* quants(int64_t group) const {
    return quants_ + group * n_units() * unit_quant_bytes();
  }
  bool is_copy() const { return half_packing_ == HalfPacking::kRows; }
  const uint8_t* raw() const { return quants_; }  // BF16: the rows
  HalfPacking half_packing() const { return half_packing_; }
  const uint8_t* half_group(int64_t g) const { return quants_ + g * kRows * k_ * 2; }
  const uint8_t* meta(int64_t group) const { return meta_ + group * n_units() * unit_meta_bytes(); }
  size_t bytes() const;  // quants + scales

 private:
  PackedWeights(GgmlType type, int64_t m, int64_t k, MatmulIsa isa);
  size_t quant_bytes() const;
  size_t meta_bytes() const;
  bool k_quant() const { return type_ == GgmlType::Q4_K || type_ == GgmlType::Q6_K; }
  bool half() const;  // F16 or BF16
  GgmlType type_ = GgmlType::Q8_0;
  HalfPacking half_packing_ = HalfPacking::kColumns16;  // F16, BF16: the layout
  int64_t m_ = 0, k_ = 0;
  StreamedBuffer own_;  // null when packed into the caller's memory
  uint8_t* quants_ = nullptr;
  uint8_t* meta_ = nullptr;
};

}  // namespace sluice
