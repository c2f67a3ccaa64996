// Micro-measurements of this machine's ceilings. Each kernel is written so the compiler cannot
// elide it (results feed a checksum) and runs long enough (~0.2-0.5 s) to be stable; the best
// of several repetitions is kept (the ceiling, not the average).
#include "perf/machine.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "base/cpu_features.h"
#include "base/huge_alloc.h"
#include "base/thread_pool.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs fn(thread_index) on n threads at once; returns wall seconds.
template <class Fn>
double run_parallel(int n, Fn fn) {
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int i = 1; i < n; ++i) ts.emplace_back(fn, i);
  fn(0);
  for (auto& t : ts) t.join();
  return seconds_since(t0);
}

volatile float g_sink = 0;  // defeats dead-code elimination of measurement loops

// Horizontal sums through memory (GCC 12's _mm512_reduce_add_* trips -Wuninitialized).
__attribute__((target("avx512f"))) float hsum(__m512 v) {
  alignas(64) float out[16];
  _mm512_store_ps(out, v);
  float r = 0;
  for (float x : out) r += x;
  return r;
}
__attribute__((target("avx512f"))) float hsum_i32(__m512i v) {
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, v);
  float r = 0;
  for (int32_t x : out) r += float(x);
  return r;
}

// The read loops: four accumulators of the ISA's widest loads over [p, p + n). kPrefetch: every
// 64-byte line 4 KiB ahead into L1, as the packed decode kernels prefetch their weights
// (prefetch_weights<1> in kernels/matmul_kernels.h: one or two activation rows); the software
// prefetch is what lets one core keep enough misses in flight on this kind of machine.
constexpr size_t kPrefetchFloats = 4096 / sizeof(float);

template <bool kPrefetch>
__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    if constexpr (kPrefetch) {
      for (int l = 0; l < 4; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchFloats + 16 * l), _MM_HINT_T0);
    }
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
  }
  float r = hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (; i < n; ++i) r += p[i];
  return r;
}

template <bool kPrefetch>
__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    if constexpr (kPrefetch) {
      for (int l = 0; l < 4; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchFloats + 16 * l), _MM_HINT_T0);
    }
    for (int h = 0; h < 64; h += 32) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i + h));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + h + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + h + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + h + 24));
    }
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float out[8];
  _mm256_storeu_ps(out, s);
  float r = 0;
  for (float x : out) r += x;
  for (; i < n; ++i) r += p[i];
  return r;
}

float sum_scalar(const float* p, size_t n) {
  float a[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) a[j] += p[i + j];
  }
  float r = (a[0] + a[1]) + (a[2] + a[3]);
  for (; i < n; ++i) r += p[i];
  return r;
}

// `simd` as the CPU can run it: "avx512", "avx2" or "scalar" ("" or another name: the best).
std::string runnable_simd(const std::string& simd) {
  const bool has512 = __builtin_cpu_supports("avx512f");
  const bool has2 = __builtin_cpu_supports("avx2");
  if (simd == "scalar") return "scalar";
  if (simd == "avx2") return has2 ? "avx2" : "scalar";
  return has512 ? "avx512" : has2 ? "avx2" : "scalar";
}

using SumFn = float (*)(const float*, size_t);
SumFn sum_fn(const std::string& simd, bool prefetch) {
  if (simd == "avx512") return prefetch ? &sum_avx512<true> : &sum_avx512<false>;
  if (simd == "avx2") return prefetch ? &sum_avx2<true> : &sum_avx2<false>;
  return &sum_scalar;
}

// The probe's layout (BandwidthProbe): 8 MiB matrices of 32 KiB units (about one 16-row group of
// a 2048-wide Q8_0 matrix, the kernels' unit of work).
constexpr size_t kMatrixFloats = (size_t(8) << 20) / sizeof(float);
constexpr size_t kUnitFloats = (size_t(32) << 10) / sizeof(float);

// One pass of the probe over buf[0, n) on `pool` (null: the calling thread alone): each matrix
// split as ThreadPool::parallel_for splits a matmul's groups (~4 chunks a thread, handed out
// dynamically), then a barrier, as between two matmuls. Returns the sum of what it read.
double probe_pass(const float* buf, size_t n, ThreadPool* pool, SumFn sum) {
  struct alignas(64) Partial {
    double sum = 0;
  };
  const int nt = pool ? pool->n_threads() : 1;
  std::vector<Partial> part(static_cast<size_t>(nt));
  for (size_t m0 = 0; m0 < n; m0 += kMatrixFloats) {
    const size_t m_n = std::min(kMatrixFloats, n - m0);
    const int64_t units = int64_t((m_n + kUnitFloats - 1) / kUnitFloats);
    auto chunk = [&](int t, int64_t u0, int64_t u1) {
      const size_t f0 = m0 + size_t(u0) * kUnitFloats;
      const size_t f1 = std::min(m0 + m_n, m0 + size_t(u1) * kUnitFloats);
      part[size_t(t)].sum += double(sum(buf + f0, f1 - f0));
    };
    if (pool) {
      pool->parallel_for_indexed(units, 1, chunk);
    } else {
      chunk(0, 0, units);
    }
  }
  double total = 0;
  for (const Partial& p : part) total += p.sum;
  return total;
}

constexpr long kPeakIters = 20'000'000;

__attribute__((target("avx512f,fma"))) double fma_f32_avx512() {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < kPeakIters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  g_sink = g_sink + hsum(s);
  return double(kPeakIters) * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) double fma_f32_avx2() {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < kPeakIters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_storeu_ps(out, s);
  g_sink = g_sink + out[0];
  return double(kPeakIters) * 12 * 8 * 2;
}

// vdpbf16ps: 16 lanes x 2 bf16 products accumulated = 64 flops per instruction.
__attribute__((target("avx512f,avx512bf16"))) double dot_bf16_avx512() {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3400);
  for (long it = 0; it < kPeakIters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  g_sink = g_sink + hsum(s);
  return double(kPeakIters) * 12 * 64;
}

// vpdpbusd: 16 lanes x 4 u8*s8 products accumulated = 128 ops per instruction.
__attribute__((target("avx512f,avx512vnni"))) double dot_int8_avx512() {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (long it = 0; it < kPeakIters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, acc[i]);
  g_sink = g_sink + hsum_i32(s);
  return double(kPeakIters) * 12 * 128;
}

// Keeps the 12 ymm accumulators of an int8 peak loop alive (their sum into g_sink); returns the
// ops counted: 12 instructions of 64 (32 u8 x s8 products, each a multiply and an add) per
// iteration.
__attribute__((target("avx2"))) double sink_i32x8(const __m256i (&acc)[12]) {
  __m256i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_epi32(s, acc[i]);
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  g_sink = g_sink + float(out[0]);
  return double(kPeakIters) * 12 * 64;
}

// AVX2 has no int8 dot instruction: the kernels' sequence, vpmaddubsw (32 u8 * s8 products
// summed in pairs to int16) + vpmaddwd (pairs to int32) + vpaddd, counts 64 ops. The
// operand is laundered each iteration so the products are not hoisted out of the loop.
__attribute__((target("avx2"))) double dot_int8_avx2() {
  __m256i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_setzero_si256();
  __m256i a = _mm256_set1_epi8(3);
  const __m256i b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (long it = 0; it < kPeakIters; ++it) {
    __asm__ volatile("" : "+x"(a));
    for (int i = 0; i < 12; ++i) {
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    }
  }
  return sink_i32x8(acc);
}

// AVX-VNNI (VEX vpdpbusd, no AVX-512: the avx2 kernels' int8 dot where the CPU has it): 8 lanes x
// 4 u8*s8 products accumulated = 64 ops per instruction.
__attribute__((target("avx2,avxvnni"))) double dot_int8_avxvnni() {
  __m256i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_setzero_si256();
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (long it = 0; it < kPeakIters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
  }
  return sink_i32x8(acc);
}

// Peak rate of `kernel` (returns ops done) over `threads` threads, in G ops/s: the best of 8
// short runs ~25 ms apart. On a shared host a core's SIMD units can be busy with another
// tenant's work (an SMT sibling); the best of 3 back-to-back runs once read half this host's
// f32 peak (113 of 220 GFLOP/s), which put F16 prefill at 115% MFU.
double measure_peak(double (*kernel)(), int threads) {
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    if (rep > 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::vector<double> ops(static_cast<size_t>(threads));
    const double s = run_parallel(threads, [&](int t) { ops[size_t(t)] = kernel(); });
    double total = 0;
    for (double o : ops) total += o;
    best = std::max(best, total / s / 1e9);
  }
  return best;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown";
}

}  // namespace

std::string now_iso8601_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

MachineRoofline measure_machine_roofline(int threads, const std::string& simd) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  MachineRoofline r;
  r.cpu = cpu_model_name();
  r.threads = threads;
  r.measured_at = now_iso8601_utc();

  const std::string read_simd = runnable_simd(simd);
  {
    // The probe's best of 9 passes, then 7 more interleaved one for one with the STREAM-style
    // cross-check's, so both see the same drifting bandwidth.
    const BandwidthProbe probe(threads, read_simd);
    r.read_gbps_1t = probe.measure(1);
    r.read_gbps = probe.measure();
    r.stream_read_gbps = measure_stream_read_gbps(threads, read_simd, size_t(1) << 30, 7, [&] {
      r.stream_probe_gbps = std::max(r.stream_probe_gbps, probe.measure(0, 1));
    });
    r.read_gbps = std::max(r.read_gbps, r.stream_probe_gbps);
    // All threads read no less than one can: a lower reading means a core was taken away
    // (another tenant) during it, and that is not the ceiling.
    r.read_gbps = std::max(r.read_gbps, r.read_gbps_1t);
    r.probe_read_gbps = r.read_gbps;
    r.read_source = "probe";
    r.read_at = r.measured_at;
  }

  const bool avx512 = __builtin_cpu_supports("avx512f") && (simd.empty() || simd == "avx512");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    (avx512 || simd.empty() || simd == "avx2");
  r.simd = avx512 ? "avx512" : avx2 ? "avx2" : "scalar";
  if (avx512) {
    r.peak_gflops_f32 = measure_peak(&fma_f32_avx512, threads);
  } else if (avx2) {
    r.peak_gflops_f32 = measure_peak(&fma_f32_avx2, threads);
  }
  if (avx512 && __builtin_cpu_supports("avx512bf16"))
    r.peak_gflops_bf16 = measure_peak(&dot_bf16_avx512, threads);
  if (avx512 && __builtin_cpu_supports("avx512vnni")) {
    r.peak_gops_int8 = measure_peak(&dot_int8_avx512, threads);
  } else if (avx2) {
    r.peak_gops_int8 =
        measure_peak(cpu_has_avx_vnni() ? &dot_int8_avxvnni : &dot_int8_avx2, threads);
  }
  return r;
}

// The buffer in transparent huge pages where the kernel allows them, as the executor keeps its
// repacked weights (kernels/packed.h): the ceiling decode is measured against.
BandwidthProbe::BandwidthProbe(int threads, const std::string& simd, size_t bytes)
    : n_(bytes / sizeof(float)),
      threads_(threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()))),
      simd_(runnable_simd(simd)) {
  mem_ = alloc_streamed(n_ * sizeof(float));
  if (!mem_) return;  // measure() says 0: no bandwidth known
  // First touch from the threads that will read it.
  ThreadPool pool(threads_);
  pool.parallel_for(int64_t(n_), int64_t(1) << 16,
                    [&](int64_t b, int64_t e) { std::fill(buf() + b, buf() + e, 1.0f); });
}

BandwidthProbe::~BandwidthProbe() = default;

double BandwidthProbe::read_sum(int threads) const {
  if (!mem_) return 0;
  threads = threads > 0 ? threads : threads_;
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
  return probe_pass(buf(), n_, pool.get(), sum_fn(simd_, true));
}

double BandwidthProbe::measure(int threads, int passes) const {
  if (!mem_) return 0;
  threads = threads > 0 ? threads : threads_;
  // A pool of its own, started once for all passes, as the executor's is.
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
  const SumFn sum = sum_fn(simd_, true);
  double best = 0;
  for (int pass = 0; pass < std::max(1, passes); ++pass) {
    if (pass > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto t0 = Clock::now();
    g_sink = g_sink + float(probe_pass(buf(), n_, pool.get(), sum));
    best = std::max(best, double(n_ * sizeof(float)) / seconds_since(t0) / 1e9);
  }
  return best;
}

double measure_stream_read_gbps(int threads, const std::string& simd, size_t bytes, int reps,
                                const std::function<void()>& between) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const size_t n = bytes / sizeof(float) / size_t(threads) / 64 * 64 * size_t(threads);
  const StreamedBuffer mem = n > 0 ? alloc_streamed(n * sizeof(float)) : nullptr;
  if (!mem) return 0;
  float* buf = reinterpret_cast<float*>(mem.get());
  const size_t per = n / size_t(threads);
  run_parallel(threads,
               [&](int t) { std::fill(buf + size_t(t) * per, buf + size_t(t + 1) * per, 1.0f); });
  const SumFn sum = sum_fn(runnable_simd(simd), false);
  double best = 0;
  for (int rep = 0; rep < std::max(1, reps); ++rep) {
    const double s =
        run_parallel(threads, [&](int t) { g_sink = g_sink + sum(buf + size_t(t) * per, per); });
    best = std::max(best, double(n * sizeof(float)) / s / 1e9);
    if (between) between();
  }
  return best;
}

size_t last_level_cache_bytes() {
  // sysfs first: glibc's sysconf takes CPUID's word, which a VM can get wrong (a Zen 4 guest with
  // a 32 MiB L3 reads 320 MiB there).
  size_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream size_file(dir + "/size");
    std::string size;
    if (!(size_file >> size) || size.empty()) continue;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(size.c_str(), &end, 10);
    const size_t mult = *end == 'K' ? 1024 : *end == 'M' ? 1024 * 1024 : 1;
    best = std::max(best, size_t(v) * mult);
  }
  if (best > 0) return best;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return size_t(l3);
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 ? size_t(l2) : 0;
}

std::string MachineRoofline::read_origin() const {
  char buf[320];
  if (format < 2) {
    std::snprintf(buf, sizeof buf,
                  "probe at %s (a format-1 cache: an older probe that read without the decode "
                  "kernels' prefetch; rerun `sluice bench --roofline`)",
                  measured_at.c_str());
  } else if (read_source == "step") {
    std::snprintf(buf, sizeof buf, "raised by %s at %s (the probe at %s read %.1f GB/s)",
                  read_by.empty() ? "an observed step" : read_by.c_str(), read_at.c_str(),
                  measured_at.c_str(), probe_read_gbps);
  } else {
    std::snprintf(buf, sizeof buf, "probe at %s",
                  (read_at.empty() ? measured_at : read_at).c_str());
  }
  return buf;
}

bool raise_read_gbps(MachineRoofline& r, double gbps, const std::string& by) {
  if (!(gbps > r.read_gbps)) return false;
  r.read_gbps = gbps;
  r.read_source = "step";
  r.read_by = by;
  r.read_at = now_iso8601_utc();
  return true;
}

std::string default_roofline_path() {
  std::string dir;
  if (const char* c = std::getenv("SLUICE_CACHE"); c && *c) {
    dir = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/sluice";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/sluice";
  } else {
    dir = ".sluice-cache";
  }
  return dir + "/roofline.json";
}

Status save_roofline(const MachineRoofline& r, const std::string& path) {
  nlohmann::ordered_json j = {{"format", kRooflineFormat},
                              {"cpu", r.cpu},
                              {"threads", r.threads},
                              {"read_gbps_1t", r.read_gbps_1t},
                              {"read_gbps", r.read_gbps},
                              {"peak_gflops_f32", r.peak_gflops_f32},
                              {"peak_gflops_bf16", r.peak_gflops_bf16},
                              {"peak_gops_int8", r.peak_gops_int8},
                              {"simd", r.simd},
                              {"measured_at", r.measured_at},
                              {"probe_read_gbps", r.probe_read_gbps},
                              {"stream_read_gbps", r.stream_read_gbps},
                              {"stream_probe_gbps", r.stream_probe_gbps},
                              {"read_source", r.read_source},
                              {"read_at", r.read_at},
                              {"read_by", r.read_by}};
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // A temp file renamed over the cache: a reader (another process) never sees half a file.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    if (!f) return make_error("cannot write '", tmp, "'");
    f << j.dump(2) << "\n";
    if (!f) return make_error("write to '", tmp, "' failed");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return make_error("cannot replace '", path, "': ", ec.message());
  }
  return {};
}

Result<MachineRoofline> load_roofline(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return make_error("no roofline measurements at '", path,
                      "' (run `sluice bench --roofline` first)");
  }
  auto j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return make_error("'", path, "' is not valid JSON");
  MachineRoofline r;
  try {
    r.format = j.value("format", 1);
    if (r.format > kRooflineFormat || r.format < 1) {
      return make_error("'", path, "' is roofline format ", r.format, "; this sluice reads 1 to ",
                        kRooflineFormat, " (rerun `sluice bench --roofline`)");
    }
    r.cpu = j.value("cpu", "");
    r.threads = j.value("threads", 0);
    r.read_gbps_1t = j.value("read_gbps_1t", 0.0);
    r.read_gbps = j.value("read_gbps", 0.0);
    r.peak_gflops_f32 = j.value("peak_gflops_f32", 0.0);
    r.peak_gflops_bf16 = j.value("peak_gflops_bf16", 0.0);
    r.peak_gops_int8 = j.value("peak_gops_int8", 0.0);
    r.simd = j.value("simd", "");
    r.measured_at = j.value("measured_at", "");
    // Format 1: the probe's reading, taken at measured_at.
    r.probe_read_gbps = j.value("probe_read_gbps", r.read_gbps);
    r.stream_read_gbps = j.value("stream_read_gbps", 0.0);
    r.stream_probe_gbps = j.value("stream_probe_gbps", 0.0);
    r.read_source = j.value("read_source", "probe");
    r.read_at = j.value("read_at", r.measured_at);
    r.read_by = j.value("read_by", "");
  } catch (const nlohmann::json::exception& e) {
    return make_error("'", path, "': ", e.what());
  }
  if (!(r.read_gbps > 0) || !std::isfinite(r.read_gbps)) {
    return make_error("'", path, "' has no read bandwidth measurement");
  }
  return r;
}

bool persist_raised_read_gbps(const std::string& path, double gbps, const std::string& by) {
  auto r = load_roofline(path);
  if (!r.ok() || !raise_read_gbps(*r, gbps, by)) return false;
  return save_roofline(*r, path).ok();
}

}  // namespace sluice
