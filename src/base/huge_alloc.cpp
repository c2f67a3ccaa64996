#include "base/huge_alloc.h"

#include <sys/mman.h>

#include <cstdlib>

namespace sluice {

namespace {
constexpr size_t kHuge = size_t(2) << 20;
}  // namespace

void StreamedFree::operator()(uint8_t* p) const {
  if (mapped > 0) {
    munmap(p, mapped);
  } else {
    std::free(p);
  }
}

StreamedBuffer alloc_streamed(size_t bytes) {
  if (bytes < 2 * kHuge) {
    bytes = (bytes + 63) / 64 * 64;
    return StreamedBuffer(static_cast<uint8_t*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes)));
  }
  const size_t len = (bytes + kHuge - 1) / kHuge * kHuge;
  // Over-map by one huge page, then give back the unaligned head and the tail.
  void* raw =
      mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return StreamedBuffer(nullptr);
  auto* base = static_cast<uint8_t*>(raw);
  auto* p =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) & ~(kHuge - 1));
  if (p > base) munmap(base, size_t(p - base));
  if (base + len + kHuge > p + len) munmap(p + len, size_t(base + len + kHuge - (p + len)));
#ifdef MADV_HUGEPAGE
  madvise(p, len, MADV_HUGEPAGE);
#endif
  return StreamedBuffer(p, StreamedFree{len});
}

}  // namespace sluice
