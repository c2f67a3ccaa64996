// The server and its engine bridge over the deterministic fake executor (tests/support): no
// model file, microseconds per step, so the bridge's failure paths and the engine's memory
// pressure can be driven on purpose. What a real model adds (goldens) is in the other suites.
#include <thread>

#include "server_test_util.h"
#include "support/fake_executor.h"

namespace sluice::test {
namespace {

constexpr int32_t kVocab = 64;

struct FakeServed {
  Tokenizer tokenizer;
  FakeExecutor executor;
  std::unique_ptr<Engine> engine;
};

struct FakeKnobs {
  int32_t n_blocks = 256;
  int32_t block_size = 16;
  int32_t max_seqs = 64;
  SpecMode spec = SpecMode::kNone;
  int32_t fail_when_batch_has = 0;  // FakeExecutor::fail_when_batch_has
  std::chrono::microseconds step_delay{0};
};

struct FakeServer {
  std::unique_ptr<server::Server> server;
  int port = 0;
};

std::unique_ptr<FakeServer> start_fake(const FakeKnobs& k) {
  auto loader = [k]() -> Result<server::ServedModel> {
    auto s = std::make_shared<FakeServed>(FakeServed{
        fake_tokenizer(kVocab), FakeExecutor(k.n_blocks, k.block_size, kVocab, 512), nullptr});
    s->executor.fail_when_batch_has(k.fail_when_batch_has);
    s->executor.set_step_delay(k.step_delay);
    EngineConfig ec;
    ec.n_ctx = 512;
    ec.scheduler.max_seqs = k.max_seqs;
    ec.spec.mode = k.spec;
    ec.spec.n_draft_max = 4;
    SLUICE_ASSIGN_OR_RETURN(s->engine, Engine::create(s->tokenizer, s->executor, ec));
    server::ServedModel m;
    m.engine = s->engine.get();
    m.tokenizer = &s->tokenizer;
    m.n_vocab = kVocab;
    m.name = "fake";
    m.owner = s;
    return m;
  };
  auto t = std::make_unique<FakeServer>();
  server::ServerConfig cfg;
  cfg.port = 0;
  t->server = std::make_unique<server::Server>(cfg);
  Result<int> port = t->server->start(loader);
  EXPECT_TRUE(port.ok()) << port.message();
  if (!port.ok()) return nullptr;
  t->port = *port;
  EXPECT_TRUE(t->server->wait_ready().ok());
  return t;
}

// The text of a completion stream's events, concatenated.
std::string sse_text(const std::string& raw) {
  std::string t;
  for (const json& e : parse_sse(raw).events) {
    if (e.contains("choices") && !e["choices"].empty()) t += e["choices"][0].value("text", "");
  }
  return t;
}

json greedy(int max_tokens, bool stream = false) {
  return {{"prompt", std::vector<int>{1, 5, 6, 7}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", stream}};
}

// A backend that dies mid-generation: every request in flight gets an error (HTTP 500 for a
// whole response, an error event and [DONE] for a stream) promptly, nothing hangs, no KV block
// stays held, and the server serves the next request.
TEST(ServerOnFake, BackendFailureFailsTheRequestsInFlightAndTheServerGoesOn) {
  FakeKnobs k;
  k.fail_when_batch_has = 2;  // the first step that runs both requests below
  k.step_delay = std::chrono::microseconds(2000);
  auto s = start_fake(k);
  ASSERT_TRUE(s);
  // A stream that is running (its first event arrived), then a whole request beside it.
  const int fd = connect_local(s->port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, http_request("POST", "/v1/completions", greedy(400, true).dump())));
  std::string streamed = recv_until(fd, "data: ", 10000);
  const HttpResult whole = post(s->port, "/v1/completions", greedy(400));
  streamed += recv_until(fd, "data: [DONE]", 10000);
  ::close(fd);
  EXPECT_EQ(whole.status, 500) << whole.body;
  EXPECT_NE(whole.body.find("backend lost"), std::string::npos) << whole.body;
  const size_t body_at = streamed.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos) << streamed;
  const SseResult sse = parse_sse(streamed.substr(body_at + 4));
  EXPECT_TRUE(sse.done) << streamed;
  ASSERT_FALSE(sse.events.empty()) << streamed;
  EXPECT_TRUE(sse.events.back().contains("error")) << streamed;
  EXPECT_LT(sse.events.size(), 400u) << "the stream ended early, with an error";

  std::string m;
  ASSERT_TRUE(eventually([&] {
    m = metrics_text(s->port);
    return metric(m, "sluice_num_requests_running") == 0 && metric(m, "sluice_kv_blocks_used") == 0;
  })) << m;
  const HttpResult next = post(s->port, "/v1/completions", greedy(20));
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(next.j()["usage"]["completion_tokens"], 20);
}

// KV memory for a fraction of the concurrent requests: the scheduler preempts and recomputes,
// and every request still gets all its tokens, identical to running alone.
TEST(ServerOnFake, KvExhaustionPreemptsAndNeverDrops) {
  FakeKnobs k;
  k.n_blocks = 16;  // 256 token slots; 6 requests x ~104 tokens need ~42 blocks
  k.step_delay = std::chrono::microseconds(1000);  // the 6 requests overlap in time
  auto s = start_fake(k);
  ASSERT_TRUE(s);
  const HttpResult alone = post(s->port, "/v1/completions", greedy(100));
  ASSERT_EQ(alone.status, 200) << alone.body;
  std::vector<HttpResult> got(6);
  std::vector<std::thread> ts;
  for (auto& g : got) ts.emplace_back([&] { g = post(s->port, "/v1/completions", greedy(100)); });
  for (auto& t : ts) t.join();
  for (const HttpResult& g : got) {
    ASSERT_EQ(g.status, 200) << g.body;
    EXPECT_EQ(g.j()["usage"]["completion_tokens"], 100);
    EXPECT_EQ(g.j()["choices"][0]["text"], alone.j()["choices"][0]["text"]);
  }
  const std::string m = metrics_text(s->port);
  EXPECT_GT(metric(m, "sluice_preemptions_total"), 0) << m;
  EXPECT_EQ(metric(m, "sluice_kv_blocks_used"), 0) << m;
}

// Server-wide n-gram speculation through the bridge: the same text as without it, and the
// acceptance counters on /metrics move (the fake's output repeats a short cycle).
TEST(ServerOnFake, SpeculationServesTheSameTextAndCountsAcceptance) {
  auto plain = start_fake({});
  FakeKnobs k;
  k.spec = SpecMode::kNgram;
  auto spec = start_fake(k);
  ASSERT_TRUE(plain && spec);
  for (bool stream : {false, true}) {
    const HttpResult a = post(plain->port, "/v1/completions", greedy(120, stream));
    const HttpResult b = post(spec->port, "/v1/completions", greedy(120, stream));
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(b.status, 200) << b.body;
    if (!stream) {
      EXPECT_EQ(a.j()["choices"][0]["text"], b.j()["choices"][0]["text"]);
    } else {
      EXPECT_EQ(sse_text(a.body), sse_text(b.body));
      EXPECT_FALSE(sse_text(a.body).empty());
    }
  }
  const std::string m = metrics_text(spec->port);
  EXPECT_GT(metric(m, "sluice_spec_accepted_tokens_total"), 20) << m;
  // Each verifying step emits its accepted drafts and the target's own token (what `bench
  // serve` divides by the verify steps for tokens per step).
  const double emitted = metric(m, "sluice_spec_emitted_tokens_total");
  EXPECT_GT(emitted, metric(m, "sluice_spec_accepted_tokens_total")) << m;
  EXPECT_LE(emitted, metric(m, "sluice_spec_accepted_tokens_total") +
                         metric(m, "sluice_spec_verify_steps_total"))
      << m;
  EXPECT_EQ(metric(metrics_text(plain->port), "sluice_spec_accepted_tokens_total"), 0);
}

}  // namespace
}  // namespace sluice::test
