#include "kernels/kernel_table.h"

#include "kernels/matmul_kernels.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx512.h"

namespace sluice {

// The attention kernels of each ISA (attention_<isa>.cpp).
#define SLUICE_ATTENTION_DECLS                                                           \
  size_t attention_scratch_floats(const PagedAttentionParams& p);                        \
  void attention_block(const PagedAttentionParams& p, int q0, int q1, int kv_head,       \
                       float* scratch);                                                  \
  size_t attention_partial_floats(const PagedAttentionParams& p);                        \
  void attention_segments(const PagedAttentionParams& p, int s0, int s1, float* partial, \
                          float* scratch);                                               \
  void attention_merge(const PagedAttentionParams& p, int kv_head, int n_seg,            \
                       const float* partial, float* scratch);
namespace kern_avx2 {
SLUICE_ATTENTION_DECLS
}  // namespace kern_avx2
namespace kern_avx512 {
SLUICE_ATTENTION_DECLS
}  // namespace kern_avx512
#undef SLUICE_ATTENTION_DECLS

// The Gated DeltaNet kernels of each ISA (delta_net_<isa>.cpp).
#define SLUICE_DELTA_NET_DECLS                                                                     \
  void delta_net_conv(const DeltaNetParams& p, float* qkv, int64_t n, float* conv_state, int c0,   \
                      int c1, float* scratch);                                                     \
  void delta_net_heads(const DeltaNetParams& p, const float* u, const float* z, const float* beta, \
                       const float* alpha, int64_t n, float* ssm, int h0, int h1, int chunk,       \
                       float* out, float* scratch, float* capture, int64_t capture_stride);
namespace kern_avx2 {
SLUICE_DELTA_NET_DECLS
}  // namespace kern_avx2
namespace kern_avx512 {
SLUICE_DELTA_NET_DECLS
}  // namespace kern_avx512
#undef SLUICE_DELTA_NET_DECLS

namespace {

AttentionKernels avx2_attention() {
  return {8,
          &kern_avx2::attention_scratch_floats,
          &kern_avx2::attention_block,
          &kern_avx2::attention_partial_floats,
          &kern_avx2::attention_segments,
          &kern_avx2::attention_merge};
}

AttentionKernels avx512_attention() {
  return {16,
          &kern_avx512::attention_scratch_floats,
          &kern_avx512::attention_block,
          &kern_avx512::attention_partial_floats,
          &kern_avx512::attention_segments,
          &kern_avx512::attention_merge};
}

KernelTable make_scalar() {
  return KernelTable{};
}

KernelTable make_avx2() {
  KernelTable t;
  t.isa = MatmulIsa::kAvx2;
  t.gemm_int8 = &kern_avx2::gemm_int8;
  t.gemm_half = &kern_avx2::gemm_half;
  t.gemm_f16_tiled = &kern_avx2::gemm_f16_tiled;
  t.gemm_bf16_tiled = &kern_avx2::gemm_bf16_tiled;
  t.gemm_f32_tiled = &kern_avx2::gemm_f32_tiled;
  t.gemm_packed = cpu_has_avx_vnni() ? &kern_avx2_vnni::gemm_packed : &kern_avx2::gemm_packed;
  t.gemm_f16_packed = &kern_avx2::gemm_f16_packed;
  t.gemm_bf16_packed = &kern_avx2::gemm_bf16_packed;
  t.bf16_packing = HalfPacking::kColumns16;
  t.quantize_rows = &kern_avx2::quantize_rows;
  t.gemm_mxfp4 = &kern_avx2::gemm_mxfp4;
  t.attention[0] = avx2_attention();
  t.delta_net_multiple = 8;
  t.delta_net_conv = &kern_avx2::delta_net_conv;
  t.delta_net_heads = &kern_avx2::delta_net_heads;
  t.swiglu = [](const float* g, const float* u, float* o, int64_t n) {
    kern_avx2::swiglu(g, u, o, n);
  };
  t.gelu = [](float* x, int64_t n) { kern_avx2::geglu(x, nullptr, x, n); };
  t.geglu = [](const float* g, const float* u, float* o, int64_t n) {
    kern_avx2::geglu(g, u, o, n);
  };
  return t;
}

KernelTable make_avx512() {
  KernelTable t;
  t.isa = MatmulIsa::kAvx512;
  t.gemm_int8 = &kern_avx512::gemm_int8;
  t.gemm_half = &kern_avx512::gemm_half;
  t.gemm_f16_tiled = &kern_avx512::gemm_f16_tiled;
  t.gemm_f32_tiled = &kern_avx2::gemm_f32_tiled;  // AVX-512 CPUs run AVX2; no 512-bit F32 tile yet
  // BF16 from 2 activation rows where gemm_bf16_dp does not take them (2-3 rows, or CPUs
  // without AVX512-BF16: Skylake-X, Ice Lake): the 256-bit register tiles, not the row kernel.
  t.gemm_bf16_tiled = &kern_avx2::gemm_bf16_tiled;
  t.gemm_packed = &kern_avx512::gemm_packed;
  t.gemm_f16_packed = &kern_avx512::gemm_f16_packed;
  if (cpu_has_avx512_bf16()) {
    t.to_bf16 = &kern_avx512::to_bf16;
    t.gemm_bf16_dp = &kern_avx512::gemm_bf16_dp;
  }
  t.quantize_rows = &kern_avx512::quantize_rows;
  t.gemm_mxfp4 = &kern_avx512::gemm_mxfp4;
  t.attention[0] = avx512_attention();
  // AVX-512 CPUs run AVX2: a head size that is a multiple of 8 but not of 16 (stories260K's 8)
  // takes its kernels, not the portable items (docs/perf-log.md has the measurement).
  t.attention[1] = avx2_attention();
  t.delta_net_multiple = 16;
  t.delta_net_conv = &kern_avx512::delta_net_conv;
  t.delta_net_heads = &kern_avx512::delta_net_heads;
  t.swiglu = [](const float* g, const float* u, float* o, int64_t n) {
    kern_avx512::swiglu(g, u, o, n);
  };
  t.gelu = [](float* x, int64_t n) { kern_avx512::gelu(x, n); };
  t.geglu = [](const float* g, const float* u, float* o, int64_t n) {
    kern_avx512::geglu(g, u, o, n);
  };
  return t;
}

}  // namespace

const KernelTable& kernel_table(MatmulIsa isa) {
  static const KernelTable scalar = make_scalar(), avx2 = make_avx2(), avx512 = make_avx512();
  if (isa == MatmulIsa::kAuto) isa = matmul_isa_best();
  switch (isa) {
    case MatmulIsa::kAvx512:
      return avx512;
    case MatmulIsa::kAvx2:
      return avx2;
    default:
      return scalar;
  }
}

}  // namespace sluice
