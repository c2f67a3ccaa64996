#include "kernels/matmul_isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/matmul_kernels.h"

namespace sluice {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 1, ECX bit 29. Not __builtin_cpu_supports("f16c"): clang 14 (the fuzz build's
// compiler) rejects that feature name.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

MatmulIsa detect_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && cpu_has_f16c()) {
    return MatmulIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
    return MatmulIsa::kAvx2;
  }
#endif
  return MatmulIsa::kScalar;
}

}  // namespace

MatmulIsa matmul_isa_detected() {
  static const MatmulIsa detected = detect_isa();
  return detected;
}

bool cpu_runs_isa(MatmulIsa isa) {
  const MatmulIsa best = matmul_isa_detected();
  switch (isa) {
    case MatmulIsa::kScalar:
      return true;
    case MatmulIsa::kAvx2:
      return best == MatmulIsa::kAvx2 || best == MatmulIsa::kAvx512;
    case MatmulIsa::kAvx512:
      return best == MatmulIsa::kAvx512;
    default:
      return false;
  }
}

// SLUICE_ISA forces a path (A/B measurements, testing the fallbacks on a newer CPU).
Result<MatmulIsa> matmul_isa_from_env() {
  const char* env = std::getenv("SLUICE_ISA");
  if (!env || !*env) return matmul_isa_detected();
  MatmulIsa isa = MatmulIsa::kAuto;
  if (std::strcmp(env, "scalar") == 0) isa = MatmulIsa::kScalar;
  if (std::strcmp(env, "avx2") == 0) isa = MatmulIsa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) isa = MatmulIsa::kAvx512;
  if (isa == MatmulIsa::kAuto) {
    return make_error("SLUICE_ISA='", env, "' is not an ISA: use scalar, avx2 or avx512");
  }
  if (!cpu_runs_isa(isa)) {
    return make_error("SLUICE_ISA=", env, ": this CPU lacks ",
                      isa == MatmulIsa::kAvx512 ? "AVX-512 F/BW/VL/DQ + VNNI" : "AVX2 + FMA + F16C",
                      " (it runs ", matmul_isa_name(matmul_isa_detected()), ")");
  }
  return isa;
}

MatmulIsa matmul_isa_best() {
  static const MatmulIsa best = [] {
    const Result<MatmulIsa> isa = matmul_isa_from_env();
    return isa.ok() ? *isa : matmul_isa_detected();
  }();
  return best;
}

std::string matmul_isa_description() {
  const MatmulIsa isa = matmul_isa_best();
  std::string s = matmul_isa_name(isa);
  switch (isa) {
    case MatmulIsa::kAvx512:
      s += cpu_has_avx512_bf16() ? " (AVX-512 + VNNI + BF16" : " (AVX-512 + VNNI";
      break;
    case MatmulIsa::kAvx2:
      s += cpu_has_avx_vnni() ? " (AVX2 + FMA + F16C + AVX-VNNI, vpdpbusd int8 dots"
                              : " (AVX2 + FMA + F16C, vpmaddubsw int8 dots";
      break;
    default:
      s += " (portable C++";
      break;
  }
  const char* env = std::getenv("SLUICE_ISA");
  if (env && *env) s += std::string("; SLUICE_ISA=") + env;
  if (isa != matmul_isa_detected()) {
    s += std::string("; the CPU runs ") + matmul_isa_name(matmul_isa_detected());
  }
  return s + ")";
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return has;
#else
  return false;
#endif
}

const char* matmul_isa_name(MatmulIsa isa) {
  switch (isa) {
    case MatmulIsa::kAuto:
      return "auto";
    case MatmulIsa::kScalar:
      return "scalar";
    case MatmulIsa::kAvx2:
      return "avx2";
    case MatmulIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool matmul_uses_int8_acts(GgmlType type) {
  return type == GgmlType::Q8_0 || type == GgmlType::Q4_0 || type == GgmlType::Q4_K ||
         type == GgmlType::Q6_K || type == GgmlType::MXFP4;
}

void ActBuffer::resize(int64_t n, int64_t k) {
  n_ = n;
  k_ = k;
  stride_ = act_row_stride(k);
  if (int64_t(qs_.size()) < n * stride_) qs_.resize(size_t(n * stride_));
  if (int64_t(d_.size()) < n * k / kActBlock) {
    d_.resize(size_t(n * k / kActBlock));
    s_.resize(size_t(n * k / kActBlock));
    bias_.resize(size_t(n * k / kActBlock));
    bias16_.resize(size_t(2 * n * k / kActBlock));
  }
}

namespace {

void quantize_rows_ref(const float* x, int64_t n_blocks, int8_t* qs, float* d, float* s,
                       int32_t* bias, int32_t* bias16) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * kActBlock;
    float amax = 0;
    for (int j = 0; j < kActBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0, half = 0;
    for (int j = 0; j < kActBlock; ++j) {
      const auto q = int8_t(std::nearbyint(xb[j] * id));
      qs[b * kActBlock + j] = q;
      sum += q;
      if (j < 16) half += q;
    }
    finish_act_block(amax, half, sum - half, b, d, s, bias, bias16);
  }
}

}  // namespace

void quantize_acts_ref(const float* x, int64_t n, int64_t k, ActBuffer& out) {
  out.resize(n, k);
  const int64_t nb = k / kActBlock;
  for (int64_t r = 0; r < n; ++r) {
    quantize_rows_ref(x + r * k, nb, out.qs() + r * out.stride(), out.d() + r * nb,
                      out.s() + r * nb, out.bias() + r * nb, out.bias16() + 2 * r * nb);
  }
}

void quantize_acts_rows(const float* x, int64_t r0, int64_t r1, ActBuffer& out, MatmulIsa isa) {
  for (int64_t r = r0; r < r1; ++r) quantize_acts_row(x + r * out.k(), r, out, isa);
}

void quantize_acts_row(const float* x, int64_t r, ActBuffer& out, MatmulIsa isa) {
  const int64_t k = out.k(), nb = k / kActBlock;
  const auto fn = kernel_table(isa).quantize_rows;
  if (fn) {
    fn(x, 1, k, out.qs() + r * out.stride(), out.d() + r * nb, out.s() + r * nb,
       out.bias() + r * nb, out.bias16() + 2 * r * nb);
  } else {
    quantize_rows_ref(x, nb, out.qs() + r * out.stride(), out.d() + r * nb, out.s() + r * nb,
                      out.bias() + r * nb, out.bias16() + 2 * r * nb);
  }
}

void quantize_acts(const float* x, int64_t n, int64_t k, ActBuffer& out, MatmulIsa isa) {
  out.resize(n, k);
  quantize_acts_rows(x, 0, n, out, isa);
}

}  // namespace sluice
