// Kernel microbenchmarks: matmul per weight type at the Llama-3.2-1B FFN shape (2048 -> 8192) as
// GEMV (decode, n = 1: bytes/s of weights streamed) and GEMM (prefill, n = 128: ops/s), with
// every ISA this CPU runs, repacked weights (also beyond the L3: GemvDram, Gemm16Dram),
// activation quantization, paged attention (decode and prefill), RMSNorm and SwiGLU.
//   build-kern/bench/kernels_bench --benchmark_filter=Gemv
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "base/fp16.h"
#include "base/huge_alloc.h"
#include "gguf/quants.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/ops.h"
#include "kernels/packed.h"

namespace sluice {
namespace {

struct Weights {
  std::vector<uint8_t> q;
  std::vector<float> x;
};

Weights make(GgmlType type, int64_t m, int64_t k, int64_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  Weights w;
  std::vector<float> row(static_cast<size_t>(k));
  const size_t rb = row_size(type, k);
  w.q.resize(rb * size_t(m));
  for (int64_t r = 0; r < m; ++r) {
    for (float& v : row) v = dist(rng);
    (void)quantize_row(type, row.data(), w.q.data() + size_t(r) * rb, k);
  }
  w.x.resize(size_t(n * k));
  for (float& v : w.x) v = dist(rng);
  return w;
}

void run(benchmark::State& state, GgmlType type, int64_t n, MatmulIsa isa, int threads,
         bool packed = false, int64_t m = 8192, int64_t k = 2048) {
  if (isa != MatmulIsa::kScalar && matmul_isa_best() != isa && isa == MatmulIsa::kAvx512) {
    state.SkipWithError("ISA not available");
    return;
  }
  const Weights w = make(type, m, k, n);
  std::vector<float> y(static_cast<size_t>(n * m));
  ThreadPool pool(threads);
  MatmulParams p;
  p.type = type;
  p.w = w.q.data();
  p.k = k;
  p.m = m;
  p.x = w.x.data();
  p.n = n;
  p.y = y.data();
  p.isa = isa;
  Result<PackedWeights> pw = make_error("not packed");
  if (packed) {
    pw = PackedWeights::pack(type, w.q.data(), m, k, &pool, nullptr, isa);
    if (!pw.ok()) {
      state.SkipWithError(pw.status().message().c_str());
      return;
    }
    p.packed = &*pw;
  }
  for (auto _ : state) {
    matmul(p, &pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.q.size()));
  state.counters["GOP/s"] =
      benchmark::Counter(2.0 * double(m * k * n) * double(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The AVX2 packed kernel's vpdpbusd copy (matmul_packed_avx2.inc): the VEX one where the CPU has
// AVX-VNNI, else its EVEX twin on AVX512-VNNI hosts; activations quantized every iteration, as
// matmul() does.
void run_avx2_vnni(benchmark::State& state, GgmlType type, int64_t n, int threads, int64_t m) {
  using Gemm =
      void (*)(const PackedWeights&, int64_t, int64_t, const QuantizedActs&, float*, int64_t);
  Gemm gemm = nullptr;
  if (cpu_has_avx_vnni()) {
    gemm = &kern_avx2_vnni::gemm_packed;
  } else if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) {
    gemm = &kern_avx2_vnni512::gemm_packed;
  }
  if (!gemm || !cpu_runs_isa(MatmulIsa::kAvx2)) {
    state.SkipWithError("no VNNI on this CPU");
    return;
  }
  const int64_t k = 2048;
  const Weights w = make(type, m, k, n);
  std::vector<float> y(static_cast<size_t>(n * m));
  ThreadPool pool(threads);
  Result<PackedWeights> pw = PackedWeights::pack(type, w.q.data(), m, k, &pool);
  if (!pw.ok()) {
    state.SkipWithError(pw.status().message().c_str());
    return;
  }
  ActBuffer a;
  for (auto _ : state) {
    quantize_acts(w.x.data(), n, k, a, MatmulIsa::kAvx2);
    const QuantizedActs qa = a.view();
    pool.parallel_for(pw->n_groups(), 1,
                      [&](int64_t g0, int64_t g1) { gemm(*pw, g0, g1, qa, y.data(), m); });
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.q.size()));
  state.counters["GOP/s"] =
      benchmark::Counter(2.0 * double(m * k * n) * double(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void register_all() {
  const std::pair<GgmlType, const char*> types[] = {
      {GgmlType::Q8_0, "Q8_0"},  {GgmlType::Q4_0, "Q4_0"}, {GgmlType::Q4_K, "Q4_K"},
      {GgmlType::Q6_K, "Q6_K"},  {GgmlType::F16, "F16"},   {GgmlType::BF16, "BF16"},
      {GgmlType::MXFP4, "MXFP4"}};
  const std::pair<MatmulIsa, const char*> isas[] = {
      {MatmulIsa::kScalar, "scalar"}, {MatmulIsa::kAvx2, "avx2"}, {MatmulIsa::kAvx512, "avx512"}};
  for (auto [type, tn] : types) {
    if (PackedWeights::supported(type)) {
      for (int threads : {1, 2}) {
        benchmark::RegisterBenchmark(
            (std::string("Gemv/") + tn + "/packed/t" + std::to_string(threads)).c_str(),
            [=](benchmark::State& s) { run(s, type, 1, matmul_isa_best(), threads, true); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
      if (type != GgmlType::F16 && type != GgmlType::BF16) {
        for (auto [n, m, name] : {std::tuple<int64_t, int64_t, const char*>{1, 8192, "Gemv"},
                                  {1, 65536, "GemvDram"},
                                  {128, 8192, "Gemm128"}}) {
          benchmark::RegisterBenchmark(
              (std::string(name) + "/" + tn + "/avx2-vnni/t2").c_str(),
              [=](benchmark::State& s) { run_avx2_vnni(s, type, n, 2, m); })
              ->UseRealTime()
              ->Unit(n == 1 && m == 8192 ? benchmark::kMicrosecond : benchmark::kMillisecond);
        }
      }
      // 64 Ki rows: 70-140 MB of weights, far beyond the L3 (DRAM bandwidth, as in decode).
      benchmark::RegisterBenchmark(
          (std::string("GemvDram/") + tn + "/packed/t2").c_str(),
          [=](benchmark::State& s) { run(s, type, 1, matmul_isa_best(), 2, true, 65536); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      // Small batches from DRAM: speculative verification (1 + k rows) and batched decode.
      for (int64_t n : {2, 3, 4, 5, 8, 9, 16}) {
        benchmark::RegisterBenchmark(
            (std::string("Gemm") + std::to_string(n) + "Dram/" + tn + "/packed/t2").c_str(),
            [=](benchmark::State& s) { run(s, type, n, matmul_isa_best(), 2, true, 65536); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
      for (int64_t n : {16, 128, 512}) {
        benchmark::RegisterBenchmark(
            (std::string("Gemm") + std::to_string(n) + "/" + tn + "/packed/t2").c_str(),
            [=](benchmark::State& s) { run(s, type, n, matmul_isa_best(), 2, true); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
      // A 512-token prefill's other Llama-3.2-1B shapes: the FFN's down projection (k 8192)
      // and the K/V projections (512 rows).
      for (auto [m, k] : {std::pair<int64_t, int64_t>{2048, 8192}, {512, 2048}}) {
        benchmark::RegisterBenchmark(
            (std::string("Gemm512/") + tn + "/packed/t2/m" + std::to_string(m) + "k" +
             std::to_string(k))
                .c_str(),
            [=](benchmark::State& s) { run(s, type, 512, matmul_isa_best(), 2, true, m, k); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
    // The rows as the file has them, from DRAM (MXFP4's kernels before it had a packed form).
    if (type == GgmlType::MXFP4) {
      benchmark::RegisterBenchmark(
          (std::string("GemvDram/") + tn + "/rows/t2").c_str(),
          [=](benchmark::State& s) { run(s, type, 1, matmul_isa_best(), 2, false, 65536); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(
          (std::string("Gemm512/") + tn + "/rows/t2").c_str(),
          [=](benchmark::State& s) { run(s, type, 512, matmul_isa_best(), 2, false); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    for (auto [isa, in] : isas) {
      for (int threads : {1, 2}) {
        benchmark::RegisterBenchmark(
            (std::string("Gemv/") + tn + "/" + in + "/t" + std::to_string(threads)).c_str(),
            [=](benchmark::State& s) { run(s, type, 1, isa, threads); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
      if (isa == MatmulIsa::kScalar) continue;  // scalar GEMM takes seconds
      benchmark::RegisterBenchmark((std::string("Gemm128/") + tn + "/" + in + "/t2").c_str(),
                                   [=](benchmark::State& s) { run(s, type, 128, isa, 2); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

void BM_QuantizeActs(benchmark::State& state) {
  const int64_t n = state.range(0), k = 2048;
  std::vector<float> x(static_cast<size_t>(n * k), 0.25f);
  ActBuffer a;
  for (auto _ : state) {
    quantize_acts(x.data(), n, k, a);
    benchmark::DoNotOptimize(a.qs());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * k * 4);
}
BENCHMARK(BM_QuantizeActs)->Arg(1)->Arg(512);

// Paged attention at the Llama-3.2-1B shape (32 query heads, 8 kv heads, head_dim 64, f16 cache)
// for one sequence: decode (1 query) at context `range(0)`, or a prefill of range(0) tokens.
// One attention layer of the synthetic Llama-3.2-1B shape (32 heads / 8 kv heads of 64) over
// a context of range(0) positions in an f16 paged cache. range(1) layers' caches are cycled so
// with 16 of them (the model's depth: 128 MiB at 4096) K/V come from DRAM as in a real decode
// step, not from the L3 the single-layer runs sit in.
void BM_Attention(benchmark::State& state, bool prefill) {
  const int ctx = int(state.range(0)), n_layers = int(state.range(1));
  const int bs = 16, n_kv = 8, nh = 32, hd = 64;
  const int n_blocks = (ctx + bs - 1) / bs;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  // The executor's KV cache lives in huge pages (base/huge_alloc.h): so does this one.
  const size_t n_elems = size_t(n_blocks) * bs * n_kv * hd;
  std::vector<StreamedBuffer> kmem, vmem;
  for (int l = 0; l < n_layers; ++l) {
    kmem.push_back(alloc_streamed(n_elems * 2));
    vmem.push_back(alloc_streamed(n_elems * 2));
    auto* k = reinterpret_cast<uint16_t*>(kmem.back().get());
    auto* v = reinterpret_cast<uint16_t*>(vmem.back().get());
    for (size_t i = 0; i < n_elems; ++i) {
      k[i] = f32_to_f16(dist(rng));
      v[i] = f32_to_f16(dist(rng));
    }
  }
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int i = 0; i < n_blocks; ++i) table[size_t(i)] = i;
  const int n_q = prefill ? ctx : 1;
  std::vector<float> q(size_t(n_q) * nh * hd), out(q.size());
  for (float& e : q) e = dist(rng);
  PagedAttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.n_q = n_q;
  p.kv_len = ctx;
  p.kv_type = KvType::kF16;
  p.block_table = table.data();
  p.block_size = bs;
  p.n_head = nh;
  p.n_kv_head = n_kv;
  p.head_dim = hd;
  p.scale = 0.125f;
  ThreadPool pool(2);
  int layer = 0;
  for (auto _ : state) {
    p.k_cache = kmem[size_t(layer)].get();
    p.v_cache = vmem[size_t(layer)].get();
    layer = (layer + 1) % n_layers;
    paged_attention(p, &pool);
    benchmark::DoNotOptimize(out.data());
  }
  // K and V bytes read per call (decode) / causal pairs (prefill).
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(n_elems) * 4);
}
BENCHMARK_CAPTURE(BM_Attention, decode, false)
    ->Args({512, 1})
    ->Args({512, 16})
    ->Args({1024, 16})
    ->Args({4096, 1})
    ->Args({4096, 16})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, prefill, true)
    ->Args({512, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// RMSNorm and SwiGLU over a prefill's activations (512 x 2048, 512 x 8192).
void BM_RmsNorm(benchmark::State& state) {
  const int64_t n = 512, d = 2048;
  std::vector<float> x(size_t(n * d), 0.5f), w(size_t(d), 1.0f), y(x.size());
  for (auto _ : state) {
    for (int64_t t = 0; t < n; ++t)
      rms_norm(x.data() + t * d, w.data(), y.data() + t * d, d, 1e-5f);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * d * 8);
}
BENCHMARK(BM_RmsNorm)->Unit(benchmark::kMicrosecond);

void BM_SwiGlu(benchmark::State& state) {
  const int64_t n = 512 * 8192;
  std::vector<float> g(size_t(n), 0.25f), u(size_t(n), 0.5f);
  for (auto _ : state) {
    swiglu(g.data(), u.data(), g.data(), n);
    benchmark::DoNotOptimize(g.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 8);
}
BENCHMARK(BM_SwiGlu)->Unit(benchmark::kMicrosecond);

const bool registered = (register_all(), true);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
