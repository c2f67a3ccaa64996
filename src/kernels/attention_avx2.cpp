// AVX2 paged attention over a block of query tokens (attention.h, paged_attention_block):
// attention_simd.inc over 256-bit vectors (simd_avx2.h), a key tile of 16 positions held as two.
// Runs head sizes that are multiples of 8 (on AVX-512 CPUs too, for those that are not
// multiples of 16).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention.h"
#include "kernels/dequant.h"
#include "kernels/simd_avx2.h"

namespace sluice::kern_avx2 {

#define SLUICE_TARGET SLUICE_AVX2_TARGET
#include "kernels/attention_simd.inc"
#undef SLUICE_TARGET

}  // namespace sluice::kern_avx2
