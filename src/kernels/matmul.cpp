#include "kernels/matmul.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/fp16.h"
#include "gguf/quants.h"
#include "kernels/dequant.h"
#include "kernels/kernel_table.h"

namespace sluice {
namespace {

// Below this many multiply-adds a matmul runs on the calling thread: waking the pool costs
// a few microseconds, more than a small product takes.
constexpr int64_t kMinParallelMacs = 1 << 16;
// Each parallel chunk of output rows does at least this many multiply-adds.
constexpr int64_t kMinChunkMacs = 1 << 14;

// Row r of W as f32: F32 rows are used in place, everything else is dequantized into `buf`.
const float* weight_row(GgmlType type, const uint8_t* row, int64_t k, float* buf) {
  if (type == GgmlType::F32) return reinterpret_cast<const float*>(row);
  dequantize_row_fast(type, row, buf, k);
  return buf;
}

}  // namespace

bool matmul_supports(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 ||
         can_dequantize(type);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

namespace {

void matmul_generic(const MatmulParams& p, ThreadPool* pool) {
  const size_t rb = row_size(p.type, p.k);
  const auto* w = static_cast<const uint8_t*>(p.w);
  auto rows = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(p.k));  // per chunk: this path dequantizes whole rows anyway
    float* buf = row.data();
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = weight_row(p.type, w + size_t(r) * rb, p.k, buf);
      for (int64_t i = 0; i < p.n; ++i) p.y[i * p.m + r] = dot_f32(wr, p.x + i * p.k, p.k);
    }
  };
  const int64_t macs_per_row = p.k * p.n;
  if (!pool || p.m * macs_per_row < kMinParallelMacs) {
    rows(0, p.m);
    return;
  }
  const int64_t grain = (kMinChunkMacs + macs_per_row - 1) / macs_per_row;
  pool->parallel_for(p.m, grain, rows);
}

// Runs kernel(r0, r1) over the m output rows: serially when small, else in chunks of at least
// 16 KiB of weights (bandwidth-sized pieces; the pool hands ~4 chunks per thread).
template <class F>
void over_rows(const MatmulParams& p, size_t row_bytes, ThreadPool* pool, F&& kernel) {
  const int64_t macs = p.m * p.k * p.n;
  if (!pool || macs < kMinParallelMacs) {
    kernel(int64_t(0), p.m);
    return;
  }
  const int64_t grain = std::max<int64_t>({1, int64_t((16 << 10) / std::max<size_t>(1, row_bytes)),
                                           (kMinChunkMacs + p.k * p.n - 1) / (p.k * p.n)});
  pool->parallel_for(p.m, grain, kernel);
}

// The 16-row groups of p.packed, split between the pool's threads when the product is big enough.
template <class F>
void over_groups(const MatmulParams& p, ThreadPool* pool, F&& kernel) {
  const int64_t groups = p.packed->n_groups();
  if (!pool || p.m * p.k * p.n < kMinParallelMacs) {
    kernel(int64_t(0), groups);
  } else {
    pool->parallel_for(groups, 1, kernel);
  }
}

// p.x as 8-bit blocks: the caller's shared copy (p.xq) or quantized here into ws.acts.
QuantizedActs int8_acts(const MatmulParams& p, MatmulIsa isa, MatmulWorkspace& ws) {
  if (p.xq) return *p.xq;
  quantize_acts(p.x, p.n, p.k, ws.acts, isa);
  return ws.acts.view();
}

// MXFP4 rows [r0, r1) against 8-bit activation blocks with f16-rounded scales d16 [n, k / 32]:
// per block the integer dot of the doubled E2M1 codes with the activations, times
// d16 * 2^(e - 128), summed in f32 block by block (ggml's vec_dot_mxfp4_q8_0 order).
void gemm_mxfp4_rows(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                     const QuantizedActs& a, const float* d16, float* y, int64_t m) {
  const int64_t nb = a.k / kActBlock;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + size_t(r) * row_bytes;
    for (int64_t i = 0; i < a.n; ++i) {
      const int8_t* q = a.qs + i * a.stride;
      const float* di = d16 + i * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * int64_t(sizeof(BlockMxfp4));
        const uint8_t* qs = blk + 1;
        const int8_t* qb = q + b * kActBlock;
        int32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; ++j) {
          lo += int32_t(kMxfp4Values[qs[j] & 0x0f]) * qb[j];
          hi += int32_t(kMxfp4Values[qs[j] >> 4]) * qb[j + 16];
        }
        acc += di[b] * mxfp4_half_scale(blk[0]) * float(lo + hi);
      }
      y[i * m + r] = acc;
    }
  }
}

void matmul_mxfp4(const MatmulParams& p, const KernelTable& kt, MatmulWorkspace& ws,
                  ThreadPool* pool) {
  assert(p.k % kActBlock == 0);
  const QuantizedActs a = int8_acts(p, kt.isa, ws);
  const int64_t n_scales = p.n * (p.k / kActBlock);
  if (int64_t(ws.d16.size()) < n_scales) ws.d16.resize(size_t(n_scales));
  for (int64_t i = 0; i < n_scales; ++i) ws.d16[size_t(i)] = mxfp4_act_scale(a.d[i]);
  if (p.packed && p.packed->type() == GgmlType::MXFP4 && kt.gemm_packed) {
    // The packed kernels read the block scales from QuantizedActs::d: the f16-rounded ones.
    QuantizedActs a16 = a;
    a16.d = ws.d16.data();
    over_groups(p, pool,
                [&](int64_t g0, int64_t g1) { kt.gemm_packed(*p.packed, g0, g1, a16, p.y, p.m); });
    return;
  }
  const size_t rb = row_size(p.type, p.k);
  const auto* w = static_cast<const uint8_t*>(p.w);
  const auto kernel = kt.gemm_mxfp4 ? kt.gemm_mxfp4 : &gemm_mxfp4_rows;
  over_rows(p, rb, pool,
            [&](int64_t r0, int64_t r1) { kernel(w, rb, r0, r1, a, ws.d16.data(), p.y, p.m); });
}

}  // namespace

float mxfp4_act_scale(float d) {
  return f16_to_f32(f32_to_f16(d));
}

void matmul(const MatmulParams& p, ThreadPool* pool) {
  const KernelTable& kt = kernel_table(p.isa);
  const MatmulIsa isa = kt.isa;
  MatmulWorkspace local;
  MatmulWorkspace& ws = p.ws ? *p.ws : local;
  if (p.type == GgmlType::MXFP4) {
    matmul_mxfp4(p, kt, ws, pool);
    return;
  }
  // F16 and BF16 packed for another ISA's kernels (a layout this table does not read): the rows.
  const PackedWeights* packed = p.packed;
  if (packed && ((p.type == GgmlType::F16 && packed->half_packing() != kt.f16_packing) ||
                 (p.type == GgmlType::BF16 && packed->half_packing() != kt.bf16_packing))) {
    packed = nullptr;
  }
  const auto* w = static_cast<const uint8_t*>(packed && packed->is_copy() ? packed->raw() : p.w);
  const size_t rb = row_size(p.type, p.k);
  const bool int8 = matmul_uses_int8_acts(p.type) && p.k % kActBlock == 0 && kt.gemm_int8;
  if (int8 && packed && kt.gemm_packed) {
    const QuantizedActs a = int8_acts(p, isa, ws);
    over_groups(p, pool,
                [&](int64_t g0, int64_t g1) { kt.gemm_packed(*packed, g0, g1, a, p.y, p.m); });
    return;
  }
  if (p.type == GgmlType::F16 && packed && kt.gemm_f16_packed) {
    over_groups(p, pool, [&](int64_t g0, int64_t g1) {
      kt.gemm_f16_packed(*packed, g0, g1, p.x, p.n, p.y, p.m);
    });
    return;
  }
  if (p.type == GgmlType::BF16 && packed && kt.gemm_bf16_packed) {
    over_groups(p, pool, [&](int64_t g0, int64_t g1) {
      kt.gemm_bf16_packed(*packed, g0, g1, p.x, p.n, p.y, p.m);
    });
    return;
  }
  if (int8) {
    const QuantizedActs a = int8_acts(p, isa, ws);
    over_rows(p, rb, pool,
              [&](int64_t r0, int64_t r1) { kt.gemm_int8(p.type, w, rb, r0, r1, a, p.y, p.m); });
    return;
  }
  if (p.type == GgmlType::F32 && kt.gemm_f32_tiled) {
    over_rows(p, rb, pool, [&](int64_t r0, int64_t r1) {
      kt.gemm_f32_tiled(w, r0, r1, p.x, p.n, p.k, p.y, p.m);
    });
    return;
  }
  if (p.type == GgmlType::F16 && p.k % 16 == 0 && kt.gemm_f16_tiled) {
    over_rows(p, rb, pool, [&](int64_t r0, int64_t r1) {
      kt.gemm_f16_tiled(w, r0, r1, p.x, p.n, p.k, p.y, p.m);
    });
    return;
  }
  if (p.type == GgmlType::BF16 && p.n >= 4 && p.k % 32 == 0 && kt.gemm_bf16_dp) {
    std::vector<uint16_t>& xb = ws.bf16;
    if (int64_t(xb.size()) < p.n * p.k) xb.resize(size_t(p.n * p.k));
    kt.to_bf16(p.x, p.n * p.k, xb.data());
    over_rows(p, rb, pool, [&](int64_t r0, int64_t r1) {
      kt.gemm_bf16_dp(w, r0, r1, xb.data(), p.n, p.k, p.y, p.m);
    });
    return;
  }
  // One activation row streams BF16 faster through the row kernel; from two rows the tiles win
  // (both measured on the AVX2 path, docs/perf-log.md). As gemm_bf16_dp, a row's value then
  // depends on whether it ran alone.
  if (p.type == GgmlType::BF16 && p.n >= 2 && p.k % 16 == 0 && kt.gemm_bf16_tiled) {
    over_rows(p, rb, pool, [&](int64_t r0, int64_t r1) {
      kt.gemm_bf16_tiled(w, r0, r1, p.x, p.n, p.k, p.y, p.m);
    });
    return;
  }
  if ((p.type == GgmlType::F16 || p.type == GgmlType::BF16) && kt.gemm_half) {
    const bool bf16 = p.type == GgmlType::BF16;
    over_rows(p, rb, pool, [&](int64_t r0, int64_t r1) {
      kt.gemm_half(bf16, w, r0, r1, p.x, p.n, p.k, p.y, p.m);
    });
    return;
  }
  matmul_generic(p, pool);
}

void matmul_ref(const MatmulParams& p) {
  const size_t rb = row_size(p.type, p.k);
  const auto* w = static_cast<const uint8_t*>(p.w);
  std::vector<float> buf(static_cast<size_t>(p.k));
  for (int64_t r = 0; r < p.m; ++r) {
    const Status s = dequantize_row(p.type, w + size_t(r) * rb, buf.data(), p.k);
    assert(s.ok());
    (void)s;
    for (int64_t i = 0; i < p.n; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < p.k; ++j) acc += double(buf[size_t(j)]) * double(p.x[i * p.k + j]);
      p.y[i * p.m + r] = float(acc);
    }
  }
}

void matmul_act_ref(const MatmulParams& p) {
  ActBuffer a;
  quantize_acts_ref(p.x, p.n, p.k, a);
  std::vector<float> xd(size_t(p.n * p.k));
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t j = 0; j < p.k; ++j) {
      const float d = a.d()[(i * p.k + j) / kActBlock];
      xd[size_t(i * p.k + j)] =
          (p.type == GgmlType::MXFP4 ? mxfp4_act_scale(d) : d) * float(a.qs()[i * a.stride() + j]);
    }
  }
  MatmulParams q = p;
  q.x = xd.data();
  matmul_ref(q);
}

void get_rows(GgmlType type, const void* table, int64_t k, const int32_t* ids, int64_t n,
              float* out) {
  const size_t rb = row_size(type, k);
  const auto* t = static_cast<const uint8_t*>(table);
  for (int64_t i = 0; i < n; ++i) {
    dequantize_row_fast(type, t + size_t(ids[i]) * rb, out + i * k, k);
  }
}

}  // namespace sluice
