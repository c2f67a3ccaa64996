// Matrix products against GGUF weights of any supported type, and embedding row lookup.
// Raw pointers and shapes only; callers check types with matmul_supports() once, at load time.
//
// Weights are stored as GGUF lays them out: W has `m` rows of `k` elements (ne[0] = k is the
// contiguous row), row r starting at byte r * row_size(type, k). Activations are f32 rows.
//
//            k                      k                 m
//        +-------+             +-------+          +-------+
//   x  n |  x_i  |   W^T   m   |  w_r  |   =  y n | y_i,r |   y[i*m + r] = dot(x_i, w_r)
//        +-------+             +-------+          +-------+
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "gguf/types.h"
#include "kernels/matmul_isa.h"
#include "kernels/packed.h"

namespace sluice {

// Whether matmul/get_rows can read weights of `type` (F32, F16, BF16 and every block type
// quants.h dequantizes).
bool matmul_supports(GgmlType type);

// The calling thread's scratch of matmul (activations quantized to 8 bits, rounded to bf16):
// grows to the largest call, then never allocates; holds nothing between calls. An executor
// keeps one so steady-state steps allocate nothing.
struct MatmulWorkspace {
  ActBuffer acts;
  std::vector<uint16_t> bf16;
  std::vector<float> d16;  // MXFP4: the activation block scales rounded to f16
};

struct MatmulParams {
  GgmlType type = GgmlType::F32;
  const void* w = nullptr;   // [m rows, k] in `type`'s GGUF row layout
  int64_t k = 0;             // row length; a multiple of the type's block size
  int64_t m = 0;             // output features (rows of W)
  const float* x = nullptr;  // [n, k]
  int64_t n = 0;             // activation rows
  float* y = nullptr;        // [n, m]; must not alias x
  // Optional: x already quantized (quantize_acts of the same x), shared by several matmuls of
  // one input (Q/K/V, gate/up). Used only by types that take 8-bit activations.
  const QuantizedActs* xq = nullptr;
  MatmulIsa isa = MatmulIsa::kAuto;  // kScalar: the dequantize + f32 dot path (tests, A/B)
  // Optional: `w` repacked (packed.h); used when the ISA has packed kernels, else `w` is read.
  const PackedWeights* packed = nullptr;
  // Optional: scratch for the conversions the calling thread makes (null: a temporary one).
  MatmulWorkspace* ws = nullptr;
};

// y = x W^T. Threads over output rows: every thread streams a disjoint range of W rows, each
// W row read once per call and dotted with all n activation rows (chunks of activation rows
// and W rows sized for L2). On SIMD ISAs:
//   Q8_0, Q4_0, Q4_K, Q6_K: x quantized to 8-bit blocks (matmul_isa.h), integer dots (VNNI);
//   F16: f32 FMA on converted rows; BF16: exact f32 FMA for one row, vdpbf16ps on bf16-rounded
//   activations for n >= 4 (AVX512-BF16);
//   everything else, and kScalar: each W row dequantized to f32, f32 dots.
// MXFP4 on every ISA, kScalar included: x quantized to 8-bit blocks whose scales are rounded to
// f16, integer dots with the doubled E2M1 codes, exactly ggml's CPU MXFP4 x Q8_0 arithmetic
// (gpt-oss's goldens depend on that rounding; docs/forward.md).
// `pool` may be null (serial). The result does not depend on the thread count.
void matmul(const MatmulParams& p, ThreadPool* pool);

// The specification: serial, W dequantized row by row, f64 accumulation.
void matmul_ref(const MatmulParams& p);

// What the 8-bit activation path computes: matmul_ref of W against dequantize(quantize_acts(x)).
// MXFP4: with each block scale rounded to f16 first (mxfp4_act_scale).
void matmul_act_ref(const MatmulParams& p);

// The activation block scale MXFP4 dots use: d (amax / 127) rounded to f16, as ggml's Q8_0
// stores it.
float mxfp4_act_scale(float d);

// out[i, :] = dequantized row ids[i] of the [n_rows, k] table (embedding lookup). Ids must be
// in range (the caller validates them).
void get_rows(GgmlType type, const void* table, int64_t k, const int32_t* ids, int64_t n,
              float* out);

// f32 dot product of two length-n vectors (several partial sums; the vectorizable inner loop
// of matmul and attention).
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace sluice
