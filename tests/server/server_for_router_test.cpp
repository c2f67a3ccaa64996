// What sluice serve offers a router: model names (aliases), usage.prompt_tokens_details.
// cached_tokens, and GET /v1/cache/routes for requests tagged X-Sluice-Route-Id.
#include "router/router_test_util.h"

namespace sluice::test {
namespace {

json ids_prompt(int n, int offset) {
  json p = json::array();
  for (int i = 0; i < n; ++i) p.push_back(10 + (i * 7 + offset) % 400);
  return p;
}

TEST(ServeForRouter, ModelAliasesAreAllAcceptedAndListed) {
  SLUICE_REQUIRE_SERVER(s, make_config([](auto& c) {
                          c.served_model_names = {"first", "second"};
                        }));
  HttpResult m = http_call(s->port, "GET", "/v1/models");
  ASSERT_EQ(m.j()["data"].size(), 2u) << m.body;
  EXPECT_EQ(m.j()["data"][0]["id"], "first");
  EXPECT_EQ(m.j()["data"][1]["id"], "second");
  EXPECT_EQ(http_call(s->port, "GET", "/v1/models/second").j()["id"], "second");
  EXPECT_EQ(http_call(s->port, "GET", "/v1/models/third").status, 404);
  for (const char* name : {"first", "second"}) {
    HttpResult r =
        post(s->port, "/v1/completions", {{"model", name}, {"prompt", "Once"}, {"max_tokens", 2}});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j()["model"], "first");  // answers carry the first name
  }
  HttpResult r = post(s->port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 200) << "no model field: accepted";
  r = post(s->port, "/v1/chat/completions",
           {{"model", "third"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.j()["error"]["code"], "model_not_found");
  EXPECT_NE(r.j()["error"]["message"].get<std::string>().find("'first', 'second'"),
            std::string::npos)
      << r.body;
}

TEST(ServeForRouter, UsageReportsCachedPromptTokens) {
  SLUICE_REQUIRE_SERVER(s);
  const json prompt = ids_prompt(100, 0);
  const json body = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
  HttpResult first = post(s->port, "/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.j()["usage"]["prompt_tokens"], 100);
  EXPECT_EQ(first.j()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  HttpResult again = post(s->port, "/v1/completions", body);
  // Full blocks of 16, leaving the last token to compute: 96 of 100.
  EXPECT_EQ(again.j()["usage"]["prompt_tokens_details"]["cached_tokens"], 96) << again.body;
  json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  SseResult st = stream(s->port, "/v1/completions", streamed);
  ASSERT_FALSE(st.events.empty());
  EXPECT_EQ(st.events.back()["usage"]["prompt_tokens_details"]["cached_tokens"], 96) << st.raw;
}

TEST(ServeForRouter, CacheRoutesReportWhatIsStillCachedAfterEvictions) {
  // 24 blocks of 16 tokens: three 160-token prompts do not fit together.
  EngineKnobs knobs;
  knobs.n_blocks = 24;
  SLUICE_REQUIRE_SERVER(s, {}, knobs);
  auto tagged = [&](uint64_t id, int offset) {
    return post(s->port, "/v1/completions",
                {{"prompt", ids_prompt(160, offset)}, {"max_tokens", 1}, {"temperature", 0}},
                {{"X-Sluice-Route-Id", std::to_string(id)}});
  };
  ASSERT_EQ(tagged(7, 0).status, 200);
  HttpResult r = http_call(s->port, "GET", "/v1/cache/routes?ids=7,8");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j()["routes"].size(), 1u) << r.body;  // 8 is unknown
  EXPECT_EQ(r.j()["routes"][0]["id"], 7);
  EXPECT_EQ(r.j()["routes"][0]["prompt_tokens"], 160);
  EXPECT_EQ(r.j()["routes"][0]["cached_tokens"], 160);
  // Two other prompts take the blocks back (the cached ones are reused oldest first).
  ASSERT_EQ(tagged(9, 1).status, 200);
  ASSERT_EQ(tagged(10, 2).status, 200);
  r = http_call(s->port, "GET", "/v1/cache/routes?ids=7,9,10");
  ASSERT_EQ(r.j()["routes"].size(), 3u) << r.body;
  EXPECT_LT(r.j()["routes"][0]["cached_tokens"], 160) << r.body;
  EXPECT_EQ(r.j()["routes"][2]["cached_tokens"], 160) << r.body;
  EXPECT_EQ(http_call(s->port, "GET", "/v1/cache/routes?ids=x").status, 400);
  EXPECT_EQ(http_call(s->port, "GET", "/v1/cache/routes").j()["routes"].size(), 0u);
}

TEST(ServeForRouter, RouteLogIsBounded) {
  server::RouteLog log(3, 10);
  log.record(1, {1, 2, 3});
  log.record(2, {1, 2, 3});
  log.record(3, {1, 2, 3});
  log.record(4, {1});
  EXPECT_EQ(log.size(), 3u);  // 1 dropped (count)
  EXPECT_TRUE(log.find({1}).empty());
  log.record(5, {1, 2, 3, 4, 5, 6, 7});  // 3 + 3 + 1 + 7 > 10: 2 and 3 go
  EXPECT_EQ(log.find({2, 3, 4, 5}).size(), 2u);
}

}  // namespace
}  // namespace sluice::test
