// AVX-512 paged attention over a block of query tokens (attention.h, paged_attention_block):
// attention_simd.inc over 512-bit vectors (simd_avx512.h), a key tile of 16 positions in one.
// Runs head sizes that are multiples of 16.
#include "kernels/avx512_diagnostics.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention.h"
#include "kernels/dequant.h"
#include "kernels/simd_avx512.h"

namespace sluice::kern_avx512 {

#define SLUICE_TARGET SLUICE_AVX512_TARGET
#include "kernels/attention_simd.inc"
#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
