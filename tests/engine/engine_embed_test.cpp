// Engine::embed over a real CpuExecutor and a tiny random qwen3 embedding model (last-token
// pooling): inputs packed into steps by max_batch_tokens and max_seqs give each input's vector
// bit for bit as when it runs alone; no KV block is held afterwards and nothing enters the
// prefix cache; bad inputs fail before anything runs.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "executor/cpu_executor.h"
#include "executor/embedding_test_util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sluice::test {
namespace {

TEST(EngineEmbed, PackedStepsEqualOneInputAtATime) {
  TempDir dir;
  const std::string path = dir.path("qwen3-embed.gguf");
  write_embedding_model("tiny-qwen3-embed", "", path);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  auto tok = Tokenizer::from_gguf(model->file());
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto exec = CpuExecutor::create(*model, {.n_threads = 2, .n_blocks = 64});
  ASSERT_TRUE(exec.ok()) << exec.message();
  EngineConfig cfg;
  cfg.scheduler.max_batch_tokens = 12;  // several steps for the inputs below
  cfg.scheduler.max_seqs = 3;
  auto engine = Engine::create(*tok, **exec, cfg);
  ASSERT_TRUE(engine.ok()) << engine.message();
  const std::vector<std::vector<int32_t>> inputs = {
      {1, 2, 3},
      {1, 40, 41, 42, 43, 44, 45},
      {1, 9},
      {1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316},
      {1, 5, 6},
      {1},
      {1, 7, 7, 7}};
  const uint64_t steps0 = (*engine)->stats().steps;
  auto all = (*engine)->embed(inputs);
  ASSERT_TRUE(all.ok()) << all.message();
  ASSERT_EQ(all->size(), inputs.size());
  EXPECT_GT((*engine)->stats().steps - steps0, 2u);  // packed into several steps
  EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto one = (*engine)->embed({&inputs[i], 1});
    ASSERT_TRUE(one.ok()) << one.message();
    EXPECT_EQ((*all)[i].size(), size_t(model->config().n_embd));
    EXPECT_EQ((*all)[i], (*one)[0]) << "input " << i;
  }
  EXPECT_EQ((*engine)->kv().n_used_blocks(), 0);

  const std::vector<std::vector<int32_t>> empty = {{1, 2}, {}};
  EXPECT_FALSE((*engine)->embed(empty).ok());
  const std::vector<std::vector<int32_t>> outside = {{1, 100000}};
  auto e = (*engine)->embed(outside);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("outside the vocabulary"), std::string::npos) << e.message();
  const std::vector<std::vector<int32_t>> too_long = {std::vector<int32_t>(513, 1)};
  EXPECT_FALSE((*engine)->embed(too_long).ok());
}

}  // namespace
}  // namespace sluice::test
