// `sluice plan` black-box: the JSON a script reads, the SVG, GGUF models and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

// `sluice plan` is registered (an unregistered command prints the top-level help).
#define SLUICE_REQUIRE_PLAN() \
  ASSERT_NE(test::run_sluice("plan --help").out.find("--hw"), std::string::npos)

TEST(CliPlan, JsonReproducesTheLlama2_13BTable) {
  SLUICE_REQUIRE_PLAN();
  auto r = test::run_sluice(
      "plan --model llama-2-13b --hw tpu-v5e --chips 8 --context 8192 "
      "--batch 1,8,16,32,64,240 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["model"]["params"].get<double>(), 13.0e9, 0.1e9);
  EXPECT_DOUBLE_EQ(j["model"]["kv_bytes_per_token"].get<double>(), 819200.0);
  EXPECT_NEAR(j["hardware"]["critical_batch"].get<double>(), 240, 1);
  EXPECT_EQ(j["hardware"]["chips"], 8);
  EXPECT_EQ(j["limits"]["max_batch"], 15);
  // {batch, step ms, tokens/s} from all-about-transformer-inference.md.
  const double want[][3] = {{1, 4.98, 200.61},   {8, 12.13, 659.30},  {16, 20.30, 787.99},
                            {32, 36.65, 873.21}, {64, 69.33, 923.13}, {240, 249.09, 963.53}};
  ASSERT_EQ(j["batches"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const auto& row = j["batches"][i];
    EXPECT_EQ(row["batch"].get<double>(), want[i][0]);
    EXPECT_NEAR(row["step_time_ms"].get<double>(), want[i][1], 0.01 * want[i][1]);
    EXPECT_NEAR(row["tokens_per_s"].get<double>(), want[i][2], 0.01 * want[i][2]);
    EXPECT_NEAR(row["total_bytes"].get<double>(),
                row["kv_bytes"].get<double>() + j["model"]["weight_bytes"].get<double>(), 1.0);
    EXPECT_NEAR(row["kv_bytes"].get<double>(), want[i][0] * 819200.0 * 8192, 1.0);
  }
}

TEST(CliPlan, Llama3_70BServingFigures) {
  SLUICE_REQUIRE_PLAN();
  auto r = test::run_sluice(
      "plan --model llama-3-70b --hw TPUv5e --chips 8 --weight-bits 8 --kv-bits 8 "
      "--batch 32 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["model"]["kv_bytes_per_token"].get<double>(), 163840.0);
  EXPECT_NEAR(j["batches"][0]["step_time_ms"].get<double>(), 17, 0.35);
  EXPECT_NEAR(j["batches"][0]["tokens_per_s"].get<double>(), 1882, 38);
  EXPECT_NEAR(j["model"]["critical_batch"].get<double>(), 120, 1);
  EXPECT_EQ(j["serving"]["batch"], 32);
  EXPECT_NEAR(j["prefill"]["seconds"].get<double>(), 2 * 70.55e9 * 8192 / (8 * 1.97e14 * 0.4),
              0.01);
}

TEST(CliPlan, SweepTableAndPlot) {
  SLUICE_REQUIRE_PLAN();
  test::TempDir dir;
  const std::string svg = dir.path("pareto.svg");
  auto r = test::run_sluice("plan --model llama-3-8b --hw H100 --batch-sweep --plot " + svg);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("critical batch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prefill:generate"), std::string::npos);
  const std::string text = test::read_file(svg);
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
}

// A synth preset with sliding windows (gemma-3-4b: 29 of 34 layers windowed to 1024 tokens):
// a 32k sequence holds 12,096 one-layer blocks (792 MB, the engine's formula), not 34 x 32768
// positions, so about 5.7x the sequences fit.
TEST(CliPlan, WindowedPresetHoldsTheWindowAndFitsMore) {
  SLUICE_REQUIRE_PLAN();
  auto r = test::run_sluice(
      "plan --model gemma-3-4b --hw H100 --context 32768 --batch 1 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["model"]["kv_bytes_per_token"].get<double>(), 34.0 * 4096);
  EXPECT_DOUBLE_EQ(j["model"]["kv_bytes_per_sequence"].get<double>(), 792723456.0);
  EXPECT_EQ(j["model"]["kv_window"], 1024);
  const double free_bytes = 80e9 - j["model"]["weight_bytes"].get<double>();
  const int64_t max_batch = j["limits"]["max_batch"].get<int64_t>();
  EXPECT_EQ(max_batch, int64_t(free_bytes / 792723456.0));
  EXPECT_GT(double(max_batch), 5.7 * std::floor(free_bytes / (34.0 * 4096 * 32768)));
  auto text = test::run_sluice("plan --model gemma-3-4b --hw H100 --context 32768 --batch 1");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("29 of 34 layers windowed: 1024 tokens, blocks of 16"), std::string::npos)
      << text.out;
}

// gemma4's per-layer head widths and shared K/V are beyond a shape's cost model: by name it is
// refused with how to price it (its file); `sim` says the same.
TEST(CliPlan, Gemma4PresetByNameIsRefusedWithHowToPriceIt) {
  SLUICE_REQUIRE_PLAN();
  for (const char* cmd :
       {"plan --model gemma-4-e4b --hw H100", "sim --model gemma-4-e4b --hw H100"}) {
    auto r = test::run_sluice(cmd);
    EXPECT_NE(r.exit_code, 0) << cmd;
    EXPECT_NE(r.err.find("is a gemma4 preset"), std::string::npos) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("sluice synth --preset gemma-4-e4b"), std::string::npos) << r.err;
  }
}

TEST(CliPlan, GgufModel) {
  SLUICE_REQUIRE_PLAN();
  SLUICE_REQUIRE_SHARED(path, "testdata/models/stories260K.gguf");
  auto r = test::run_sluice("plan --model " + path +
                            " --hw rtx-4090 --context 256 "
                            "--batch 1,4 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // Counted from the tensor directory (see CliInfo.Stories260K): f32 weights as stored.
  const double params = 2 * 64 * 512 + 64 + 5 * (4096 + 2048 + 2048 + 4096 + 3 * 64 * 172 + 128);
  EXPECT_DOUBLE_EQ(j["model"]["params"].get<double>(), params);
  EXPECT_DOUBLE_EQ(j["model"]["weight_bytes"].get<double>(), params * 4);
  EXPECT_EQ(j["precision"]["weight_bits"], 0);
  // 2 x 5 layers x 4 KV heads x head_dim 8 at 16 bits.
  EXPECT_DOUBLE_EQ(j["model"]["kv_bytes_per_token"].get<double>(), 2 * 5 * 4 * 8 * 2);
  EXPECT_EQ(j["batches"].size(), 2u);
  // --weight-bits overrides the stored bytes.
  r = test::run_sluice("plan --model " + path +
                       " --hw rtx-4090 --weight-bits 4 "
                       "--output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(r.out)["model"]["weight_bytes"].get<double>(), params / 2);
}

TEST(CliPlan, LocalHardwareWithoutCache) {
  SLUICE_REQUIRE_PLAN();
  test::TempDir dir;
  auto r =
      test::run_sluice("plan --model llama-3-8b --hw local --roofline " + dir.path("none.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("sluice plan: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sluice bench --roofline"), std::string::npos) << r.err;
}

TEST(CliPlan, LocalHardwareFromCache) {
  SLUICE_REQUIRE_PLAN();
  test::TempDir dir;
  const std::string cache = dir.path("roofline.json");
  ASSERT_TRUE(test::write_roofline_cache(cache, 0));
  auto r = test::run_sluice("plan --model llama-3-8b --hw local --roofline " + cache +
                            " --batch 1 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["hardware"]["hbm_bytes_per_s"].get<double>(), 20e9);
  EXPECT_DOUBLE_EQ(j["hardware"]["critical_batch"].get<double>(), 100e9 / 20e9);
  // Batch 1 is bandwidth-bound: (weights + 8192 tokens of KV) / 20 GB/s.
  const double bytes = j["batches"][0]["total_bytes"].get<double>();
  EXPECT_NEAR(j["batches"][0]["step_time_ms"].get<double>(), bytes / 20e9 * 1e3, 1e-6);
}

TEST(CliPlan, Errors) {
  SLUICE_REQUIRE_PLAN();
  auto r = test::run_sluice("plan --model gpt-9 --hw H100");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown model 'gpt-9'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama-3-70b"), std::string::npos) << r.err;
  r = test::run_sluice("plan --model llama-3-8b --hw tpu-v9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown hardware 'tpu-v9'"), std::string::npos) << r.err;
  r = test::run_sluice("plan --model llama-3-8b --hw H100 --weight-bits 3");
  EXPECT_NE(r.exit_code, 0);
  r = test::run_sluice("plan --model llama-3-8b --hw H100 --batch 8 --batch-sweep");
  EXPECT_NE(r.exit_code, 0);
  r = test::run_sluice("plan --model /nonexistent/m.gguf --hw H100");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/m.gguf"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sluice
