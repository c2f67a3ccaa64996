// Every error the server answers, over real HTTP: OpenAI's JSON shape and the right status for
// bad JSON, wrong types, out-of-range values, context overflow, unknown model/route/method,
// auth, body and header limits, a full queue, and a model still loading.
#include <future>

#include "server_test_util.h"

namespace sluice::test {
namespace {

using server::ServerConfig;

// Checks the error shape and returns error.param (or "" when null).
std::string expect_error(const HttpResult& r, int status, const std::string& type = "") {
  EXPECT_EQ(r.status, status) << r.body;
  const json j = r.j();
  EXPECT_TRUE(j.contains("error")) << r.body;
  if (!j.contains("error")) return "";
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
  if (!type.empty()) {
    EXPECT_EQ(e["type"], type) << r.body;
  }
  return e["param"].is_string() ? e["param"].get<std::string>() : "";
}

TEST(ServerErrors, MalformedBodiesAre400) {
  SLUICE_REQUIRE_SERVER(s);
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    expect_error(http_call(s->port, "POST", path, "{not json"), 400, "invalid_request_error");
    expect_error(http_call(s->port, "POST", path, "[1, 2]"), 400);
    expect_error(http_call(s->port, "POST", path, ""), 400);
  }
  // Nesting is refused before anything recursive touches it.
  std::string deep(100000, '[');
  expect_error(http_call(s->port, "POST", "/v1/completions", "{\"prompt\": " + deep), 400);
  expect_error(
      http_call(s->port, "POST", "/v1/completions",
                "{\"x\":" + std::string(70, '[') + std::string(70, ']') + ", \"prompt\": \"a\"}"),
      400);
}

TEST(ServerErrors, WrongTypesAndOutOfRangeValuesName400Params) {
  SLUICE_REQUIRE_SERVER(s, make_config([](auto& c) { c.chat_template = kPlainTemplate; }));
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 4}};
  struct Case {
    json patch;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"temperature", "hot"}}, "temperature"},
      {{{"temperature", 2.5}}, "temperature"},
      {{{"temperature", -1}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_p", 1.5}}, "top_p"},
      {{{"top_k", -2}}, "top_k"},
      {{{"top_k", 1.5}}, "top_k"},
      {{{"min_p", 2}}, "min_p"},
      {{{"presence_penalty", 3}}, "presence_penalty"},
      {{{"frequency_penalty", -3}}, "frequency_penalty"},
      {{{"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"n", 0}}, "n"},
      {{{"n", 1000}}, "n"},
      {{{"n", true}}, "n"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"max_tokens", "5"}}, "max_tokens"},
      {{{"seed", "x"}}, "seed"},
      {{{"stop", 5}}, "stop"},
      {{{"stop", {"a", 1}}}, "stop"},
      {{{"logit_bias", {{"abc", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"99999", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"5", 500}}}}, "logit_bias"},
      {{{"logprobs", 21}}, "logprobs"},
      {{{"logprobs", true}}, "logprobs"},
      {{{"stream", "yes"}}, "stream"},
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"ignore_eos", 1}}, "ignore_eos"},
      {{{"user", 5}}, "user"},
      {{{"prompt", 5}}, "prompt"},
      {{{"prompt", json::array()}}, "prompt"},
      {{{"prompt", {1, "a"}}}, "prompt"},
      {{{"prompt", {-1}}}, "prompt"},
      {{{"prompt", {100000}}}, "prompt"},
      {{{"prompt", {json::array()}}}, "prompt"},
      {{{"prompt", nullptr}}, "prompt"},
      {{{"echo", true}}, "echo"},
  };
  for (const Case& c : cases) {
    json body = base;
    body.update(c.patch);
    EXPECT_EQ(expect_error(post(s->port, "/v1/completions", body), 400, "invalid_request_error"),
              c.param)
        << c.patch.dump();
  }
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}};
  const std::vector<Case> chat_cases = {
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", "hello"}}, "messages"},
      {{{"messages", nullptr}}, "messages"},
      {{{"messages", {{{"content", "no role"}}}}}, "messages"},
      {{{"messages", {{{"role", "user"}}}}}, "messages"},
      {{{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages"},
      {{{"messages",
         {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}}}},
       "messages"},
      {{{"logprobs", 3}}, "logprobs"},
      {{{"top_logprobs", 2}}, "top_logprobs"},  // without logprobs: true
      {{{"logprobs", true}, {"top_logprobs", 25}}, "top_logprobs"},
      {{{"max_completion_tokens", -1}}, "max_completion_tokens"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format"},
  };
  for (const Case& c : chat_cases) {
    json body = chat;
    body.update(c.patch);
    EXPECT_EQ(expect_error(post(s->port, "/v1/chat/completions", body), 400), c.param)
        << c.patch.dump();
  }
}

TEST(ServerErrors, PromptsBeyondTheContextAre400) {
  SLUICE_REQUIRE_SERVER(s);  // n_ctx 512
  std::vector<int> long_prompt(600, 300);
  HttpResult r = post(s->port, "/v1/completions", {{"prompt", long_prompt}, {"max_tokens", 1}});
  expect_error(r, 400);
  EXPECT_EQ(r.j()["error"]["code"], "context_length_exceeded");
  r = post(s->port, "/v1/completions", {{"prompt", std::vector<int>(512, 300)}});
  EXPECT_EQ(r.j()["error"]["code"], "context_length_exceeded");
  // Prompt fits, prompt + max_tokens does not.
  r = post(s->port, "/v1/completions",
           {{"prompt", std::vector<int>(500, 300)}, {"max_tokens", 20}});
  EXPECT_EQ(expect_error(r, 400), "max_tokens");
  // Without max_tokens the completion stops at the context: "length".
  r = post(s->port, "/v1/completions",
           {{"prompt", std::vector<int>(505, 300)}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.j()["usage"]["completion_tokens"], 7);
}

TEST(ServerErrors, ChatWithoutATemplateIs400) {
  SLUICE_REQUIRE_SERVER(s);  // stories260K has no chat template
  HttpResult r = post(s->port, "/v1/chat/completions",
                      {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  expect_error(r, 400);
  EXPECT_EQ(r.j()["error"]["code"], "no_chat_template");
}

TEST(ServerErrors, UnknownModelRouteAndMethod) {
  SLUICE_REQUIRE_SERVER(s);
  HttpResult r = post(s->port, "/v1/completions", {{"model", "gpt-4"}, {"prompt", "a"}});
  expect_error(r, 404);
  EXPECT_EQ(r.j()["error"]["code"], "model_not_found");
  expect_error(http_call(s->port, "GET", "/v1/models/gpt-4"), 404);
  expect_error(post(s->port, "/tokenize", {{"model", 5}, {"prompt", "a"}}), 400);
  expect_error(http_call(s->port, "GET", "/v1/nothing"), 404, "not_found_error");
  expect_error(http_call(s->port, "POST", "/nothing", "{}"), 404);
  expect_error(http_call(s->port, "POST", "/", "{}"), 405);  // / is the web app (GET)
  r = http_call(s->port, "GET", "/v1/chat/completions");
  expect_error(r, 405);
  EXPECT_EQ(r.headers.find("Allow")->second, "POST");
  expect_error(http_call(s->port, "DELETE", "/v1/completions"), 405);
  expect_error(http_call(s->port, "PUT", "/health"), 405);
  expect_error(http_call(s->port, "POST", "/v1/models", "{}"), 405);
}

TEST(ServerErrors, ApiKeyIsRequiredOnTheApiButNotOnHealthOrMetrics) {
  SLUICE_REQUIRE_SERVER(s, make_config([](auto& c) { c.api_key = "sekret-123"; }));
  const json body = {{"prompt", "Once"}, {"max_tokens", 2}};
  expect_error(post(s->port, "/v1/completions", body), 401, "authentication_error");
  expect_error(post(s->port, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401);
  expect_error(post(s->port, "/v1/completions", body, {{"Authorization", "Bearer sekret-12"}}),
               401);
  expect_error(post(s->port, "/v1/completions", body, {{"Authorization", "sekret-123"}}), 401);
  expect_error(http_call(s->port, "GET", "/v1/models"), 401);
  expect_error(post(s->port, "/tokenize", {{"prompt", "a"}}), 401);
  EXPECT_EQ(post(s->port, "/v1/completions", body, {{"Authorization", "Bearer sekret-123"}}).status,
            200);
  EXPECT_EQ(
      http_call(s->port, "GET", "/v1/models", "", {{"Authorization", "Bearer sekret-123"}}).status,
      200);
  EXPECT_EQ(http_call(s->port, "GET", "/health").status, 200);
  EXPECT_EQ(http_call(s->port, "GET", "/metrics").status, 200);
}

TEST(ServerErrors, BodyAndHeaderLimits) {
  SLUICE_REQUIRE_SERVER(s);
  // A declared body over 16 MiB is refused before it is read.
  int fd = connect_local(s->port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(
      send_all(fd,
               "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: 17000000\r\n\r\n{\"prompt\": \""));
  std::string got = recv_until(fd, "}}");
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got;
  EXPECT_NE(got.find("request_too_large"), std::string::npos) << got;
  // A real 17 MiB body through a client.
  HttpResult big = http_call(s->port, "POST", "/v1/completions", std::string(17 << 20, ' '));
  EXPECT_TRUE(big.status == 413 || big.status == -1) << big.status;  // -1: reset while sending

  // Headers over 64 KiB: 431.
  fd = connect_local(s->port);
  ASSERT_GE(fd, 0);
  std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 100; ++i)
    req += "X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'a') + "\r\n";
  send_all(fd, req + "\r\n");
  got = recv_until(fd, "}}");
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 431", 0), 0u) << got.substr(0, 200);
  // The server is fine afterwards.
  EXPECT_EQ(http_call(s->port, "GET", "/health").status, 200);
}

TEST(ServerErrors, FullQueueIs429WithRetryAfter) {
  SLUICE_REQUIRE_SHARED(path, kStoriesModel);
  // One running sequence; a queue of 4 generations.
  auto s = TestServer::start(path, make_config([](auto& c) { c.max_queue = 4; }), [] {
    EngineKnobs k;
    k.max_seqs = 1;
    return k;
  }());
  ASSERT_TRUE(s);
  // A holds the only running slot; its other choices wait their turn (500 tokens each), so the
  // queue holds >= 2 for the whole time its first two choices run.
  const int a = connect_local(s->port);
  ASSERT_GE(a, 0);
  const json a_body = {
      {"prompt", "Once"}, {"max_tokens", 500}, {"ignore_eos", true}, {"n", 4}, {"temperature", 0}};
  ASSERT_TRUE(send_all(a, http_request("POST", "/v1/completions", a_body.dump())));
  ASSERT_TRUE(
      eventually([&] { return metric(metrics_text(s->port), "sluice_server_queue_depth") == 3; }));
  HttpResult r =
      post(s->port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}, {"n", 3}});
  expect_error(r, 429, "rate_limit_error");
  EXPECT_EQ(r.j()["error"]["code"], "queue_full");
  EXPECT_EQ(r.headers.find("Retry-After")->second, "1");
  // More than the whole queue can ever hold is a client error.
  expect_error(post(s->port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}, {"n", 5}}),
               400);
  // A's client leaves: its queued choices go, and the queue takes new work again.
  ::close(a);
  EXPECT_TRUE(
      eventually([&] { return metric(metrics_text(s->port), "sluice_server_queue_depth") == 0; }));
  r = post(s->port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}, {"n", 3}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(ServerErrors, ModelEndpointsAre503UntilLoaded) {
  SLUICE_REQUIRE_SHARED(path, kStoriesModel);
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  server::ModelLoader inner = stories_loader(path);
  server::Server srv(make_config([](auto& c) { c.port = 0; }));
  // Declared after srv (destroyed before it): the loader is let go on every path, or the
  // server could not stop.
  struct Release {  // the loader must be let go on every path, or the server cannot stop
    std::promise<void>& p;
    bool done = false;
    void now() {
      if (!done) p.set_value();
      done = true;
    }
    ~Release() { now(); }
  } guard{release};
  Result<int> port = srv.start([inner, go] {
    go.wait();
    return inner();
  });
  ASSERT_TRUE(port.ok()) << port.message();
  HttpResult h = http_call(*port, "GET", "/health");
  expect_error(h, 503);
  EXPECT_EQ(h.headers.find("Retry-After")->second, "1");
  expect_error(post(*port, "/v1/completions", {{"prompt", "a"}}), 503);
  expect_error(http_call(*port, "GET", "/v1/models"), 503);
  expect_error(post(*port, "/tokenize", {{"prompt", "a"}}), 503);
  HttpResult m = http_call(*port, "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(metric(m.body, "sluice_ready"), 0);
  guard.now();
  ASSERT_TRUE(srv.wait_ready().ok());
  EXPECT_EQ(http_call(*port, "GET", "/health").status, 200);
  EXPECT_EQ(metric(metrics_text(*port), "sluice_ready"), 1);
}

TEST(ServerErrors, LoaderFailureIsReportedAndHealthStays503) {
  server::Server srv(make_config([](auto& c) { c.port = 0; }));
  Result<int> port =
      srv.start([]() -> Result<server::ServedModel> { return make_error("no such model"); });
  ASSERT_TRUE(port.ok());
  Status st = srv.wait_ready();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no such model"), std::string::npos);
  expect_error(http_call(*port, "GET", "/health"), 503);
}

TEST(ServerErrors, BadChatTemplateFailsTheLoad) {
  SLUICE_REQUIRE_SHARED(path, kStoriesModel);
  server::Server srv(make_config([](auto& c) {
    c.port = 0;
    c.chat_template = "{% for x in %}";
  }));
  ASSERT_TRUE(srv.start(stories_loader(path)).ok());
  Status st = srv.wait_ready();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("chat template"), std::string::npos) << st.message();
}

TEST(ServerErrors, BindingABusyPortFails) {
  SLUICE_REQUIRE_SERVER(s);
  server::Server other(make_config([&](auto& c) { c.port = s->port; }));
  Result<int> r = other.start([]() -> Result<server::ServedModel> { return make_error("unused"); });
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace sluice::test
