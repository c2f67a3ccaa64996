// End to end: `sluice serve` replicas of stories260K as child processes behind the router.
// The router gives the same greedy text as one server; a replica killed during a load run
// loses no request silently (each one completes or ends with an error).
#include <signal.h>

#include <future>

#include "router/router_test_util.h"

namespace sluice::test {
namespace {

std::unique_ptr<router::RouterServer> router_over(
    const std::vector<std::unique_ptr<ServeProcess>>& replicas, router::Policy policy) {
  router::RouterConfig c;
  for (const auto& r : replicas)
    c.backends.push_back("http://127.0.0.1:" + std::to_string(r->port));
  c.port = 0;
  c.policy.policy = policy;
  c.health_interval_s = 0.2;
  auto r = std::make_unique<router::RouterServer>(c);
  Result<int> port = r->start();
  EXPECT_TRUE(port.ok()) << port.message();
  return port.ok() ? std::move(r) : nullptr;
}

const std::vector<std::string> kPrompts = {"Once upon a time",   "Lily and Ben",
                                           "The little dog",     "One day",
                                           "Tom had a red ball", "The sun was"};

TEST(RouterEndToEnd, ReplicasBehindTheRouterGiveTheSameGreedyTextAsOneServer) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  std::vector<std::unique_ptr<ServeProcess>> replicas;
  for (int i = 0; i < 3; ++i) {
    replicas.push_back(
        ServeProcess::start({model, "-c", "512", "-t", "1", "--kv-cache-gb", "0.01"}));
    ASSERT_TRUE(replicas.back());
  }
  auto r = router_over(replicas, router::Policy::kCacheAware);
  ASSERT_TRUE(r);
  const int one = replicas[0]->port;
  // The model is listed under its file stem, by each replica and by the router.
  HttpResult models = http_call(r->port(), "GET", "/v1/models");
  ASSERT_EQ(models.j()["data"].size(), 1u) << models.body;
  EXPECT_EQ(models.j()["data"][0]["id"], "stories260K");
  for (int round = 0; round < 2; ++round) {
    for (const std::string& p : kPrompts) {
      const json body = {
          {"model", "stories260K"}, {"prompt", p}, {"max_tokens", 24}, {"temperature", 0}};
      HttpResult want = post(one, "/v1/completions", body);
      HttpResult got = post(r->port(), "/v1/completions", body);
      ASSERT_EQ(got.status, 200) << got.body;
      EXPECT_EQ(got.j()["choices"][0]["text"], want.j()["choices"][0]["text"]) << p;
      // Streamed through the router: the same text as streamed from one server.
      SseResult s_want =
          stream(one, "/v1/completions",
                 {{"prompt", p}, {"max_tokens", 16}, {"temperature", 0}, {"stream", true}});
      SseResult s_got =
          stream(r->port(), "/v1/completions",
                 {{"prompt", p}, {"max_tokens", 16}, {"temperature", 0}, {"stream", true}});
      EXPECT_TRUE(s_got.done);
      EXPECT_EQ(streamed_text(s_got), streamed_text(s_want)) << p;
    }
  }
  // Unknown model: 404 from the router itself.
  HttpResult bad = post(r->port(), "/v1/completions", {{"model", "nope"}, {"prompt", "x"}});
  EXPECT_EQ(bad.status, 404);
  EXPECT_EQ(bad.j()["error"]["code"], "model_not_found");
  // The second round found its prompts cached where the first one left them: the router
  // predicted hits; the replicas reported none (prompts this short have no full 16-token block).
  auto hits = [&] {
    const std::string m = metrics_text(r->port());
    double predicted = 0, reported = 0;
    for (const auto& rep : replicas) {
      const std::string l = "{backend=\"http://127.0.0.1:" + std::to_string(rep->port) + "\"}";
      predicted += metric(m, "sluice_router_predicted_hit_tokens_total" + l);
      reported += metric(m, "sluice_router_reported_hit_tokens_total" + l);
    }
    return std::make_pair(predicted, reported);
  };
  const auto [predicted, reported] = hits();
  EXPECT_GT(predicted, 0);
  EXPECT_EQ(reported, 0);
  // A prompt of several blocks, twice: the second time its replica reports the cached blocks,
  // and the router counts them.
  std::string long_prompt;
  for (int i = 0; i < 12; ++i) long_prompt += "Once upon a time there was a little dog. ";
  const json body = {{"model", "stories260K"}, {"prompt", long_prompt}, {"max_tokens", 2}};
  ASSERT_EQ(post(r->port(), "/v1/completions", body).status, 200);
  HttpResult again = post(r->port(), "/v1/completions", body);
  ASSERT_EQ(again.status, 200) << again.body;
  const int64_t cached = again.j()["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GE(cached, 16) << again.body;
  EXPECT_EQ(hits().second, double(cached));
}

// Growing conversations (token-id prompts, each turn extending the last by 48 tokens) over two
// replicas: cache_aware keeps each on one replica, which then computes only the new tokens of a
// turn; round robin alternates every conversation between the two, so each turn also recomputes
// the turn before it (about twice the prompt tokens computed).
TEST(RouterEndToEnd, CacheAwareFindsMorePrefixHitsThanRoundRobin) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  double hit_rate[2] = {0, 0}, computed[2] = {0, 0};
  for (const router::Policy policy : {router::Policy::kCacheAware, router::Policy::kRoundRobin}) {
    std::vector<std::unique_ptr<ServeProcess>> replicas;
    for (int i = 0; i < 2; ++i) {
      replicas.push_back(
          ServeProcess::start({model, "-c", "512", "-t", "1", "--kv-cache-gb", "0.01"}));
      ASSERT_TRUE(replicas.back());
    }
    auto r = router_over(replicas, policy);
    ASSERT_TRUE(r);
    std::vector<json> convos(3, json::array());
    for (int turn = 0; turn < 5; ++turn) {
      for (size_t c = 0; c < convos.size(); ++c) {
        for (int i = 0; i < 48; ++i) convos[c].push_back(10 + (int(c) * 97 + turn * 31 + i) % 400);
        HttpResult got = post(r->port(), "/v1/completions",
                              {{"prompt", convos[c]}, {"max_tokens", 1}, {"temperature", 0}});
        ASSERT_EQ(got.status, 200) << got.body;
      }
    }
    const std::string m = metrics_text(r->port());
    double prompt = 0, hit = 0;
    for (const auto& rep : replicas) {
      const std::string l = "{backend=\"http://127.0.0.1:" + std::to_string(rep->port) + "\"}";
      prompt += metric(m, "sluice_router_reported_prompt_tokens_total" + l);
      hit += metric(m, "sluice_router_reported_hit_tokens_total" + l);
    }
    const int k = policy == router::Policy::kCacheAware ? 0 : 1;
    hit_rate[k] = hit / prompt;
    computed[k] = prompt - hit;
  }
  std::printf(
      "[ prefix hits ] cache_aware %.2f (%.0f prompt tokens computed), round_robin %.2f "
      "(%.0f)\n",
      hit_rate[0], computed[0], hit_rate[1], computed[1]);
  EXPECT_GT(hit_rate[0], hit_rate[1]);
  EXPECT_GE(computed[1], 1.5 * computed[0]);
}

// One client's streamed request: how it ended.
struct Outcome {
  int status = -1;
  bool done = false;
  bool finished = false;  // a choice had a finish_reason
  bool error = false;     // an error event or an error status
  std::string raw;
};

Outcome streamed_request(int port, const std::string& prompt) {
  Outcome o;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  const json body = {{"prompt", prompt},
                     {"max_tokens", 48},
                     {"ignore_eos", true},
                     {"temperature", 0},
                     {"stream", true}};
  httplib::Result r = cli.Post("/v1/completions", body.dump(), "application/json");
  if (!r) {
    o.error = true;  // the client sees the failure (connection error)
    o.raw = httplib::to_string(r.error());
    return o;
  }
  o.status = r->status;
  o.raw = r->body;
  if (r->status != 200) {
    o.error = true;
    return o;
  }
  const SseResult s = parse_sse(r->body);
  o.done = s.done;
  o.finished = !streamed_finish(s).empty();
  for (const json& e : s.events)
    if (e.contains("error")) o.error = true;
  return o;
}

TEST(RouterEndToEnd, AKilledReplicaLosesNoRequestSilently) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  std::vector<std::unique_ptr<ServeProcess>> replicas;
  for (int i = 0; i < 2; ++i) {
    replicas.push_back(
        ServeProcess::start({model, "-c", "512", "-t", "1", "--kv-cache-gb", "0.01"}));
    ASSERT_TRUE(replicas.back());
  }
  auto r = router_over(replicas, router::Policy::kLeastLoad);
  ASSERT_TRUE(r);
  constexpr int kClients = 6, kEach = 5;
  std::atomic<int> completed{0};
  std::vector<std::future<std::vector<Outcome>>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&, c] {
      std::vector<Outcome> out;
      for (int i = 0; i < kEach; ++i) {
        out.push_back(streamed_request(r->port(), kPrompts[size_t(c + i) % kPrompts.size()]));
        ++completed;
      }
      return out;
    }));
  }
  // Kill replica 1 while requests stream from it.
  const std::string in_flight_1 =
      "sluice_router_in_flight{backend=\"http://127.0.0.1:" + std::to_string(replicas[1]->port) +
      "\"}";
  ASSERT_TRUE(
      eventually([&] { return completed >= 4 && metric(metrics_text(r->port()), in_flight_1) > 0; },
                 std::chrono::milliseconds(30000)));
  ::kill(replicas[1]->pid, SIGKILL);
  int ok = 0, failed = 0;
  for (auto& f : clients) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    for (const Outcome& o : f.get()) {
      // Never silent: a 200 stream either finishes with [DONE] after a finish_reason, or carries
      // an error event; anything else is an error status the client sees.
      if (o.status == 200 && !o.error) {
        EXPECT_TRUE(o.done && o.finished) << o.raw.substr(0, 400);
        ++ok;
      } else {
        EXPECT_TRUE(o.error) << o.raw.substr(0, 400);
        if (o.status == 200) {
          EXPECT_TRUE(o.done) << o.raw.substr(0, 400);
        }
        ++failed;
      }
    }
  }
  std::printf("[ kill ] %d requests completed, %d ended with an error the client saw\n", ok,
              failed);
  EXPECT_EQ(ok + failed, kClients * kEach);
  EXPECT_GE(ok, kClients * kEach - kClients) << "at most the requests in flight there fail";
  EXPECT_FALSE(r->backends().healthy(1));
  // After the kill everything goes to the survivor.
  for (const std::string& p : kPrompts) {
    const Outcome o = streamed_request(r->port(), p);
    EXPECT_TRUE(o.status == 200 && o.done && o.finished && !o.error) << o.raw.substr(0, 400);
  }
}

}  // namespace
}  // namespace sluice::test
