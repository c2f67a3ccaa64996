// Included first by the AVX-512 kernel files (and simd_avx512.h): GCC 12's AVX-512 headers trip
// -Wmaybe-uninitialized on their own _mm512_undefined_*() pass-through operands (GCC PR105593),
// at every extract/convert intrinsic. Silenced for the including file only (a kernel .cpp, or
// kernel_table.cpp through simd_avx512.h).
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
