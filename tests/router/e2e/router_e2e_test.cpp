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
  int status = -1;           // -1: no HTTP answer at all (the connection failed)
  bool done = false;         // saw data: [DONE]
  bool finished = false;     // a choice had a finish_reason
  bool error_event = false;  // a 200 stream carried an error event
  bool error_body = false;   // an error status whose body is an OpenAI error object
  std::string raw;
  bool ok() const { return status == 200 && !error_event; }
};

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A client's current stream as the test sees it while it runs.
struct StreamProgress {
  std::atomic<bool> mid_stream{false};    // bytes of the answer arrived, its end did not yet
  std::atomic<int64_t> last_bytes_ms{0};  // steady_ms() of the latest bytes
};

Outcome streamed_request(int port, const std::string& prompt, StreamProgress& progress) {
  Outcome o;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  const json body = {{"prompt", prompt},
                     {"max_tokens", 48},
                     {"ignore_eos", true},
                     {"temperature", 0},
                     {"stream", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    o.raw.append(data, n);
    progress.last_bytes_ms = steady_ms();
    progress.mid_stream = true;
    return true;
  };
  httplib::Result r = cli.send(req);
  progress.mid_stream = false;
  if (!r) {
    o.raw += httplib::to_string(r.error());
    return o;
  }
  o.status = r->status;
  if (r->status != 200) {
    const json e = json::parse(o.raw, nullptr, false);
    o.error_body = e.is_object() && e.contains("error") && e["error"].contains("message");
    return o;
  }
  const SseResult s = parse_sse(o.raw);
  o.done = s.done;
  o.finished = !streamed_finish(s).empty();
  for (const json& e : s.events)
    if (e.contains("error")) o.error_event = true;
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
  std::vector<StreamProgress> progress(kClients);
  std::vector<std::future<std::vector<Outcome>>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&, c] {
      std::vector<Outcome> out;
      for (int i = 0; i < kEach; ++i) {
        out.push_back(streamed_request(r->port(), kPrompts[size_t(c + i) % kPrompts.size()],
                                       progress[size_t(c)]));
        ++completed;
      }
      return out;
    }));
  }
  // Kill replica 1 while a client is in the middle of a stream from it. Frozen first
  // (SIGSTOP), replica 1 sends nothing more while replica 0's streams go on and end: a client
  // whose stream stopped moving for 300 ms is one replica 1 was serving. Without one, thaw it
  // and try again.
  const pid_t pid_1 = replicas[1]->pid;
  const auto stalled_mid_stream = [&] {
    for (const StreamProgress& p : progress)
      if (p.mid_stream && steady_ms() - p.last_bytes_ms > 300) return true;
    return false;
  };
  bool caught = false;
  for (int attempt = 0; attempt < 20 && !caught && completed < kClients * kEach; ++attempt) {
    ASSERT_TRUE(eventually([&] { return completed >= 4; }, std::chrono::milliseconds(30000)));
    ::kill(pid_1, SIGSTOP);
    caught = eventually(stalled_mid_stream, std::chrono::milliseconds(1000));
    if (!caught) ::kill(pid_1, SIGCONT);
  }
  ::kill(pid_1, SIGKILL);
  ASSERT_TRUE(caught) << "no stream from replica 1 was caught in the middle";
  int ok = 0, failed = 0, broken_streams = 0;
  for (auto& f : clients) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    for (const Outcome& o : f.get()) {
      const std::string head = o.raw.substr(0, 400);
      if (o.ok()) {
        // A clean stream: a finish_reason, then [DONE].
        EXPECT_TRUE(o.done && o.finished) << head;
        ++ok;
        continue;
      }
      ++failed;
      // Every failure is one the client can read: an error status with an error object, or a
      // 200 stream whose error event is followed by [DONE]. A dropped connection is silent.
      EXPECT_NE(o.status, -1) << "the router dropped the connection: " << head;
      if (o.status == 200) {
        EXPECT_TRUE(o.done) << "an error event, then [DONE]: " << head;
        ++broken_streams;
      } else if (o.status != -1) {
        EXPECT_GE(o.status, 500) << head;
        EXPECT_TRUE(o.error_body) << head;
      }
    }
  }
  std::printf("[ kill ] %d requests completed, %d ended with an error the client saw\n", ok,
              failed);
  // The stream caught in the middle fails; the others (retried before their first byte, or on
  // replica 0) complete.
  EXPECT_GE(failed, 1) << "the stream caught in the middle of replica 1 did not fail";
  EXPECT_GE(ok, kClients * kEach - kClients) << "at most the requests in flight there fail";
  // The router counted each stream it broke off, and only those.
  const std::string m = metrics_text(r->port());
  double stream_errors = 0;
  for (const auto& rep : replicas) {
    stream_errors += metric(m, "sluice_router_stream_errors_total{backend=\"http://127.0.0.1:" +
                                   std::to_string(rep->port) + "\"}");
  }
  EXPECT_EQ(stream_errors, broken_streams) << m;
  // The health poll takes the dead replica out; then everything goes to the survivor.
  EXPECT_TRUE(eventually([&] { return !r->backends().healthy(1); }));
  for (const std::string& p : kPrompts) {
    StreamProgress unwatched;
    const Outcome o = streamed_request(r->port(), p, unwatched);
    EXPECT_TRUE(o.ok() && o.done && o.finished) << o.raw.substr(0, 400);
  }
}

}  // namespace
}  // namespace sluice::test
