// The KV disk tier's costs, 512 KiB blocks (a 16-token block of a ~8B model in f16: 32 layers
// x 2 (K, V) x 8 KV heads x 128 dims x 16 tokens x 2 bytes = 1 MiB; half that at 16 layers):
//   BM_KvDiskWrite2MiB   put() 4 blocks + flush(): files created, written, renamed (the writer's
//                        throughput; steady state evicts one old file per write). sync:1 with
//                        KvDiskOptions::sync (fdatasync + directory fsync per block)
//   BM_KvDiskRead2MiB    get() 4 stored blocks from the page cache (open, preadv, crc32c, close)
//   BM_KvDiskGet512K     get() of one block from the page cache: the latency an admission sees
//   BM_KvDiskPut512K     put() alone, the writer paused: what the engine's thread pays (a copy)
//   BM_Crc32c512K        the checksum share of a get()
// The directory is a fresh one under $TMPDIR (or /tmp); set SLUICE_KV_DISK_BENCH_DIR to put it
// on the disk to measure. Real time: the writer thread does the work of a write.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "kv_io/kv_disk.h"

namespace sluice {
namespace {

constexpr size_t kBlockBytes = 512 << 10;
constexpr int kBlocksPer2MiB = 4;

// A tier on a fresh directory, removed with it.
class BenchTier {
 public:
  explicit BenchTier(uint64_t max_bytes, bool sync = false) {
    const char* base = std::getenv("SLUICE_KV_DISK_BENCH_DIR");
    if (!base) base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/sluice-kv-bench-XXXXXX";
    if (::mkdtemp(tmpl.data())) dir_ = tmpl;
    KvDiskOptions o;
    o.dir = dir_ + "/kv";
    o.max_bytes = max_bytes;
    o.compat = "bench f16 L16 H8 D128 B16";
    o.bytes_per_block = kBlockBytes;
    o.sync = sync;
    auto t = KvDiskTier::open(o);
    if (t.ok()) tier_ = std::move(t).value();
    error_ = t.message();
  }
  ~BenchTier() {
    tier_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  KvDiskTier* get() { return tier_.get(); }
  const std::string& error() const { return error_; }

 private:
  std::string dir_, error_;
  std::unique_ptr<KvDiskTier> tier_;
};

std::vector<int32_t> tokens_of(uint64_t hash) {
  std::vector<int32_t> t(16);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t((hash * 31 + i) % 128256);
  return t;
}

std::vector<uint8_t> payload() {
  std::vector<uint8_t> p(kBlockBytes);
  uint64_t s = 88172645463325252ull;
  for (auto& b : p) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    b = uint8_t(s);
  }
  return p;
}

void BM_KvDiskWrite2MiB(benchmark::State& state) {
  BenchTier bt(64ull << 20, state.range(0) != 0);
  if (!bt.get()) return state.SkipWithError(bt.error().c_str());
  const auto p = payload();
  uint64_t next = 1;
  for (auto _ : state) {
    for (int i = 0; i < kBlocksPer2MiB; ++i, ++next) bt.get()->put(next, tokens_of(next), p);
    bt.get()->flush();
  }
  const auto s = bt.get()->stats();
  if (s.write_errors + s.write_dropped > 0) state.SkipWithError("writes failed or dropped");
  state.SetBytesProcessed(int64_t(state.iterations()) * kBlocksPer2MiB * int64_t(kBlockBytes));
}
BENCHMARK(BM_KvDiskWrite2MiB)
    ->ArgName("sync")
    ->Arg(0)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// A tier holding blocks 1..n, written and read once (so in the page cache).
std::unique_ptr<BenchTier> stored(int n) {
  auto bt = std::make_unique<BenchTier>(64ull << 20);
  if (!bt->get()) return bt;
  const auto p = payload();
  for (int i = 1; i <= n; ++i) bt->get()->put(uint64_t(i), tokens_of(uint64_t(i)), p);
  bt->get()->flush();
  return bt;
}

void BM_KvDiskRead2MiB(benchmark::State& state) {
  auto bt = stored(kBlocksPer2MiB);
  if (!bt->get()) return state.SkipWithError(bt->error().c_str());
  std::vector<uint8_t> out(kBlockBytes);
  for (auto _ : state) {
    for (uint64_t h = 1; h <= kBlocksPer2MiB; ++h) {
      if (!bt->get()->get(h, tokens_of(h), out)) return state.SkipWithError("get() missed");
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kBlocksPer2MiB * int64_t(kBlockBytes));
}
BENCHMARK(BM_KvDiskRead2MiB)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_KvDiskGet512K(benchmark::State& state) {
  auto bt = stored(1);
  if (!bt->get()) return state.SkipWithError(bt->error().c_str());
  std::vector<uint8_t> out(kBlockBytes);
  const auto tokens = tokens_of(1);
  for (auto _ : state) {
    if (!bt->get()->get(1, tokens, out)) return state.SkipWithError("get() missed");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBlockBytes));
}
BENCHMARK(BM_KvDiskGet512K)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_KvDiskPut512K(benchmark::State& state) {
  BenchTier bt(64ull << 20);
  if (!bt.get()) return state.SkipWithError(bt.error().c_str());
  const auto p = payload();
  uint64_t next = 1;
  for (auto _ : state) {
    if (!bt.get()->put(next, tokens_of(next), p)) return state.SkipWithError("put() dropped");
    if (++next % kBlocksPer2MiB == 0) {  // the writer keeps up: the queue stays short
      state.PauseTiming();
      bt.get()->flush();
      state.ResumeTiming();
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBlockBytes));
}
BENCHMARK(BM_KvDiskPut512K)->Unit(benchmark::kMicrosecond);

void BM_Crc32c512K(benchmark::State& state) {
  const auto p = payload();
  for (auto _ : state) benchmark::DoNotOptimize(crc32c(p.data(), p.size()));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBlockBytes));
}
BENCHMARK(BM_Crc32c512K)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
