// FNV-1a, 64 bits: a fast non-cryptographic hash for fingerprints and seeds (model files, rank
// agreement, synthetic weights, synthetic token ids). Chain calls by passing the previous
// value as `h`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice {

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnv1aBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aBasis) {
  return fnv1a(s.data(), s.size(), h);
}

}  // namespace sluice
