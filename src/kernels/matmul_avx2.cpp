// The AVX2 + FMA + F16C build of matmul_simd.inc (no VNNI: u8 x s8 dots via vpmaddubsw, whose
// int16 pair sums cannot saturate here: |w| <= 128 and |x| <= 127 give at most 32512).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "gguf/quants.h"
#include "kernels/dequant.h"
#include "kernels/matmul_kernels.h"

namespace sluice::kern_avx2 {

#define SLUICE_TARGET __attribute__((target("avx2,fma,f16c")))
#define SLUICE_DPBUSD(a, u, s) \
  _mm256_add_epi32((a), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#include "kernels/matmul_simd.inc"
#undef SLUICE_DPBUSD
#undef SLUICE_TARGET

}  // namespace sluice::kern_avx2
