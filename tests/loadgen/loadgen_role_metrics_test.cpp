// Server-side latency per role (`bench serve --role-metrics ROLE=URL`): the Prometheus histogram
// parser on a real `sluice serve` /metrics text and on crafted ones, sums and deltas,
// histogram_quantile against hand arithmetic, the role grouping, the report rows, and the
// binary against a real `sluice serve` child process on stories260K.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "loadgen/report.h"
#include "loadgen/server_metrics.h"
#include "server/metrics.h"
#include "server/server_test_util.h"

namespace sluice::loadgen {
namespace {

constexpr double kInf = HUGE_VAL;

// An estimate, NaN when there is none (a failing comparison rather than a bad dereference).
double or_nan(std::optional<double> v) {
  return v.value_or(std::nan(""));
}
double quantile(const PromHistogram& h, double q) {
  return or_nan(histogram_quantile(h, q));
}

// A histogram from (le, cumulative count) pairs, the last one +Inf.
PromHistogram hist(std::vector<PromHistogram::Bucket> buckets, double sum = 0) {
  PromHistogram h;
  h.buckets = std::move(buckets);
  h.count = h.buckets.empty() ? 0 : h.buckets.back().count;
  h.sum = sum;
  return h;
}

// What a real server renders after three requests: TTFTs of 3, 3 and 30 ms (buckets (2.5, 5]
// and (25, 50] ms), and one request's 4 tokens 2 ms apart (ITL bucket (1, 2.5] ms).
std::string real_sluice_metrics() {
  server::ServerMetrics m;
  for (double ttft : {0.003, 0.003, 0.030}) {
    RequestTimes t;
    t.arrival = 10;
    t.scheduled = 10.001;
    t.first_token = 10 + ttft;
    t.finished = 10 + ttft;
    t.tokens = {t.first_token};
    m.observe_finished(t, FinishReason::kLength);
  }
  RequestTimes t;
  t.arrival = 20;
  t.first_token = 20.0003;  // 0.3 ms: the first bucket, le = 0.0005
  t.tokens = {20.0003, 20.0023, 20.0043, 20.0063};
  t.finished = 20.0063;
  m.observe_finished(t, FinishReason::kStop);
  http::ConnectionStats conn;
  return m.render(conn);
}

TEST(LoadgenRoleMetrics, ParsesARealSluiceMetricsText) {
  const std::string text = real_sluice_metrics();
  ASSERT_NE(text.find("sluice_time_to_first_token_seconds_bucket{le=\"+Inf\"} 4"),
            std::string::npos)
      << text;
  const std::optional<LatencyHistograms> h = parse_latency_histograms(text);
  ASSERT_TRUE(h.has_value()) << text;
  // 20 finite bounds (0.5 ms .. 640 s, printed with %.17g) and +Inf.
  ASSERT_EQ(h->ttft.buckets.size(), 21u);
  EXPECT_EQ(h->ttft.buckets.front().le, 0.0005);
  EXPECT_EQ(h->ttft.buckets[19].le, 640);
  EXPECT_EQ(h->ttft.buckets.back().le, kInf);
  EXPECT_EQ(h->ttft.count, 4);
  EXPECT_NEAR(h->ttft.sum, 0.003 + 0.003 + 0.030 + 0.0003, 1e-9);
  auto cum = [](const PromHistogram& x, double le) {
    for (const auto& b : x.buckets)
      if (b.le == le) return b.count;
    return -1.0;
  };
  EXPECT_EQ(cum(h->ttft, 0.0005), 1);
  EXPECT_EQ(cum(h->ttft, 0.0025), 1);
  EXPECT_EQ(cum(h->ttft, 0.005), 3);
  EXPECT_EQ(cum(h->ttft, 0.025), 3);
  EXPECT_EQ(cum(h->ttft, 0.05), 4);
  EXPECT_EQ(h->itl.count, 3);
  EXPECT_EQ(cum(h->itl, 0.001), 0);
  EXPECT_EQ(cum(h->itl, 0.0025), 3);
  EXPECT_NEAR(or_nan(h->itl.mean()), 0.002, 1e-9);
  // The other histograms of the text (e2e, queue, step) are not mixed in.
  EXPECT_EQ(parse_prometheus_histogram(text, "sluice_request_queue_time_seconds")->count, 3);
  EXPECT_FALSE(parse_prometheus_histogram(text, "sluice_time_to_first_token").has_value());

  // p50 of TTFT: rank 2 of 4 lands in (2.5, 5] ms holding observations 2..3: 2.5 + 2.5 x 1/2.
  EXPECT_NEAR(quantile(h->ttft, 0.5), 0.00375, 1e-12);
  // p99: rank 3.96 in (25, 50] ms holding the 4th: 25 + 25 x 0.96.
  EXPECT_NEAR(quantile(h->ttft, 0.99), 0.049, 1e-12);
  const HistogramSummary s = summarize_histogram(h->ttft);
  EXPECT_EQ(s.count, 4);
  EXPECT_NEAR(or_nan(s.p50_ms), 3.75, 1e-9);
  EXPECT_NEAR(or_nan(s.p99_ms), 49, 1e-9);
  EXPECT_NEAR(or_nan(s.mean_ms), 36.3 / 4, 1e-9);

  EXPECT_FALSE(parse_latency_histograms("sluice_prefix_cache_queries_total 3\n").has_value());
}

TEST(LoadgenRoleMetrics, SumsBucketsOverLabelSets) {
  const std::string text =
      "# TYPE lat histogram\n"
      "lat_bucket{backend=\"a\",le=\"0.1\"} 1\n"
      "lat_bucket{backend=\"a\",le=\"1\"} 3\n"
      "lat_bucket{backend=\"a\",le=\"+Inf\"} 4\n"
      "lat_sum{backend=\"a\"} 2.5\n"
      "lat_count{backend=\"a\"} 4\n"
      "lat_bucket{le=\"0.10\", backend=\"b,}\\\"\"} 2\n"  // le first, spaces, odd label value
      "lat_bucket{le=\"1.0\",backend=\"b,}\\\"\"} 2\n"
      "lat_bucket{le=\"+Inf\",backend=\"b,}\\\"\"} 6 1700000000000\n"
      "lat_sum{backend=\"b,}\\\"\"} 10\n"
      "lat_count{backend=\"b,}\\\"\"} 6\n"
      "lat_bucket_other{le=\"1\"} 100\n"
      "latency_bucket{le=\"1\"} 100\n";
  const std::optional<PromHistogram> h = parse_prometheus_histogram(text, "lat");
  ASSERT_TRUE(h.has_value());
  ASSERT_EQ(h->buckets.size(), 3u);
  EXPECT_EQ(h->buckets[0].le, 0.1);
  EXPECT_EQ(h->buckets[0].count, 3);
  EXPECT_EQ(h->buckets[1].le, 1);
  EXPECT_EQ(h->buckets[1].count, 5);
  EXPECT_EQ(h->buckets[2].le, kInf);
  EXPECT_EQ(h->buckets[2].count, 10);
  EXPECT_EQ(h->sum, 12.5);
  EXPECT_EQ(h->count, 10);
  EXPECT_DOUBLE_EQ(or_nan(h->mean()), 1.25);
}

TEST(LoadgenRoleMetrics, MalformedLinesAreSkipped) {
  const std::string text =
      "lat_bucket{le=\"1\"} 2\n"
      "lat_bucket 7\n"                 // no le
      "lat_bucket{backend=\"x\"} 7\n"  // no le
      "lat_bucket{le=\"fast\"} 7\n"    // le not a number
      "lat_bucket{le=\"NaN\"} 7\n"     // NaN bound
      "lat_bucket{le=\"-Inf\"} 7\n"    // -Inf bound
      "lat_bucket{le=\"2\"} NaN\n"     // NaN count
      "lat_bucket{le=\"2\"} seven\n"   // not a number
      "lat_bucket{le=\"2\" 7\n"        // unterminated labels
      "lat_bucket{le=2} 7\n"           // unquoted value
      "lat_bucket{le=\"2} 7\n"         // unterminated quote
      "lat_bucketx{le=\"2\"} 7\n"      // another metric
      "# lat_bucket{le=\"2\"} 7\n"     // a comment
      "lat_bucket{le=\"+Inf\"} 3\r\n"  // CRLF
      "lat_sum 1.5\n"
      "lat_count 3\n"
      "lat_count\n";
  const std::optional<PromHistogram> h = parse_prometheus_histogram(text, "lat");
  ASSERT_TRUE(h.has_value());
  ASSERT_EQ(h->buckets.size(), 2u);
  EXPECT_EQ(h->buckets[0].le, 1);
  EXPECT_EQ(h->buckets[0].count, 2);
  EXPECT_EQ(h->buckets[1].le, kInf);
  EXPECT_EQ(h->buckets[1].count, 3);
  EXPECT_EQ(h->count, 3);
  EXPECT_EQ(h->sum, 1.5);
  // Each of the three kinds of sample is required.
  EXPECT_FALSE(parse_prometheus_histogram("lat_sum 1\nlat_count 1\n", "lat").has_value());
  EXPECT_FALSE(
      parse_prometheus_histogram("lat_bucket{le=\"+Inf\"} 1\nlat_count 1\n", "lat").has_value());
  EXPECT_FALSE(
      parse_prometheus_histogram("lat_bucket{le=\"+Inf\"} 1\nlat_sum 1\n", "lat").has_value());
  EXPECT_FALSE(parse_prometheus_histogram("", "lat").has_value());
}

TEST(LoadgenRoleMetrics, DeltaAndSum) {
  const PromHistogram before = hist({{0.1, 1}, {1, 2}, {kInf, 3}}, 1.0);
  const PromHistogram after = hist({{0.1, 4}, {1, 8}, {kInf, 10}}, 5.5);
  const PromHistogram d = after - before;
  ASSERT_EQ(d.buckets.size(), 3u);
  EXPECT_EQ(d.buckets[0].count, 3);
  EXPECT_EQ(d.buckets[1].count, 6);
  EXPECT_EQ(d.buckets[2].count, 7);
  EXPECT_EQ(d.count, 7);
  EXPECT_EQ(d.sum, 4.5);
  EXPECT_FALSE(d.any_negative());
  EXPECT_TRUE((before - after).any_negative());

  const PromHistogram s = after + before;
  EXPECT_EQ(s.buckets[1].count, 10);
  EXPECT_EQ(s.count, 13);
  // Bounds one side lacks read the count at its next bound below, so sums stay cumulative.
  const PromHistogram other = hist({{0.5, 1}, {kInf, 2}});
  const PromHistogram u = before + other;
  ASSERT_EQ(u.buckets.size(), 4u);
  EXPECT_EQ(u.buckets[0].le, 0.1);
  EXPECT_EQ(u.buckets[0].count, 1 + 0);
  EXPECT_EQ(u.buckets[1].le, 0.5);
  EXPECT_EQ(u.buckets[1].count, 1 + 1);
  EXPECT_EQ(u.buckets[2].le, 1);
  EXPECT_EQ(u.buckets[2].count, 2 + 1);
  EXPECT_EQ(u.buckets[3].count, 3 + 2);
}

TEST(LoadgenRoleMetrics, QuantileInterpolatesWithinTheBucket) {
  // Every observation in (2.5, 5]: every quantile lies inside it.
  const PromHistogram one = hist({{0.001, 0}, {0.0025, 0}, {0.005, 10}, {0.01, 10}, {kInf, 10}});
  for (double q : {0.01, 0.25, 0.5, 0.9, 0.99, 1.0}) {
    const double v = quantile(one, q);
    EXPECT_GT(v, 0.0025) << q;
    EXPECT_LE(v, 0.005) << q;
  }
  EXPECT_NEAR(quantile(one, 0.5), 0.00375, 1e-15);
  EXPECT_NEAR(quantile(one, 1.0), 0.005, 1e-15);

  // 10 observations in each of (0, 1], (1, 2], (2, 3], (3, 4]: spread evenly.
  const PromHistogram uniform = hist({{1, 10}, {2, 20}, {3, 30}, {4, 40}, {kInf, 40}});
  EXPECT_DOUBLE_EQ(quantile(uniform, 0.5), 2);
  EXPECT_DOUBLE_EQ(quantile(uniform, 0.25), 1);
  EXPECT_DOUBLE_EQ(quantile(uniform, 0.3), 1.2);    // rank 12: 1 + 1 x 2/10
  EXPECT_DOUBLE_EQ(quantile(uniform, 0.99), 3.96);  // rank 39.6: 3 + 1 x 9.6/10
  EXPECT_DOUBLE_EQ(quantile(uniform, 0.1), 0.4);    // first bucket: from 0
  // Rank 0 at an empty first bucket: its lower edge, not 0/0.
  EXPECT_DOUBLE_EQ(quantile(one, 0), 0);
  // Unsorted buckets are sorted first.
  const PromHistogram shuffled = hist({{4, 40}, {2, 20}, {kInf, 40}, {1, 10}, {3, 30}});
  EXPECT_DOUBLE_EQ(quantile(shuffled, 0.5), 2);
  // Counts that go down (a sum over inconsistent servers) are made monotonic first.
  const PromHistogram dip = hist({{1, 5}, {2, 3}, {kInf, 6}});
  EXPECT_DOUBLE_EQ(quantile(dip, 0.5), 0.6);  // rank 3 in (0, 1] of 5
  // A first bucket at or below 0 gives its bound.
  EXPECT_DOUBLE_EQ(quantile(hist({{-1, 4}, {1, 8}, {kInf, 8}}), 0.25), -1);
}

TEST(LoadgenRoleMetrics, QuantileInTheInfBucketIsTheLastFiniteBound) {
  const PromHistogram h = hist({{1, 1}, {2, 2}, {kInf, 10}});
  EXPECT_DOUBLE_EQ(quantile(h, 0.5), 2);
  EXPECT_DOUBLE_EQ(quantile(h, 0.99), 2);
  EXPECT_DOUBLE_EQ(quantile(h, 0.1), 1);  // rank 1: the top of (0, 1]
  EXPECT_DOUBLE_EQ(quantile(h, 0.15), 1.5);
}

TEST(LoadgenRoleMetrics, QuantileNulloptWithoutObservations) {
  EXPECT_FALSE(histogram_quantile(hist({{1, 0}, {kInf, 0}}), 0.5).has_value());
  EXPECT_FALSE(histogram_quantile(PromHistogram{}, 0.5).has_value());
  EXPECT_FALSE(hist({{1, 0}, {kInf, 0}}).mean().has_value());
  const HistogramSummary s = summarize_histogram(hist({{1, 0}, {kInf, 0}}));
  EXPECT_EQ(s.count, 0);
  EXPECT_FALSE(s.p50_ms || s.p99_ms || s.mean_ms);
  // No +Inf bucket, only the +Inf bucket, q out of range, negative totals.
  EXPECT_FALSE(histogram_quantile(hist({{1, 3}, {2, 4}}), 0.5).has_value());
  EXPECT_FALSE(histogram_quantile(hist({{kInf, 4}}), 0.5).has_value());
  const PromHistogram ok = hist({{1, 3}, {kInf, 4}});
  EXPECT_TRUE(histogram_quantile(ok, 0.5).has_value());
  EXPECT_FALSE(histogram_quantile(ok, -0.1).has_value());
  EXPECT_FALSE(histogram_quantile(ok, 1.5).has_value());
  EXPECT_FALSE(histogram_quantile(ok, std::nan("")).has_value());
  EXPECT_FALSE(histogram_quantile(hist({{1, -3}, {kInf, -2}}), 0.5).has_value());
}

TEST(LoadgenRoleMetrics, GroupsRolesAndValidatesUrls) {
  const auto r = group_role_metrics({"prefill=http://h:8001", "decode=http://h:8002/metrics",
                                     "prefill=http://h:8003/", "colocated=h:8004/v1"});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].role, "prefill");
  EXPECT_EQ((*r)[0].urls,
            (std::vector<std::string>{"http://h:8001/metrics", "http://h:8003/metrics"}));
  EXPECT_EQ((*r)[1].role, "decode");
  EXPECT_EQ((*r)[1].urls, (std::vector<std::string>{"http://h:8002/metrics"}));
  EXPECT_EQ((*r)[2].urls, (std::vector<std::string>{"h:8004/metrics"}));
  EXPECT_TRUE(group_role_metrics({})->empty());

  for (const char* bad : {"http://h:8001", "=http://h:8001", "decode=", "decode"}) {
    const auto e = group_role_metrics({"prefill=http://h:1", bad});
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.message().find(std::string("--role-metrics '") + bad + "': expected ROLE=URL"),
              std::string::npos)
        << e.message();
  }
  const auto port = group_role_metrics({"decode=http://h:99999"});
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.message(),
            "--role-metrics 'decode=http://h:99999': 'http://h:99999/metrics': bad port '99999'");
  EXPECT_FALSE(group_role_metrics({"decode=ftp://h"}).ok());
}

TEST(LoadgenRoleMetrics, RoleLatencyDeltaOrNote) {
  const RoleMetricsUrls urls{"decode", {"http://h/metrics"}};
  const LatencyHistograms before{hist({{0.01, 1}, {0.1, 2}, {kInf, 2}}, 0.05),
                                 hist({{0.01, 0}, {0.1, 0}, {kInf, 0}}, 0)};
  const LatencyHistograms after{hist({{0.01, 1}, {0.1, 12}, {kInf, 12}}, 0.65),
                                hist({{0.01, 30}, {0.1, 40}, {kInf, 40}}, 0.5)};
  const RoleLatency r = role_latency(urls, before, after);
  EXPECT_EQ(r.role, "decode");
  EXPECT_EQ(r.urls, urls.urls);
  EXPECT_TRUE(r.note.empty()) << r.note;
  ASSERT_TRUE(r.ttft && r.itl);
  EXPECT_EQ(r.ttft->count, 10);
  EXPECT_NEAR(or_nan(r.ttft->p50_ms), 55, 1e-9);  // rank 5 of 10 in (10, 100] ms
  EXPECT_NEAR(or_nan(r.ttft->mean_ms), 60, 1e-9);
  EXPECT_EQ(r.itl->count, 40);
  EXPECT_NEAR(or_nan(r.itl->p50_ms), 20.0 / 30 * 10, 1e-9);
  EXPECT_NEAR(or_nan(r.itl->p99_ms), 10 + 90 * (39.6 - 30) / 10, 1e-9);

  const RoleLatency back = role_latency(urls, after, before);
  EXPECT_FALSE(back.ttft || back.itl);
  EXPECT_EQ(back.note, "the histograms went backwards during the run (a server restarted?)");
  const Result<LatencyHistograms> failed = make_error("GET http://h/metrics: HTTP 404");
  EXPECT_EQ(role_latency(urls, failed, after).note, "GET http://h/metrics: HTTP 404");
  EXPECT_EQ(role_latency(urls, before, failed).note, "GET http://h/metrics: HTTP 404");
}

TEST(LoadgenRoleMetrics, ReportsATablePerRoleAndJson) {
  RunResult a;
  a.info.url = "http://router";
  a.info.rate = 2;
  RoleLatency prefill;
  prefill.role = "prefill";
  prefill.urls = {"http://p/metrics"};
  prefill.ttft = HistogramSummary{10, 41.25, 230, 52.5};
  prefill.itl = HistogramSummary{0, std::nullopt, std::nullopt, std::nullopt};
  RoleLatency decode;
  decode.role = "decode";
  decode.urls = {"http://d1/metrics", "http://d2/metrics"};
  decode.note = "GET http://d2/metrics: Could not establish connection";
  a.roles = {prefill, decode};

  const std::string one = markdown_report({a});
  EXPECT_NE(one.find("| role | TTFT n | TTFT p50 (ms) | TTFT p99 (ms) | TTFT mean (ms) | ITL n |"),
            std::string::npos)
      << one;
  EXPECT_NE(one.find("| prefill | 10 | 41.25 | 230.00 | 52.50 | 0 | - | - | - |"),
            std::string::npos)
      << one;
  EXPECT_NE(one.find("| decode | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"),
            std::string::npos)
      << one;
  EXPECT_NE(one.find("interpolated within the histogram buckets"), std::string::npos);
  EXPECT_NE(one.find("Role decode: n/a (GET http://d2/metrics: Could not"), std::string::npos);
  // After the main table.
  EXPECT_LT(one.find("| Std E2EL (ms) |"), one.find("| role |"));

  RunResult b = a;
  b.info.rate = 4;
  b.roles = {prefill};
  const std::string two = markdown_report({a, b});
  EXPECT_NE(two.find("| rate | role | TTFT n |"), std::string::npos) << two;
  EXPECT_NE(two.find("| 4 | prefill | 10 |"), std::string::npos) << two;
  EXPECT_NE(two.find("Role decode at rate 2: n/a"), std::string::npos) << two;
  // No roles: no table.
  EXPECT_EQ(markdown_report({RunResult{}}).find("| role |"), std::string::npos);

  const nlohmann::ordered_json j = json_report({a, RunResult{}}, false);
  const auto& roles = j["runs"][0]["roles"];
  ASSERT_EQ(roles.size(), 2u);
  EXPECT_EQ(roles[0]["role"], "prefill");
  EXPECT_EQ(roles[0]["urls"][0], "http://p/metrics");
  EXPECT_EQ(roles[0]["ttft"]["count"], 10.0);
  EXPECT_EQ(roles[0]["ttft"]["count"].dump(), "10");
  EXPECT_EQ(roles[0]["ttft"]["p50_ms"], 41.25);
  EXPECT_EQ(roles[0]["ttft"]["p99_ms"], 230.0);
  EXPECT_EQ(roles[0]["ttft"]["mean_ms"], 52.5);
  EXPECT_EQ(roles[0]["itl"]["count"], 0.0);
  EXPECT_TRUE(roles[0]["itl"]["p50_ms"].is_null());
  EXPECT_FALSE(roles[0].contains("note"));
  EXPECT_EQ(roles[1]["urls"].size(), 2u);
  EXPECT_TRUE(roles[1]["ttft"].is_null());
  EXPECT_EQ(roles[1]["note"], decode.note);
  EXPECT_TRUE(j["runs"][1]["roles"].is_array());
  EXPECT_TRUE(j["runs"][1]["roles"].empty());
}

}  // namespace
}  // namespace sluice::loadgen

namespace sluice::test {
namespace {

TEST(BenchServe, RoleMetricsReportServerSideLatency) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = ServeProcess::start({model, "-c", "512", "-t", "1", "--kv-cache-gb", "0.05"});
  ASSERT_TRUE(p);
  const std::string url = "http://127.0.0.1:" + std::to_string(p->port);
  TempDir tmp;
  const std::string out = tmp.path("results.json");
  // colocated: the server once; twice: the same server given twice (no /metrics: appended), so
  // its histograms count double; missing: a 404 (at /nothing/metrics: /metrics is appended).
  const CommandResult r = run_sluice(
      "bench serve --url " + url + " --num-prompts 6 --rate inf --input-len 16 --output-len 8" +
      " --role-metrics colocated=" + url + "/metrics --role-metrics twice=" + url +
      " --role-metrics twice=" + url + "/ --role-metrics missing=" + url + "/nothing --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("| role | TTFT n |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| colocated | 6 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Role missing: n/a (GET " + url + "/nothing/metrics: HTTP 404)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("server latency of role missing n/a"), std::string::npos) << r.err;

  const json j = json::parse(read_file(out), nullptr, false);
  ASSERT_TRUE(j.is_object());
  const json& run = j["runs"][0];
  EXPECT_EQ(run["completed"], 6) << run["errors"].dump();
  const json& roles = run["roles"];
  ASSERT_EQ(roles.size(), 3u) << roles.dump();
  const json& co = roles[0];
  EXPECT_EQ(co["role"], "colocated");
  EXPECT_EQ(co["urls"], json::array({url + "/metrics"}));
  ASSERT_TRUE(co["ttft"].is_object()) << co.dump();
  // The server observes every request's TTFT and its 7 gaps before the client sees the end.
  EXPECT_EQ(co["ttft"]["count"], 6.0);
  EXPECT_EQ(co["itl"]["count"], 6.0 * 7);
  for (const char* h : {"ttft", "itl"}) {
    const json& x = co[h];
    EXPECT_GE(x["p50_ms"].get<double>(), 0) << h;
    EXPECT_LE(x["p50_ms"].get<double>(), x["p99_ms"].get<double>()) << h;
    EXPECT_GT(x["mean_ms"].get<double>(), 0) << h;
  }
  EXPECT_GT(co["ttft"]["p50_ms"].get<double>(), 0);
  // The server's TTFT (arrival at the engine to first token) is inside the client's.
  EXPECT_LE(co["ttft"]["mean_ms"].get<double>(), run["ttft_ms"]["mean"].get<double>() + 1e-6);
  EXPECT_EQ(roles[1]["role"], "twice");
  EXPECT_EQ(roles[1]["urls"].size(), 2u);
  EXPECT_EQ(roles[1]["ttft"]["count"], 12.0);
  EXPECT_EQ(roles[2]["role"], "missing");
  EXPECT_TRUE(roles[2]["ttft"].is_null());
  EXPECT_TRUE(roles[2]["itl"].is_null());
  EXPECT_EQ(roles[2]["note"], "GET " + url + "/nothing/metrics: HTTP 404");

  const CommandResult bad =
      run_sluice("bench serve --url " + url + " --num-prompts 1 --role-metrics decode");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--role-metrics 'decode': expected ROLE=URL"), std::string::npos)
      << bad.err;
}

}  // namespace
}  // namespace sluice::test
