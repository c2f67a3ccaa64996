// `sluice serve` as a separate process under load: 512 simultaneous streaming requests while
// about 10% of the clients hang up at random moments. Every other stream completes with the
// right text; afterwards nothing runs, no KV block is held, and resident memory returns to
// within 10% of its level before the burst. The burst runs twice and the second is measured:
// the KV cache is a mapping faulted in as blocks are first written (executor/kv_cache.cpp), so
// the first burst grows the resident set by the pages of the blocks it reaches first.
#include <latch>
#include <random>

#include "server_test_util.h"

namespace sluice::test {
namespace {

struct ClientResult {
  bool hung_up = false;  // planned to disconnect
  bool done = false;     // saw data: [DONE]
  std::string text;
  std::string finish;
  std::string error;
};

TEST(ServerLoad, ManyConcurrentStreamsWithRandomHangUps) {
  SLUICE_REQUIRE_SHARED(model, kStoriesModel);
  auto p = ServeProcess::start({model, "-c", "512", "-t", "1", "--max-seqs", "256", "--kv-cache-gb",
                                "0.02", "--served-model-name", "stories"});
  ASSERT_TRUE(p);
  const int port = p->port;
  const long idle_threads = p->n_threads();  // no connection yet
  constexpr int kClients = 512;
  constexpr int kTokens = 16;
  const json body = {{"model", "stories"},
                     {"prompt", "Once upon a time"},
                     {"max_tokens", kTokens},
                     {"temperature", 0},
                     {"stream", true}};

  // Warm-up: the reference text, then full batches (--max-seqs generations at once) so that the
  // engine's batch-sized buffers (activations, logits: ~3 MiB here) have reached the size they
  // keep; what is measured afterwards is what the burst itself leaves behind.
  HttpResult ref =
      post(port, "/v1/completions",
           {{"prompt", "Once upon a time"}, {"max_tokens", kTokens}, {"temperature", 0}});
  ASSERT_EQ(ref.status, 200) << ref.body;
  const std::string want = ref.j()["choices"][0]["text"];
  const long rss_cold = p->rss_kib();
  const json full_batch = {{"prompt", {"Once upon a time", "Once upon a time"}},
                           {"max_tokens", kTokens},
                           {"n", 128},
                           {"temperature", 0}};  // 256 generations = --max-seqs
  for (int i = 0; i < 2; ++i) {
    HttpResult warm = post(port, "/v1/completions", full_batch);
    ASSERT_EQ(warm.status, 200) << warm.body;
  }
  // Settled before a measurement: the idle connection threads have exited (those above the 4 the
  // pool keeps warm do after 2 s: HttpLimits) and the resident set has stayed put for 1.2 s (the
  // engine thread trims malloc's free memory once a second while idle).
  const auto settle = [&] {
    long last_rss = -1;
    auto stable_since = std::chrono::steady_clock::now();
    const bool settled = eventually(
        [&] {
          const auto now = std::chrono::steady_clock::now();
          const long rss = p->rss_kib();
          if (p->n_threads() > idle_threads + 4 || rss != last_rss) {
            last_rss = rss;
            stable_since = now;
            return false;
          }
          return now - stable_since >= std::chrono::milliseconds(1200);
        },
        std::chrono::seconds(20));
    ASSERT_TRUE(settled) << "threads " << p->n_threads() << " (idle " << idle_threads
                         << " + 4 warm)";
  };

  // One burst: kClients streams at once, ~10% hanging up; every other one completes with the
  // reference text, and afterwards nothing runs or holds a KV block. Returns its seconds, its
  // hang-ups and the peak resident set seen meanwhile.
  int n_bursts = 0;
  int64_t completed_before = 1 + 512;  // the warm-up's requests
  struct Burst {
    double seconds;
    int hung_up;
    long rss_peak;
  };
  const auto run_burst = [&](unsigned seed) -> Burst {
    std::mt19937 rng(seed);
    std::vector<ClientResult> results(kClients);
    std::vector<size_t> hang_up_after(kClients, 0);  // bytes read before closing (0: never)
    for (int i = 0; i < kClients; ++i) {
      if (rng() % 10 == 0) {
        results[size_t(i)].hung_up = true;
        hang_up_after[size_t(i)] = 1 + rng() % 3000;  // from mid-headers to late in the stream
      }
    }
    std::latch start(kClients);
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<long> rss_peak{0};
    std::atomic<bool> sampling{true};
    std::thread sampler([&] {
      while (sampling) {
        rss_peak = std::max(rss_peak.load(), p->rss_kib());
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    std::vector<std::thread> clients;
    clients.reserve(kClients);
    for (int i = 0; i < kClients; ++i) {
      clients.emplace_back([&, i] {
        ClientResult& r = results[size_t(i)];
        start.arrive_and_wait();
        const int fd = connect_local(port);
        if (fd < 0) {
          r.error = "connect failed";
          return;
        }
        if (!send_all(fd, http_request("POST", "/v1/completions", body.dump())))
          r.error = "send failed";
        std::string got;
        char buf[2048];
        const size_t limit = hang_up_after[size_t(i)];
        while (got.find("data: [DONE]") == std::string::npos) {
          pollfd pf{fd, POLLIN, 0};
          if (::poll(&pf, 1, 30000) <= 0) {
            r.error = "timeout";
            break;
          }
          const size_t want_n = limit > 0 ? std::min(sizeof buf, limit - got.size()) : sizeof buf;
          const ssize_t n = ::recv(fd, buf, want_n, 0);
          if (n <= 0) {
            r.error = "connection closed";
            break;
          }
          got.append(buf, size_t(n));
          if (limit > 0 && got.size() >= limit) break;
        }
        ::close(fd);
        const size_t body_at = got.find("\r\n\r\n");
        SseResult s = parse_sse(body_at == std::string::npos ? "" : got.substr(body_at + 4));
        r.done = s.done;
        r.text = streamed_text(s);
        r.finish = streamed_finish(s);
      });
    }
    for (std::thread& t : clients) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sampling = false;
    sampler.join();

    int completed = 0, hung_up = 0;
    for (int i = 0; i < kClients; ++i) {
      const ClientResult& r = results[size_t(i)];
      if (r.hung_up) {
        ++hung_up;
        continue;
      }
      EXPECT_TRUE(r.done) << "client " << i << ": " << r.error;
      EXPECT_EQ(r.text, want) << "client " << i;
      EXPECT_EQ(r.finish, "length") << "client " << i;
      completed += r.done ? 1 : 0;
    }
    EXPECT_EQ(completed, kClients - hung_up);
    EXPECT_GT(hung_up, 20);

    // Nothing left running or holding KV blocks.
    std::string m;
    EXPECT_TRUE(eventually([&] {
      m = metrics_text(port);
      return metric(m, "sluice_num_requests_running") == 0 &&
             metric(m, "sluice_num_requests_waiting") == 0 &&
             metric(m, "sluice_kv_blocks_used") == 0;
    })) << m;
    const double finished = metric(m, "sluice_requests_finished_total{finish_reason=\"length\"}");
    const double aborted =
        std::max(0.0, metric(m, "sluice_requests_finished_total{finish_reason=\"abort\"}"));
    ++n_bursts;
    EXPECT_EQ(finished + aborted, n_bursts * kClients + 1 + 512) << m;
    EXPECT_GE(finished, completed_before + completed) << m;
    completed_before += completed;
    return {seconds, hung_up, rss_peak.load()};
  };

  (void)run_burst(54321);  // brings the KV pages in (see the top)
  settle();
  const long rss_before = p->rss_kib();
  const auto [seconds, hung_up, rss_peak] = run_burst(12345);
  // Memory returns once the burst's connection threads have exited and malloc trimmed.
  long rss_after = p->rss_kib();
  eventually(
      [&] {
        rss_after = p->rss_kib();
        return double(rss_after) <= double(rss_before) * 1.10;
      },
      std::chrono::milliseconds(kSanitizedBuild ? 0 : 10000));
  std::printf(
      "[ load ] %d streams (%d hung up) in %.2f s; RSS cold %ld KiB, before %ld KiB, peak %ld KiB, "
      "after %ld KiB\n",
      kClients, hung_up, seconds, rss_cold, rss_before, rss_peak, rss_after);
  if (!kSanitizedBuild) {  // bounds of plain builds only (test_util.h)
    EXPECT_LE(double(rss_after), double(rss_before) * 1.10);
    EXPECT_LT(seconds, 60);
  }
}

}  // namespace
}  // namespace sluice::test
