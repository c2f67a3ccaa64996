// `sluice run --tp N --pp M` as users run it: the command relaunches itself under mpirun and prints
// what one process prints; shapes that do not split and bad sizes are refused with a message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(CliTensorParallel, RunPrintsTheGoldenContinuation) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  SLUICE_REQUIRE_SHARED(golden_path, "testdata/models/stories260K.once_upon_a_time.json");
  auto golden = nlohmann::json::parse(test::read_file(golden_path));
  const auto want = golden["greedy_tokens"].get<std::vector<int>>();
  for (const char* layout : {"--tp 2", "--tp 4", "--pp 2", "--tp 2 --pp 2 --pp-microbatches 3",
                             "--tp 2 --pp 2 --spec ngram"}) {
    auto r = test::run_sluice("run " + model + " -p 'Once upon a time' --temp 0 -c 512 -t 1 -n " +
                              std::to_string(want.size()) + " --output-format json " + layout);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].get<std::vector<int>>(), want) << layout;
    EXPECT_EQ(j["text"], golden["greedy_text"]) << layout;
  }
}

// A hybrid (qwen35: 6 Gated DeltaNet + 2 gated attention layers) over ranks: each holds its
// linear-attention heads and their recurrent states; the greedy continuation is one process's.
TEST(CliTensorParallel, HybridRunMatchesOneProcess) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/arch/qwen35.gguf");
  const std::string run = "run " + model +
                          " -p 'Every morning before school, Maria walked' --temp 0 -c 256 -t 1 "
                          "-n 16 --output-format json ";
  auto one = test::run_sluice(run);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto want = nlohmann::json::parse(one.out);
  ASSERT_EQ(want["tokens"].size(), 16u);
  for (const char* layout : {"--tp 2", "--tp 4", "--tp 2 --pp 2"}) {
    auto r = test::run_sluice(run + layout);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"], want["tokens"]) << layout;
    EXPECT_EQ(j["text"], want["text"]) << layout;
  }
  // 2 K / 4 V linear-attention heads do not split over 3 ranks.
  auto three = test::run_sluice("run " + model + " -p hi -n 4 --tp 3");
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(three.err.find("tensor parallel size 3 and the model's 2 linear-attention (Gated "
                           "DeltaNet) K heads"),
            std::string::npos)
      << three.err;
}

TEST(CliTensorParallel, ClearErrors) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto three = test::run_sluice("run " + model + " -p hi -n 4 --tp 3");
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(three.err.find("does not divide the model's 8 attention heads"), std::string::npos)
      << three.err;
  auto zero = test::run_sluice("run " + model + " -p hi -n 4 --tp 0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.err.find("--tp must be in 1..1024"), std::string::npos) << zero.err;
  auto draft =
      test::run_sluice("run " + model + " -p hi -n 4 --tp 2 --spec draft --model-draft " + model);
  EXPECT_NE(draft.exit_code, 0);
  EXPECT_NE(draft.err.find("--spec draft with --tp or --pp is not supported"), std::string::npos)
      << draft.err;
  auto depth = test::run_sluice("run " + model + " -p hi -n 4 --pp 2 --pp-depth -1");
  EXPECT_NE(depth.exit_code, 0);
  EXPECT_NE(depth.err.find("--pp-depth must be in 0..64"), std::string::npos) << depth.err;
  auto deep = test::run_sluice("run " + model + " -p hi -n 4 --pp 6");
  EXPECT_NE(deep.exit_code, 0);
  EXPECT_NE(deep.err.find("pipeline parallel size 6 must be in 1..5"), std::string::npos)
      << deep.err;
}

// Under mpirun with different model files on the ranks (MPMD): every rank refuses at start-up,
// naming the rank that differs, and the job exits non-zero instead of computing garbage.
TEST(CliTensorParallel, RanksThatDisagreeOrCannotStartEndTheJob) {
  SLUICE_REQUIRE_SHARED(a, "testdata/models/stories260K.gguf");
  SLUICE_REQUIRE_SHARED(b, "testdata/models/aidreams260K.gguf");
  test::TempDir dir;
  const std::string err = dir.path("err");
  const std::string run = test::sluice_binary() + " run ";
  const std::string cmd =
      "timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 " + run + a +
      " -p hi -n 4 -t 1 --tp 2 : -np 1 " + run + b + " -p hi -n 4 -t 1 --tp 2 >/dev/null 2>" + err;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(WEXITSTATUS(status), 124) << "timed out";
  const std::string log = test::read_file(err);
  EXPECT_NE(log.find("rank 1 differs from rank 0"), std::string::npos) << log;
  // A rank that cannot start (its model is missing): the job ends with its error, no hang.
  const std::string missing =
      "timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 " + run + a +
      " -p hi -n 4 -t 1 --tp 2 : -np 1 " + run + "/nonexistent.gguf -p hi -n 4 -t 1 --tp 2 " +
      ">/dev/null 2>" + err;
  const int st2 = std::system(missing.c_str());
  ASSERT_TRUE(WIFEXITED(st2));
  EXPECT_NE(WEXITSTATUS(st2), 0);
  EXPECT_NE(WEXITSTATUS(st2), 124) << "timed out";
  const std::string log2 = test::read_file(err);
  EXPECT_NE(log2.find("run (rank 1)"), std::string::npos) << log2;
  EXPECT_NE(log2.find("does not exist"), std::string::npos) << log2;
}

}  // namespace
}  // namespace sluice
