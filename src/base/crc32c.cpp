#include "base/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sluice {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t update_scalar(uint32_t c, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
using Gf2Matrix = std::array<uint32_t, 32>;  // column i: the image of bit i

uint32_t times(const Gf2Matrix& m, uint32_t v) {
  uint32_t r = 0;
  for (size_t i = 0; v; ++i, v >>= 1) r ^= (v & 1) ? m[i] : 0;
  return r;
}

Gf2Matrix square(const Gf2Matrix& m) {
  Gf2Matrix r{};
  for (size_t i = 0; i < 32; ++i) r[i] = times(m, m[i]);
  return r;
}

// The operator that runs a CRC register over n_bytes zero bytes: combines streams, since
// crc(c, X||Y) = zeros(|Y|)(crc(c, X)) ^ crc(0, Y).
Gf2Matrix zeros_operator(size_t n_bytes) {
  Gf2Matrix op{};  // one zero bit
  op[0] = kPoly;
  for (size_t i = 1; i < 32; ++i) op[i] = 1u << (i - 1);
  op = square(square(square(op)));  // one zero byte
  Gf2Matrix acc{};
  for (size_t i = 0; i < 32; ++i) acc[i] = 1u << i;  // identity
  while (n_bytes) {
    if (n_bytes & 1) {
      Gf2Matrix next{};
      for (size_t i = 0; i < 32; ++i) next[i] = times(op, acc[i]);
      acc = next;
    }
    n_bytes >>= 1;
    if (n_bytes) op = square(op);
  }
  return acc;
}

constexpr size_t kStride = 4096;  // bytes per stream per round

__attribute__((target("sse4.2"))) uint32_t update_hw(uint32_t c, const uint8_t* p, size_t n) {
  // Three independent streams hide the instruction's 3-cycle latency.
  static const Gf2Matrix shift1 = zeros_operator(kStride);
  static const Gf2Matrix shift2 = zeros_operator(2 * kStride);
  while (n >= 3 * kStride) {
    uint64_t a = c, b = 0, d = 0;
    for (size_t i = 0; i < kStride; i += 8) {
      uint64_t x, y, z;
      std::memcpy(&x, p + i, 8);
      std::memcpy(&y, p + kStride + i, 8);
      std::memcpy(&z, p + 2 * kStride + i, 8);
      a = _mm_crc32_u64(a, x);
      b = _mm_crc32_u64(b, y);
      d = _mm_crc32_u64(d, z);
    }
    c = times(shift2, uint32_t(a)) ^ times(shift1, uint32_t(b)) ^ uint32_t(d);
    p += 3 * kStride;
    n -= 3 * kStride;
  }
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    c64 = _mm_crc32_u64(c64, x);
  }
  c = uint32_t(c64);
  for (; n; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}

bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c_scalar(const void* data, size_t n, uint32_t crc) {
  return ~update_scalar(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (have_sse42()) return ~update_hw(~crc, static_cast<const uint8_t*>(data), n);
#endif
  return crc32c_scalar(data, n, crc);
}

}  // namespace sluice
