// The persistent pool: every index visited exactly once, back-to-back jobs, inline fallbacks.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace sluice {
namespace {

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  for (int n : {1, 2, 3, 8}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.n_threads(), n);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    for (int rep = 0; rep < 100; ++rep) pool.run([&](int i) { hits[size_t(i)]++; });
    for (auto& h : hits) EXPECT_EQ(h.load(), 100);
  }
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 31, 33, 4097, 100000}) {
    for (int64_t grain : {1, 7, 1000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        for (int64_t i = b; i < e; ++i) seen[size_t(i)]++;
      });
      for (auto& s : seen) ASSERT_EQ(s.load(), 1) << "n=" << n << " grain=" << grain;
    }
  }
}

TEST(ThreadPool, ManySmallJobsBackToBack) {
  ThreadPool pool(0);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 5000; ++rep) {
    pool.parallel_for(16, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 5000 * 16);
}

}  // namespace
}  // namespace sluice
