// Golden outputs of real models (../shared/testdata/models, from llama.cpp): logits at every
// prompt position within 1e-3 relative L2, then the greedy continuation decoded one token at a
// time through the paged K/V cache must equal llama.cpp's token for token.
#include <gtest/gtest.h>

#include "executor/cpu_executor.h"
#include "executor/executor_test_util.h"
#include "model/golden_util.h"

namespace sluice {
namespace {

using test::GoldenCase;

struct GoldenResult {
  double worst_rel_l2 = 0;
  std::vector<int32_t> greedy;
};

// Prompt in chunks of `chunk` tokens (logits for all), then greedy decode.
GoldenResult run_golden(const GoldenCase& gc, const CpuExecutorOptions& opts, int chunk) {
  GoldenResult res;
  auto model = Model::load(gc.model_path, {test::kGoldenContext, true});
  EXPECT_TRUE(model.ok()) << model.message();
  if (!model.ok()) return res;
  EXPECT_EQ(model->config().n_vocab, gc.n_vocab);
  auto exec = CpuExecutor::create(*model, opts);
  EXPECT_TRUE(exec.ok()) << exec.message();
  if (!exec.ok()) return res;
  BlockFreeList blocks((*exec)->n_blocks());
  test::TestSequence seq;
  Batch batch;
  batch.n_kv_groups = (*exec)->capacity().n_kv_groups();
  batch.block_size = (*exec)->block_size();
  Logits out;

  std::vector<float> last;
  for (size_t i = 0; i < gc.prompt_tokens.size(); i += size_t(chunk)) {
    const size_t n = std::min(gc.prompt_tokens.size() - i, size_t(chunk));
    batch.clear();
    test::add_step(batch, blocks, seq,
                   {gc.prompt_tokens.begin() + long(i), gc.prompt_tokens.begin() + long(i + n)},
                   LogitsMode::kAll);
    const Status s = (*exec)->execute(batch, out);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return res;
    EXPECT_EQ(out.n_rows(), int32_t(n));
    for (int32_t r = 0; r < out.n_rows(); ++r) {
      const size_t pos = i + size_t(r);
      res.worst_rel_l2 =
          std::max(res.worst_rel_l2, test::golden_rel_l2(out.row(r), gc.prompt_logits[pos]));
    }
    last.assign(out.row(out.n_rows() - 1), out.row(out.n_rows() - 1) + out.n_vocab);
  }
  while (res.greedy.size() < gc.greedy_tokens.size()) {
    const int32_t tok = test::argmax(last.data(), gc.n_vocab);
    res.greedy.push_back(tok);
    if (tok == test::kGoldenEos) break;
    batch.clear();
    test::add_step(batch, blocks, seq, {tok}, LogitsMode::kLast);
    const Status s = (*exec)->execute(batch, out);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) break;
    EXPECT_EQ(out.n_rows(), 1);
    last.assign(out.row(0), out.row(0) + out.n_vocab);
  }
  return res;
}

class Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::shared_path("testdata/models/stories260K.gguf").empty()) {
      SLUICE_SHARED_MISSING("../shared/testdata/models");
    }
    cases_ = test::load_golden_cases();
    ASSERT_FALSE(cases_.empty());
  }
  std::vector<GoldenCase> cases_;
};

// The default configuration (f16 K/V, as llama.cpp's): the acceptance test.
TEST_F(Golden, PromptLogitsAndGreedyTokens) {
  for (const GoldenCase& gc : cases_) {
    SCOPED_TRACE(gc.name);
    CpuExecutorOptions opts;
    opts.block_size = 16;
    const GoldenResult r = run_golden(gc, opts, 1 << 30);
    EXPECT_LT(r.worst_rel_l2, 1e-3);
    EXPECT_EQ(r.greedy, gc.greedy_tokens);
    std::printf("[ golden ] %-34s f16 KV: prompt logits rel-L2 %.2e, %zu greedy tokens\n",
                gc.name.c_str(), r.worst_rel_l2, r.greedy.size());
  }
}

// Exact f32 K/V: llama.cpp's own f16 rounding makes the gap up to ~1.01e-3 (see
// model_reference_test.cpp); greedy tokens still match.
TEST_F(Golden, F32KvCache) {
  for (const GoldenCase& gc : cases_) {
    SCOPED_TRACE(gc.name);
    CpuExecutorOptions opts;
    opts.kv_type = KvType::kF32;
    const GoldenResult r = run_golden(gc, opts, 1 << 30);
    EXPECT_LT(r.worst_rel_l2, 1.5e-3);
    EXPECT_EQ(r.greedy, gc.greedy_tokens);
    std::printf("[ golden ] %-34s f32 KV: prompt logits rel-L2 %.2e\n", gc.name.c_str(),
                r.worst_rel_l2);
  }
}

// Chunked prompts and odd block sizes change nothing.
TEST_F(Golden, ChunkedPromptsAndBlockSizes) {
  for (const GoldenCase& gc : cases_) {
    SCOPED_TRACE(gc.name);
    for (int chunk : {1, 7}) {
      for (int bs : {1, 7, 64}) {
        CpuExecutorOptions opts;
        opts.block_size = bs;
        opts.n_threads = 2;
        const GoldenResult r = run_golden(gc, opts, chunk);
        EXPECT_LT(r.worst_rel_l2, 1e-3) << "chunk " << chunk << " block " << bs;
        EXPECT_EQ(r.greedy, gc.greedy_tokens) << "chunk " << chunk << " block " << bs;
      }
    }
  }
}

}  // namespace
}  // namespace sluice
