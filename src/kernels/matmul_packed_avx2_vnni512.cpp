// The AVX-VNNI copy of the AVX2 packed kernels with vpdpbusd EVEX-encoded (AVX512-VNNI + VL):
// runs the same 256-bit VNNI code on AVX-512 hosts, which lack the VEX form, so the tests and
// kernels_bench can check and measure it there. Not in any kernel table.
#define SLUICE_PACKED_NS kern_avx2_vnni512
#define SLUICE_TARGET __attribute__((target("avx2,fma,f16c,avx512vnni,avx512vl")))
#define SLUICE_PACKED_VNNI 2
#include "kernels/matmul_packed_avx2.inc"
