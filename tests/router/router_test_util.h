// Helpers of the router tests: fake OpenAI backends in-process (sluice's own HTTP transport on
// ephemeral ports, with scriptable answers) and a router in front of them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/http_transport.h"
#include "router/proxy.h"
#include "server/server_test_util.h"

namespace sluice::test {

// A backend that answers like an OpenAI server: /health, /metrics, /v1/models and the two
// generation routes, whose answer `generate` decides (default: a small JSON naming the backend).
struct FakeBackend {
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  explicit FakeBackend(std::string name_, std::vector<std::string> models_ = {"fake-model"})
      : name(std::move(name_)), models(std::move(models_)), http(http::HttpLimits{}) {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(health_delay_ms.load()));
      res.status = health_status.load();
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content("# TYPE sluice_num_requests_running gauge\nsluice_num_requests_running " +
                          std::to_string(running.load()) + "\nsluice_num_requests_waiting " +
                          std::to_string(waiting.load()) + "\n",
                      "text/plain");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!models_key.empty() && req.get_header_value("Authorization") != "Bearer " + models_key) {
        res.status = 401;
        return;
      }
      json data = json::array();
      for (const std::string& m : models) data.push_back({{"id", m}, {"object", "model"}});
      res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    });
    http.Get("/v1/cache/routes", [this](const httplib::Request& req, httplib::Response& res) {
      if (!cache_routes) {
        res.status = 404;
        return;
      }
      json routes = json::array();
      std::lock_guard<std::mutex> lock(mu);
      for (const std::string& id : split(req.get_param_value("ids"))) {
        for (const std::string& seen : route_ids) {
          if (seen == id)
            routes.push_back({{"id", std::stoull(id)},
                              {"prompt_tokens", 100},
                              {"cached_tokens", cached_tokens.load()}});
        }
      }
      res.set_content(json{{"routes", routes}}.dump(), "application/json");
    });
    auto gen = [this](const httplib::Request& req, httplib::Response& res) {
      ++calls;
      Handler handler;
      {
        std::lock_guard<std::mutex> lock(mu);
        bodies.push_back(req.body);
        const std::string id = req.get_header_value("X-Sluice-Route-Id");
        if (!id.empty()) route_ids.push_back(id);
        handler = generate;
      }
      if (handler) return handler(req, res);
      res.set_content(json{{"backend", name},
                           {"usage",
                            {{"prompt_tokens", 10},
                             {"completion_tokens", 1},
                             {"prompt_tokens_details", {{"cached_tokens", 4}}}}}}
                          .dump(),
                      "application/json");
    };
    http.Post("/v1/chat/completions", gen);
    http.Post("/v1/completions", gen);
    http.Post("/tokenize", gen);
    for (const char* path :
         {"/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/v1/rerank", "/rerank"})
      http.Post(path, gen);
    // Responses: ids name this backend; stored ones answer GET/DELETE and previous_response_id.
    http.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
      ++calls;
      const json body = json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu);
      bodies.push_back(req.body);
      if (body.contains("previous_response_id") &&
          std::find(responses.begin(), responses.end(), body["previous_response_id"]) ==
              responses.end()) {
        res.status = 404;
        res.set_content(R"({"error": {"message": "unknown previous response"}})",
                        "application/json");
        return;
      }
      const std::string id = "resp_" + name + "_" + std::to_string(responses.size());
      responses.push_back(id);
      const json answer = {{"id", id}, {"object", "response"}, {"backend", name}};
      if (body.value("stream", false)) {
        res.set_content("event: response.created\ndata: " +
                            json{{"type", "response.created"}, {"response", answer}}.dump() +
                            "\n\nevent: response.completed\ndata: {}\n\n",
                        "text/event-stream");
      } else {
        res.set_content(answer.dump(), "application/json");
      }
    });
    auto stored = [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu);
      const std::string id = req.matches[1];
      if (std::find(responses.begin(), responses.end(), id) == responses.end()) {
        res.status = 404;
        res.set_content(R"({"error": {"message": "no such response"}})", "application/json");
        return;
      }
      res.set_content(json{{"id", id}, {"backend", name}, {"method", req.method}}.dump(),
                      "application/json");
    };
    http.Get(R"(/v1/responses/(.+))", stored);
    http.Delete(R"(/v1/responses/(.+))", stored);
    Result<int> p = http.bind_port("127.0.0.1", 0);
    EXPECT_TRUE(p.ok()) << p.message();
    port = p.ok() ? *p : 0;
    thread = std::thread([this] { http.serve(); });
    for (int i = 0; i < 2000 && !http.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeBackend() { stop(); }
  void stop() {
    if (!thread.joinable()) return;
    http.stop();
    thread.join();
  }
  // Sets the generation answer (under the lock the connection threads read it with).
  void set_generate(Handler h) {
    std::lock_guard<std::mutex> lock(mu);
    generate = std::move(h);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

  static std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at <= s.size() && !s.empty()) {
      const size_t comma = std::min(s.find(',', at), s.size());
      out.push_back(s.substr(at, comma - at));
      at = comma + 1;
    }
    return out;
  }

  std::string name;
  std::vector<std::string> models;
  std::string models_key;  // non-empty: GET /v1/models needs "Authorization: Bearer KEY"
  http::HttpServer http;
  std::thread thread;
  int port = 0;
  Handler generate;  // guarded by mu: use set_generate()
  std::atomic<int> calls{0};
  std::atomic<int> health_status{200};
  std::atomic<int> health_delay_ms{0};
  std::atomic<int> running{0}, waiting{0};
  std::atomic<bool> cache_routes{false};
  std::atomic<int> cached_tokens{100};
  std::mutex mu;
  std::vector<std::string> bodies;
  std::vector<std::string> route_ids;
  std::vector<std::string> responses;  // ids this backend created
};

// A router over `backends` on an ephemeral port; the health thread polls every `interval_s`.
inline std::unique_ptr<router::RouterServer> start_router(
    const std::vector<FakeBackend*>& backends, router::Policy policy = router::Policy::kRoundRobin,
    double interval_s = 60, std::function<void(router::RouterConfig&)> tweak = nullptr) {
  router::RouterConfig c;
  for (FakeBackend* b : backends) c.backends.push_back(b->url());
  c.port = 0;
  c.policy.policy = policy;
  c.health_interval_s = interval_s;
  c.backends_options.poll_timeout_ms = 1000;
  if (tweak) tweak(c);
  auto r = std::make_unique<router::RouterServer>(c);
  Result<int> port = r->start();
  EXPECT_TRUE(port.ok()) << port.message();
  return port.ok() ? std::move(r) : nullptr;
}

}  // namespace sluice::test
