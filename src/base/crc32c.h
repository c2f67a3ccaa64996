// CRC-32C (Castagnoli), the checksum of KV blocks on the wire and on disk. The SSE4.2 crc32
// instruction when the CPU has it (about 8 GB/s per core: three interleaved streams), a
// table otherwise; both give the same value (tested against the RFC 3720 vectors).
//
//   uint32_t c = crc32c(data, n);              // whole buffer
//   uint32_t c = crc32c(b, nb, crc32c(a, na)); // a then b: the same as one buffer a||b
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice {

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The table version (the reference the fast path is tested against).
uint32_t crc32c_scalar(const void* data, size_t n, uint32_t crc = 0);

}  // namespace sluice
