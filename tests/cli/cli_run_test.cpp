// `sluice run` and `sluice bench throughput` as a user runs them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

TEST(CliRun, JsonOutputMatchesTheGoldenContinuation) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  SLUICE_REQUIRE_SHARED(golden_path, "testdata/models/stories260K.once_upon_a_time.json");
  auto golden = nlohmann::json::parse(test::read_file(golden_path));
  const auto want = golden["greedy_tokens"].get<std::vector<int>>();
  auto r = test::run_sluice("run " + model + " -p 'Once upon a time' --temp 0 -c 512 -n " +
                            std::to_string(want.size()) + " --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"], golden["prompt_tokens"]);
  EXPECT_EQ(j["tokens"].get<std::vector<int>>(), want);
  EXPECT_EQ(j["text"], golden["greedy_text"]);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_GT(j["timings"]["decode_tokens_per_s"].get<double>(), 0);
}

TEST(CliRun, TextModeStreamsAndReportsTimings) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto r =
      test::run_sluice("run " + model + " -p 'Once upon a time' --temp 0 -c 512 -n 12 --stop girl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ", there was a little ");
  EXPECT_NE(r.err.find("TTFT"), std::string::npos);
  EXPECT_NE(r.err.find("decode"), std::string::npos);
}

TEST(CliRun, SeededSamplingIsReproducible) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  const std::string args =
      "run " + model + " -p 'Once upon a time' -c 512 -n 30 --temp 1 --seed 7 --output-format json";
  auto a = test::run_sluice(args), b = test::run_sluice(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["tokens"], nlohmann::json::parse(b.out)["tokens"]);
}

TEST(CliRun, ClearErrors) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto none = test::run_sluice("run " + model);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("give a prompt"), std::string::npos);
  auto missing = test::run_sluice("run /nonexistent.gguf -p hi");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos);
  auto badp = test::run_sluice("run " + model + " -p hi --top-p 3");
  EXPECT_EQ(badp.exit_code, 1);
  EXPECT_NE(badp.err.find("top_p"), std::string::npos) << badp.err;
  auto toolong = test::run_sluice(
      "run " + model +
      " -c 16 -p 'Once upon a time there was a very long prompt that does not fit'");
  EXPECT_EQ(toolong.exit_code, 1);
  EXPECT_NE(toolong.err.find("context"), std::string::npos) << toolong.err;
}

TEST(CliBenchThroughput, ReportsServingMetrics) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  auto r = test::run_sluice("bench throughput " + model +
                            " --requests 6 --input-len 24 --output-len 8 --concurrency 3 "
                            "--shared-prefix 16 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests"], 6);
  EXPECT_EQ(j["concurrency"], 3);
  EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["ttft_ms"]["p99"].get<double>(), 0);
  EXPECT_GE(j["ttft_ms"]["p99"].get<double>(), j["ttft_ms"]["p50"].get<double>());
  EXPECT_GT(j["prefix_cache_hit_tokens"].get<int>(),
            0);  // later requests reuse the 16-token prefix
}

}  // namespace
}  // namespace sluice
