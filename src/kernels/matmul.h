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

#include "base/thread_pool.h"
#include "gguf/types.h"

namespace sluice {

// Whether matmul/get_rows can read weights of `type` (F32, F16, BF16 and every block type
// quants.h dequantizes).
bool matmul_supports(GgmlType type);

struct MatmulParams {
  GgmlType type = GgmlType::F32;
  const void* w = nullptr;   // [m rows, k] in `type`'s GGUF row layout
  int64_t k = 0;             // row length; a multiple of the type's block size
  int64_t m = 0;             // output features (rows of W)
  const float* x = nullptr;  // [n, k]
  int64_t n = 0;             // activation rows
  float* y = nullptr;        // [n, m]; must not alias x
};

// y = x W^T. Threads over output rows (each W row is dequantized once into a per-thread
// buffer and dotted with all n activation rows in f32). `pool` may be null (serial).
void matmul(const MatmulParams& p, ThreadPool* pool);

// The specification: serial, W dequantized row by row, f64 accumulation.
void matmul_ref(const MatmulParams& p);

// out[i, :] = dequantized row ids[i] of the [n_rows, k] table (embedding lookup). Ids must be
// in range (the caller validates them).
void get_rows(GgmlType type, const void* table, int64_t k, const int32_t* ids, int64_t n,
              float* out);

// f32 dot product of two length-n vectors (several partial sums; the vectorizable inner loop
// of matmul and attention).
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace sluice
