// The servers' prefix-cache counters: the Prometheus text parser on crafted expositions, sums
// over replicas and before/after deltas, scraping fake /metrics endpoints over HTTP, and the
// hit-rate rows of the reports.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

#include "loadgen/report.h"
#include "loadgen/server_metrics.h"

namespace sluice::loadgen {
namespace {

// What `sluice serve` writes (src/server/metrics.cpp), with other metrics around it.
std::string sluice_metrics(int queries, int hits, int hit_tokens, int prompt, int computed) {
  return "# HELP sluice_prefix_cache_queries_total Full prompt blocks looked up.\n"
         "# TYPE sluice_prefix_cache_queries_total counter\n"
         "sluice_prefix_cache_queries_total " +
         std::to_string(queries) +
         "\n"
         "sluice_prefix_cache_hits_total " +
         std::to_string(hits) +
         "\n"
         "sluice_prefix_cache_hit_tokens_total " +
         std::to_string(hit_tokens) +
         "\n"
         "sluice_prefix_cache_hit_ratio 0.5\n"
         "sluice_prompt_tokens_total " +
         std::to_string(prompt) +
         "\n"
         "sluice_prompt_tokens_computed_total " +
         std::to_string(computed) +
         "\n"
         "sluice_request_latency_seconds_bucket{le=\"0.1\"} 3\n";
}

TEST(LoadgenServerMetrics, PrometheusSumMatchesExactNamesAndSumsLabels) {
  const std::string text =
      "# HELP x_total help text x_total 99\n"
      "x_total 1\n"
      "x_total_more 100\n"
      "x_total{backend=\"a\"} 2.5\n"
      "x_total{backend=\"b}\\\"c\"} 4 1700000000000\n"
      "x_total{broken=\"\n"
      "x_total notanumber\n"
      "x_totalx 7\r\n"
      "y 3\r\n";
  EXPECT_DOUBLE_EQ(*prometheus_sum(text, "x_total"), 7.5);
  EXPECT_DOUBLE_EQ(*prometheus_sum(text, "y"), 3);
  EXPECT_FALSE(prometheus_sum(text, "z").has_value());
  EXPECT_FALSE(prometheus_sum("", "x_total").has_value());
}

TEST(LoadgenServerMetrics, CountersSumsAndDeltas) {
  const auto a = parse_server_counters(sluice_metrics(10, 4, 64, 200, 136));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->queried_blocks, 10);
  EXPECT_EQ(a->hit_blocks, 4);
  EXPECT_EQ(a->hit_tokens, 64);
  EXPECT_EQ(a->prompt_tokens, 200);  // not sluice_prompt_tokens_computed_total
  EXPECT_EQ(a->prompt_tokens_computed, 136);
  EXPECT_DOUBLE_EQ(*a->block_hit_rate(), 0.4);
  EXPECT_DOUBLE_EQ(*a->token_hit_rate(), 0.32);
  const auto b = parse_server_counters(sluice_metrics(30, 6, 96, 300, 204));
  const ServerCounters sum = *a + *b;
  EXPECT_EQ(sum.queried_blocks, 40);
  EXPECT_EQ(sum.hit_tokens, 160);
  const ServerCounters d = *b - *a;
  EXPECT_EQ(d.queried_blocks, 20);
  EXPECT_EQ(d.hit_blocks, 2);
  EXPECT_DOUBLE_EQ(*d.block_hit_rate(), 0.1);
  EXPECT_FALSE(d.any_negative());
  EXPECT_TRUE((*a - *b).any_negative());  // a restart between the scrapes
  EXPECT_FALSE(ServerCounters{}.block_hit_rate().has_value());
  EXPECT_FALSE(ServerCounters{}.token_hit_rate().has_value());
  // A server without them (llama-server's names).
  EXPECT_FALSE(parse_server_counters("llamacpp:prompt_tokens_total 5\n").has_value());
  // No --spec: the speculative counters are 0 and their rates unknown.
  EXPECT_EQ(a->spec_draft_tokens, 0);
  EXPECT_FALSE(a->spec_acceptance().has_value());
  EXPECT_FALSE(a->spec_tokens_per_step().has_value());
}

// `serve --spec`'s counters (src/server/metrics.cpp), differenced over a run like the others.
TEST(LoadgenServerMetrics, SpeculativeCountersGiveAcceptanceAndTokensPerStep) {
  auto spec = [](int steps, int drafted, int accepted, int emitted) {
    return "sluice_spec_verify_steps_total " + std::to_string(steps) +
           "\nsluice_spec_draft_tokens_total " + std::to_string(drafted) +
           "\nsluice_spec_accepted_tokens_total " + std::to_string(accepted) +
           "\nsluice_spec_emitted_tokens_total " + std::to_string(emitted) +
           "\nsluice_spec_acceptance_ratio 0.9\n";
  };
  const auto before = parse_server_counters(sluice_metrics(1, 0, 0, 10, 10) + spec(5, 20, 4, 9));
  const auto after = parse_server_counters(sluice_metrics(2, 0, 0, 20, 20) + spec(25, 100, 64, 89));
  ASSERT_TRUE(before && after);
  const ServerCounters d = *after - *before;
  EXPECT_EQ(d.spec_verify_steps, 20);
  EXPECT_EQ(d.spec_draft_tokens, 80);
  EXPECT_EQ(d.spec_accepted_tokens, 60);
  EXPECT_DOUBLE_EQ(*d.spec_acceptance(), 0.75);
  EXPECT_DOUBLE_EQ(*d.spec_tokens_per_step(), 4.0);  // 80 emitted / 20 steps
  EXPECT_EQ((*after + *before).spec_emitted_tokens, 98);
  EXPECT_FALSE(d.any_negative());
  // Only the speculative counters reset (prefix counters equal): still a restart.
  const auto reset = parse_server_counters(sluice_metrics(2, 0, 0, 20, 20) + spec(0, 0, 0, 0));
  EXPECT_TRUE((*reset - *after).any_negative());

  RunResult r;
  r.info.url = "http://h";
  r.counters = d;
  const std::string md = markdown_report({r});
  EXPECT_NE(md.find("| Spec draft acceptance (%) | 75.0 (60 / 80) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| Spec tokens per verify step | 4.00 |"), std::string::npos) << md;
  const nlohmann::ordered_json j = json_report({r}, false);
  EXPECT_DOUBLE_EQ(j["runs"][0]["spec"]["acceptance"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["runs"][0]["spec"]["tokens_per_step"].get<double>(), 4.0);
  // Without drafts the rows are left out.
  r.counters = *before - *before;
  EXPECT_EQ(markdown_report({r}).find("Spec draft"), std::string::npos);
}

TEST(LoadgenServerMetrics, DefaultMetricsUrl) {
  EXPECT_EQ(default_metrics_url("http://h:8080"), "http://h:8080/metrics");
  EXPECT_EQ(default_metrics_url("http://h:8080/"), "http://h:8080/metrics");
  EXPECT_EQ(default_metrics_url("http://h:8080/v1"), "http://h:8080/metrics");
  EXPECT_EQ(default_metrics_url("http://h:8080/metrics"), "http://h:8080/metrics");
  EXPECT_EQ(default_metrics_url("http://h/api"), "http://h/api/metrics");
}

// Two fake replicas on one port: /a/metrics and /b/metrics with sluice counters, /c/metrics
// without them.
class FakeMetrics {
 public:
  FakeMetrics() {
    svr_.Get(R"(/(\w)/metrics)", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string who = req.matches[1];
      if (who == "a")
        res.set_content(sluice_metrics(10 * calls_a_++, 1, 16, 100, 84), "text/plain");
      if (who == "b") res.set_content(sluice_metrics(4, 2, 32, 50, 18), "text/plain");
      if (who == "c") res.set_content("vllm:num_requests_running 0\n", "text/plain");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~FakeMetrics() {
    svr_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  httplib::Server svr_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> calls_a_{1};  // each scrape is served on a connection thread of its own
};

TEST(LoadgenServerMetrics, ScrapesAndSumsReplicas) {
  FakeMetrics f;
  auto first = scrape_server_counters({f.url("/a/metrics"), f.url("/b/metrics")});
  ASSERT_TRUE(first.ok()) << first.message();
  EXPECT_EQ(first->queried_blocks, 10 + 4);
  EXPECT_EQ(first->hit_tokens, 16 + 32);
  EXPECT_EQ(first->prompt_tokens, 150);
  auto second = scrape_server_counters({f.url("/a/metrics"), f.url("/b/metrics")});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second - *first).queried_blocks, 10);  // replica a served more

  auto missing = scrape_server_counters({f.url("/a/metrics"), f.url("/c/metrics")});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find(f.url("/c/metrics") + " has no sluice_prefix_cache_"),
            std::string::npos)
      << missing.message();
  auto not_found = scrape_server_counters({f.url("/x/y")});
  ASSERT_FALSE(not_found.ok());
  EXPECT_NE(not_found.message().find("HTTP 404"), std::string::npos) << not_found.message();
}

TEST(LoadgenServerMetrics, ReportsShowTheHitRateOrNa) {
  RunResult hit;
  hit.info.url = "http://h";
  hit.info.rate = 2;
  hit.info.dataset_arrivals = true;
  hit.counters = ServerCounters{40, 10, 160, 800, 640};
  RunResult none = hit;
  none.info.rate = 4;
  none.counters.reset();
  none.counters_note = "http://h/metrics has no sluice_prefix_cache_* counters";

  const std::string one = markdown_report({hit});
  EXPECT_NE(one.find("| Prefix cache hit rate, blocks (%) | 25.0 (10 / 40) |"), std::string::npos)
      << one;
  EXPECT_NE(one.find("| Prefix cache hit rate, tokens (%) | 20.0 (160 / 800) |"), std::string::npos)
      << one;
  EXPECT_NE(one.find("| Request rate (req/s) | dataset times, 2 conv/s |"), std::string::npos)
      << one;
  // TTFT and the hit rate in one table.
  EXPECT_NE(one.find("| Median TTFT (ms) |"), std::string::npos);

  const std::string two = markdown_report({hit, none});
  EXPECT_NE(two.find("| Prefix cache hit rate, blocks (%) | 25.0 (10 / 40) | n/a |"),
            std::string::npos)
      << two;
  EXPECT_NE(two.find("Prefix cache at rate 4: n/a (http://h/metrics has no"), std::string::npos)
      << two;

  const nlohmann::ordered_json j = json_report({hit, none}, false);
  const auto& pc = j["runs"][0]["prefix_cache"];
  EXPECT_EQ(pc["queried_blocks"], 40.0);
  EXPECT_EQ(pc["hit_tokens"], 160.0);
  EXPECT_DOUBLE_EQ(pc["block_hit_rate"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(pc["token_hit_rate"].get<double>(), 0.2);
  EXPECT_EQ(j["runs"][0]["arrivals"], "dataset");
  EXPECT_TRUE(j["runs"][1]["prefix_cache"].is_null());
  EXPECT_EQ(j["runs"][1]["prefix_cache_note"], none.counters_note);
}

}  // namespace
}  // namespace sluice::loadgen
