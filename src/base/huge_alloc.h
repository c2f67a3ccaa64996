// Memory that is streamed through (weights, the KV cache): 64-byte aligned, and for large
// buffers 2 MiB aligned and advised into transparent huge pages, so a stream does not walk the
// page table every 4 KiB (the TLB covers only a few MiB of 4 KiB pages). Free with std::free.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace sluice {

inline uint8_t* alloc_streamed(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes >= 2 * kHuge) {
    bytes = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return static_cast<uint8_t*>(p);
  }
  bytes = (bytes + 63) / 64 * 64;
  return static_cast<uint8_t*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes));
}

}  // namespace sluice
