// The router over fake backends: passthrough (whole and SSE, byte for byte, as it arrives),
// failover before the first byte (once), mid-stream failures, client disconnects, health,
// model routing, metrics, cache-state reports.
#include <poll.h>

#include "http/webui.h"
#include "router/backends.h"
#include "router/routing_key.h"
#include "router_test_util.h"

namespace sluice::test {
namespace {

using router::Policy;

const json kChat = {{"messages", {{{"role", "user"}, {"content", "hello"}}}}};

std::string backend_of(const HttpResult& r) {
  return r.j().is_object() ? r.j().value("backend", "") : "";
}

// A stream of `n` SSE events, one per `gap`; `then_fail`: the connection drops after them
// (no terminating chunk) instead of [DONE].
FakeBackend::Handler sse_handler(int n, std::chrono::milliseconds gap, bool then_fail = false) {
  return [=](const httplib::Request&, httplib::Response& res) {
    res.set_header("X-Backend-Header", "kept");
    auto i = std::make_shared<int>(0);
    res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
      if (*i < n) {
        std::this_thread::sleep_for(gap);
        const std::string ev =
            "data: {\"i\":" + std::to_string((*i)++) + ",\"t\":\"\\u00e9 \"}\n\n";
        sink.write(ev.data(), ev.size());
        return true;
      }
      if (then_fail) return false;
      const std::string usage =
          "data: {\"usage\":{\"prompt_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":8}}}"
          "\n\ndata: [DONE]\n\n";
      sink.write(usage.data(), usage.size());
      sink.done();
      return true;
    });
  };
}

TEST(RouterProxy, WholeAnswersPassThroughByteForByte) {
  // Declared before the backend, whose threads read it until the backend is destroyed.
  const std::string body = "{ \"odd\" :  [1,2 ,3], \"text\": \"caf\\u00e9 \xe2\x82\xac\" }\n";
  FakeBackend a("a");
  a.set_generate([&](const httplib::Request& req, httplib::Response& res) {
    res.status = 201;
    res.set_header("X-Backend-Header", req.get_header_value("Authorization"));
    res.set_content(body, "application/x-test");
  });
  auto r = start_router({&a});
  ASSERT_TRUE(r);
  HttpResult got = http_call(r->port(), "POST", "/v1/completions", R"({"prompt":"hi"})",
                             {{"Authorization", "Bearer k"}});
  EXPECT_EQ(got.status, 201);
  EXPECT_EQ(got.body, body);
  EXPECT_EQ(std::string(httplib::detail::get_header_value(got.headers, "Content-Type", 0, "")),
            "application/x-test");
  EXPECT_EQ(std::string(httplib::detail::get_header_value(got.headers, "X-Backend-Header", 0, "")),
            "Bearer k");
  // The backend got the client's body unchanged and the router's route tag.
  std::lock_guard<std::mutex> lock(a.mu);
  ASSERT_EQ(a.bodies.size(), 1u);
  EXPECT_EQ(a.bodies[0], R"({"prompt":"hi"})");
}

TEST(RouterProxy, ExpectContinueIsAnsweredByTheRouterNotForwarded) {
  FakeBackend a("a");
  auto r = start_router({&a});
  ASSERT_TRUE(r);
  const int fd = connect_local(r->port());
  ASSERT_TRUE(send_all(fd, http_request("POST", "/v1/completions", R"({"prompt":"x"})",
                                        "Expect: 100-continue\r\n")));
  const std::string got = recv_until(fd, "\"backend\":\"a\"", 5000);
  ::close(fd);
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
  EXPECT_NE(got.find("\"backend\":\"a\""), std::string::npos) << got;
}

TEST(RouterProxy, SseStreamsPassThroughByteForByteAsEventsArrive) {
  // The backend sends its second event only after the client saw the first one through the
  // router: a router that buffered the stream would never deliver it. (Declared before the
  // backend, whose threads use them until it is destroyed.)
  std::mutex mu;
  std::condition_variable cv;
  bool client_saw_first = false;
  FakeBackend a("a");
  a.set_generate([&](const httplib::Request&, httplib::Response& res) {
    auto i = std::make_shared<int>(0);
    res.set_chunked_content_provider("text/event-stream", [&, i](size_t, httplib::DataSink& sink) {
      if (*i == 1) {
        std::unique_lock<std::mutex> lock(mu);
        if (!cv.wait_for(lock, std::chrono::seconds(5), [&] { return client_saw_first; })) {
          return false;
        }
      }
      if (*i == 2) {
        const std::string end = "data: [DONE]\n\n";
        sink.write(end.data(), end.size());
        sink.done();
        return true;
      }
      const std::string ev = "data: {\"n\": " + std::to_string((*i)++) + "}\n\n";
      sink.write(ev.data(), ev.size());
      return true;
    });
  });
  auto r = start_router({&a});
  ASSERT_TRUE(r);
  const int fd = connect_local(r->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(
      fd, http_request("POST", "/v1/chat/completions", R"({"stream":true,"messages":[]})")));
  std::string got = recv_until(fd, "data: {\"n\": 0}\n\n", 5000);
  ASSERT_NE(got.find("data: {\"n\": 0}\n\n"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Type: text/event-stream"), std::string::npos) << got;
  {
    std::lock_guard<std::mutex> lock(mu);
    client_saw_first = true;
  }
  cv.notify_all();
  got += recv_until(fd, "data: [DONE]", 5000);
  ::close(fd);
  // De-chunked, the body is exactly what the backend wrote.
  const size_t body_at = got.find("\r\n\r\n") + 4;
  std::string body, chunked = got.substr(body_at);
  while (!chunked.empty()) {
    const size_t nl = chunked.find("\r\n");
    const size_t n = std::stoul(chunked.substr(0, nl), nullptr, 16);
    if (n == 0) break;
    body += chunked.substr(nl + 2, n);
    chunked = chunked.substr(nl + 2 + n + 2);
  }
  EXPECT_EQ(body, "data: {\"n\": 0}\n\ndata: {\"n\": 1}\n\ndata: [DONE]\n\n");
}

TEST(RouterProxy, BackendFailingBeforeTheFirstByteIsRetriedOnceElsewhere) {
  FakeBackend a("a"), b("b");
  a.set_generate([](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_content(R"({"error":{"message":"loading"}})", "application/json");
  });
  auto r = start_router({&a, &b});  // round robin: a first
  ASSERT_TRUE(r);
  HttpResult got = post(r->port(), "/v1/chat/completions", kChat);
  EXPECT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(backend_of(got), "b");
  EXPECT_EQ(a.calls, 1);
  const std::string m = metrics_text(r->port());
  EXPECT_EQ(metric(m, "sluice_router_failures_total{backend=\"" + a.url() + "\"}"), 1);
  EXPECT_EQ(metric(m, "sluice_router_retries_total{backend=\"" + b.url() + "\"}"), 1);
  // A 5xx alone does not take a backend out (a connection failure does).
  EXPECT_TRUE(r->backends().healthy(0));
}

TEST(RouterProxy, UnreachableBackendIsTakenOutAndTheRequestRetried) {
  FakeBackend a("a"), b("b");
  auto r = start_router({&a, &b});
  ASSERT_TRUE(r);
  a.stop();  // connections to a are refused from now on
  for (int i = 0; i < 4; ++i) {
    HttpResult got = post(r->port(), "/v1/completions", {{"prompt", "x"}});
    EXPECT_EQ(got.status, 200) << got.body;
    EXPECT_EQ(backend_of(got), "b");
  }
  EXPECT_FALSE(r->backends().healthy(0));
  const std::string m = metrics_text(r->port());
  EXPECT_EQ(metric(m, "sluice_router_backend_healthy{backend=\"" + a.url() + "\"}"), 0);
  EXPECT_EQ(metric(m, "sluice_router_failures_total{backend=\"" + a.url() + "\"}"), 1);
}

TEST(RouterProxy, RetriesOnlyOnceThenAnswersWithTheLastError) {
  FakeBackend a("a"), b("b"), c("c");
  for (FakeBackend* f : {&a, &b, &c}) {
    f->set_generate([f](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content(R"({"error":{"message":"boom from )" + f->name + R"("}})",
                      "application/json");
    });
  }
  auto r = start_router({&a, &b, &c});
  ASSERT_TRUE(r);
  HttpResult got = post(r->port(), "/v1/chat/completions", kChat);
  EXPECT_EQ(got.status, 500);
  EXPECT_NE(got.body.find("boom from b"), std::string::npos) << got.body;
  EXPECT_EQ(a.calls + b.calls + c.calls, 2);
  // Nothing reachable at all: a 502 in OpenAI's shape.
  a.stop();
  b.stop();
  c.stop();
  got = post(r->port(), "/v1/chat/completions", kChat);
  EXPECT_EQ(got.status, 502) << got.body;
  EXPECT_EQ(got.j()["error"]["code"], "backend_unavailable");
  EXPECT_NE(got.j()["error"]["message"].get<std::string>().find("cannot connect"),
            std::string::npos);
  // The poller takes the last one out too: 503 at once.
  r->poll_now();
  got = post(r->port(), "/v1/chat/completions", kChat);
  EXPECT_EQ(got.status, 503) << got.body;
  EXPECT_EQ(http_call(r->port(), "GET", "/health").status, 503);
}

TEST(RouterProxy, ClientErrorsPassThroughWithoutRetry) {
  FakeBackend a("a"), b("b");
  for (FakeBackend* f : {&a, &b}) {
    f->set_generate([](const httplib::Request&, httplib::Response& res) {
      res.status = 400;
      res.set_content(R"({"error":{"message":"bad temperature","param":"temperature"}})",
                      "application/json");
    });
  }
  auto r = start_router({&a, &b});
  ASSERT_TRUE(r);
  HttpResult got = post(r->port(), "/v1/completions", {{"prompt", "x"}, {"temperature", 9}});
  EXPECT_EQ(got.status, 400);
  EXPECT_EQ(got.j()["error"]["param"], "temperature");
  EXPECT_EQ(a.calls + b.calls, 1);
  // The router's own 400 for a body that is not JSON.
  got = http_call(r->port(), "POST", "/v1/completions", "{not json");
  EXPECT_EQ(got.status, 400);
  EXPECT_TRUE(got.j()["error"].is_object());
}

TEST(RouterProxy, StreamBrokenMidwayEndsWithAnErrorEvent) {
  FakeBackend a("a");
  a.set_generate(sse_handler(2, std::chrono::milliseconds(1), /*then_fail=*/true));
  auto r = start_router({&a});
  ASSERT_TRUE(r);
  SseResult s =
      stream(r->port(), "/v1/chat/completions", {{"stream", true}, {"messages", json::array()}});
  EXPECT_EQ(s.status, 200);
  ASSERT_EQ(s.events.size(), 3u) << s.raw;
  EXPECT_EQ(s.events[0]["i"], 0);
  EXPECT_EQ(s.events[1]["i"], 1);
  EXPECT_EQ(s.events[2]["error"]["code"], "backend_error") << s.raw;
  EXPECT_TRUE(s.done);
  EXPECT_EQ(metric(metrics_text(r->port()),
                   "sluice_router_stream_errors_total{backend=\"" + a.url() + "\"}"),
            1);
}

TEST(RouterProxy, WholeAnswerBrokenMidwayIsA502) {
  FakeBackend a("a");
  a.set_generate([](const httplib::Request&, httplib::Response& res) {
    res.set_content_provider(1000, "application/json", [](size_t, size_t, httplib::DataSink& sink) {
      sink.write("{\"partial\":", 11);
      return false;
    });
  });
  auto r = start_router({&a});
  ASSERT_TRUE(r);
  HttpResult got = post(r->port(), "/v1/completions", {{"prompt", "x"}});
  EXPECT_EQ(got.status, 502) << got.body;
  EXPECT_EQ(got.j()["error"]["code"], "backend_error");
}

// A backend answer that waits for its client to hang up; says whether it saw that.
FakeBackend::Handler wait_for_hangup(std::atomic<bool>& saw, bool stream) {
  return [&saw, stream](const httplib::Request&, httplib::Response& res) {
    const int fd = http::current_connection_socket();
    auto wait = [&saw, fd] {
      pollfd p{fd, POLLRDHUP, 0};
      if (::poll(&p, 1, 5000) > 0) saw = true;
    };
    if (!stream) {
      wait();
      res.set_content("{}", "application/json");
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [wait](size_t, httplib::DataSink& sink) {
      sink.write("data: {}\n\n", 10);
      wait();
      return false;
    });
  };
}

TEST(RouterProxy, ClientHangUpClosesTheBackendConnection) {
  for (const bool streaming : {true, false}) {
    FakeBackend a("a");
    std::atomic<bool> saw{false};
    a.set_generate(wait_for_hangup(saw, streaming));
    auto r = start_router({&a});
    ASSERT_TRUE(r);
    const int fd = connect_local(r->port());
    ASSERT_TRUE(send_all(fd, http_request("POST", "/v1/completions",
                                          json{{"prompt", "x"}, {"stream", streaming}}.dump())));
    if (streaming) {
      EXPECT_NE(recv_until(fd, "data: {}", 5000).find("data: {}"), std::string::npos);
    } else {
      EXPECT_TRUE(eventually([&] { return a.calls == 1; }));
    }
    ::close(fd);
    EXPECT_TRUE(eventually([&] { return saw.load(); }, std::chrono::milliseconds(3000)))
        << (streaming ? "streaming" : "whole");
    EXPECT_TRUE(eventually([&] {
      return metric(metrics_text(r->port()), "sluice_router_client_disconnects_total") == 1;
    }));
  }
}

TEST(RouterProxy, HealthChecksTakeBackendsOutAndPutThemBack) {
  FakeBackend a("a"), b("b");
  auto r = start_router({&a, &b});
  ASSERT_TRUE(r);
  a.health_status = 503;
  r->poll_now();
  EXPECT_FALSE(r->backends().healthy(0));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(backend_of(post(r->port(), "/v1/completions", {{"prompt", "x"}})), "b");
  a.health_status = 200;
  r->poll_now();
  EXPECT_TRUE(r->backends().healthy(0));
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i)
    seen.insert(backend_of(post(r->port(), "/v1/completions", {{"prompt", "x"}})));
  EXPECT_EQ(seen, (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(
      metric(metrics_text(r->port()), "sluice_router_takeouts_total{backend=\"" + a.url() + "\"}"),
      1);
}

TEST(RouterProxy, ABackendThatHangsCostsOnlyItsOwnPoll) {
  FakeBackend a("a"), b("b"), c("c");
  auto r = start_router({&a, &b, &c}, Policy::kRoundRobin, 60, [](router::RouterConfig& cfg) {
    cfg.backends_options.poll_timeout_ms = 300;
  });
  ASSERT_TRUE(r);
  a.health_delay_ms = 1000;  // accepts, then says nothing for longer than the poll timeout
  b.health_status = 503;
  const auto t0 = std::chrono::steady_clock::now();
  r->poll_now();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 0.9);
  EXPECT_FALSE(r->backends().healthy(0));
  EXPECT_FALSE(r->backends().healthy(1));
  EXPECT_TRUE(r->backends().healthy(2));
  a.health_delay_ms = 0;
}

TEST(RouterProxy, TheBackgroundPollerNoticesOnItsOwn) {
  FakeBackend a("a"), b("b");
  auto r = start_router({&a, &b}, Policy::kRoundRobin, /*interval_s=*/0.05);
  ASSERT_TRUE(r);
  a.health_status = 500;
  EXPECT_TRUE(eventually([&] { return !r->backends().healthy(0); }));
  a.health_status = 200;
  EXPECT_TRUE(eventually([&] { return r->backends().healthy(0); }));
  // Load reports are read from /metrics.
  b.running = 3;
  b.waiting = 2;
  EXPECT_TRUE(eventually([&] {
    const std::string m = metrics_text(r->port());
    return metric(m, "sluice_router_backend_running{backend=\"" + b.url() + "\"}") == 3 &&
           metric(m, "sluice_router_backend_waiting{backend=\"" + b.url() + "\"}") == 2;
  }));
}

TEST(RouterProxy, RequestsGoOnlyToBackendsServingTheirModel) {
  FakeBackend a("a", {"alpha"}), b("b", {"beta", "shared"}), c("c", {"shared"});
  auto r = start_router({&a, &b, &c});
  ASSERT_TRUE(r);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(backend_of(post(r->port(), "/v1/completions", {{"prompt", "x"}, {"model", "beta"}})),
              "b");
    EXPECT_EQ(backend_of(post(r->port(), "/v1/completions", {{"prompt", "x"}, {"model", "alpha"}})),
              "a");
  }
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i)
    seen.insert(
        backend_of(post(r->port(), "/v1/completions", {{"prompt", "x"}, {"model", "shared"}})));
  EXPECT_EQ(seen, (std::set<std::string>{"b", "c"}));
  HttpResult got =
      post(r->port(), "/v1/chat/completions", {{"model", "gamma"}, {"messages", json::array()}});
  EXPECT_EQ(got.status, 404);
  EXPECT_EQ(got.j()["error"]["code"], "model_not_found");
  EXPECT_EQ(got.j()["error"]["param"], "model");
  EXPECT_NE(got.j()["error"]["message"].get<std::string>().find("'alpha'"), std::string::npos);
  // /tokenize follows the model too.
  EXPECT_EQ(backend_of(post(r->port(), "/tokenize", {{"prompt", "x"}, {"model", "alpha"}})), "a");
  // The union of the models, each once.
  got = http_call(r->port(), "GET", "/v1/models");
  std::vector<std::string> ids;
  for (const json& m : got.j()["data"]) ids.push_back(m["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"alpha", "beta", "shared"}));
  EXPECT_EQ(http_call(r->port(), "GET", "/v1/models/beta").j()["id"], "beta");
  got = http_call(r->port(), "GET", "/v1/models/gamma");
  EXPECT_EQ(got.status, 404);
  EXPECT_EQ(got.j()["error"]["code"], "model_not_found");
  // The only backend with a model is down: 503, not 404.
  a.health_status = 503;
  r->poll_now();
  got = post(r->port(), "/v1/completions", {{"prompt", "x"}, {"model", "alpha"}});
  EXPECT_EQ(got.status, 503) << got.body;
  EXPECT_EQ(http_call(r->port(), "GET", "/v1/models/alpha").status, 404);
}

TEST(RouterProxy, MetricsCountRoutedRequestsAndReportedHits) {
  FakeBackend a("a");
  auto r = start_router({&a}, Policy::kCacheAware);
  ASSERT_TRUE(r);
  const std::string key(400, 'p');
  post(r->port(), "/v1/completions", {{"prompt", key}});
  post(r->port(), "/v1/completions", {{"prompt", key}});
  a.set_generate(sse_handler(1, std::chrono::milliseconds(0)));
  SseResult s = stream(r->port(), "/v1/completions", {{"prompt", key}, {"stream", true}});
  EXPECT_TRUE(s.done);
  // The client has the stream's last event before the router's handler returns and books the
  // request: wait for it to leave the in-flight count (observable), not for a time.
  const std::string l = "{backend=\"" + a.url() + "\"}";
  std::string m = metrics_text(r->port());
  for (int i = 0; i < 500 && metric(m, "sluice_router_in_flight" + l) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = metrics_text(r->port());
  }
  EXPECT_EQ(metric(m, "sluice_router_requests_total" + l), 3);
  EXPECT_EQ(metric(m, "sluice_router_key_tokens_total" + l), 300);
  EXPECT_EQ(metric(m, "sluice_router_predicted_hit_tokens_total" + l), 200);  // 2nd and 3rd
  EXPECT_EQ(metric(m, "sluice_router_affinity_requests_total" + l), 2);
  EXPECT_EQ(metric(m, "sluice_router_reported_prompt_tokens_total" + l), 10 + 10 + 12);
  EXPECT_EQ(metric(m, "sluice_router_reported_hit_tokens_total" + l), 4 + 4 + 8);
  EXPECT_EQ(metric(m, "sluice_router_in_flight" + l), 0);
  EXPECT_EQ(metric(m, "sluice_router_tree_bytes" + l), 400);
}

TEST(RouterProxy, CacheAwareKeepsEachConversationOnOneBackend) {
  FakeBackend a("a"), b("b"), c("c");
  auto r = start_router({&a, &b, &c}, Policy::kCacheAware);
  ASSERT_TRUE(r);
  std::vector<json> convos(6, json::array());
  std::vector<std::string> home(6);
  for (int turn = 0; turn < 4; ++turn) {
    for (size_t i = 0; i < convos.size(); ++i) {
      // A long first turn of its own (a document to discuss), short turns after it.
      const std::string first = turn == 0 ? std::string(300, char('a' + i)) : "";
      convos[i].push_back({{"role", "user"},
                           {"content", first + "conversation " + std::to_string(i) + " turn " +
                                           std::to_string(turn)}});
      const std::string got =
          backend_of(post(r->port(), "/v1/chat/completions", {{"messages", convos[i]}}));
      if (turn == 0) home[i] = got;
      EXPECT_EQ(got, home[i]) << "conversation " << i << " turn " << turn;
      convos[i].push_back({{"role", "assistant"}, {"content", "reply " + std::to_string(turn)}});
    }
  }
  EXPECT_EQ(std::set<std::string>(home.begin(), home.end()).size(), 3u);  // spread by load ties
}

TEST(RouterProxy, EvictionReportsTrimThePredictedTree) {
  FakeBackend a("a");
  a.cache_routes = true;
  auto r = start_router({&a}, Policy::kCacheAware);
  ASSERT_TRUE(r);
  const std::string key(1000, 'q');
  post(r->port(), "/v1/completions", {{"prompt", key}});
  {
    std::lock_guard<std::mutex> lock(a.mu);
    ASSERT_EQ(a.route_ids.size(), 1u);
  }
  EXPECT_EQ(r->backends().tree_chars(0), 1000u);
  r->poll_now();  // all 100 prompt tokens cached: nothing to trim
  EXPECT_EQ(r->backends().tree_chars(0), 1000u);
  a.cached_tokens = 25;  // evictions: a quarter is left
  r->poll_now();
  EXPECT_EQ(r->backends().tree_chars(0), 250u);
  a.cached_tokens = 0;
  r->poll_now();
  EXPECT_EQ(r->backends().tree_chars(0), 0u);
  EXPECT_EQ(metric(metrics_text(r->port()),
                   "sluice_router_trimmed_routes_total{backend=\"" + a.url() + "\"}"),
            2);
  // A backend without the endpoint is no longer tagged.
  FakeBackend b("b");
  auto r2 = start_router({&b}, Policy::kCacheAware);
  post(r2->port(), "/v1/completions", {{"prompt", key}});
  r2->poll_now();
  post(r2->port(), "/v1/completions", {{"prompt", key}});
  std::lock_guard<std::mutex> lock(b.mu);
  EXPECT_EQ(b.route_ids.size(), 1u);
}

TEST(RouterKeys, DescribeRequestReadsModelStreamAndKey) {
  router::RequestInfo i = router::describe_request(
      json{{"model", "m"},
           {"stream", true},
           {"messages",
            {{{"role", "system"}, {"content", "be brief"}},
             {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}}}}},
      true);
  EXPECT_EQ(i.model, "m");
  EXPECT_TRUE(i.stream);
  EXPECT_EQ(i.key, "system: be brief\nuser: hi\n");
  i = router::describe_request(json{{"prompt", "once upon"}}, false);
  EXPECT_EQ(i.key, "once upon");
  EXPECT_EQ(i.model, "");
  EXPECT_FALSE(i.stream);
  i = router::describe_request(json{{"prompt", {"first", "second"}}}, false);
  EXPECT_EQ(i.key, "first");
  i = router::describe_request(json{{"prompt", {1, 258}}}, false);
  EXPECT_EQ(i.key, std::string("\x01\x00\x00\x00\x02\x01\x00\x00", 8));
  i = router::describe_request(json{{"prompt", {{1}, {2}}}}, false);
  EXPECT_EQ(i.key, std::string("\x01\x00\x00\x00", 4));
}

TEST(RouterKeys, LoadMetricsParseSluiceAndVllmNames) {
  EXPECT_EQ(router::parse_load_metrics("# HELP x\nsluice_num_requests_running 3\n"
                                       "sluice_num_requests_waiting 1\n"),
            (std::pair<int64_t, int64_t>{3, 1}));
  EXPECT_EQ(router::parse_load_metrics("vllm:num_requests_running{model_name=\"m\"} 2.0\n"
                                       "vllm:num_requests_waiting{model_name=\"m\"} 0.0\n"),
            (std::pair<int64_t, int64_t>{2, 0}));
  EXPECT_EQ(router::parse_load_metrics("other 1\n"), (std::pair<int64_t, int64_t>{-1, -1}));
}

TEST(RouterUrls, BackendUrlsParseOrSayWhy) {
  Result<router::Endpoint> e = router::parse_backend_url("http://127.0.0.1:8080/");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 8080);
  EXPECT_EQ(e->url, "http://127.0.0.1:8080");
  EXPECT_EQ(router::parse_backend_url("localhost:9000")->port, 9000);
  EXPECT_FALSE(router::parse_backend_url("https://x:1").ok());
  EXPECT_FALSE(router::parse_backend_url("http://x:99999").ok());
  EXPECT_FALSE(router::parse_backend_url("http://x:1/v1").ok());
  router::RouterConfig c;
  c.port = 0;
  c.backends = {"http://x:0"};
  router::RouterServer r(c);
  Result<int> p = r.start();
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("port"), std::string::npos);
}

// The web app (http/webui.h) is the router's own, not a backend's: served open with --api-key
// (it asks for the key), 404 with --no-webui.
TEST(RouterProxy, ServesTheWebAppItselfOpenWithAKeyAndNotWithNoWebui) {
  FakeBackend a("a");
  auto r = start_router({&a}, router::Policy::kRoundRobin, 60,
                        [](router::RouterConfig& c) { c.api_key = "k"; });
  ASSERT_TRUE(r);
  for (const char* path : {"/", "/webui/app.js"}) {
    const HttpResult got = http_call(r->port(), "GET", path);
    EXPECT_EQ(got.status, 200) << path;
    EXPECT_EQ(got.body, http::find_web_asset(path)->body) << path;
    EXPECT_EQ(std::string(httplib::detail::get_header_value(got.headers, "Content-Type", 0, "")),
              http::find_web_asset(path)->content_type);
  }
  EXPECT_EQ(http_call(r->port(), "GET", "/webui/nothing.js").status, 404);
  EXPECT_EQ(http_call(r->port(), "GET", "/v1/models").status, 401);
  {
    std::lock_guard<std::mutex> lock(a.mu);
    EXPECT_TRUE(a.bodies.empty());
  }
  auto off = start_router({&a}, router::Policy::kRoundRobin, 60,
                          [](router::RouterConfig& c) { c.webui = false; });
  ASSERT_TRUE(off);
  EXPECT_EQ(http_call(off->port(), "GET", "/").status, 404);
  EXPECT_EQ(http_call(off->port(), "GET", "/webui/app.js").status, 404);
  EXPECT_EQ(http_call(off->port(), "GET", "/health").status, 200);
}

}  // namespace
}  // namespace sluice::test
