// Weight formats, bit-exact with the GGUF/ggml block layouts: row dequantization to f32 and a
// reference quantizer for each. These are the specifications that fast kernels are tested
// against; they favour clarity over speed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "gguf/types.h"

namespace sluice {

// Types this module can dequantize / quantize.
bool can_dequantize(GgmlType type);
bool can_quantize(GgmlType type);

// Dequantizes `n` values (a multiple of the type's block size) from `src` into `dst`.
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Reference quantizer: `n` floats (a multiple of the block size) into row_size(type, n) bytes
// at `dst`. Deterministic; matches ggml's quantize_row_*_ref output for the same input.
Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace sluice
