// Memory that is streamed through (weights, the KV cache): 64-byte aligned, and for large
// buffers a fresh anonymous mapping, 2 MiB aligned and advised into transparent huge pages
// before its first touch, so a stream does not walk the page table every 4 KiB (the TLB covers
// only a few MiB of 4 KiB pages). A mapping of its own, not the heap: glibc serves
// allocations below its (growing) mmap threshold from heap pages that may already be mapped
// 4 KiB at a time, where the advice comes too late.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sluice {

struct StreamedFree {
  size_t mapped = 0;  // bytes mapped (0: from the heap)
  void operator()(uint8_t* p) const;
};
using StreamedBuffer = std::unique_ptr<uint8_t[], StreamedFree>;

// At least `bytes` bytes; null when the memory is not there. A mapping (get_deleter().mapped
// > 0) reads as zeros until written; a heap buffer's contents are unspecified.
StreamedBuffer alloc_streamed(size_t bytes);

}  // namespace sluice
