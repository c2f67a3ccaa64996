#include "kernels/packed.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/huge_alloc.h"
#include "gguf/quants.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul_kernels.h"

namespace sluice {

namespace {

constexpr bool lut_matches_values() {
  for (int i = 0; i < 16; ++i)
    if (int(kMxfp4Lut[i]) != kMxfp4Values[i] + 12) return false;
  return true;
}
static_assert(lut_matches_values(), "kMxfp4Lut is kMxfp4Values + 12");

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
    for (int s = 0; s < 8; ++s)
      unpack_scale_min_k4(src + 4, s, &meta[64 + s * kR + r], &meta[192 + s * kR + r]);
    const uint8_t* qs = src + 16;
    for (int v = 0; v < 32; ++v) std::memcpy(q + v * 64 + r * 4, qs + 4 * v, 4);
    return;
  }
  if (type == GgmlType::MXFP4) {  // [e][16 code bytes]: as Q4_0's codes, e into the meta
    meta[r] = src ? src[0] : 0;
    for (int j = 0; j < 4; ++j) {
      if (src) {
        std::memcpy(q + j * 64 + r * 4, src + 1 + 4 * j, 4);
      } else {
        std::memset(q + j * 64 + r * 4, 0, 4);  // code 0: +0
      }
    }
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
    for (int t = 0; t < 4; ++t)
      q[j * 64 + r * 4 + t] = q8 ? uint8_t(qs[4 * j + t] ^ 0x80) : qs[4 * j + t];
  }
}

}  // namespace

namespace {

size_t round64(size_t n) {
  return (n + 63) / 64 * 64;
}

template <class F>
void over_groups(ThreadPool* pool, int64_t n_groups, F&& f) {
  if (pool) {
    pool->parallel_for(n_groups, 16, f);
  } else {
    f(int64_t(0), n_groups);
  }
}

}  // namespace

bool PackedWeights::supported(GgmlType type, MatmulIsa isa) {
  const KernelTable& kt = kernel_table(isa);
  switch (type) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::MXFP4:
      return kt.gemm_packed != nullptr;
    case GgmlType::F16:
      return kt.gemm_f16_packed != nullptr;
    case GgmlType::BF16:  // a copy the row kernels read, or the columns gemm_bf16_packed reads
      return kt.gemm_half != nullptr || kt.gemm_bf16_packed != nullptr;
    default:
      return false;
  }
}

PackedWeights::PackedWeights(GgmlType type, int64_t m, int64_t k, MatmulIsa isa)
    : type_(type), m_(m), k_(k) {
  if (type == GgmlType::F16) half_packing_ = kernel_table(isa).f16_packing;
  if (type == GgmlType::BF16) half_packing_ = kernel_table(isa).bf16_packing;
}

bool PackedWeights::half() const {
  return type_ == GgmlType::F16 || type_ == GgmlType::BF16;
}

size_t PackedWeights::quant_bytes() const {
  if (is_copy()) return size_t(m_ * k_ * 2);
  if (half()) return size_t(n_groups() * kRows * k_ * 2);
  return size_t(n_groups() * n_units() * unit_quant_bytes());
}

size_t PackedWeights::meta_bytes() const {
  if (half()) return 0;
  return size_t(n_groups() * n_units() * unit_meta_bytes());
}

size_t PackedWeights::bytes() const {
  return quant_bytes() + meta_bytes();
}

Result<size_t> PackedWeights::bytes_needed(GgmlType type, int64_t m, int64_t k, MatmulIsa isa) {
  const PackedWeights p(type, m, k, isa);
  if (type != GgmlType::Q8_0 && type != GgmlType::Q4_0 && type != GgmlType::Q4_K &&
      type != GgmlType::Q6_K && type != GgmlType::MXFP4 && type != GgmlType::F16 &&
      type != GgmlType::BF16) {
    return make_error("packed weights: ", type_name(type), " has no packed form");
  }
  const int64_t unit = p.is_copy() ? 1 : p.half() ? 16 : p.unit_cols();
  if (m <= 0 || k <= 0 || k % unit != 0) {
    return make_error("packed weights: shape [", m, ", ", k, "] of ", type_name(type),
                      " must be positive with k % ", unit, " == 0");
  }
  return round64(p.quant_bytes()) + p.meta_bytes();
}

Result<PackedWeights> PackedWeights::pack(GgmlType type, const void* w, int64_t m, int64_t k,
                                          ThreadPool* pool, uint8_t* dst, MatmulIsa isa) {
  const Result<size_t> need = bytes_needed(type, m, k, isa);
  if (!need.ok()) return need.status();
  PackedWeights p(type, m, k, isa);
  if (!dst) {
    p.own_ = alloc_streamed(*need);
    if (!p.own_) return make_error("packed weights: out of memory (", *need, " bytes)");
    dst = p.own_.get();
  }
  p.quants_ = dst;
  p.meta_ = dst + round64(p.quant_bytes());
  const auto* src = static_cast<const uint8_t*>(w);
  if (p.is_copy()) {
    const size_t n = p.quant_bytes(), chunk = size_t(4) << 20;
    const auto n_chunks = int64_t((n + chunk - 1) / chunk);
    auto copy = [&](int64_t c0, int64_t c1) {
      const size_t b0 = size_t(c0) * chunk, b1 = std::min(n, size_t(c1) * chunk);
      std::memcpy(p.quants_ + b0, src + b0, b1 - b0);
    };
    if (pool) {
      pool->parallel_for(n_chunks, 1, copy);
    } else {
      copy(0, n_chunks);
    }
  } else if (p.half()) {  // kColumns16
    // Each group column by column (packed.h), 64 columns at a time (2 KiB of output, the 16
    // source rows' 128-byte pieces); the rows past m in the last group are zeros. BF16 puts
    // rows r and r + 8 in one 32-bit lane.
    const bool bf16 = type == GgmlType::BF16;
    over_groups(pool, p.n_groups(), [&](int64_t g0, int64_t g1) {
      constexpr int64_t kCols = 64;
      for (int64_t g = g0; g < g1; ++g) {
        auto* out = reinterpret_cast<uint16_t*>(p.quants_ + g * kRows * k * 2);
        for (int64_t c0 = 0; c0 < k; c0 += kCols) {
          const int64_t c1 = std::min(k, c0 + kCols);
          for (int64_t r = 0; r < kRows; ++r) {
            const int64_t row = g * kRows + r;
            const int64_t at = bf16 ? (r < 8 ? 2 * r : 2 * (r - 8) + 1) : r;
            if (row >= m) {
              for (int64_t c = c0; c < c1; ++c) out[c * kRows + at] = 0;
              continue;
            }
            uint16_t in[kCols];
            std::memcpy(in, src + size_t(row * k + c0) * 2, size_t(c1 - c0) * 2);
            for (int64_t c = c0; c < c1; ++c) out[c * kRows + at] = in[c - c0];
          }
        }
      }
    });
  } else {
    const int64_t nu = p.n_units(), qb = p.unit_quant_bytes(), mb = p.unit_meta_bytes();
    const size_t rb = row_size(type, k);
    const size_t unit_bytes = type_traits(type).type_size;
    over_groups(pool, p.n_groups(), [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        for (int64_t u = 0; u < nu; ++u) {
          uint8_t* q = p.quants_ + (g * nu + u) * qb;
          uint8_t* meta = p.meta_ + (g * nu + u) * mb;
          for (int r = 0; r < int(kRows); ++r) {
            const int64_t row = g * kRows + r;
            pack_unit(type, row < m ? src + size_t(row) * rb + size_t(u) * unit_bytes : nullptr, r,
                      q, meta);
          }
        }
      }
    });
  }
  return p;
}

}  // namespace sluice
