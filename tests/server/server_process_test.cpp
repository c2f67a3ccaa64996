// `sluice serve` as users run it: start-up errors, and SIGTERM / SIGINT: stop accepting, let
// running streams finish (or cancel them after --shutdown-timeout), exit 0.
#include "server_test_util.h"

namespace sluice::test {
namespace {

// Opens a stream that runs for about `seconds` on this build (sanitizers are ~50x slower):
// n choices of up to 400 tokens, one sequence at a time (--max-seqs 1). Returns its socket
// after the first event and the number of choices.
std::pair<int, int> open_long_stream(int port, double seconds = 0.5) {
  const auto t0 = std::chrono::steady_clock::now();
  post(port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 64}, {"ignore_eos", true}});
  const double per_token =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 64;
  const int tokens = std::max(32, int(seconds / per_token));
  const int n = std::min(64, (tokens + 399) / 400);
  const int fd = connect_local(port);
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", std::min(400, tokens)},
                     {"ignore_eos", true},
                     {"temperature", 0},
                     {"n", n},
                     {"stream", true}};
  send_all(fd, http_request("POST", "/v1/completions", body.dump()));
  const std::string got = recv_until(fd, "data: ");
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  return {fd, n};
}

TEST(ServeProcess, SigtermLetsRunningStreamsFinishThenExitsZero) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = ServeProcess::start(
      {model, "-c", "512", "-t", "1", "--max-seqs", "1", "--kv-cache-gb", "0.01"});
  ASSERT_TRUE(p);
  const auto [fd, n] = open_long_stream(p->port);
  ASSERT_GE(fd, 0);
  ::kill(p->pid, SIGTERM);
  // New connections are refused soon after.
  EXPECT_TRUE(eventually([&] {
    const int c = connect_local(p->port);
    if (c >= 0) ::close(c);
    return c < 0;
  }));
  const std::string rest = recv_until(fd, "data: [DONE]", 60000);
  ::close(fd);
  const SseResult s = parse_sse(rest);
  EXPECT_TRUE(s.done);
  for (int i = 0; i < n; ++i) EXPECT_EQ(streamed_finish(s, i), "length") << i;
  EXPECT_EQ(p->wait_exit(30000), 0);
  const std::string log = p->drain_log();
  EXPECT_NE(log.find("shutting down (1 generations running"), std::string::npos) << log;
  EXPECT_NE(log.find("stopped"), std::string::npos) << log;
}

TEST(ServeProcess, ShutdownTimeoutCancelsWhatIsStillRunning) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = ServeProcess::start({model, "-c", "512", "-t", "1", "--max-seqs", "1", "--kv-cache-gb",
                                "0.01", "--shutdown-timeout", "0"});
  ASSERT_TRUE(p);
  const int fd = open_long_stream(p->port).first;
  ASSERT_GE(fd, 0);
  ::kill(p->pid, SIGINT);
  const std::string rest = recv_until(fd, "data: [DONE]", 30000);
  ::close(fd);
  const SseResult s = parse_sse(rest);
  EXPECT_TRUE(s.done);
  ASSERT_FALSE(s.events.empty());
  EXPECT_TRUE(s.events.back().contains("error"))
      << rest.substr(rest.size() > 400 ? rest.size() - 400 : 0);
  EXPECT_EQ(p->wait_exit(30000), 0);
  EXPECT_NE(p->drain_log().find("cancelling 1 generations"), std::string::npos) << p->log;
}

// `sluice serve --spec ngram`: the same greedy request twice gives the same text, the second
// is drafted from the first one's output, and /metrics counts it. (`--spec-gate off`: every
// draft verified; the measured gate's cuts would depend on this host's step times.)
TEST(ServeProcess, SpeculativeNgramServesIdenticalTextAndCountsAcceptance) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = ServeProcess::start({model, "-c", "512", "-t", "1", "--kv-cache-gb", "0.01", "--spec",
                                "ngram", "--spec-k", "6", "--spec-gate", "off"});
  ASSERT_TRUE(p);
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 120},
                     {"temperature", 0},
                     {"ignore_eos", true}};
  const HttpResult a = post(p->port, "/v1/completions", body);
  const HttpResult b = post(p->port, "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.j()["choices"][0]["text"], b.j()["choices"][0]["text"]);
  EXPECT_EQ(b.j()["usage"]["completion_tokens"], 120);
  const HttpResult m = http_call(p->port, "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  const auto value = [&](const std::string& name) {
    const size_t at = m.body.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.body.substr(at + name.size() + 2));
  };
  EXPECT_GE(value("sluice_spec_accepted_tokens_total"), 100.0) << m.body;
  EXPECT_GT(value("sluice_spec_mean_accepted_length"), 2.0);
  ::kill(p->pid, SIGTERM);
  EXPECT_EQ(p->wait_exit(30000), 0);
}

// `sluice serve` on a hybrid recurrent model (qwen35): a second request that repeats the first
// one's prompt and answer and adds to it resumes from a state checkpoint (a prefix hit), with
// the same text as a server without the prefix cache; /metrics reports the state memory and
// the checkpoints. With --spec ngram the greedy text is the same. What is not done for hybrids
// is refused at start-up.
TEST(ServeProcess, HybridModelResumesFromStateCheckpoints) {
  SLUICE_REQUIRE_SHARED(model, "testdata/models/arch/qwen35.gguf");
  auto p = ServeProcess::start({model, "-t", "1", "--max-seqs", "4"});
  auto q = ServeProcess::start({model, "-t", "1", "--max-seqs", "4", "--no-prefix-cache"});
  ASSERT_TRUE(p && q);
  const std::string first = "The little red boat drifted toward the harbor, and the old man";
  const json body = {{"prompt", first}, {"max_tokens", 24}, {"temperature", 0}};
  const HttpResult a = post(p->port, "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  const std::string second =
      first + a.j()["choices"][0]["text"].get<std::string>() + " Then the wind rose again.";
  const json body2 = {{"prompt", second}, {"max_tokens", 16}, {"temperature", 0}};
  const HttpResult b = post(p->port, "/v1/completions", body2);
  const HttpResult c = post(q->port, "/v1/completions", body2);
  ASSERT_EQ(b.status, 200) << b.body;
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(b.j()["choices"][0]["text"], c.j()["choices"][0]["text"]);
  EXPECT_GE(b.j()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << b.body;
  const HttpResult m = http_call(p->port, "GET", "/metrics");
  const auto value = [&](const std::string& name) {
    const size_t at = m.body.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.body.substr(at + name.size() + 2));
  };
  EXPECT_GE(value("sluice_state_checkpoints_restored_total"), 1.0) << m.body;
  EXPECT_GE(value("sluice_state_checkpoints_used"), 1.0);
  EXPECT_GT(value("sluice_recurrent_state_bytes_total"), 0.0);
  EXPECT_EQ(value("sluice_recurrent_state_bytes_used"), 0.0);

  TempDir tmp;
  auto run = [&](const std::string& args) {
    const std::string cmd = sluice_path() + " serve " + model + " " + args + " --port 0 >" +
                            tmp.path("out") + " 2>" + tmp.path("err");
    const int st = std::system(cmd.c_str());
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, read_file(tmp.path("err")));
  };
  auto r = ServeProcess::start({model, "-t", "1", "--spec", "ngram", "--spec-k", "4"});
  ASSERT_TRUE(r);
  const HttpResult d = post(r->port, "/v1/completions", body2);
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.j()["choices"][0]["text"], c.j()["choices"][0]["text"]);
  auto [code, err] = run("--spec draft --model-draft " + model);
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("draft model with recurrent layers"), std::string::npos) << err;
  // The disk tier and the K/V transfer move the saved states: without them, refused.
  std::tie(code, err) =
      run("--kv-disk-dir " + tmp.path("disk") + " --kv-disk-gb 1 --state-checkpoints 0");
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("checkpoints"), std::string::npos) << err;
}

TEST(ServeProcess, StartUpErrorsExitNonZero) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  TempDir tmp;
  auto run = [&](const std::string& args) {
    const std::string cmd = sluice_path() + " serve " + args + " --port 0 >" + tmp.path("out") +
                            " 2>" + tmp.path("err");
    const int st = std::system(cmd.c_str());
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, read_file(tmp.path("err")));
  };
  auto [code, err] = run(tmp.path("missing.gguf"));
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("sluice serve: error"), std::string::npos) << err;
  std::tie(code, err) = run(model + " --chat-template " + tmp.path("missing.jinja"));
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("chat template"), std::string::npos) << err;
  std::tie(code, err) = run(model + " --host 256.1.1.1");
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("cannot listen"), std::string::npos) << err;
  std::tie(code, err) = run(model + " --spec draft");
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("--model-draft"), std::string::npos) << err;
  std::tie(code, err) = run(model + " --spec ngram --spec-k 0");
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("draft length"), std::string::npos) << err;
}

}  // namespace
}  // namespace sluice::test
