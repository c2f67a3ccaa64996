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
  for (const char* layout : {"--tp 2", "--tp 4", "--pp 2", "--tp 2 --pp 2 --pp-microbatches 3"}) {
    auto r = test::run_sluice("run " + model + " -p 'Once upon a time' --temp 0 -c 512 -t 1 -n " +
                              std::to_string(want.size()) + " --output-format json " + layout);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].get<std::vector<int>>(), want) << layout;
    EXPECT_EQ(j["text"], golden["greedy_text"]) << layout;
  }
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
  auto deep = test::run_sluice("run " + model + " -p hi -n 4 --pp 6");
  EXPECT_NE(deep.exit_code, 0);
  EXPECT_NE(deep.err.find("pipeline parallel size 6 must be in 1..5"), std::string::npos)
      << deep.err;
}

}  // namespace
}  // namespace sluice
