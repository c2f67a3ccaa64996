// AVX-512 Gated DeltaNet, the chunked form (delta_net.h; the loops are delta_net_simd.inc's).
#include "kernels/avx512_diagnostics.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/delta_net.h"
#include "kernels/simd_avx512.h"

namespace sluice::kern_avx512 {

#define SLUICE_TARGET SLUICE_AVX512_TARGET

namespace {
struct V : Vec {
  static constexpr int J = 4;  // vectors per column tile
  SLUICE_TARGET static T silu(T x) { return vsilu(x); }
};
}  // namespace

#include "kernels/delta_net_simd.inc"

#undef SLUICE_TARGET

}  // namespace sluice::kern_avx512
