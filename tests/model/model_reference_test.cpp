// The f64 reference forward pass (the executors' oracle) against llama.cpp's golden logits and
// greedy continuations of the real tiny models in ../shared/testdata/models.
#include <gtest/gtest.h>

#include "model/golden_util.h"
#include "model/model.h"
#include "model/model_test_util.h"
#include "model/reference_forward.h"

namespace sluice {
namespace {

using test::GoldenCase;

TEST(ReferenceForward, MatchesGoldenLogitsAndGreedyTokens) {
  SLUICE_REQUIRE_SHARED(stories, "testdata/models/stories260K.gguf");
  const std::vector<GoldenCase> cases = test::load_golden_cases();
  ASSERT_FALSE(cases.empty());
  for (const GoldenCase& gc : cases) {
    SCOPED_TRACE(gc.name);
    auto model = Model::load(gc.model_path, {test::kGoldenContext, true});
    ASSERT_TRUE(model.ok()) << model.message();
    ASSERT_EQ(model->config().n_vocab, gc.n_vocab);
    auto ref = ReferenceForward::create(*model);
    ASSERT_TRUE(ref.ok()) << ref.message();
    std::vector<float> logits;
    double worst = 0;
    for (size_t i = 0; i < gc.prompt_tokens.size(); ++i) {
      auto r = (*ref)->step(gc.prompt_tokens[i]);
      ASSERT_TRUE(r.ok()) << r.message();
      logits = std::move(r).value();
      worst = std::max(worst, test::golden_rel_l2(logits.data(), gc.prompt_logits[i]));
    }
    // The golden logits come from llama.cpp with its default f16 K/V cache, which also rounds
    // q and the attention probabilities to f16; this exact f64 pass differs from them by up to
    // 1.01e-3 (stories260K.lily_and_ben, position 2). Emulating those f16 roundings brings the
    // difference to <= 3.6e-4, so the gap is theirs; the tolerance here leaves room for it.
    EXPECT_LT(worst, 1.5e-3);
    std::vector<int32_t> generated;
    while (generated.size() < gc.greedy_tokens.size()) {
      const int32_t tok = test::argmax(logits.data(), gc.n_vocab);
      generated.push_back(tok);
      if (tok == test::kGoldenEos) break;
      auto r = (*ref)->step(tok);
      ASSERT_TRUE(r.ok()) << r.message();
      logits = std::move(r).value();
    }
    EXPECT_EQ(generated, gc.greedy_tokens);
    std::printf("[ reference ] %-34s prompt logits rel-L2 %.2e, %zu greedy tokens\n",
                gc.name.c_str(), worst, generated.size());
  }
}

// Synthetic models of every family run through the reference without error, deterministically.
TEST(ReferenceForward, RunsEveryFamily) {
  test::TempDir dir;
  for (const char* variant :
       {"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3", "tiny-mqa", "tiny-gemma"}) {
    const std::string path = dir.path(std::string(variant) + ".gguf");
    test::write_synthetic_model(variant, FileType::ALL_F32, path);
    auto model = Model::load(path);
    ASSERT_TRUE(model.ok()) << model.message();
    auto ref = ReferenceForward::create(*model);
    ASSERT_TRUE(ref.ok());
    auto a = (*ref)->step(1);
    ASSERT_TRUE(a.ok());
    double norm = 0;
    for (float x : *a) norm += double(x) * x;
    EXPECT_GT(norm, 0.0) << variant;
    EXPECT_TRUE(std::isfinite(norm)) << variant;
  }
}

}  // namespace
}  // namespace sluice
