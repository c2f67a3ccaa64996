// The streaming client: the SSE parser on crafted byte streams, and whole requests against a
// fake OpenAI server (httplib on 127.0.0.1) that streams tokens on a known schedule or fails in
// known ways. Timing bounds are one-sided where the schedule makes them strict (nothing can
// arrive before the server sends it) and generous the other way (a loaded 2-core machine).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "loadgen/client.h"
#include "loadgen/runner.h"

namespace sluice::loadgen {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

std::string completion_event(const std::string& text) {
  return "data: " +
         json({{"object", "text_completion"}, {"choices", {{{"index", 0}, {"text", text}}}}})
             .dump() +
         "\n\n";
}

std::string usage_event(int prompt, int completion) {
  return "data: " +
         json({{"choices", json::array()},
               {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion}}}})
             .dump() +
         "\n\n";
}

// --- SseStream ---------------------------------------------------------------------------------

TEST(LoadgenSse, ParsesCompletionChunksUsageAndDone) {
  SseStream s;
  s.feed(completion_event("Once") + completion_event(" upon"), 1.0);  // one read: one timestamp
  s.feed(completion_event(""), 1.5);                                  // empty text: not a token
  s.feed(completion_event(" a") + usage_event(5, 3) + "data: [DONE]\n\n", 2.0);
  s.feed(completion_event("after done"), 3.0);
  EXPECT_TRUE(s.done());
  EXPECT_FALSE(s.failed());
  EXPECT_EQ(s.done_time(), 2.0);
  EXPECT_EQ(s.token_times(), (std::vector<double>{1.0, 1.0, 2.0}));
  EXPECT_EQ(s.prompt_tokens(), 5);
  EXPECT_EQ(s.completion_tokens(), 3);
}

TEST(LoadgenSse, ByteAtATimeCrlfCommentsAndMultilineData) {
  const std::string stream =
      ": keep-alive\r\n\r\nid: 1\r\ndata: {\"choices\": [{\"index\": 0,\r\ndata:  \"text\": "
      "\"hi\"}]}\r\n\r\n" +
      usage_event(2, 1) + "data: [DONE]\r\n\r\n";
  SseStream s;
  for (size_t i = 0; i < stream.size(); ++i) s.feed(stream.substr(i, 1), double(i));
  EXPECT_TRUE(s.done()) << s.error();
  ASSERT_EQ(s.token_times().size(), 1u);
  // Stamped when the blank line that ends the event arrived.
  const size_t end_of_event = stream.find("\r\n\r\n", stream.find("hi")) + 3;
  EXPECT_EQ(s.token_times()[0], double(end_of_event));
  EXPECT_EQ(s.completion_tokens(), 1);
}

TEST(LoadgenSse, ChatDeltasCountOnlyNonEmptyContent) {
  auto chunk = [](json delta) {
    return "data: " +
           json({{"choices", {{{"index", 0}, {"delta", delta}, {"finish_reason", nullptr}}}}})
               .dump() +
           "\n\n";
  };
  SseStream s;
  s.feed(chunk({{"role", "assistant"}, {"content", ""}}), 0.1);
  s.feed(chunk({{"content", "Hel"}}), 0.2);
  s.feed(chunk({{"content", "lo"}}), 0.3);
  s.feed(chunk(json::object()), 0.4);  // finish chunk
  s.feed("data: [DONE]\n\n", 0.5);
  EXPECT_EQ(s.token_times(), (std::vector<double>{0.2, 0.3}));
  EXPECT_FALSE(s.completion_tokens().has_value());
}

TEST(LoadgenSse, ErrorsStopTheStream) {
  {
    SseStream s;
    s.feed(completion_event("a") +
               "data: {\"error\": {\"message\": \"engine exploded\", \"code\": 500}}\n\n",
           1);
    EXPECT_TRUE(s.failed());
    EXPECT_EQ(s.error(), "error event: engine exploded");
    s.feed("data: [DONE]\n\n", 2);
    EXPECT_FALSE(s.done());
  }
  {
    SseStream s;
    s.feed("event: error\ndata: {\"message\": \"overloaded\"}\n\n", 1);
    EXPECT_EQ(s.error(), "error event: overloaded");
  }
  {
    SseStream s;
    s.feed("data: {not json\n\n", 1);
    EXPECT_TRUE(s.failed());
    EXPECT_NE(s.error().find("malformed SSE event"), std::string::npos) << s.error();
    EXPECT_NE(s.error().find("{not json"), std::string::npos) << s.error();
  }
}

TEST(LoadgenClient, UrlsAndRequestBody) {
  auto b = parse_base_url("http://127.0.0.1:8080/");
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->scheme_host_port, "http://127.0.0.1:8080");
  EXPECT_EQ(endpoint_path(*b, ApiKind::kCompletions), "/v1/completions");
  EXPECT_EQ(endpoint_path(*b, ApiKind::kChat), "/v1/chat/completions");
  b = parse_base_url("localhost:9000/api/v1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->scheme_host_port, "http://localhost:9000");
  EXPECT_EQ(endpoint_path(*b, ApiKind::kChat), "/api/v1/chat/completions");
  EXPECT_FALSE(parse_base_url("ftp://x").ok());
  EXPECT_FALSE(parse_base_url("http://:80").ok());
  EXPECT_FALSE(parse_base_url("http://host:99999").ok());

  ClientConfig c;
  c.model = "m";
  RequestSpec spec;
  spec.prompt = "hello";
  spec.output_tokens = 7;
  json j = request_body(c, spec);
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["prompt"], "hello");
  EXPECT_EQ(j["max_tokens"], 7);
  EXPECT_EQ(j["temperature"], 0);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  c.endpoint = ApiKind::kChat;
  c.model.clear();
  j = request_body(c, spec);
  EXPECT_FALSE(j.contains("model"));
  EXPECT_EQ(j["messages"], json::array({{{"role", "user"}, {"content", "hello"}}}));
  spec.messages =
      json::array({{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", "u"}}});
  EXPECT_EQ(request_body(c, spec)["messages"], spec.messages);
}

// --- a fake OpenAI server ------------------------------------------------------------------------

// Routes by the first path segment: POST /<behaviour>/v1/completions (or chat/completions).
//   ok        first token 200 ms after the request, then one every 50 ms, 5 tokens, usage, [DONE]
//   nousage   3 tokens at once, no usage chunk
//   chat      role chunk, 4 content deltas 20 ms apart, finish chunk, usage, [DONE]
//   fast      first token after 100 ms, 3 tokens 10 ms apart, usage (many in flight)
//   err500    HTTP 500 with an OpenAI error object
//   cut       2 tokens, then the connection closes mid-stream
//   errevent  1 token, then an error event
//   malformed a data line that is not JSON
//   plain     a non-streaming JSON answer
//   nodone    2 tokens, then the stream ends without [DONE]
// httplib 0.11 listens with a backlog of 5, which drops SYNs when dozens connect at once.
class BackloggedServer : public httplib::Server {
 public:
  int bind_local() {
    const int port = bind_to_any_port("127.0.0.1");
    ::listen(svr_sock_, 1024);  // listen() again only changes the backlog
    return port;
  }
};

class FakeOpenAi {
 public:
  FakeOpenAi() {
    svr_.new_task_queue = [] { return new httplib::ThreadPool(96); };
    svr_.set_tcp_nodelay(true);
    svr_.Post(R"(/(\w+)/v1/(?:chat/)?completions)",
              [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
    port_ = svr_.bind_local();
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~FakeOpenAi() {
    svr_.stop();
    thread_.join();
  }
  std::string url(const std::string& behaviour) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + behaviour;
  }
  json last_body(const std::string& behaviour) {
    std::lock_guard<std::mutex> g(mu_);
    return bodies_[behaviour];
  }

 private:
  using Writes = std::vector<std::pair<double, std::string>>;  // (ms after the request, bytes)

  void handle(const httplib::Request& req, httplib::Response& res) {
    const auto t_req = clock_type::now();
    const std::string b = req.matches[1];
    {
      std::lock_guard<std::mutex> g(mu_);
      bodies_[b] = json::parse(req.body, nullptr, false);
    }
    Writes w;
    bool close_early = false;
    if (b == "ok") {
      for (int k = 0; k < 5; ++k)
        w.push_back({200.0 + 50 * k, completion_event("t" + std::to_string(k))});
      w.back().second += usage_event(7, 5) + "data: [DONE]\n\n";
    } else if (b == "nousage") {
      w.push_back({0, completion_event("a") + completion_event("b") + completion_event("c") +
                          "data: [DONE]\n\n"});
    } else if (b == "chat") {
      auto chunk = [](json delta) {
        return "data: " + json({{"choices", {{{"index", 0}, {"delta", delta}}}}}).dump() + "\n\n";
      };
      w.push_back({0, chunk({{"role", "assistant"}, {"content", ""}})});
      for (int k = 0; k < 4; ++k)
        w.push_back({20.0 + 20 * k, chunk({{"content", "w" + std::to_string(k)}})});
      w.push_back({100, chunk(json::object()) + usage_event(3, 4) + "data: [DONE]\n\n"});
    } else if (b == "fast") {
      for (int k = 0; k < 3; ++k) w.push_back({100.0 + 10 * k, completion_event("f")});
      w.back().second += usage_event(1, 3) + "data: [DONE]\n\n";
    } else if (b == "err500") {
      res.status = 500;
      res.set_content(R"({"error": {"message": "boom", "type": "server_error"}})",
                      "application/json");
      return;
    } else if (b == "plain") {
      res.set_content(R"({"choices": [{"text": "whole answer"}]})", "application/json");
      return;
    } else if (b == "cut") {
      w = {{0, completion_event("x")}, {10, completion_event("y")}};
      close_early = true;
    } else if (b == "errevent") {
      w = {{0, completion_event("x")},
           {10, "data: {\"error\": {\"message\": \"engine exploded\"}}\n\n"}};
    } else if (b == "malformed") {
      w = {{0, "data: {oops\n\n"}};
    } else if (b == "nodone") {
      w = {{0, completion_event("x")}, {10, completion_event("y")}};
    }
    res.set_chunked_content_provider(
        "text/event-stream", [t_req, w, close_early](size_t, httplib::DataSink& sink) {
          for (const auto& [ms, bytes] : w) {
            std::this_thread::sleep_until(t_req + std::chrono::microseconds(int64_t(ms * 1000)));
            if (!sink.write(bytes.data(), bytes.size())) return false;
          }
          if (close_early) return false;  // drop the connection mid-stream
          sink.done();
          return true;
        });
  }

  BackloggedServer svr_;
  std::thread thread_;
  int port_ = -1;
  std::mutex mu_;
  std::map<std::string, json> bodies_;
};

RequestRecord send(const std::string& url, ApiKind kind = ApiKind::kCompletions) {
  ClientConfig c;
  c.url = url;
  c.model = "fake";
  c.endpoint = kind;
  c.timeout_s = 30;
  RequestSpec spec;
  spec.prompt = "a b c";
  spec.input_tokens = 3;
  spec.output_tokens = 5;
  return send_request(c, spec, clock_type::now());
}

TEST(LoadgenFakeServer, MeasuresKnownTimings) {
  FakeOpenAi fake;
  const RequestRecord r = send(fake.url("ok"));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.output_tokens, 5);
  EXPECT_TRUE(r.usage_reported);
  EXPECT_EQ(r.input_tokens, 7);  // the server's usage wins over the dataset's count
  ASSERT_EQ(r.itl_s.size(), 4u);
  // Strict lower bounds: token k leaves the server at 200 + 50 k ms after it read the request.
  EXPECT_GE(r.ttft_s * 1e3, 200 - 5);
  double t = r.ttft_s;
  for (int k = 1; k < 5; ++k) {
    t += r.itl_s[size_t(k - 1)];
    EXPECT_GE(t * 1e3, 200 + 50 * k - 5) << "token " << k;
  }
  EXPECT_GE(r.e2el_s * 1e3, 400 - 5);
  // Generous upper bounds for a loaded machine.
  EXPECT_LE(r.ttft_s * 1e3, 200 + 300);
  EXPECT_LE(r.e2el_s * 1e3, 400 + 400);
  EXPECT_NEAR(r.tpot_s() * 1e3, 50, 40);
  double itl_sum = 0;
  for (double g : r.itl_s) itl_sum += g;
  EXPECT_NEAR(itl_sum / 4 * 1e3, 50, 40);

  const json body = fake.last_body("ok");
  EXPECT_EQ(body["model"], "fake");
  EXPECT_EQ(body["prompt"], "a b c");
  EXPECT_EQ(body["max_tokens"], 5);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
}

TEST(LoadgenFakeServer, RunnerSummarizesKnownTimings) {
  FakeOpenAi fake;
  ClientConfig c;
  c.url = fake.url("ok");
  c.timeout_s = 30;
  std::vector<RequestSpec> specs(3);
  for (RequestSpec& s : specs) s.prompt = "p", s.input_tokens = 1, s.output_tokens = 5;
  const std::vector<RequestRecord> recs = run_load(specs, LoadParams{}, c);
  const RunSummary s = summarize(recs, {});
  ASSERT_EQ(s.completed, 3) << (s.errors.empty() ? "" : s.errors[0].first);
  EXPECT_EQ(s.total_output_tokens, 15);
  EXPECT_EQ(s.itl_ms.n, 12u);
  EXPECT_GE(s.ttft_ms.median, 195);
  EXPECT_LE(s.ttft_ms.median, 500);
  EXPECT_NEAR(s.tpot_ms.median, 50, 40);
  EXPECT_NEAR(s.itl_ms.mean, 50, 40);
  EXPECT_GE(s.e2el_ms.median, 395);
  EXPECT_LE(s.e2el_ms.median, 800);
  EXPECT_GE(s.duration_s, 0.395);
  EXPECT_NEAR(s.output_throughput, 15 / s.duration_s, 1e-9);
}

TEST(LoadgenFakeServer, ChatAndMissingUsage) {
  FakeOpenAi fake;
  RequestRecord r = send(fake.url("chat"), ApiKind::kChat);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.output_tokens, 4);
  EXPECT_EQ(r.itl_s.size(), 3u);  // the empty role chunk is not a token
  EXPECT_GE(r.ttft_s * 1e3, 20 - 5);
  const json body = fake.last_body("chat");
  EXPECT_EQ(body["messages"][0]["content"], "a b c");
  EXPECT_FALSE(body.contains("prompt"));

  r = send(fake.url("nousage"));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.usage_reported);
  EXPECT_EQ(r.output_tokens, 3);  // counted chunks
  EXPECT_EQ(r.input_tokens, 3);   // the dataset's count
}

TEST(LoadgenFakeServer, FailuresAreRecordsWithMessages) {
  FakeOpenAi fake;
  struct Case {
    const char* behaviour;
    const char* want;
  };
  for (const Case& c :
       {Case{"err500", "HTTP 500: boom"}, Case{"cut", "stream broken after 2 text chunks"},
        Case{"errevent", "error event: engine exploded"}, Case{"malformed", "malformed SSE event"},
        Case{"plain", "not an event stream"}, Case{"nodone", "without 'data: [DONE]'"}}) {
    const RequestRecord r = send(fake.url(c.behaviour));
    EXPECT_FALSE(r.ok) << c.behaviour;
    EXPECT_NE(r.error.find(c.want), std::string::npos) << c.behaviour << ": " << r.error;
    EXPECT_GE(r.e2el_s, 0) << c.behaviour;
  }
}

int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(LoadgenFakeServer, ConnectionRefusedIsAFailedRecord) {
  const RequestRecord r = send("http://127.0.0.1:" + std::to_string(unused_port()));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("request failed: Connection"), std::string::npos) << r.error;
  // And through the runner: every request fails, nothing throws.
  ClientConfig c;
  c.url = "http://127.0.0.1:" + std::to_string(unused_port());
  const RunSummary s = summarize(run_load(std::vector<RequestSpec>(5), LoadParams{}, c), {});
  EXPECT_EQ(s.completed, 0);
  EXPECT_EQ(s.failed, 5);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].second, 5);
}

TEST(LoadgenFakeServer, SixtyFourInFlight) {
  FakeOpenAi fake;
  ClientConfig c;
  c.url = fake.url("fast");
  c.timeout_s = 60;
  std::vector<RequestSpec> specs(64);
  for (RequestSpec& s : specs) s.prompt = "p", s.output_tokens = 3;
  const RunSummary s = summarize(run_load(specs, LoadParams{}, c), {});
  EXPECT_EQ(s.completed, 64) << (s.errors.empty() ? "" : s.errors[0].first);
  EXPECT_EQ(s.total_output_tokens, 64 * 3);
  EXPECT_GE(s.ttft_ms.p99, 100 - 5);
  // All at once: the whole run takes about one request's time, not 64 of them (6.4 s).
  EXPECT_LT(s.duration_s, 4.0);
}

}  // namespace
}  // namespace sluice::loadgen
