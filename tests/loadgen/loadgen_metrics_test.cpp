// The metric math of `sluice bench serve` on hand-made records: every number below is worked
// out by hand in the comments (numpy.percentile's linear interpolation, population std).
#include <gtest/gtest.h>

#include <cmath>

#include "loadgen/metrics.h"

namespace sluice::loadgen {
namespace {

RequestRecord ok(double start, double ttft, std::vector<double> itl, int64_t out, double e2el,
                 int64_t in) {
  RequestRecord r;
  r.ok = true;
  r.start_s = start;
  r.ttft_s = ttft;
  r.itl_s = std::move(itl);
  r.output_tokens = out;
  r.e2el_s = e2el;
  r.input_tokens = in;
  return r;
}

RequestRecord failed(double start, double e2el, std::string error) {
  RequestRecord r;
  r.start_s = start;
  r.e2el_s = e2el;
  r.error = std::move(error);
  return r;
}

// Seven requests: four completed, three failed (two with the same message).
//   R1 start 0.0  TTFT 100  ITL 20,30,50  4 tokens  E2EL 200  in 10   TPOT (200-100)/3 = 33.33
//   R2 start 0.5  TTFT 300  ITL 40        2 tokens  E2EL 350  in 20   TPOT  50
//   R3 start 1.0  TTFT 200  -             1 token   E2EL 200  in 30   no TPOT
//   R4 start 1.5  failed "HTTP 500: boom"  (ends 1.51)
//   R5 start 1.6  failed "HTTP 500: boom"  (ends 1.62)
//   R6 start 0.2  failed "connection refused"
//   R7 start 1.2  TTFT 500  ITL 100,100   3 tokens  E2EL 800  in 40   TPOT (800-500)/2 = 150
// Duration: first start 0.0 to last end 1.2 + 0.8 = 2.0 s.
std::vector<RequestRecord> sample() {
  return {ok(0.0, 0.100, {0.020, 0.030, 0.050}, 4, 0.200, 10),
          ok(0.5, 0.300, {0.040}, 2, 0.350, 20),
          ok(1.0, 0.200, {}, 1, 0.200, 30),
          failed(1.5, 0.01, "HTTP 500: boom"),
          failed(1.6, 0.02, "HTTP 500: boom"),
          failed(0.2, 0.001, "connection refused"),
          ok(1.2, 0.500, {0.100, 0.100}, 3, 0.800, 40)};
}

constexpr double kEps = 1e-9;

TEST(LoadgenMetrics, PercentileIsNumpyLinearInterpolation) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({7}, 99), 7);
  // numpy.percentile([1, 2, 3, 4], q): rank = q/100 * 3.
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 25), 1.75, kEps);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 50), 2.5, kEps);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 90), 3.7, kEps);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 99), 3.97, kEps);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 100), 4, kEps);
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 0), 1, kEps);
  // 101 values 0..100: the p-th percentile is p.
  std::vector<double> v;
  for (int i = 0; i <= 100; ++i) v.push_back(i);
  EXPECT_NEAR(percentile(v, 90), 90, kEps);
  EXPECT_NEAR(percentile(v, 99), 99, kEps);
}

TEST(LoadgenMetrics, DistributionSortsAndUsesPopulationStd) {
  const Distribution d = distribution({4, 2, 8, 6});  // mean 5, deviations -3 -1 1 3
  EXPECT_EQ(d.n, 4u);
  EXPECT_NEAR(d.mean, 5, kEps);
  EXPECT_NEAR(d.std, std::sqrt(20.0 / 4), kEps);
  EXPECT_NEAR(d.median, 5, kEps);
  EXPECT_NEAR(d.p90, 6 + 0.7 * 2, kEps);
  EXPECT_NEAR(d.p99, 6 + 0.97 * 2, kEps);
  const Distribution empty = distribution({});
  EXPECT_EQ(empty.n, 0u);
  EXPECT_EQ(empty.mean, 0);
  EXPECT_EQ(empty.p99, 0);
}

TEST(LoadgenMetrics, CountsDurationAndThroughput) {
  const RunSummary s = summarize(sample(), {});
  EXPECT_EQ(s.completed, 4);
  EXPECT_EQ(s.failed, 3);
  EXPECT_NEAR(s.duration_s, 2.0, kEps);
  EXPECT_EQ(s.total_input_tokens, 100);  // 10 + 20 + 30 + 40
  EXPECT_EQ(s.total_output_tokens, 10);  // 4 + 2 + 1 + 3
  EXPECT_NEAR(s.request_throughput, 4 / 2.0, kEps);
  EXPECT_NEAR(s.input_throughput, 100 / 2.0, kEps);
  EXPECT_NEAR(s.output_throughput, 10 / 2.0, kEps);
  EXPECT_NEAR(s.total_token_throughput, 110 / 2.0, kEps);
  ASSERT_EQ(s.errors.size(), 2u);  // distinct, first-seen order
  EXPECT_EQ(s.errors[0].first, "HTTP 500: boom");
  EXPECT_EQ(s.errors[0].second, 2);
  EXPECT_EQ(s.errors[1].first, "connection refused");
  EXPECT_EQ(s.errors[1].second, 1);
}

TEST(LoadgenMetrics, Ttft) {
  // Completed only: 100 300 200 500 -> sorted 100 200 300 500.
  const Distribution d = summarize(sample(), {}).ttft_ms;
  EXPECT_EQ(d.n, 4u);
  EXPECT_NEAR(d.mean, 275, kEps);
  EXPECT_NEAR(d.median, 250, kEps);            // rank 1.5
  EXPECT_NEAR(d.p90, 300 + 0.7 * 200, kEps);   // rank 2.7
  EXPECT_NEAR(d.p99, 300 + 0.97 * 200, kEps);  // rank 2.97
  EXPECT_NEAR(d.std, std::sqrt((175.0 * 175 + 75 * 75 + 25 * 25 + 225 * 225) / 4), kEps);
}

TEST(LoadgenMetrics, TpotSkipsSingleTokenRequests) {
  // R1 100/3, R2 50, R7 150 (R3 has one token): sorted 33.33 50 150.
  const Distribution d = summarize(sample(), {}).tpot_ms;
  EXPECT_EQ(d.n, 3u);
  const double r1 = 100.0 / 3;
  EXPECT_NEAR(d.mean, (r1 + 50 + 150) / 3, 1e-9);
  EXPECT_NEAR(d.median, 50, 1e-9);
  EXPECT_NEAR(d.p90, 50 + 0.8 * 100, 1e-9);   // rank 1.8
  EXPECT_NEAR(d.p99, 50 + 0.98 * 100, 1e-9);  // rank 1.98
  const double m = (r1 + 50 + 150) / 3;
  EXPECT_NEAR(d.std,
              std::sqrt(((r1 - m) * (r1 - m) + (50 - m) * (50 - m) + (150 - m) * (150 - m)) / 3),
              1e-9);
}

TEST(LoadgenMetrics, ItlPoolsEveryGap) {
  // 20 30 50 | 40 | 100 100 -> sorted 20 30 40 50 100 100.
  const Distribution d = summarize(sample(), {}).itl_ms;
  EXPECT_EQ(d.n, 6u);
  EXPECT_NEAR(d.mean, 340.0 / 6, 1e-9);
  EXPECT_NEAR(d.median, 45, 1e-9);  // rank 2.5
  EXPECT_NEAR(d.p90, 100, 1e-9);    // rank 4.5 between 100 and 100
  EXPECT_NEAR(d.p99, 100, 1e-9);
  // Pooled ITL weights long requests; mean TPOT does not (the guide's distinction).
  EXPECT_NE(d.mean, summarize(sample(), {}).tpot_ms.mean);
}

TEST(LoadgenMetrics, E2el) {
  // 200 350 200 800 -> sorted 200 200 350 800.
  const Distribution d = summarize(sample(), {}).e2el_ms;
  EXPECT_EQ(d.n, 4u);
  EXPECT_NEAR(d.mean, 387.5, 1e-9);
  EXPECT_NEAR(d.median, 275, 1e-9);
  EXPECT_NEAR(d.p90, 350 + 0.7 * 450, 1e-9);
  EXPECT_NEAR(d.p99, 350 + 0.97 * 450, 1e-9);
}

TEST(LoadgenMetrics, GoodputNeedsBothSlos) {
  Slo both;
  both.ttft_ms = 300;  // inclusive: R2's 300 ms passes
  both.tpot_ms = 60;
  // R1 (100, 33) yes; R2 (300, 50) yes; R3 (200, one token) yes; R7 (500, 150) no; failed no.
  RunSummary s = summarize(sample(), both);
  EXPECT_EQ(s.good_requests, 3);
  EXPECT_NEAR(s.request_goodput, 3 / 2.0, kEps);
  EXPECT_NEAR(s.good_percent, 100.0 * 3 / 7, kEps);

  Slo ttft_only;
  ttft_only.ttft_ms = 250;  // R1, R3
  EXPECT_EQ(summarize(sample(), ttft_only).good_requests, 2);
  Slo tpot_only;
  tpot_only.tpot_ms = 40;  // R1 (33.3), R3 (no TPOT)
  EXPECT_EQ(summarize(sample(), tpot_only).good_requests, 2);
  Slo tight;
  tight.ttft_ms = 250;
  tight.tpot_ms = 40;  // R1, R3
  s = summarize(sample(), tight);
  EXPECT_EQ(s.good_requests, 2);
  EXPECT_NEAR(s.request_goodput, 1.0, kEps);

  // No SLO: no goodput.
  s = summarize(sample(), {});
  EXPECT_EQ(s.good_requests, 0);
  EXPECT_EQ(s.request_goodput, 0);
}

TEST(LoadgenMetrics, EmptyAndAllFailed) {
  RunSummary s = summarize({}, {});
  EXPECT_EQ(s.completed, 0);
  EXPECT_EQ(s.duration_s, 0);
  EXPECT_EQ(s.request_throughput, 0);
  s = summarize({failed(0, 0.5, "x"), failed(1, 0.5, "x")}, {});
  EXPECT_EQ(s.failed, 2);
  EXPECT_NEAR(s.duration_s, 1.5, kEps);
  EXPECT_EQ(s.output_throughput, 0);
  EXPECT_EQ(s.ttft_ms.n, 0u);
}

}  // namespace
}  // namespace sluice::loadgen
