// Decode throughput, run only on request: SLUICE_BENCH_MODEL=path/to/model.gguf
// [SLUICE_BENCH_TOKENS=n] [SLUICE_BENCH_THREADS=n] executor_test --gtest_filter='Bench.*'
// Prints prompt (prefill) and decode tokens per second of one sequence.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "executor/cpu_executor.h"
#include "executor/executor_test_util.h"
#include "model/golden_util.h"

namespace sluice {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

TEST(Bench, DecodeTokensPerSecond) {
  const char* path = std::getenv("SLUICE_BENCH_MODEL");
  if (!path || !*path) GTEST_SKIP() << "set SLUICE_BENCH_MODEL to run";
  const int n_decode = env_int("SLUICE_BENCH_TOKENS", 64);
  const int n_prompt = env_int("SLUICE_BENCH_PROMPT", 32);
  auto model = Model::load(path, {std::min(4096, n_prompt + n_decode + 1), true});
  ASSERT_TRUE(model.ok()) << model.message();
  CpuExecutorOptions opts;
  opts.n_threads = env_int("SLUICE_BENCH_THREADS", 0);
  auto exec = CpuExecutor::create(*model, opts);
  ASSERT_TRUE(exec.ok()) << exec.message();
  BlockFreeList blocks((*exec)->n_blocks());
  test::TestSequence seq;
  Batch batch;
  batch.block_size = (*exec)->block_size();
  Logits out;
  using clock = std::chrono::steady_clock;

  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int i = 0; i < n_prompt; ++i) prompt[size_t(i)] = (1 + 37 * i) % model->config().n_vocab;
  test::add_step(batch, blocks, seq, prompt, LogitsMode::kLast);
  const auto t0 = clock::now();
  ASSERT_TRUE((*exec)->execute(batch, out).ok());
  const auto t1 = clock::now();
  for (int i = 0; i < n_decode; ++i) {
    const int32_t tok = test::argmax(out.row(0), out.n_vocab);
    batch.clear();
    test::add_step(batch, blocks, seq, {tok}, LogitsMode::kLast);
    ASSERT_TRUE((*exec)->execute(batch, out).ok());
  }
  const auto t2 = clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf(
      "[ bench ] %s, %d threads: prefill %d tokens %.1f tok/s, decode %d tokens %.2f tok/s (%.2f "
      "ms/token)\n",
      path, (*exec)->n_threads(), n_prompt, n_prompt / prefill_s, n_decode, n_decode / decode_s,
      1e3 * decode_s / n_decode);
}

}  // namespace
}  // namespace sluice
