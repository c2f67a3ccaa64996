// Element-wise and per-row transformer ops on f32 rows: RMSNorm, RoPE, SwiGLU, GeGLU, softmax.
// Each `foo` has a scalar `foo_ref` (f64 arithmetic) that is its specification; the tests
// compare them on random inputs at odd sizes. Raw pointers only: no model or KV types.
#pragma once

#include <cstdint>

#include "kernels/matmul_isa.h"

namespace sluice {

// ---- RMSNorm ----------------------------------------------------------------------------------
// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]   (w == nullptr: no scale). y may equal x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void rms_norm_ref(const float* x, const float* w, float* y, int64_t n, float eps);

// ---- RoPE -------------------------------------------------------------------------------------
// Which dimensions of a head rotate together (the first n_rot dims rotate, the rest pass):
//   kNormal (llama, GPT-J style): pairs (2i, 2i+1)
//   kNeox   (qwen2/qwen3, GPT-NeoX style): pairs (i, i + n_rot/2)
// Pair i at position p turns by angle p * inv_freq[i], with
//   inv_freq[i] = freq_scale / (theta_base^(2i / n_rot) * freq_factors[i])
// (freq_factors: llama 3's rope_freqs tensor, or all ones; freq_scale: 1 / linear factor).
// YaRN (yarn_ext > 0, gpt-oss; ggml's rope_yarn): pair i interpolates only where its wavelength
// is long; with e_i = 1 / (theta_base^(2i / n_rot) * freq_factors[i]) and
//   ramp_i = (1 - clamp((i - yarn_low) / max(0.001, yarn_high - yarn_low), 0, 1)) * yarn_ext,
//   inv_freq[i] = e_i * (freq_scale * (1 - ramp_i) + ramp_i),
// and the rotated values are scaled by mscale (YaRN's 1 + 0.1 ln(1 / freq_scale)).
enum class RopeStyle { kNormal, kNeox };

struct RopeParams {
  int head_dim = 0;
  int n_rot = 0;  // rotated dims per head, even, <= head_dim
  RopeStyle style = RopeStyle::kNormal;
  float theta_base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // [n_rot / 2] or nullptr
  float yarn_ext = 0;                   // YaRN extrapolation mix (0: plain scaling)
  float yarn_low = 0, yarn_high = 0;    // YaRN's correction range in pairs (yarn_corr_dims)
  float mscale = 1.0f;                  // both rotated values multiplied by it
};

// YaRN's correction range (ggml_rope_yarn_corr_dims): the pairs whose wavelength fits
// n_ctx_orig / beta_fast (fast) and n_ctx_orig / beta_slow (slow) times in the original context,
// floor and ceil, clamped to [0, n_rot - 1]: low[0], high[1].
void yarn_corr_dims(int n_rot, int n_ctx_orig, float theta_base, float beta_fast, float beta_slow,
                    float out[2]);

// Fills inv_freq[n_rot / 2] (computed in f64, rounded once) for rope().
void rope_inv_freq(const RopeParams& p, float* inv_freq);

// Rotates x: [n_heads, head_dim] of one token at position `pos` in place.
void rope(float* x, int n_heads, int32_t pos, const RopeParams& p, const float* inv_freq);
void rope_ref(float* x, int n_heads, int32_t pos, const RopeParams& p);

// ---- soft-capping ------------------------------------------------------------------------------
// x[i] = cap * tanh(x[i] / cap) (Gemma 2's attention and final logits), cap > 0.
void softcap(float* x, int64_t n, float cap);

// ---- SwiGLU -----------------------------------------------------------------------------------
// out[i] = silu(gate[i]) * up[i],  silu(g) = g / (1 + exp(-g)). out may equal gate or up.
// `isa`: the kernels to run (kAuto: the process's; tests force each one the CPU runs).
void swiglu(const float* gate, const float* up, float* out, int64_t n,
            MatmulIsa isa = MatmulIsa::kAuto);
void swiglu_ref(const float* gate, const float* up, float* out, int64_t n);

// ---- gpt-oss's clamped SwiGLU ----------------------------------------------------------------
// g = min(gate[i], 7), u = clamp(up[i], -7, 7), out[i] = g * sigmoid(1.702 g) * (u + 1)
// (llama.cpp's swiglu_oai with alpha 1.702, limit 7). out may equal gate or up. Portable code on
// every ISA.
inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);
void swiglu_oai_ref(const float* gate, const float* up, float* out, int64_t n);

// ---- GELU, GeGLU (Gemma, BERT) -----------------------------------------------------------------
// gelu with the tanh approximation (as llama.cpp and Gemma's reference):
// gelu(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))), computed as g / (1 + e^(-2u)) by
// the AVX2 and AVX-512 kernels (the same function; within a few ulp). geglu: out[i] =
// gelu(gate[i]) * up[i], out may equal gate or up; gelu: x[i] = gelu(x[i]) (BERT's FFN).
void geglu(const float* gate, const float* up, float* out, int64_t n,
           MatmulIsa isa = MatmulIsa::kAuto);
void geglu_ref(const float* gate, const float* up, float* out, int64_t n);
void gelu(float* x, int64_t n, MatmulIsa isa = MatmulIsa::kAuto);

// ---- Softmax ----------------------------------------------------------------------------------
// x = exp(x - max x) / sum, in place; n >= 1.
void softmax(float* x, int64_t n);
void softmax_ref(float* x, int64_t n);

}  // namespace sluice
