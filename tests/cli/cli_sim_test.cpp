// `sluice sim` black-box: the seeds' worked example as a simulated service, the report's JSON,
// disaggregated and capacity-planning runs, --hw this, --calibrate, --sweep and --plot,
// seeded reproducibility, and the errors a user sees.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

#define SLUICE_REQUIRE_SIM() \
  ASSERT_NE(test::run_sluice("sim --help").out.find("--replicas"), std::string::npos)

// LLaMA 3-70B, int8 weights and KV, 8 TPU v5e, 32 sequences at ~8k context: the seeds' 17 ms step
// (how-to-scale-your-model.md; the planner's 17.30 ms), communication left out as they do.
TEST(CliSim, SeedsLlama70bStepAsAService) {
  SLUICE_REQUIRE_SIM();
  auto r = test::run_sluice(
      "sim --model llama-3-70b --hw tpu-v5e --tp 8 --weight-bits 8 --kv-bits 8 --link-gbps 1e9 "
      "--link-latency-us 0 --num-prompts 32 --input-len 8000 --prefix-len 7999 --output-len 384 "
      "--max-seqs 32 --max-batch-tokens 8192 --prefill-chunk 8192 --ideal --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& run = j["runs"][0];
  EXPECT_EQ(run["completed"], 32);
  EXPECT_NEAR(run["tpot_ms"]["median"].get<double>(), 17.30, 0.05);
}

TEST(CliSim, ReplicasRoutersAndDisaggregation) {
  SLUICE_REQUIRE_SIM();
  for (const char* layout : {"--replicas 3 --router round_robin", "--replicas 3",
                             "--prefill-replicas 1 --decode-replicas 2"}) {
    auto r = test::run_sluice(std::string("sim --model llama-3-8b --hw H100 ") + layout +
                              " --num-prompts 60 --rate 8 --input-len 1000 --output-len 50 "
                              "--range-ratio 0.5 --seed 3");
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    EXPECT_NE(r.out.find("| Successful requests | 60 |"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Prefix cache hit rate"), std::string::npos);
    if (std::string(layout).find("prefill") != std::string::npos) {
      EXPECT_NE(r.out.find("KV transfers: 60 prompts"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("| decode |"), std::string::npos);
    }
  }
}

// A windowed model's simulated cache has the engine's K/V groups: gemma-3-4b's blocks are one
// layer's, and a 32k context holds 12,096 of them (5 global layers x 2048 + 29 windowed x 64),
// so 4 sequences of 28k tokens run together in 3 GiB without preemption (keeping every layer for
// the whole context they would need 4 x 34 x 1750 such blocks: 15.6 GB).
TEST(CliSim, WindowedModelHoldsItsWindowsBlocks) {
  SLUICE_REQUIRE_SIM();
  auto r = test::run_sluice(
      "sim --model gemma-3-4b --hw H100 --kv-cache-gb 3 --max-seqs 4 --num-prompts 4 "
      "--rate inf --input-len 28000 --output-len 4 --range-ratio 0 --ideal");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| Successful requests | 4 |"), std::string::npos) << r.out;
  // n_blocks = min(3 GiB / 64 KiB, 4 x 12096).
  EXPECT_NE(r.out.find("| 0 | both | 4 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 0 | 48384 |"), std::string::npos) << r.out;
  // Disaggregated serving moves one-group models only, as sluice serve --role.
  auto d = test::run_sluice(
      "sim --model gemma-3-4b --hw H100 --prefill-replicas 1 --decode-replicas 1 "
      "--num-prompts 2 --input-len 100 --output-len 4");
  EXPECT_NE(d.exit_code, 0);
  EXPECT_NE(d.err.find("groups of blocks"), std::string::npos) << d.err;
}

TEST(CliSim, FindMinChipsPicksTheCheapestLayoutMeetingTheSlo) {
  SLUICE_REQUIRE_SIM();
  // 70B bf16 does not fit one H100: the search must skip 1 chip and report why.
  auto r = test::run_sluice(
      "sim --model llama-3-70b --hw H100 --num-prompts 40 --rate 2 --input-len 1000 "
      "--output-len 100 --slo-ttft-ms 2000 --slo-tpot-ms 100 --find min-chips --max-chips 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| 1 | 1 x tp1 | no: the weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Cheapest layout meeting the SLO"), std::string::npos) << r.out;
}

// --hw this: the chip is this machine as `sluice bench --roofline` measured it. A memory-bound
// decode (llama-3-8b, bf16: 16 GB of weights a step) then takes the weights over the cached
// bandwidth: twice the bandwidth, half the time per token.
TEST(CliSim, HwThisTimesStepsByThisMachinesRoofline) {
  SLUICE_REQUIRE_SIM();
  test::TempDir dir;
  ASSERT_TRUE(test::write_roofline_cache(dir.path("roofline.json"), 100));  // 20 GB/s
  auto at_40 = nlohmann::json::parse(test::read_file(dir.path("roofline.json")));
  at_40["read_gbps"] = 40;
  std::filesystem::create_directories(dir.path("fast"));
  test::write_text(dir.path("fast/roofline.json"), at_40.dump());
  const std::string args =
      "sim --model llama-3-8b --hw this --ideal --num-prompts 1 --input-len 32 --output-len 8 "
      "--output-format json";
  // The cache `sluice bench --roofline` wrote ($SLUICE_CACHE/roofline.json), and one given.
  auto slow = test::run_sluice(args, "", "SLUICE_CACHE=" + dir.path(""));
  auto fast = test::run_sluice(args + " --roofline " + dir.path("fast/roofline.json"));
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  const auto s = nlohmann::json::parse(slow.out)["runs"][0];
  const auto f = nlohmann::json::parse(fast.out)["runs"][0];
  EXPECT_NE(s["url"].get<std::string>().find("local (Test CPU)"), std::string::npos) << s["url"];
  const double tpot_slow = s["tpot_ms"]["median"], tpot_fast = f["tpot_ms"]["median"];
  EXPECT_GT(tpot_slow, 16e9 / 20e9 * 1e3 * 0.95) << "8B bf16 weights over 20 GB/s";
  EXPECT_LT(tpot_slow, 16.5e9 / 20e9 * 1e3 * 1.05);
  EXPECT_NEAR(tpot_fast / tpot_slow, 0.5, 1e-6);
  // Without the measurements: say how to get them.
  auto none = test::run_sluice(args + " --roofline " + dir.path("none.json"));
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("run `sluice bench --roofline` first"), std::string::npos) << none.err;
}

// --calibrate: real engine steps of stories260K here, fitted and written; a later run on --hw
// this uses that calibration (the report names it) and is timed differently from the bare
// roofline.
TEST(CliSim, CalibrateFitsAndALaterRunUsesTheFit) {
  SLUICE_REQUIRE_SIM();
  SLUICE_REQUIRE_SHARED(model, "testdata/models/stories260K.gguf");
  test::TempDir dir;
  const std::string roofline = dir.path("roofline.json"), cal = dir.path("cal.json");
  ASSERT_TRUE(test::write_roofline_cache(roofline, 100));
  const std::string base = "sim --model " + model + " --hw this --roofline " + roofline +
                           " -c 512 --max-seqs 4 --max-batch-tokens 64 --prefill-chunk 64";
  auto fit = test::run_sluice(base + " --calibrate -t 1 --calibration " + cal);
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  EXPECT_NE(fit.out.find("Saved to " + cal), std::string::npos) << fit.out;
  const auto c = nlohmann::json::parse(test::read_file(cal), nullptr, false);
  ASSERT_TRUE(c.is_object()) << test::read_file(cal);
  for (const char* key : {"mem_efficiency", "compute_efficiency"}) {
    const double e = c[key];
    EXPECT_TRUE(std::isfinite(e) && e > 0) << key << " " << c;
  }
  for (const char* key : {"step_overhead_ms", "per_seq_us", "per_row_us"}) {
    const double v = c[key];
    EXPECT_TRUE(std::isfinite(v) && v >= 0) << key << " " << c;
  }
  // "fitted on N steps of stories260K.gguf", one table row per step.
  const std::string source = c["source"];
  int steps = 0;
  ASSERT_EQ(std::sscanf(source.c_str(), "fitted on %d steps of stories260K.gguf", &steps), 1)
      << source;
  EXPECT_GT(steps, 0);
  size_t rows = 0;  // lines "| <seqs> | ...": the header starts the output, the rest follow a \n
  for (size_t at = fit.out.find("\n| "); at != std::string::npos; at = fit.out.find("\n| ", at + 1))
    ++rows;
  EXPECT_EQ(rows, size_t(steps)) << fit.out;

  const std::string run = base + " --num-prompts 4 --input-len 32 --output-len 8";
  auto used = test::run_sluice(run + " --calibration " + cal);
  auto ideal = test::run_sluice(run + " --ideal");
  ASSERT_EQ(used.exit_code, 0) << used.err;
  ASSERT_EQ(ideal.exit_code, 0) << ideal.err;
  EXPECT_NE(used.out.find("Calibration: " + source + " (MBU "), std::string::npos) << used.out;
  EXPECT_NE(ideal.out.find("Calibration: ideal (MBU 1.00, MFU 1.00"), std::string::npos)
      << ideal.out;
  const auto tpot = [&](const std::string& extra) {
    auto r = test::run_sluice(run + extra + " --output-format json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["runs"][0]["tpot_ms"]["median"].get<double>();
  };
  EXPECT_NE(tpot(" --calibration " + cal), tpot(" --ideal"));
}

// --sweep: one run per rate, in the order given, over the same requests; the lower the rate, the
// longer the requests take to arrive, so the duration falls and the request throughput rises.
// --plot: the curve as an SVG with a point per run for each of its three series.
TEST(CliSim, SweepRunsEachRateAndPlotDrawsThem) {
  SLUICE_REQUIRE_SIM();
  test::TempDir dir;
  const std::string svg_path = dir.path("curve.svg");
  auto r = test::run_sluice(
      "sim --model llama-3-8b --hw H100 --num-prompts 40 --input-len 500 --output-len 40 "
      "--seed 2 --sweep 1,4,16,inf --output-format json --plot " +
      svg_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto runs = nlohmann::json::parse(r.out)["runs"];
  ASSERT_EQ(runs.size(), 4u) << r.out;
  EXPECT_EQ(runs[0]["request_rate"], 1);
  EXPECT_EQ(runs[1]["request_rate"], 4);
  EXPECT_EQ(runs[2]["request_rate"], 16);
  EXPECT_EQ(runs[3]["request_rate"], "inf");
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i]["completed"], 40) << i;
    EXPECT_EQ(runs[i]["total_input_tokens"], runs[0]["total_input_tokens"]) << i;
    EXPECT_EQ(runs[i]["total_output_tokens"], runs[0]["total_output_tokens"]) << i;
    if (i == 0) continue;
    EXPECT_LT(runs[i]["duration_s"].get<double>(), runs[i - 1]["duration_s"].get<double>()) << i;
    EXPECT_GT(runs[i]["request_throughput"].get<double>(),
              runs[i - 1]["request_throughput"].get<double>())
        << i;
  }

  const std::string svg = test::read_file(svg_path);
  ASSERT_EQ(svg.rfind("<?xml version=\"1.0\"", 0), 0u) << svg.substr(0, 200);
  const auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<svg "), 1u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count("<polyline "), 3u);  // TPOT p50, TPOT p99, TTFT p99
  EXPECT_EQ(count("<circle "), 3u * runs.size());
  EXPECT_EQ(count("<circle "), count("</circle>"));
  EXPECT_EQ(count("<text "), count("</text>"));
  EXPECT_EQ(count("<g "), count("</g>"));
  for (const char* rate : {"1", "4", "16", "inf"})
    EXPECT_EQ(count(std::string(">rate ") + rate + "</text>"), 1u) << rate;
  for (const char* series : {"TPOT p50", "TPOT p99", "TTFT p99"})
    EXPECT_NE(svg.find(std::string(">") + series + "</text>"), std::string::npos) << series;
  // Every point lies in the plot area (x 80..600, y 60..430).
  for (size_t at = svg.find("<circle cx=\""); at != std::string::npos;
       at = svg.find("<circle cx=\"", at + 1)) {
    double x = 0, y = 0;
    ASSERT_EQ(std::sscanf(svg.c_str() + at, "<circle cx=\"%lf\" cy=\"%lf\"", &x, &y), 2);
    EXPECT_TRUE(x >= 80 && x <= 600 && y >= 60 && y <= 430) << x << "," << y;
  }
}

// The same seed in two `sluice sim` processes: byte-identical reports, per-request timings
// included; another seed: another report.
TEST(CliSim, SeededRunsRepeatAcrossProcesses) {
  SLUICE_REQUIRE_SIM();
  test::TempDir dir;
  const auto sim = [&](int seed, const std::string& out) {
    return test::run_sluice(
        "sim --model llama-3-8b --hw H100 --replicas 2 --num-prompts 40 --rate 8 "
        "--burstiness 0.5 --range-ratio 0.5 --prefix-len 100 --input-len 400 --output-len 40 "
        "--output-format json --seed " +
        std::to_string(seed) + " --out " + dir.path(out));
  };
  auto a = sim(3, "a.json"), b = sim(3, "b.json"), c = sim(4, "c.json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  ASSERT_EQ(c.exit_code, 0) << c.err;
  // (EXPECT_TRUE: a failure need not print two whole reports.)
  EXPECT_TRUE(a.out == b.out) << "seed 3 twice: the reports differ";
  EXPECT_TRUE(test::read_file(dir.path("a.json")) == test::read_file(dir.path("b.json")))
      << "seed 3 twice: the per-request timings differ";
  EXPECT_FALSE(a.out == c.out) << "seeds 3 and 4: the same report";
  EXPECT_FALSE(test::read_file(dir.path("a.json")) == test::read_file(dir.path("c.json")))
      << "seeds 3 and 4: the same per-request timings";
}

TEST(CliSim, ClearErrors) {
  SLUICE_REQUIRE_SIM();
  struct Case {
    const char* args;
    const char* says;
  } cases[] = {
      {"sim --model nope --hw H100", "unknown model 'nope'"},
      {"sim --model llama-3-8b --hw nope", "unknown hardware 'nope'"},
      {"sim --model llama-3-8b --hw H100 --rate -3", "bad rate"},
      {"sim --model llama-3-8b --hw H100 --prefill-replicas 2", "go together"},
      {"sim --model llama-3-8b --hw H100 --dataset mooncake:x.jsonl --sweep 1,2", "--sweep"},
      {"sim --model llama-3-8b --hw H100 --dataset bogus", "--dataset must be"},
      {"sim --model llama-3-8b --hw H100 --kv-bits 5", "--kv-bits must be"},
      {"sim --model llama-3-8b --hw H100 --find everything", "--find takes"},
      {"sim --model llama-3-8b --hw H100 --pp 2 --pp-depth -1", "--pp-depth"},
      {"sim --model llama-3-8b --hw H100 --pp 2 --pp-microbatches -2", "--pp-microbatches"},
      {"sim --model llama-3-8b --hw H100 --calibration /nonexistent.json", "cannot read"},
  };
  for (const Case& c : cases) {
    auto r = test::run_sluice(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
  }
}

}  // namespace
}  // namespace sluice
