// The agent routes behind `sluice router`: Responses (stored answers and their continuations go
// to the replica that made them, streamed or not), Anthropic Messages and the other new routes
// forwarded, --api-key with Bearer or x-api-key (errors in each API's shape), and connections
// left well defined after every error the router answers itself.
#include <set>
#include <string>
#include <vector>

#include "router_test_util.h"

namespace sluice::test {
namespace {

TEST(RouterAgentRoutes, StoredResponsesStayWithTheirReplica) {
  FakeBackend a("a"), b("b");
  auto r = start_router({&a, &b});
  ASSERT_TRUE(r);
  std::vector<std::pair<std::string, std::string>> made;  // id, backend
  for (int i = 0; i < 8; ++i) {
    const bool streamed = i % 2 == 1;
    json body = {{"model", "fake-model"}, {"input", "hi " + std::to_string(i)}};
    if (streamed) body["stream"] = true;
    HttpResult res = post(r->port(), "/v1/responses", body);
    ASSERT_EQ(res.status, 200) << res.body;
    std::string id;
    if (streamed) {
      const size_t at = res.body.find("\"id\":\"resp_");
      ASSERT_NE(at, std::string::npos) << res.body;
      id = res.body.substr(at + 6, res.body.find('"', at + 6) - (at + 6));
    } else {
      id = res.j()["id"];
    }
    made.emplace_back(id, id.substr(5, 1));
  }
  std::set<std::string> backends;
  for (const auto& [id, backend] : made) backends.insert(backend);
  EXPECT_EQ(backends.size(), 2u) << "round robin should have used both replicas";
  for (const auto& [id, backend] : made) {
    SCOPED_TRACE(id);
    HttpResult got = http_call(r->port(), "GET", "/v1/responses/" + id);
    ASSERT_EQ(got.status, 200) << got.body;
    EXPECT_EQ(got.j()["backend"], backend);
    HttpResult next =
        post(r->port(), "/v1/responses",
             {{"model", "fake-model"}, {"input", "more"}, {"previous_response_id", id}});
    ASSERT_EQ(next.status, 200) << next.body;
    EXPECT_EQ(next.j()["backend"], backend);
    HttpResult del = http_call(r->port(), "DELETE", "/v1/responses/" + id);
    EXPECT_EQ(del.status, 200) << del.body;
    EXPECT_EQ(del.j()["method"], "DELETE");
  }
  HttpResult unknown = http_call(r->port(), "GET", "/v1/responses/resp_never");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.j()["error"]["code"], "response_not_found");
  HttpResult orphan =
      post(r->port(), "/v1/responses", {{"input", "x"}, {"previous_response_id", "resp_never"}});
  EXPECT_EQ(orphan.status, 404);
  EXPECT_EQ(orphan.j()["error"]["param"], "previous_response_id");
}

TEST(RouterAgentRoutes, NewRoutesAreForwarded) {
  FakeBackend a("a");
  auto r = start_router({&a});
  ASSERT_TRUE(r);
  for (const char* path :
       {"/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/v1/rerank", "/rerank"}) {
    const int before = a.calls.load();
    HttpResult res = post(r->port(), path, {{"model", "fake-model"}, {"input", "x"}});
    EXPECT_EQ(res.status, 200) << path << ": " << res.body;
    EXPECT_EQ(a.calls.load(), before + 1) << path;
  }
  // No backend serves the model: Anthropic's shape on the Messages route, OpenAI's elsewhere.
  HttpResult m = post(r->port(), "/v1/messages", {{"model", "other"}, {"max_tokens", 1}});
  EXPECT_EQ(m.status, 404);
  EXPECT_EQ(m.j()["type"], "error") << m.body;
  EXPECT_EQ(m.j()["error"]["type"], "not_found_error") << m.body;
  HttpResult c = post(r->port(), "/v1/chat/completions", {{"model", "other"}});
  EXPECT_EQ(c.status, 404);
  EXPECT_TRUE(c.j()["error"].contains("code")) << c.body;
}

TEST(RouterAgentRoutes, ApiKeyByBearerOrXApiKey) {
  FakeBackend a("a");
  auto r = start_router({&a}, router::Policy::kRoundRobin, 60,
                        [](router::RouterConfig& c) { c.api_key = "sekrit"; });
  ASSERT_TRUE(r);
  EXPECT_EQ(http_call(r->port(), "GET", "/health").status, 200);
  EXPECT_EQ(http_call(r->port(), "GET", "/metrics").status, 200);
  const json body = {{"model", "fake-model"}, {"messages", json::array()}};
  HttpResult none = post(r->port(), "/v1/chat/completions", body);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.j()["error"]["type"], "authentication_error") << none.body;
  HttpResult anthropic = post(r->port(), "/v1/messages", body, {{"x-api-key", "wrong"}});
  EXPECT_EQ(anthropic.status, 401);
  EXPECT_EQ(anthropic.j()["error"]["type"], "authentication_error") << anthropic.body;
  EXPECT_EQ(anthropic.j()["type"], "error") << anthropic.body;
  EXPECT_EQ(http_call(r->port(), "GET", "/v1/models").status, 401);
  const int before = a.calls.load();
  EXPECT_EQ(
      post(r->port(), "/v1/chat/completions", body, {{"Authorization", "Bearer sekrit"}}).status,
      200);
  EXPECT_EQ(post(r->port(), "/v1/messages", body, {{"x-api-key", "sekrit"}}).status, 200);
  EXPECT_EQ(a.calls.load(), before + 2);
}

// Key-protected backends: the router's model-list poll sends the router's key (the deployment's
// one), so GET /v1/models through the router lists their models.
TEST(RouterAgentRoutes, ModelListOfKeyProtectedBackends) {
  FakeBackend a("a");
  a.models_key = "sekrit";
  auto r = start_router({&a}, router::Policy::kRoundRobin, 60,
                        [](router::RouterConfig& c) { c.api_key = "sekrit"; });
  ASSERT_TRUE(r);
  HttpResult models =
      http_call(r->port(), "GET", "/v1/models", "", {{"Authorization", "Bearer sekrit"}});
  ASSERT_EQ(models.status, 200) << models.body;
  ASSERT_EQ(models.j()["data"].size(), 1u) << models.body;
  EXPECT_EQ(models.j()["data"][0]["id"], "fake-model");
}

TEST(RouterAgentRoutes, ConnectionsStayWellDefinedAfterTheRoutersOwnErrors) {
  FakeBackend a("a");
  auto r = start_router({&a}, router::Policy::kRoundRobin, 60,
                        [](router::RouterConfig& c) { c.api_key = "k"; });
  ASSERT_TRUE(r);
  const std::string key = "Authorization: Bearer k\r\n";
  const std::string next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  struct Case {
    std::string name, request;
    int status;
    bool closes;
  };
  for (const Case& c : std::vector<Case>{
           {"401 with a body", http_request("POST", "/v1/chat/completions", "{}"), 401, true},
           {"401 without one", "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 401, false},
           {"404 unknown route", http_request("POST", "/nope", "{}", key), 404, false},
           {"400 not JSON", http_request("POST", "/v1/chat/completions", "{nope", key), 400, false},
           {"404 unknown model",
            http_request("POST", "/v1/completions", R"({"model": "zzz"})", key), 404, false},
           {"404 unknown response",
            "GET /v1/responses/resp_x HTTP/1.1\r\nHost: x\r\n" + key + "\r\n", 404, false},
       }) {
    SCOPED_TRACE(c.name);
    const int fd = connect_local(r->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, c.request + next));
    std::string got = recv_until(fd, c.closes ? "\r\n\r\n{" : "\"ok\"", 5000);
    if (c.closes) got += recv_until(fd, "never", 500);  // the rest, up to EOF
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 " + std::to_string(c.status), 0), 0u) << got;
    const bool says_close = got.find("Connection: close") != std::string::npos;
    EXPECT_EQ(says_close, c.closes) << got;
    const size_t second = got.find("HTTP/1.1 ", 1);
    if (c.closes) {
      EXPECT_EQ(second, std::string::npos) << got;
    } else {
      ASSERT_NE(second, std::string::npos) << got;
      EXPECT_EQ(got.compare(second, 12, "HTTP/1.1 200"), 0) << got;
    }
  }
}

}  // namespace
}  // namespace sluice::test
