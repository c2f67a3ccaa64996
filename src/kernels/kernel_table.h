// The kernels of one ISA behind one table (internal to kernels/), chosen once per process.
//
// matmul(), paged attention and the element-wise ops look their SIMD kernels up here instead of
// branching on the ISA: an ISA is a set of files (matmul_<isa>.cpp, attention_<isa>.cpp, ...)
// plus one table in kernel_table.cpp, so a new one (ARM NEON next) adds files, not branches.
// A null entry means "this ISA has no such kernel": the caller takes the portable path (the
// scalar table is all null; its kernels are the *_ref specifications and the generic loops).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/types.h"
#include "kernels/attention.h"
#include "kernels/delta_net.h"
#include "kernels/matmul_isa.h"
#include "kernels/packed.h"

namespace sluice {

// One ISA's SIMD paged attention (attention.h), for head_dim % head_dim_multiple == 0. Each
// takes a scratch buffer of scratch_floats(p) floats.
struct AttentionKernels {
  int head_dim_multiple = 0;
  size_t (*scratch_floats)(const PagedAttentionParams& p) = nullptr;
  void (*block)(const PagedAttentionParams& p, int q0, int q1, int kv_head,
                float* scratch) = nullptr;
  size_t (*partial_floats)(const PagedAttentionParams& p) = nullptr;
  void (*segments)(const PagedAttentionParams& p, int s0, int s1, float* partial,
                   float* scratch) = nullptr;
  void (*merge)(const PagedAttentionParams& p, int kv_head, int n_seg, const float* partial,
                float* scratch) = nullptr;
};

struct KernelTable {
  MatmulIsa isa = MatmulIsa::kScalar;

  // ---- matmul (matmul_kernels.h has the contracts) ----
  // Q8_0 / Q4_0 / Q4_K / Q6_K rows against 8-bit activation blocks.
  void (*gemm_int8)(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                    const QuantizedActs& a, float* y, int64_t m) = nullptr;
  // F16 / BF16 rows against f32 activations.
  void (*gemm_half)(bool bf16, const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n,
                    int64_t k, float* y, int64_t m) = nullptr;
  // F16 rows in register tiles (k % 16 == 0).
  void (*gemm_f16_tiled)(const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n,
                         int64_t k, float* y, int64_t m) = nullptr;
  // BF16 rows in the F16 register tiles (k % 16 == 0; matmul() takes them from 2 rows of x).
  void (*gemm_bf16_tiled)(const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n,
                          int64_t k, float* y, int64_t m) = nullptr;
  // F32 rows in register tiles (any k).
  void (*gemm_f32_tiled)(const uint8_t* w, int64_t r0, int64_t r1, const float* x, int64_t n,
                         int64_t k, float* y, int64_t m) = nullptr;
  // Packed weights (packed.h), groups [g0, g1): Q8_0, Q4_0, Q4_K, Q6_K, and MXFP4 (whose
  // a.d must be the f16-rounded block scales, mxfp4_act_scale: matmul() passes them).
  void (*gemm_packed)(const PackedWeights& w, int64_t g0, int64_t g1, const QuantizedActs& a,
                      float* y, int64_t m) = nullptr;
  void (*gemm_f16_packed)(const PackedWeights& w, int64_t g0, int64_t g1, const float* x, int64_t n,
                          float* y, int64_t m) = nullptr;
  HalfPacking f16_packing = HalfPacking::kColumns16;  // the layout gemm_f16_packed reads
  // Packed BF16 weights (AVX2: kColumns16); without it BF16 is packed as a copy of the rows.
  void (*gemm_bf16_packed)(const PackedWeights& w, int64_t g0, int64_t g1, const float* x,
                           int64_t n, float* y, int64_t m) = nullptr;
  HalfPacking bf16_packing = HalfPacking::kRows;
  // BF16 weights against bf16-rounded activations (AVX512-BF16 only; n >= 4, k % 32 == 0).
  void (*to_bf16)(const float* x, int64_t count, uint16_t* out) = nullptr;
  void (*gemm_bf16_dp)(const uint8_t* w, int64_t r0, int64_t r1, const uint16_t* xb, int64_t n,
                       int64_t k, float* y, int64_t m) = nullptr;
  // MXFP4 rows against 8-bit activation blocks whose scales d16 are rounded to f16 (bit for
  // bit the portable kernel).
  void (*gemm_mxfp4)(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                     const QuantizedActs& a, const float* d16, float* y, int64_t m) = nullptr;
  // Activation rows -> 8-bit blocks, bit for bit quantize_acts_ref.
  void (*quantize_rows)(const float* x, int64_t n, int64_t k, int8_t* qs, float* d, float* s,
                        int32_t* bias, int32_t* bias16) = nullptr;

  // ---- paged attention (attention.h) ----
  // Tried in order: the first set whose head_dim_multiple divides p.head_dim runs p; none (or
  // only null sets): the portable items. An ISA may list another ISA's kernels after its own
  // (an AVX-512 CPU runs AVX2's for head sizes that are multiples of 8 but not of 16).
  AttentionKernels attention[2];

  // ---- Gated DeltaNet's chunked form (delta_net.h): for state sizes % delta_net_multiple == 0
  // ----
  int delta_net_multiple = 0;
  void (*delta_net_conv)(const DeltaNetParams& p, float* qkv, int64_t n, float* conv_state, int c0,
                         int c1, float* scratch) = nullptr;
  void (*delta_net_heads)(const DeltaNetParams& p, const float* u, const float* z,
                          const float* beta, const float* alpha, int64_t n, float* ssm, int h0,
                          int h1, int chunk, float* out, float* scratch, float* capture,
                          int64_t capture_stride) = nullptr;

  // ---- element-wise (ops.h) ----
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  void (*gelu)(float* x, int64_t n) = nullptr;
  void (*geglu)(const float* gate, const float* up, float* out, int64_t n) = nullptr;

  // The attention kernels that run p (nullptr: the portable items).
  const AttentionKernels* attention_for(const PagedAttentionParams& p) const {
    for (const AttentionKernels& k : attention) {
      if (k.block && p.head_dim % k.head_dim_multiple == 0) return &k;
    }
    return nullptr;
  }
};

// The table of `isa` (kAuto: the process's, matmul_isa_best()). The caller has checked that this
// CPU runs `isa`.
const KernelTable& kernel_table(MatmulIsa isa = MatmulIsa::kAuto);

}  // namespace sluice
