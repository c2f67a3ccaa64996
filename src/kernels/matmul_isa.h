// Instruction-set dispatch and 8-bit activation blocks for the matmul kernels.
//
// One binary runs on any x86-64: the SIMD kernels are compiled per ISA with
// __attribute__((target(...))) (matmul_avx512.cpp, matmul_avx2.cpp) and chosen at run time from
// __builtin_cpu_supports, never from a global -march flag.
//
// Quantized weights (Q8_0, Q4_0, Q4_K, Q6_K) are dotted with the activation row quantized to
// 8-bit blocks of 32 (as Q8_0: int8 values, one f32 scale per block), so the inner product is an
// integer one (AVX512-VNNI vpdpbusd, or AVX2 vpmaddubsw). That rounds each activation to
// within half a step (amax_block / 254) of its value: the result is exactly
//   y = W . dequantize(quantize_acts(x))     (up to f32 accumulation order),
// which matmul_act_ref specifies and the tests check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/cpu_features.h"  // cpu_has_avx_vnni: the avx2 ISA dots with it
#include "base/status.h"
#include "gguf/types.h"

namespace sluice {

enum class MatmulIsa {
  kAuto,    // the best the CPU supports (matmul_isa_best())
  kScalar,  // dequantize each row to f32, then an f32 dot (the portable path)
  kAvx2,    // AVX2 + FMA + F16C
  kAvx512,  // AVX-512 F/BW/VL/DQ + VNNI (+ BF16 where present)
};

// The ISA of this process, chosen once: SLUICE_ISA when set (and valid), else the best this CPU
// runs. Every kernel dispatches on it.
MatmulIsa matmul_isa_best();
// The best ISA this CPU runs (detected once, SLUICE_ISA ignored).
MatmulIsa matmul_isa_detected();
// Whether this CPU runs `isa` (kScalar: always).
bool cpu_runs_isa(MatmulIsa isa);
// What SLUICE_ISA=scalar|avx2|avx512 asks for (unset or empty: the detected best), or why it
// cannot be had: an unknown name, or an ISA this CPU lacks. Front ends call it at start-up and
// refuse to run on an error; matmul_isa_best() then falls back to the detected ISA.
Result<MatmulIsa> matmul_isa_from_env();
// One line for start-up logs: "avx2 (AVX2 + FMA + F16C, vpmaddubsw int8 dots; SLUICE_ISA=avx2)".
std::string matmul_isa_description();
// Whether the CPU has AVX512-BF16 (vdpbf16ps).
bool cpu_has_avx512_bf16();
const char* matmul_isa_name(MatmulIsa isa);

// Whether `type` weights go through the 8-bit activation path on SIMD ISAs (MXFP4: on every ISA).
bool matmul_uses_int8_acts(GgmlType type);

constexpr int64_t kActBlock = 32;

// Activation rows quantized to 8-bit blocks, a view:
//   qs  [n, k]        int8 (rows `stride` apart), x[i, j] ~= d[i, j / 32] * qs[i, j]
//   d   [n, k / 32]   f32 block scales (amax / 127)
//   s   [n, k / 32]   f32 d * sum of the block's qs (for weight types with block minimums)
//   bias [n, k / 32]  int32 -128 * sum of the block's qs: the packed kernels (packed.h) dot
//                     unsigned weights (w + 128, or w + 8 for 4-bit) and start from this
//   bias16 [n, k / 16] int32 -32 * the sum of each half block's qs: where a dot with weights of
//                     16-column scales stored + 32 (Q6_K) starts
struct QuantizedActs {
  const int8_t* qs = nullptr;  // row i at qs + i * stride
  const float* d = nullptr;
  const float* s = nullptr;
  const int32_t* bias = nullptr;
  const int32_t* bias16 = nullptr;
  int64_t n = 0;
  int64_t k = 0;       // a multiple of 32
  int64_t stride = 0;  // bytes from one row of qs to the next: act_row_stride(k)
};

// The row stride of quantized activations with k columns: k, padded by a cache line where k is a
// multiple of 2048. The register tiles read 4-8 rows at once; rows 4 KiB apart map to the same
// L1 set, and 8 of them with the weight stream overflowed its 8 ways (measured with the AVX2
// Q4_K 8-row tile on Zen 4: slower than the 4-row one at k 4096 and 8192, faster at k 8448;
// docs/perf-log.md).
constexpr int64_t act_row_stride(int64_t k) {
  return k % 2048 == 0 ? k + 64 : k;
}

// Owns the memory of a QuantizedActs; grows to the largest (n, k) seen, never shrinks, so
// steady-state decode quantizes without allocating.
class ActBuffer {
 public:
  QuantizedActs view() const {
    return {qs_.data(), d_.data(), s_.data(), bias_.data(), bias16_.data(), n_, k_, stride_};
  }
  void resize(int64_t n, int64_t k);
  int8_t* qs() { return qs_.data(); }  // row i at qs() + i * stride()
  float* d() { return d_.data(); }
  float* s() { return s_.data(); }
  int32_t* bias() { return bias_.data(); }
  int32_t* bias16() { return bias16_.data(); }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t stride() const { return stride_; }

 private:
  std::vector<int8_t> qs_;
  std::vector<float> d_, s_;
  std::vector<int32_t> bias_, bias16_;
  int64_t n_ = 0, k_ = 0, stride_ = 0;
};

// x [n, k] -> out (k a multiple of 32). Per block: d = amax / 127, qs = round-half-even(x / d)
// (computed as x * (127 / amax)), s = d * sum(qs), bias = -128 * sum(qs), bias16 = -32 * the sums
// of its two halves; an all-zero block has d = 0 and qs = 0.
void quantize_acts(const float* x, int64_t n, int64_t k, ActBuffer& out,
                   MatmulIsa isa = MatmulIsa::kAuto);
// The specification (scalar).
void quantize_acts_ref(const float* x, int64_t n, int64_t k, ActBuffer& out);
// One row (row `r` of `out`, already resize()d) from its own buffer `x` [k].
void quantize_acts_row(const float* x, int64_t r, ActBuffer& out, MatmulIsa isa = MatmulIsa::kAuto);
// Rows [r0, r1) of x [n, k] into `out`, already resize()d to (n, k): lets a pool split the rows.
void quantize_acts_rows(const float* x, int64_t r0, int64_t r1, ActBuffer& out,
                        MatmulIsa isa = MatmulIsa::kAuto);

}  // namespace sluice
