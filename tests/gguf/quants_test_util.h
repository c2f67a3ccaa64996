// Helpers shared by the quants_*_test.cpp files: a portable deterministic input generator (the
// golden hashes depend on it, so it uses only exact IEEE operations, no libm and no <random>
// distributions, whose output differs between standard libraries), and byte/row utilities.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/quants.h"

namespace sluice::test {

// SplitMix64; floats built from its high bits are exact, so sequences are identical everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return float(next() >> 40) * 0x1.0p-24f; }  // [0, 1), exact
  // Approximately N(0, 1): Irwin-Hall sum of 12 uniforms minus 6 (range +-6).
  float normal() {
    float s = 0.0f;
    for (int i = 0; i < 12; ++i) s += uniform();
    return s - 6.0f;
  }

 private:
  uint64_t state_;
};

inline std::vector<float> normal_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = rng.normal() * scale;
  return x;
}

// sqrt(sum (y - x)^2 / sum x^2).
inline double rel_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += double(y[i] - x[i]) * double(y[i] - x[i]);
    ref += double(x[i]) * double(x[i]);
  }
  return std::sqrt(err / ref);
}

// FNV-1a over bytes; the golden tests store these.
inline uint64_t fnv1a(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

inline std::string hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// Golden input 2: a row that exercises the corner cases of every format, block by block
// (n a multiple of 256): zero and constant sub-blocks, one outlier per super-block, one-signed
// stretches, integer ties on level midpoints, and tiny magnitudes whose f16 scales are
// subnormal.
inline std::vector<float> mixed_floats(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const float g = rng.normal();
    switch (i / 32 % 8) {
      case 0:
        x[i] = 0.0f;
        break;
      case 1:
        x[i] = 0.75f;
        break;
      case 2:
        x[i] = i % 256 == 77 ? 500.0f : g * 0.01f;
        break;
      case 3:
        x[i] = -std::fabs(g) - 0.01f;
        break;
      case 4:
        x[i] = std::fabs(g) * 3.0f;
        break;
      case 5:
        x[i] = float(int(rng.next() % 17) - 8) * 0.5f;
        break;
      case 6:
        x[i] = g * 1e-4f;
        break;
      default:
        x[i] = g * float(1 << (rng.next() % 8));
        break;
    }
  }
  return x;
}

// Pseudo-random bytes for `n_blocks` blocks of `type` with finite scales: every f16 field
// with an all-ones exponent (inf/NaN) gets one exponent bit cleared; Q8_K's f32 d is set to a
// normal draw.
inline std::vector<uint8_t> random_blocks(GgmlType type, size_t n_blocks, uint64_t seed) {
  Rng rng(seed);
  const size_t type_size = type_traits(type).type_size;
  std::vector<uint8_t> q(n_blocks * type_size);
  for (uint8_t& b : q) b = uint8_t(rng.next() >> 56);
  std::vector<size_t> f16_fields;  // byte offsets within a block
  switch (type) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q8_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      f16_fields = {0, 2};
      break;
    case GgmlType::Q2_K:
      f16_fields = {80, 82};
      break;
    case GgmlType::Q3_K:
      f16_fields = {108};
      break;
    case GgmlType::Q6_K:
      f16_fields = {208};
      break;
    case GgmlType::Q8_K:
      break;
    default:
      f16_fields = {0};
      break;
  }
  for (size_t i = 0; i < n_blocks; ++i) {
    uint8_t* block = q.data() + i * type_size;
    for (size_t off : f16_fields) {
      if ((block[off + 1] & 0x7c) == 0x7c) block[off + 1] &= 0xbf;
    }
    if (type == GgmlType::Q8_K) {
      const float d = rng.normal();
      std::memcpy(block, &d, sizeof d);
    }
  }
  return q;
}

// The block types (not F32/F16/BF16) this module quantizes.
inline constexpr GgmlType kBlockTypes[] = {
    GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1, GgmlType::Q8_0,
    GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K, GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::IQ4_NL, GgmlType::MXFP4};

// Quantizes x with `type`, asserting success; returns the bytes.
inline std::vector<uint8_t> quantize(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_size(type, int64_t(x.size())));
  Status s = quantize_row(type, x.data(), q.data(), int64_t(x.size()));
  EXPECT_TRUE(s.ok()) << type_name(type) << ": " << s.message();
  return q;
}

inline std::vector<float> dequantize(GgmlType type, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(size_t(n), -12345.0f);
  Status s = dequantize_row(type, q.data(), y.data(), n);
  EXPECT_TRUE(s.ok()) << type_name(type) << ": " << s.message();
  return y;
}

// A block struct as bytes, and back.
template <class Block>
std::vector<uint8_t> bytes_of(const Block& b) {
  std::vector<uint8_t> v(sizeof b);
  std::memcpy(v.data(), &b, sizeof b);
  return v;
}
template <class Block>
Block block_from(const std::vector<uint8_t>& v, size_t index = 0) {
  Block b;
  std::memcpy(&b, v.data() + index * sizeof b, sizeof b);
  return b;
}

}  // namespace sluice::test
