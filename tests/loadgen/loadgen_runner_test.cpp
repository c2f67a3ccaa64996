// The arrival process (a pure function: checked statistically without sleeping) and the
// dispatcher's in-flight cap, driven by a fake send function instead of a network.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "loadgen/runner.h"

namespace sluice::loadgen {
namespace {

struct GapStats {
  double mean = 0, cv = 0;  // coefficient of variation = std / mean
};

GapStats gap_stats(const std::vector<double>& t) {
  GapStats g;
  const size_t n = t.size() - 1;
  for (size_t i = 1; i < t.size(); ++i) g.mean += t[i] - t[i - 1];
  g.mean /= double(n);
  double sq = 0;
  for (size_t i = 1; i < t.size(); ++i)
    sq += (t[i] - t[i - 1] - g.mean) * (t[i] - t[i - 1] - g.mean);
  g.cv = std::sqrt(sq / double(n)) / g.mean;
  return g;
}

TEST(LoadgenArrivals, PoissonMeanGapIsOneOverRate) {
  const std::vector<double> t = arrival_schedule(50000, 20.0, 1.0, 42);
  ASSERT_EQ(t.size(), 50000u);
  EXPECT_EQ(t[0], 0.0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  const GapStats g = gap_stats(t);
  EXPECT_NEAR(g.mean, 1.0 / 20, 0.03 / 20);  // within 3%
  EXPECT_NEAR(g.cv, 1.0, 0.05);              // exponential gaps: std == mean
  // Exponential: P(gap > mean) = e^-1.
  size_t longer = 0;
  for (size_t i = 1; i < t.size(); ++i) longer += (t[i] - t[i - 1]) > 1.0 / 20;
  EXPECT_NEAR(double(longer) / double(t.size() - 1), std::exp(-1.0), 0.02);
}

TEST(LoadgenArrivals, BurstinessKeepsTheMeanAndChangesTheSpread) {
  for (double k : {0.25, 0.5, 2.0, 8.0}) {
    const GapStats g = gap_stats(arrival_schedule(50000, 5.0, k, 7));
    EXPECT_NEAR(g.mean, 0.2, 0.2 * 0.03) << "burstiness " << k;
    EXPECT_NEAR(g.cv, 1.0 / std::sqrt(k), 0.06 / std::sqrt(k))
        << "burstiness " << k;  // gamma: cv = 1/sqrt(k)
  }
}

TEST(LoadgenArrivals, SeededAndInfinite) {
  EXPECT_EQ(arrival_schedule(100, 3.0, 1.0, 1), arrival_schedule(100, 3.0, 1.0, 1));
  EXPECT_NE(arrival_schedule(100, 3.0, 1.0, 1), arrival_schedule(100, 3.0, 1.0, 2));
  const std::vector<double> all = arrival_schedule(1000, kInfiniteRate, 1.0, 1);
  ASSERT_EQ(all.size(), 1000u);
  for (double x : all) EXPECT_EQ(x, 0.0);
  EXPECT_TRUE(arrival_schedule(0, 1.0, 1.0, 1).empty());
}

// A fake send that counts requests in flight and can hold them until released.
struct InFlight {
  std::mutex mu;
  std::condition_variable cv;
  int now = 0, max = 0, started = 0;

  RequestRecord enter_wait_leave(const RequestSpec& spec, int release_at_started,
                                 std::chrono::milliseconds hold) {
    std::unique_lock<std::mutex> lk(mu);
    ++started;
    max = std::max(max, ++now);
    cv.notify_all();
    if (release_at_started > 0) {
      cv.wait_for(lk, std::chrono::seconds(30), [&] { return started >= release_at_started; });
    } else {
      lk.unlock();
      std::this_thread::sleep_for(hold);
      lk.lock();
    }
    --now;
    RequestRecord r;
    r.ok = true;
    r.input_tokens = spec.input_tokens;  // echoes which request this was
    r.output_tokens = 1;
    return r;
  }
};

std::vector<RequestSpec> numbered(int n) {
  std::vector<RequestSpec> v(size_t(n), RequestSpec{});
  for (int i = 0; i < n; ++i) v[size_t(i)].input_tokens = i;
  return v;
}

TEST(LoadgenRunner, InfiniteRateHasEveryRequestInFlightAtOnce) {
  // 512 requests that each wait until all 512 have started: completes only if none is held back.
  InFlight f;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RequestRecord> recs =
      run_load(numbered(512), LoadParams{},
               [&](const RequestSpec& s, auto) { return f.enter_wait_leave(s, 512, {}); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(f.max, 512);
  ASSERT_EQ(recs.size(), 512u);
  for (size_t i = 0; i < recs.size(); ++i)
    EXPECT_EQ(recs[i].input_tokens, int64_t(i));  // request order
}

TEST(LoadgenRunner, ConcurrencyCapHolds) {
  InFlight f;
  LoadParams p;
  p.max_concurrency = 4;
  size_t last_done = 0, calls = 0;
  const std::vector<RequestRecord> recs = run_load(
      numbered(40), p,
      [&](const RequestSpec& s, auto) {
        return f.enter_wait_leave(s, 0, std::chrono::milliseconds(5));
      },
      [&](size_t done, size_t total) {
        EXPECT_EQ(total, 40u);
        EXPECT_GE(done, last_done);
        last_done = done;
        ++calls;
      });
  EXPECT_LE(f.max, 4);
  EXPECT_GE(f.max, 2);  // the cap is reached in practice, but a loaded machine may serialise
  EXPECT_EQ(f.started, 40);
  EXPECT_EQ(last_done, 40u);
  EXPECT_GT(calls, 0u);
  for (size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(recs[i].input_tokens, int64_t(i));
}

TEST(LoadgenRunner, FollowsTheScheduleNoEarlierThanDue) {
  // rate 40/s, 10 requests: request i is sent no earlier than its scheduled time.
  LoadParams p;
  p.rate = 40;
  p.seed = 3;
  const std::vector<double> due = arrival_schedule(10, p.rate, p.burstiness, p.seed);
  const std::vector<RequestRecord> recs =
      run_load(numbered(10), p, [](const RequestSpec& s, auto t0) {
        RequestRecord r;
        r.ok = true;
        r.input_tokens = s.input_tokens;
        r.start_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return r;
      });
  for (size_t i = 0; i < recs.size(); ++i) EXPECT_GE(recs[i].start_s, due[i]) << i;
}

}  // namespace
}  // namespace sluice::loadgen
