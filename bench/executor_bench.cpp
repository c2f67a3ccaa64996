// One sequence's executor step with n new tokens at a fixed context (decode: n = 1; a
// speculative verification: n = 1 + k; a prompt chunk: n large), on a real model:
//   SLUICE_BENCH_MODEL=model.gguf [SLUICE_BENCH_CONTEXT=512] [SLUICE_BENCH_THREADS=0]
//   executor_bench
// Time per iteration = one step; tokens/s counts the step's new tokens. Without
// SLUICE_BENCH_MODEL it reports an error and runs nothing. (`sluice bench` is the end-to-end
// benchmark; this one isolates the cost ratio T(1 + k) / T(1) that speculative decoding's
// speed-up depends on, docs/speculative.md.)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

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

Loaded& loaded() {
  static Loaded l = [] {
    Loaded r;
    const char* path = std::getenv("SLUICE_BENCH_MODEL");
    if (!path || !*path) {
      r.error = "set SLUICE_BENCH_MODEL=model.gguf";
      return r;
    }
    auto m = Model::load(path, {4096, true});
    if (!m.ok()) {
      r.error = m.message();
      return r;
    }
    r.model = std::make_unique<Model>(std::move(*m));
    CpuExecutorOptions o;
    o.n_threads = env_int("SLUICE_BENCH_THREADS", 0);
    o.n_blocks = 4096 / 16;
    auto e = CpuExecutor::create(*r.model, o);
    if (!e.ok()) {
      r.error = e.message();
      return r;
    }
    r.exec = std::move(*e);
    return r;
  }();
  return l;
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
  std::vector<int32_t> table(size_t((ctx + n + 15) / 16));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  Batch batch;
  batch.block_size = 16;
  Logits out;
  // Fill the context once.
  std::vector<int32_t> prompt(static_cast<size_t>(ctx));
  for (int32_t i = 0; i < ctx; ++i) prompt[size_t(i)] = (1 + 37 * i) % n_vocab;
  batch.add_sequence(prompt, 0, table, LogitsMode::kLast);
  if (!l.exec->execute(batch, out).ok()) {
    state.SkipWithError("prefill failed");
    return;
  }
  std::vector<int32_t> step(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) step[size_t(i)] = (5 + 11 * i) % n_vocab;
  batch.clear();
  batch.add_sequence(step, ctx, table, LogitsMode::kAll);  // logits at each (verification)
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

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
