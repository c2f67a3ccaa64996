#include "kernels/packed.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/huge_alloc.h"
#include "gguf/quants.h"
#include "kernels/matmul_isa.h"

namespace sluice {

namespace {

// Q6_K super-block `src` (null: padding) -> row r's bytes of the packed unit (packed.h).
void pack_q6_k(const uint8_t* src, int r, uint8_t* q, uint8_t* meta) {
  constexpr int kR = int(PackedWeights::kRows);
  for (int g = 0; g < 16; ++g) {
    for (int v = 0; v < 3; ++v) std::memset(q + 192 * g + 64 * v + 4 * r, 0, 4);
    meta[32 + g * kR + r] = src ? src[192 + g] : 0;
  }
  if (!src) {
    std::memset(meta + 2 * r, 0, 2);
    return;
  }
  std::memcpy(meta + 2 * r, src + 208, 2);
  const uint8_t* ql = src;
  const uint8_t* qh = src + 128;
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, rr = e % 128;
    const int lo = ql[64 * half + rr % 64] >> (4 * (rr / 64)) & 15;
    const int hi = qh[32 * half + rr % 32] >> (2 * (rr / 32)) & 3;
    const int g = e / 16, s = (e % 16) / 4, t = e % 4;
    q[192 * g + 64 * (s / 2) + 4 * r + t] |= uint8_t(lo << (4 * (s % 2)));
    q[192 * g + 128 + 4 * r + t] |= uint8_t(hi << (2 * s));
  }
}

// One unit of row r (0..15) of a group from its GGUF bytes `src` (null: a padding row).
void pack_unit(GgmlType type, const uint8_t* src, int r, uint8_t* q, uint8_t* meta) {
  constexpr int kR = int(PackedWeights::kRows);
  if (type == GgmlType::Q6_K) {
    pack_q6_k(src, r, q, meta);
    return;
  }
  if (type == GgmlType::Q4_K) {
    if (!src) {
      std::memset(meta + 2 * r, 0, 2);
      std::memset(meta + 32 + 2 * r, 0, 2);
      for (int s = 0; s < 8; ++s) meta[64 + s * kR + r] = meta[192 + s * kR + r] = 0;
      for (int v = 0; v < 32; ++v) std::memset(q + v * 64 + r * 4, 0, 4);
      return;
    }
    std::memcpy(meta + 2 * r, src, 2);           // d
    std::memcpy(meta + 32 + 2 * r, src + 2, 2);  // dmin
    for (int s = 0; s < 8; ++s) unpack_scale_min_k4(src + 4, s, &meta[64 + s * kR + r], &meta[192 + s * kR + r]);
    const uint8_t* qs = src + 16;
    for (int v = 0; v < 32; ++v) std::memcpy(q + v * 64 + r * 4, qs + 4 * v, 4);
    return;
  }
  const bool q8 = type == GgmlType::Q8_0;
  const int n_vec = q8 ? 8 : 4;
  if (!src) {
    std::memset(meta + 2 * r, 0, 2);
    for (int j = 0; j < n_vec; ++j) std::memset(q + j * 64 + r * 4, q8 ? 0x80 : 0x88, 4);
    return;
  }
  std::memcpy(meta + 2 * r, src, 2);
  const uint8_t* qs = src + 2;
  for (int j = 0; j < n_vec; ++j) {
    for (int t = 0; t < 4; ++t) q[j * 64 + r * 4 + t] = q8 ? uint8_t(qs[4 * j + t] ^ 0x80) : qs[4 * j + t];
  }
}

}  // namespace

// F16 rows into 4-row tiles (packed.h); the rows past m in the last group are zeros.
Result<PackedWeights> PackedWeights::pack_f16(PackedWeights p, const uint8_t* src, ThreadPool* pool) {
  const int64_t m = p.m_, k = p.k_;
  if (m <= 0 || k <= 0 || k % 16 != 0) {
    return make_error("packed weights: shape [", m, ", ", k, "] of F16 must be positive with k % 16 == 0");
  }
  p.quants_ = alloc_streamed(p.bytes());
  if (!p.quants_) return make_error("packed weights: out of memory");
  const int64_t tiles_per_group = kRows / kF16TileRows;
  auto pack_groups = [&](int64_t g0, int64_t g1) {
    for (int64_t t = g0 * tiles_per_group; t < g1 * tiles_per_group; ++t) {
      uint8_t* dst = p.quants_.get() + t * kF16TileRows * k * 2;
      for (int64_t c = 0; c < k; c += 16) {
        for (int64_t a = 0; a < kF16TileRows; ++a, dst += 32) {
          const int64_t row = t * kF16TileRows + a;
          if (row < m) {
            std::memcpy(dst, src + size_t(row * k + c) * 2, 32);
          } else {
            std::memset(dst, 0, 32);
          }
        }
      }
    }
  };
  if (pool) {
    pool->parallel_for(p.n_groups(), 16, pack_groups);
  } else {
    pack_groups(0, p.n_groups());
  }
  return p;
}

bool PackedWeights::supported(GgmlType type) {
  return (type == GgmlType::Q8_0 || type == GgmlType::Q4_0 || type == GgmlType::Q4_K ||
          type == GgmlType::Q6_K || type == GgmlType::F16 || type == GgmlType::BF16) &&
         matmul_isa_best() == MatmulIsa::kAvx512;
}

size_t PackedWeights::bytes() const {
  if (is_copy()) return size_t(m_ * k_ * 2);
  if (type_ == GgmlType::F16) return size_t(n_groups() * kRows * k_ * 2);
  return size_t(n_groups() * n_units()) * size_t(unit_quant_bytes() + unit_meta_bytes());
}

Result<PackedWeights> PackedWeights::pack(GgmlType type, const void* w, int64_t m, int64_t k,
                                          ThreadPool* pool) {
  PackedWeights p;
  p.type_ = type;
  p.m_ = m;
  p.k_ = k;
  if (p.is_copy()) {
    if (m <= 0 || k <= 0) return make_error("packed weights: shape [", m, ", ", k, "] must be positive");
    const size_t n = size_t(m * k * 2);
    p.quants_ = alloc_streamed(n);
    if (!p.quants_) return make_error("packed weights: out of memory");
    const size_t chunk = size_t(4) << 20;
    auto copy = [&](int64_t c0, int64_t c1) {
      const size_t b0 = size_t(c0) * chunk, b1 = std::min(n, size_t(c1) * chunk);
      std::memcpy(p.quants_.get() + b0, static_cast<const uint8_t*>(w) + b0, b1 - b0);
    };
    const auto n_chunks = int64_t((n + chunk - 1) / chunk);
    if (pool) {
      pool->parallel_for(n_chunks, 1, copy);
    } else {
      copy(0, n_chunks);
    }
    return p;
  }
  if (type == GgmlType::F16) return pack_f16(std::move(p), static_cast<const uint8_t*>(w), pool);
  if (type != GgmlType::Q8_0 && type != GgmlType::Q4_0 && type != GgmlType::Q4_K &&
      type != GgmlType::Q6_K) {
    return make_error("packed weights: ", type_name(type), " has no packed form");
  }
  if (m <= 0 || k <= 0 || k % p.unit_cols() != 0) {
    return make_error("packed weights: shape [", m, ", ", k, "] of ", type_name(type),
                      " must be positive with k % ", p.unit_cols(), " == 0");
  }
  const int64_t nu = p.n_units(), qb = p.unit_quant_bytes(), mb = p.unit_meta_bytes();
  p.quants_ = alloc_streamed(size_t(p.n_groups() * nu * qb));
  p.meta_ = alloc_streamed(size_t(p.n_groups() * nu * mb));
  if (!p.quants_ || !p.meta_) return make_error("packed weights: out of memory");

  const size_t rb = row_size(type, k);
  const size_t unit_bytes = type_traits(type).type_size;
  const auto* src = static_cast<const uint8_t*>(w);
  auto pack_groups = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t u = 0; u < nu; ++u) {
        uint8_t* q = p.quants_.get() + (g * nu + u) * qb;
        uint8_t* meta = p.meta_.get() + (g * nu + u) * mb;
        for (int r = 0; r < int(kRows); ++r) {
          const int64_t row = g * kRows + r;
          pack_unit(type, row < m ? src + size_t(row) * rb + size_t(u) * unit_bytes : nullptr, r, q, meta);
        }
      }
    }
  };
  if (pool) {
    pool->parallel_for(p.n_groups(), 16, pack_groups);
  } else {
    pack_groups(0, p.n_groups());
  }
  return p;
}

}  // namespace sluice
