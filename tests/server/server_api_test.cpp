// The non-generation endpoints (/health, /v1/models, /metrics, /tokenize, /detokenize), and a
// client that hangs up: its generation is aborted at the next step and its KV blocks freed.
#include "server_test_util.h"

namespace sluice::test {
namespace {

using server::ServerConfig;

TEST(ServerApi, HealthModelsAndMetrics) {
  SLUICE_REQUIRE_SERVER(s);
  HttpResult h = http_call(s->port, "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.j()["status"], "ok");

  HttpResult m = http_call(s->port, "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  const json j = m.j();
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "stories260K");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["max_model_len"], 512);
  HttpResult one = http_call(s->port, "GET", "/v1/models/stories260K");
  EXPECT_EQ(one.status, 200);
  EXPECT_EQ(one.j()["id"], "stories260K");

  ASSERT_EQ(
      post(s->port, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 8}}).status,
      200);
  post(s->port, "/v1/completions", {{"prompt", 5}});  // a 400
  // A response is counted once it has been written (httplib's logger), which can be just after
  // the client has read it: wait for both counts rather than racing them.
  HttpResult met;
  ASSERT_TRUE(eventually([&] {
    met = http_call(s->port, "GET", "/metrics");
    return metric(met.body,
                  "sluice_http_requests_total{route=\"/v1/completions\",status=\"400\"}") == 1 &&
           metric(met.body,
                  "sluice_http_requests_total{route=\"/v1/completions\",status=\"200\"}") == 1;
  })) << met.body;
  ASSERT_EQ(met.status, 200);
  EXPECT_NE(met.headers.find("Content-Type")->second.find("text/plain"), std::string::npos);
  const std::string& t = met.body;
  EXPECT_EQ(metric(t, "sluice_http_requests_total{route=\"/v1/completions\",status=\"200\"}"), 1)
      << t;
  EXPECT_EQ(metric(t, "sluice_http_requests_total{route=\"/v1/completions\",status=\"400\"}"), 1)
      << t;
  EXPECT_EQ(metric(t, "sluice_requests_finished_total{finish_reason=\"length\"}"), 1) << t;
  EXPECT_EQ(metric(t, "sluice_time_to_first_token_seconds_count"), 1) << t;
  EXPECT_EQ(metric(t, "sluice_inter_token_latency_seconds_count"), 7) << t;
  EXPECT_EQ(metric(t, "sluice_e2e_request_latency_seconds_count"), 1) << t;
  EXPECT_EQ(metric(t, "sluice_request_queue_time_seconds_count"), 1) << t;
  EXPECT_GE(metric(t, "sluice_engine_step_seconds_count"), 8) << t;
  EXPECT_EQ(metric(t, "sluice_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 1) << t;
  EXPECT_EQ(metric(t, "sluice_prompt_tokens_total"), 5) << t;
  EXPECT_EQ(metric(t, "sluice_generation_tokens_total"), 8) << t;
  EXPECT_EQ(metric(t, "sluice_num_requests_running"), 0) << t;
  EXPECT_EQ(metric(t, "sluice_num_requests_waiting"), 0) << t;
  EXPECT_EQ(metric(t, "sluice_kv_blocks_used"), 0) << t;
  EXPECT_EQ(metric(t, "sluice_kv_blocks_total"), 512) << t;
  // K and V of 5 layers x 16 tokens x 4 KV heads x 8 dims in f16: 10240 bytes a block.
  EXPECT_EQ(metric(t, "sluice_kv_bytes_total"), 512 * 10240) << t;
  EXPECT_EQ(metric(t, "sluice_kv_bytes_used"), 0) << t;
  EXPECT_GE(metric(t, "sluice_prefix_cache_hit_ratio"), 0) << t;
  EXPECT_EQ(metric(t, "sluice_ready"), 1) << t;
  EXPECT_GE(metric(t, "sluice_http_connection_threads"), 1) << t;
  for (const char* name :
       {"sluice_time_to_first_token_seconds", "sluice_inter_token_latency_seconds",
        "sluice_e2e_request_latency_seconds", "sluice_request_queue_time_seconds",
        "sluice_engine_step_seconds"}) {
    EXPECT_NE(t.find(std::string("# TYPE ") + name + " histogram"), std::string::npos) << name;
  }
}

// With the machine's roofline known, /metrics compares every forward pass with the roofline's
// time for that batch (decode steps of a tiny model are memory-bound).
TEST(ServerApi, MetricsReportForwardPassesAgainstTheRoofline) {
  SLUICE_REQUIRE_SHARED(path, kStoriesModel);
  EngineKnobs k;
  MachineRoofline roof;
  roof.cpu = "test";
  roof.threads = 1;
  roof.read_gbps_1t = roof.read_gbps = 10;
  roof.peak_gflops_f32 = 100;
  roof.peak_gops_int8 = 400;
  k.roofline = roof;
  auto s = TestServer::start(path, {}, k);
  ASSERT_TRUE(s);
  std::string t = metrics_text(s->port);
  EXPECT_EQ(metric(t, "sluice_engine_mbu"), 0) << t;
  ASSERT_EQ(
      post(s->port, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 8}}).status,
      200);
  t = metrics_text(s->port);
  EXPECT_GT(metric(t, "sluice_engine_forward_seconds_total{bound=\"memory\"}"), 0) << t;
  EXPECT_GT(metric(t, "sluice_engine_roofline_seconds_total{bound=\"memory\"}"), 0) << t;
  EXPECT_GT(metric(t, "sluice_engine_mbu"), 0) << t;
  EXPECT_GE(metric(t, "sluice_engine_mfu"), 0) << t;
  EXPECT_GT(metric(t, "sluice_engine_last_step_roofline_ratio"), 0) << t;
  // Without measurements the series are absent.
  SLUICE_REQUIRE_SERVER(plain);
  EXPECT_EQ(metrics_text(plain->port).find("sluice_engine_mbu"), std::string::npos);
}

TEST(ServerApi, TokenizeAndDetokenize) {
  SLUICE_REQUIRE_SHARED(golden_path, kStoriesGolden);
  SLUICE_REQUIRE_SERVER(s, make_config([](auto& c) { c.chat_template = kPlainTemplate; }));
  const Golden g = load_golden(golden_path);

  HttpResult r = post(s->port, "/tokenize", {{"prompt", g.prompt}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["tokens"], g.prompt_tokens);
  EXPECT_EQ(r.j()["count"], g.prompt_tokens.size());
  EXPECT_EQ(r.j()["max_model_len"], 512);
  // llama.cpp's spelling, without BOS, with pieces.
  r = post(s->port, "/tokenize",
           {{"content", g.prompt}, {"add_special", false}, {"with_pieces", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<int32_t> no_bos(g.prompt_tokens.begin() + 1, g.prompt_tokens.end());
  EXPECT_EQ(r.j()["tokens"], no_bos);
  ASSERT_EQ(r.j()["pieces"].size(), no_bos.size());
  EXPECT_EQ(r.j()["pieces"][0], " Once");
  // Chat messages through the template: "<s>" written by the template is BOS, once.
  r = post(s->port, "/tokenize", {{"messages", {{{"role", "user"}, {"content", g.prompt}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["tokens"], g.prompt_tokens);

  r = post(s->port, "/detokenize", {{"tokens", no_bos}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["prompt"], g.prompt);
  r = post(s->port, "/detokenize", {{"tokens", g.greedy_tokens}});
  EXPECT_EQ(r.j()["prompt"].get<std::string>(),
            g.greedy_text.substr(g.greedy_text[0] == ' ' ? 1 : 0));

  EXPECT_EQ(post(s->port, "/detokenize", {{"tokens", {1, 99999}}}).status, 400);
  EXPECT_EQ(post(s->port, "/detokenize", {{"tokens", "abc"}}).status, 400);
  EXPECT_EQ(post(s->port, "/detokenize", json::object()).status, 400);
  EXPECT_EQ(post(s->port, "/tokenize", json::object()).status, 400);
  EXPECT_EQ(post(s->port, "/tokenize", {{"prompt", 5}}).status, 400);
  EXPECT_EQ(post(s->port, "/tokenize", {{"messages", json::array()}}).status, 400);
}

// Reads a streamed request's first data event from a raw socket, then closes the socket.
void start_and_hang_up(int port, const json& body) {
  const int fd = connect_local(port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(
      fd,
      http_request("POST", body.contains("messages") ? "/v1/chat/completions" : "/v1/completions",
                   body.dump())));
  const std::string got = recv_until(fd, "data: ");
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  ::close(fd);
}

TEST(ServerApi, ClientHangUpAbortsAndFreesKvBlocks) {
  SLUICE_REQUIRE_SERVER(s);
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 500},
                     {"ignore_eos", true},
                     {"temperature", 0},
                     {"stream", true}};
  start_and_hang_up(s->port, body);
  // Aborted, not finished by length, and everything released.
  std::string m;
  ASSERT_TRUE(eventually([&] {
    m = metrics_text(s->port);
    return metric(m, "sluice_requests_finished_total{finish_reason=\"abort\"}") == 1 &&
           metric(m, "sluice_num_requests_running") == 0 && metric(m, "sluice_kv_blocks_used") == 0;
  })) << m;
  EXPECT_EQ(metric(m, "sluice_requests_finished_total{finish_reason=\"length\"}"), -1) << m;
  EXPECT_LT(metric(m, "sluice_generation_tokens_total"), 500) << m;

  // Also a non-streaming request with several choices.
  const int fd = connect_local(s->port);
  ASSERT_GE(fd, 0);
  json whole = body;
  whole["stream"] = false;
  whole["n"] = 3;
  ASSERT_TRUE(send_all(fd, http_request("POST", "/v1/completions", whole.dump())));
  ASSERT_TRUE(eventually([&] {
    return metric(metrics_text(s->port), "sluice_generation_tokens_total") >
           metric(m, "sluice_generation_tokens_total") + 10;
  }));
  ::close(fd);
  ASSERT_TRUE(eventually([&] {
    m = metrics_text(s->port);
    return metric(m, "sluice_requests_finished_total{finish_reason=\"abort\"}") == 4 &&
           metric(m, "sluice_num_requests_running") == 0 && metric(m, "sluice_kv_blocks_used") == 0;
  })) << m;
  // The server keeps serving.
  EXPECT_EQ(post(s->port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}}).status, 200);
}

TEST(ServerApi, HangUpTakesEffectWithinAStep) {
  SLUICE_REQUIRE_SERVER(s);
  // A request that would run for 400 steps; the client hangs up right after its first event.
  std::vector<int> prompt(100, 300);
  prompt[0] = 1;
  const int fd = connect_local(s->port);
  ASSERT_GE(fd, 0);
  json body = {{"prompt", prompt}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}};
  ASSERT_TRUE(send_all(fd, http_request("POST", "/v1/completions", body.dump())));
  std::string got = recv_until(fd, "\"finish_reason\":null}]}\n\n");
  ASSERT_NE(got.find("data: "), std::string::npos);
  ::close(fd);
  // Read after the hang-up (the engine may already have seen it): from here at most the step in
  // flight and the one whose boundary notices it may run. Reading before close() would also count
  // the steps of however long this thread waits to be scheduled on a busy machine.
  const double steps_at_close = metric(metrics_text(s->port), "sluice_engine_steps_total");
  std::string m;
  ASSERT_TRUE(eventually([&] {
    m = metrics_text(s->port);
    return metric(m, "sluice_kv_blocks_used") == 0;
  })) << m;
  EXPECT_EQ(metric(m, "sluice_requests_finished_total{finish_reason=\"abort\"}"), 1) << m;
  EXPECT_LT(metric(m, "sluice_generation_tokens_total"), 400) << m;
  EXPECT_LE(metric(m, "sluice_engine_steps_total") - steps_at_close, 2) << m;
}

}  // namespace
}  // namespace sluice::test
