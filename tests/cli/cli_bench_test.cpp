// `sluice bench MODEL` black-box: the rows and the numbers a script reads, on a synthetic tiny
// model with a given roofline cache (no ../shared needed, no 10-second roofline measurement).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "test_util.h"

namespace sluice {
namespace {

class CliBench : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.path("tiny.gguf");
    const auto synth = test::run_sluice("synth --preset tiny --type q8_0 -t 1 -o " + model_);
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    cache_ = dir_.path("roofline.json");
    ASSERT_TRUE(test::write_roofline_cache(cache_, 400));
  }

  test::CommandResult bench(const std::string& args) {
    return test::run_sluice("bench " + model_ + " --roofline-file " + cache_ + " " + args);
  }

  test::TempDir dir_;
  std::string model_, cache_;
};

TEST_F(CliBench, JsonRowsDivideByTheCachedAndTheProbedBandwidth) {
  const auto r = bench("-t 1 -p 8,16 -n 4 -b 1,3 -r 2 --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& rows = j["results"];
  ASSERT_EQ(rows.size(), 5u) << r.out;  // pp8, tg4 @8, pp16, tg4 @16, tg4 b3 @8
  EXPECT_EQ(rows[0]["test"], "pp8");
  EXPECT_EQ(rows[1]["test"], "tg4 @8");
  EXPECT_EQ(rows[2]["test"], "pp16");
  EXPECT_EQ(rows[3]["test"], "tg4 @16");
  EXPECT_EQ(rows[4]["test"], "tg4 b3 @8");
  // The JSON prints GB/s with 2 decimals and the ratios with 3: each check allows the rounding
  // of what it reads (a slow run, e.g. under ASan, prints gb_s ~0.1, where 0.005 is 4%).
  const double gbs_round = 0.005, ratio_round = 0.0005, eps = 1e-9;
  for (const auto& row : rows) {
    EXPECT_EQ(row["threads"], 1);
    const double tps = row["tok_s"].get<double>(), gbs = row["gb_s"].get<double>();
    EXPECT_GT(tps, 0);
    EXPECT_GE(row["tok_s_best"].get<double>(), tps);
    EXPECT_NEAR(gbs, tps * row["bytes_per_token"].get<double>() / 1e9, 1e-2 * gbs + gbs_round);
    // 1 thread: MBU divides by the best reading: the cached 1-thread bandwidth, raised by the
    // probe alongside or by a test that streamed faster (this model fits in the caches), the
    // same for every row, so it never passes 100%.
    const double bw = row["mbu_gb_s"].get<double>(), best = row["gb_s_best"].get<double>();
    EXPECT_GE(bw, 10 - gbs_round);
    EXPECT_EQ(bw, rows[0]["mbu_gb_s"].get<double>());
    EXPECT_GE(best, gbs - gbs_round);
    EXPECT_LE(best, bw + gbs_round);
    EXPECT_NEAR(row["mbu"].get<double>(), gbs / bw, ratio_round + gbs_round / bw + eps);
    EXPECT_LE(row["mbu"].get<double>(), 1 + ratio_round);
    const std::string origin = row["mbu_origin"];
    EXPECT_TRUE(bw == 10 ? origin.find("probe") != std::string::npos
                         : origin.find("not saved") != std::string::npos)
        << origin;
    const double probe = row["probe_gb_s"].get<double>();
    EXPECT_GT(probe, 0);
    // MBU*: against the probe, or the test's own best repetition where that streamed faster.
    // d(gbs / p) = d(gbs) / p + gbs * d(p) / p^2.
    const double p = std::max(probe, best);
    EXPECT_NEAR(row["mbu_probe"].get<double>(), gbs / p,
                ratio_round + gbs_round * (1 + gbs / p) / p + eps);
    EXPECT_GT(row["roofline"].get<double>(), 0);
  }
  EXPECT_GT(rows[0]["mfu"].get<double>(), 0);  // prefill rows carry MFU, decode rows do not
  EXPECT_EQ(rows[1]["mfu"].get<double>(), 0);
  // A model within the caches never raises the cached (DRAM) bandwidth.
  const auto cache = nlohmann::json::parse(test::read_file(cache_));
  EXPECT_EQ(cache["read_gbps_1t"], 10);
  EXPECT_EQ(cache["read_gbps"], 20);
  EXPECT_FALSE(cache.contains("format"));
}

// A mixture of experts: decode rows count the experts each step ran. One sequence runs 2 of 4
// a layer, so it reads less than the whole file; 8 sequences run at most the 4 (not 8 x 2).
TEST_F(CliBench, MoeRowsCountTheExpertsEachStepRan) {
  const std::string moe = dir_.path("tiny-moe.gguf");
  const auto synth = test::run_sluice("synth --preset tiny-moe --type q8_0 -t 1 -o " + moe);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const auto r = test::run_sluice("bench " + moe + " --roofline-file " + cache_ +
                                  " -t 1 -p 8 -n 3 -b 1,8 -r 1 --no-probe --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& rows = j["results"];
  ASSERT_EQ(rows.size(), 3u) << r.out;  // pp8, tg3 @8, tg3 b8 @8
  EXPECT_FALSE(rows[0].contains("expert_reads_per_layer"));
  EXPECT_DOUBLE_EQ(rows[1]["expert_reads_per_layer"].get<double>(), 2.0);
  EXPECT_EQ(rows[1]["ungrouped_reads_per_layer"], 2);
  const double b8 = rows[2]["expert_reads_per_layer"].get<double>();
  EXPECT_GE(b8, 2.0);
  EXPECT_LE(b8, 4.0);
  EXPECT_EQ(rows[2]["ungrouped_reads_per_layer"], 16);
  const std::string desc = j["model"].get<std::string>();
  EXPECT_NE(desc.find("MoE: 2 of 4 experts a token"), std::string::npos) << desc;
}

TEST_F(CliBench, MarkdownTableAndNoProbe) {
  const auto r = bench("-t 1 -p 8 -n 2 -r 1 --no-probe");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| test | threads | tok/s |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| pp8 | 1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| tg2 @8 | 1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--no-probe: not measured"), std::string::npos) << r.out;
  const auto j = bench("-t 1 -p 8 -n 2 -r 1 --no-probe --output-format json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  // Named: a range-for over a member of the temporary parse() result dangles (ASan caught it).
  const auto parsed = nlohmann::json::parse(j.out);
  for (const auto& row : parsed["results"]) {
    EXPECT_EQ(row["probe_gb_s"].get<double>(), 0);
  }
}

// Prefill MFU counts the FLOPs done: the tiny preset's layer matmuls for every prompt token, the
// output projection (512 x 256, untied) for the one logits row, and attention. With both peaks
// at 1 G/s (whichever the kernels use) MFU is large enough for the JSON's 3 decimals; counting
// the output projection for all 64 tokens would read 10% higher. A roofline cached for another
// ISA's peaks is named on stderr.
TEST_F(CliBench, PrefillMfuCountsTheFlopsDoneAndNamesAnotherIsasPeaks) {
  const std::string cache = dir_.path("unit-peaks.json");
  ASSERT_TRUE(test::write_roofline_cache(cache, 1, 1, "another-isa"));
  const auto r = test::run_sluice("bench " + model_ + " --roofline-file " + cache +
                                  " -t 1 -p 64 -n 2 -r 1 --no-probe --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("holds another-isa peaks"), std::string::npos) << r.err;
  const auto parsed = nlohmann::json::parse(r.out);
  const auto& pp = parsed["results"][0];
  ASSERT_EQ(pp["test"], "pp64");
  const double layers = 2 * (256.0 * 256 * 2 + 256.0 * 128 * 2 + 3 * 256.0 * 512);
  const double flops_per_token = 2 * layers + 2 * 512.0 * 256 / 64 + 2 * 2 * 64 * 256;
  // 1 thread of the cache's 2: half the peak.
  const double expected = pp["tok_s"].get<double>() * flops_per_token / 1e9 / 0.5;
  EXPECT_NEAR(pp["mfu"].get<double>(), expected, 0.002 * expected + 0.0005) << r.out;
}

// A prefill faster than the cached peak (one measured while the cores were busy) says so and
// names the file to refresh; a believable MFU prints no such line.
TEST_F(CliBench, MfuAboveTheCachedPeakAsksForANewRoofline) {
  const std::string cache = dir_.path("tiny-peak.json");
  ASSERT_TRUE(test::write_roofline_cache(cache, 0.001, 0.001));
  const auto low = test::run_sluice("bench " + model_ + " --roofline-file " + cache +
                                    " -t 1 -p 16 -n 0 -r 1 --no-probe");
  ASSERT_EQ(low.exit_code, 0) << low.err;
  EXPECT_NE(low.out.find("MFU above 100%: the cached peak (" + cache + ")"), std::string::npos)
      << low.out;
  const auto ok = bench("-t 1 -p 16 -n 0 -r 1 --no-probe");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out.find("MFU above 100%"), std::string::npos) << ok.out;
}

// --tp / --pp: the ranks run the test (relaunched under mpirun) and every row reports rank 0's
// seconds in messages a step beside the link model's prediction.
TEST_F(CliBench, ParallelRowsReportCommunication) {
  for (const std::string layout : {"--tp 2", "--pp 2"}) {
    const auto r = bench("-t 1 -p 8 -n 2 -b 1,3 -r 1 --no-probe --output-format json " + layout);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_NE(j["model"].get<std::string>().find(layout), std::string::npos) << j["model"];
    const auto& rows = j["results"];
    ASSERT_EQ(rows.size(), 3u) << r.out;  // pp8, tg2 @8, tg2 b3 @8
    for (const auto& row : rows) {
      EXPECT_GT(row["tok_s"].get<double>(), 0) << layout;
      // Every step of every row sends messages between the two ranks (all-reduces with --tp,
      // activations between stages with --pp), each taking some time.
      EXPECT_GT(row["comm_ms_per_step"].get<double>(), 0) << layout << ": " << row;
      EXPECT_GT(row["comm_predicted_ms_per_step"].get<double>(), 0) << layout;
    }
  }
  const auto md = bench("-t 1 -p 8 -n 2 -r 1 --no-probe --tp 2");
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("| comm ms/step | predicted |"), std::string::npos) << md.out;
}

TEST_F(CliBench, ClearErrors) {
  const auto none = test::run_sluice("bench");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("give a MODEL"), std::string::npos) << none.err;
  const auto zero = bench("-p 0");
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_NE(zero.err.find("-p and -b need values >= 1"), std::string::npos) << zero.err;
  const auto missing = test::run_sluice("bench /nonexistent.gguf --roofline-file " + cache_);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace sluice
