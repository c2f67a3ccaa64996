// One sequence's executor step with n new tokens at a fixed context (decode: n = 1; a
// speculative verification: n = 1 + k; a prompt chunk: n large), on a real model:
//   SLUICE_BENCH_MODEL=model.gguf [SLUICE_BENCH_CONTEXT=512] [SLUICE_BENCH_THREADS=0]
//   executor_bench
// Time per iteration = one step; tokens/s counts the step's new tokens. Without
// SLUICE_BENCH_MODEL it reports an error and runs nothing. (`sluice bench` is the end-to-end
// benchmark; this one isolates the cost ratio T(1 + k) / T(1) that speculative decoding's
// speed-up depends on, docs/speculative.md.)
//
// BM_DecodeAtDepth/C: one decode step at position C - 1 (context C, up to 16384) with no
// prefill: the blocks hold random K/V written once at start-up (never-written cache memory
// would read as the kernel's zero page, from cache). Each K/V group's table is built as the
// engine builds it (a global group every block, a windowed one the blocks of its last window,
// the released entries naming its first held block). Counters: the step, and the attention of
// the windowed and of the global layers per step (CpuExecutor::attention_times), in ms.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "executor/cpu_executor.h"

namespace sluice {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuExecutor> exec;
  std::string error;
};

// Blocks one sequence of n_ctx positions holds at its last position, summed over the model's
// K/V groups (a windowed group: its window and the block it starts in, and one more), and at
// least `min_per_group` per group.
int32_t blocks_for(const KvCacheLayout& layout, int32_t n_ctx, int32_t min_per_group) {
  const int32_t per_ctx = (n_ctx + 15) / 16;
  int32_t n = 0;
  for (int32_t w : layout.group_window) {
    const int32_t held = w > 0 ? std::min(per_ctx, (w + 15) / 16 + 2) : per_ctx;
    n += std::max(held, min_per_group);
  }
  return n;
}

// Every block gets random K/V (small values of the cache's type), so each page of the cache is
// written and a step reads real memory.
bool fill_random(CpuExecutor& exec, std::string& error) {
  auto one = exec.export_blocks(std::vector<int32_t>{0});
  if (!one.ok()) {
    error = one.message();
    return false;
  }
  const bool f16 = one->layout.rfind("f16", 0) == 0;
  const size_t block_bytes = one->bytes_per_block;
  const int32_t chunk = 64;
  KvBlockData data = std::move(*one);
  data.n_blocks = chunk;
  data.bytes.resize(block_bytes * chunk);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (f16) {
    for (size_t i = 0; i + 2 <= data.bytes.size(); i += 2) {
      const uint16_t h = f32_to_f16(u(rng));
      std::memcpy(data.bytes.data() + i, &h, 2);
    }
  } else {
    for (size_t i = 0; i + 4 <= data.bytes.size(); i += 4) {
      const float f = u(rng);
      std::memcpy(data.bytes.data() + i, &f, 4);
    }
  }
  std::vector<int32_t> ids;
  for (int32_t b0 = 0; b0 < exec.n_blocks(); b0 += chunk) {
    const int32_t n = std::min(chunk, exec.n_blocks() - b0);
    ids.resize(size_t(n));
    for (int32_t i = 0; i < n; ++i) ids[size_t(i)] = b0 + i;
    data.n_blocks = n;
    data.bytes.resize(block_bytes * size_t(n));
    const Status st = exec.import_blocks(ids, data);
    if (!st.ok()) {
      error = st.message();
      return false;
    }
  }
  return true;
}

// The model of SLUICE_BENCH_MODEL with a context of n_ctx and enough blocks for one sequence
// of it (blocks_for), random K/V.
Loaded load(int32_t n_ctx, int32_t min_per_group) {
  Loaded r;
  const char* path = std::getenv("SLUICE_BENCH_MODEL");
  if (!path || !*path) {
    r.error = "set SLUICE_BENCH_MODEL=model.gguf";
    return r;
  }
  auto m = Model::load(path, {n_ctx, true});
  if (!m.ok()) {
    r.error = m.message();
    return r;
  }
  r.model = std::make_unique<Model>(std::move(*m));
  CpuExecutorOptions o;
  o.n_threads = env_int("SLUICE_BENCH_THREADS", 0);
  o.n_blocks = blocks_for(r.model->config().kv_cache_layout(), n_ctx, min_per_group);
  auto e = CpuExecutor::create(*r.model, o);
  if (!e.ok()) {
    r.error = e.message();
    return r;
  }
  r.exec = std::move(*e);
  if (!fill_random(*r.exec, r.error)) r.exec.reset();
  return r;
}

// BM_Step's: a 4096 context, every group holding every block of it.
Loaded& loaded() {
  static Loaded l = load(4096, 4096 / 16);
  return l;
}

// BM_DecodeAtDepth's: the deepest context it runs, plus some.
constexpr int32_t kMaxDepth = 16384;
Loaded& loaded_deep() {
  static Loaded l = load(kMaxDepth + 16, 0);
  return l;
}

// Tables for a sequence of n_tokens positions whose next step starts at first_pos, one per K/V
// group, from consecutive block ids: a global group holds every block; a windowed one only the
// blocks from the one holding first_pos - window + 1 on (KvCacheManager's release), its earlier
// entries naming its first held block (as the engine's tables do). Fails when the executor has
// too few blocks.
bool build_tables(const CpuExecutor& exec, int32_t n_tokens, int32_t first_pos,
                  std::vector<std::vector<int32_t>>& tables) {
  const ExecutorCapacity cap = exec.capacity();
  const int32_t bs = cap.block_size, n = (n_tokens + bs - 1) / bs;
  tables.assign(size_t(cap.n_kv_groups()), std::vector<int32_t>(size_t(n)));
  int32_t next = 0;
  for (int32_t g = 0; g < cap.n_kv_groups(); ++g) {
    const int32_t w = cap.group_window(g);
    const int32_t first = w > 0 ? std::max(0, first_pos - w + 1) / bs : 0;
    std::vector<int32_t>& t = tables[size_t(g)];
    for (int32_t i = first; i < n; ++i) t[size_t(i)] = next++;
    for (int32_t i = 0; i < first; ++i) t[size_t(i)] = t[size_t(first)];
  }
  return next <= cap.n_blocks;
}

void BM_Step(benchmark::State& state) {
  Loaded& l = loaded();
  if (!l.exec) {
    state.SkipWithError(l.error.c_str());
    return;
  }
  const int32_t ctx = env_int("SLUICE_BENCH_CONTEXT", 512);
  const int32_t n = int32_t(state.range(0));
  const int32_t n_vocab = l.model->config().n_vocab;
  // Every block of every group (the prefill writes them all).
  std::vector<std::vector<int32_t>> tables;
  if (!build_tables(*l.exec, ctx + n, 0, tables)) {
    state.SkipWithError("too few K/V blocks for SLUICE_BENCH_CONTEXT");
    return;
  }
  Batch batch;
  batch.block_size = 16;
  batch.n_kv_groups = int32_t(tables.size());
  Logits out;
  // Fill the context once.
  std::vector<int32_t> prompt(static_cast<size_t>(ctx));
  for (int32_t i = 0; i < ctx; ++i) prompt[size_t(i)] = (1 + 37 * i) % n_vocab;
  batch.add_sequence(prompt, 0, tables, LogitsMode::kLast);
  if (!l.exec->execute(batch, out).ok()) {
    state.SkipWithError("prefill failed");
    return;
  }
  std::vector<int32_t> step(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) step[size_t(i)] = (5 + 11 * i) % n_vocab;
  batch.clear();
  batch.add_sequence(step, ctx, tables, LogitsMode::kAll);  // logits at each (verification)
  for (auto _ : state) {
    if (!l.exec->execute(batch, out).ok()) {
      state.SkipWithError("step failed");
      return;
    }
  }
  state.counters["tokens/s"] =
      benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Step)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Arg(5)
    ->Arg(9)
    ->Arg(17)
    ->Arg(33)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_DecodeAtDepth(benchmark::State& state) {
  Loaded& l = loaded_deep();
  if (!l.exec) {
    state.SkipWithError(l.error.c_str());
    return;
  }
  const auto ctx = int32_t(state.range(0));
  std::vector<std::vector<int32_t>> tables;
  if (!build_tables(*l.exec, ctx, ctx - 1, tables)) {
    state.SkipWithError("too few K/V blocks");
    return;
  }
  Batch batch;
  batch.block_size = 16;
  batch.n_kv_groups = int32_t(tables.size());
  const int32_t token = 5 % l.model->config().n_vocab;
  batch.add_sequence(std::span<const int32_t>(&token, 1), ctx - 1, tables, LogitsMode::kLast);
  Logits out;
  if (!l.exec->execute(batch, out).ok()) {  // warm-up, untimed
    state.SkipWithError("step failed");
    return;
  }
  l.exec->reset_attention_times();
  for (auto _ : state) {
    if (!l.exec->execute(batch, out).ok()) {
      state.SkipWithError("step failed");
      return;
    }
  }
  const AttentionTimes& t = l.exec->attention_times();
  const double steps = double(state.iterations());
  state.counters["windowed_ms"] = double(t.windowed.ns) * 1e-6 / steps;
  state.counters["global_ms"] = double(t.global.ns) * 1e-6 / steps;
  state.counters["windowed_keys"] =
      double(t.windowed.keys) / double(std::max<int64_t>(1, t.windowed.calls));
  state.counters["global_keys"] =
      double(t.global.keys) / double(std::max<int64_t>(1, t.global.calls));
}
BENCHMARK(BM_DecodeAtDepth)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(4096)
    ->Arg(8192)
    ->Arg(kMaxDepth)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
