// CPU features that more than one module asks about, detected once per process.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace sluice {

// Whether the CPU has AVX-VNNI: the VEX-encoded vpdpbusd on 256-bit registers without AVX-512
// (Intel client chips since Alder Lake). CPUID leaf 7 sub-leaf 1, EAX bit 4; AVX512-VNNI is
// another bit. The kernels' avx2 table dots with it, and `--roofline` measures its peak.
inline bool cpu_has_avx_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace sluice
