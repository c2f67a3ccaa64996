// The AVX2 packed kernels with AVX-VNNI's vpdpbusd (VEX encoding): CPUs with AVX2 and AVX-VNNI but
// no AVX-512 (Intel Alder Lake and later client chips, Sierra Forest). kernel_table.cpp picks this
// copy for the avx2 ISA when CPUID says AVX-VNNI.
#define SLUICE_PACKED_NS kern_avx2_vnni
#define SLUICE_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define SLUICE_PACKED_VNNI 1
#include "kernels/matmul_packed_avx2.inc"
