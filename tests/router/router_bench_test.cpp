// Router overhead against a fake backend (run on demand, on a quiet machine):
//
//   build/tests/router/router_test --gtest_also_run_disabled_tests --gtest_filter='*RouterBench*'
//
// TTFT: sequential streamed requests over one keep-alive connection, time to the first event,
// direct vs through the router (p50/p99). Throughput: 8 clients with keep-alive connections
// sending small whole requests for 3 s, direct vs through the router.
#include <algorithm>
#include <future>

#include "router/upstream.h"
#include "router_test_util.h"

namespace sluice::test {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

std::string request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Time to the first body byte of `n` streamed requests over one connection (ms each).
std::vector<double> ttft(int port, int n) {
  router::Endpoint ep{"127.0.0.1", port, ""};
  router::ConnectionPool pool(ep);
  const std::string req = request("/v1/completions", R"({"prompt":"x","stream":true})");
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    auto c = pool.acquire(1000);
    if (!c.ok()) continue;
    const auto t0 = Clock::now();
    if (!(*c)->write_request(req, 1000).ok()) continue;
    router::Wait w;
    w.timeout_ms = 5000;
    if (!(*c)->read_head(w).ok()) continue;
    std::string body;
    if ((*c)->read_body(body, w) != router::ReadResult::kData) continue;
    out.push_back(ms_since(t0));
    (*c)->read_all(body, w);
    pool.release(std::move(*c));
  }
  return out;
}

// Whole requests per second from `clients` keep-alive clients over `seconds`.
double throughput(int port, int clients, double seconds) {
  std::atomic<int64_t> done{0};
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::future<void>> fs;
  for (int c = 0; c < clients; ++c) {
    fs.push_back(std::async(std::launch::async, [&] {
      router::Endpoint ep{"127.0.0.1", port, ""};
      router::ConnectionPool pool(ep);
      const std::string req = request("/v1/completions", R"({"prompt":"hello"})");
      while (Clock::now() < end) {
        auto conn = pool.acquire(1000);
        if (!conn.ok()) continue;
        router::Wait w;
        w.timeout_ms = 5000;
        std::string body;
        if ((*conn)->write_request(req, 1000).ok() && (*conn)->read_head(w).ok() &&
            (*conn)->read_all(body, w) == router::ReadResult::kEnd) {
          ++done;
          pool.release(std::move(*conn));
        }
      }
    }));
  }
  for (auto& f : fs) f.wait();
  return double(done.load()) / seconds;
}

TEST(RouterBench, DISABLED_OverheadAndThroughputAgainstAFakeBackend) {
  set_log_level(LogLevel::kWarn);
  FakeBackend a("a");
  a.set_generate([](const httplib::Request& req, httplib::Response& res) {
    if (req.body.find("\"stream\":true") == std::string::npos) {
      res.set_content(R"({"backend":"a","usage":{"prompt_tokens":1}})", "application/json");
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
      const std::string ev = "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n";
      sink.write(ev.data(), ev.size());
      sink.done();
      return true;
    });
  });
  auto r = start_router({&a}, router::Policy::kCacheAware, /*interval_s=*/1);
  ASSERT_TRUE(r);
  ttft(a.port, 200);  // warm up
  ttft(r->port(), 200);
  const std::vector<double> direct = ttft(a.port, 2000), routed = ttft(r->port(), 2000);
  std::printf(
      "[ router ttft ] direct p50 %.3f ms p99 %.3f ms; routed p50 %.3f ms p99 %.3f ms; "
      "added p50 %.3f ms\n",
      percentile(direct, 0.5), percentile(direct, 0.99), percentile(routed, 0.5),
      percentile(routed, 0.99), percentile(routed, 0.5) - percentile(direct, 0.5));
  const double rps_direct = throughput(a.port, 8, 3), rps_routed = throughput(r->port(), 8, 3);
  std::printf("[ router rps ] direct %.0f req/s, routed %.0f req/s (8 keep-alive clients)\n",
              rps_direct, rps_routed);
  EXPECT_LT(percentile(routed, 0.5) - percentile(direct, 0.5), 1.0);
  EXPECT_GE(rps_routed, 2000);
}

}  // namespace
}  // namespace sluice::test
