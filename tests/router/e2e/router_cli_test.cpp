// `sluice router` as users run it: a process in front of two `sluice serve` replicas of
// stories260K (the other router tests use the in-process RouterServer, so the command line, its
// flags and its signal handling are tested only here).
#include <signal.h>

#include "server/server_test_util.h"

namespace sluice::test {
namespace {

constexpr const char* kKey = "router-test-key";

std::string chat_text(const HttpResult& r) {
  return r.j()["choices"][0]["message"]["content"].get<std::string>();
}

// The sum over the router's backends of one per-backend sample of its /metrics.
double sum_over_backends(const std::string& metrics, const std::string& name,
                         const std::vector<std::unique_ptr<ServeProcess>>& replicas) {
  double sum = 0;
  for (const auto& r : replicas) {
    sum += metric(metrics, name + "{backend=\"http://127.0.0.1:" + std::to_string(r->port) + "\"}");
  }
  return sum;
}

TEST(RouterCli, ProxiesWithTheKeyCountsAndStopsOnSigterm) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  const std::string chat_template =
      std::string(SLUICE_TESTS_DIR) + "/server/plain_chat_template.jinja";
  std::vector<std::unique_ptr<ServeProcess>> replicas;
  std::vector<std::string> router_args = {"--api-key", kKey,       "--health-interval",
                                          "0.2",       "--policy", "round_robin"};
  for (int i = 0; i < 2; ++i) {
    replicas.push_back(ServeProcess::start({model, "-c", "512", "-t", "1", "--kv-cache-gb", "0.01",
                                            "--chat-template", chat_template}));
    ASSERT_TRUE(replicas.back());
    router_args.push_back("--backend");
    router_args.push_back("http://127.0.0.1:" + std::to_string(replicas.back()->port));
  }
  auto router = ServeProcess::start(router_args, {.command = "router"});
  ASSERT_TRUE(router);
  const std::string log = router->drain_log();
  EXPECT_NE(log.find("round_robin over 2 backends"), std::string::npos) << log;

  // Greedy chat through the router (round robin: both replicas answer) is what a replica says.
  const json body = {{"model", "stories260K"},
                     {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                     {"max_tokens", 24},
                     {"temperature", 0}};
  const HttpResult direct = post(replicas[0]->port, "/v1/chat/completions", body);
  ASSERT_EQ(direct.status, 200) << direct.body;
  ASSERT_FALSE(chat_text(direct).empty()) << direct.body;
  const httplib::Headers with_key = {{"Authorization", std::string("Bearer ") + kKey}};
  constexpr int kThrough = 4;
  for (int i = 0; i < kThrough; ++i) {
    const HttpResult got = post(router->port, "/v1/chat/completions", body, with_key);
    ASSERT_EQ(got.status, 200) << got.body;
    EXPECT_EQ(chat_text(got), chat_text(direct)) << i;
  }

  // No key, or a wrong one: 401 from the router itself; /health and /metrics stay open.
  for (const httplib::Headers& h :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}}}) {
    const HttpResult refused = post(router->port, "/v1/chat/completions", body, h);
    ASSERT_EQ(refused.status, 401) << refused.body;
    EXPECT_EQ(refused.j()["error"]["code"], "invalid_api_key") << refused.body;
  }
  EXPECT_EQ(http_call(router->port, "GET", "/health").status, 200);

  // The router's counters: the proxied requests and nothing else (the refused ones never
  // reached a backend), split over both replicas, both healthy, none failed.
  const HttpResult m = http_call(router->port, "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(sum_over_backends(m.body, "sluice_router_requests_total", replicas), kThrough)
      << m.body;
  EXPECT_EQ(sum_over_backends(m.body, "sluice_router_backend_healthy", replicas), 2) << m.body;
  EXPECT_EQ(sum_over_backends(m.body, "sluice_router_failures_total", replicas), 0) << m.body;
  for (const auto& r : replicas) {
    EXPECT_EQ(metric(m.body, "sluice_router_requests_total{backend=\"http://127.0.0.1:" +
                                 std::to_string(r->port) + "\"}"),
              kThrough / 2)
        << m.body;
  }

  // SIGTERM: a clean stop (exit code 0) within 10 s.
  ASSERT_EQ(::kill(router->pid, SIGTERM), 0);
  EXPECT_EQ(router->wait_exit(10000), 0) << router->drain_log();
  EXPECT_NE(router->drain_log().find("sluice router: stopped"), std::string::npos) << router->log;
}

}  // namespace
}  // namespace sluice::test
