#include "loadgen/runner.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <system_error>
#include <thread>

namespace sluice::loadgen {

std::vector<double> arrival_schedule(size_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(n, 0.0);
  if (!(rate > 0) || std::isinf(rate) || n == 0) return t;
  const double k = burstiness > 0 ? burstiness : 1.0;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(k, 1.0 / (rate * k));
  for (size_t i = 1; i < n; ++i) t[i] = t[i - 1] + gap(rng);
  return t;
}

bool has_dataset_arrivals(const std::vector<RequestSpec>& requests) {
  return std::any_of(requests.begin(), requests.end(),
                     [](const RequestSpec& r) { return r.arrival_s >= 0; });
}

std::vector<double> send_schedule(const std::vector<RequestSpec>& requests,
                                  const LoadParams& params) {
  if (!has_dataset_arrivals(requests))
    return arrival_schedule(requests.size(), params.rate, params.burstiness, params.seed);
  std::vector<double> t(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) t[i] = std::max(0.0, requests[i].arrival_s);
  return t;
}

std::vector<RequestRecord> run_load(const std::vector<RequestSpec>& requests,
                                    const LoadParams& params, const SendFn& send,
                                    const ProgressFn& progress) {
  using clock = std::chrono::steady_clock;
  const size_t n = requests.size();
  const std::vector<double> schedule = send_schedule(requests, params);
  std::vector<size_t> order(n);  // dispatch order: by send time, ties in request order
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return schedule[a] < schedule[b]; });
  std::vector<RequestRecord> records(n);
  std::vector<std::thread> threads(n);

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;          // guarded by mu
  std::vector<size_t> ended;  // finished, not yet joined; guarded by mu
  size_t n_finished = 0;      // guarded by mu

  // Joins the threads that said they are done (they touch nothing after that), then reports.
  auto reap = [&](std::unique_lock<std::mutex>& lk) {
    if (ended.empty()) return;
    std::vector<size_t> batch;
    batch.swap(ended);
    const size_t finished = n_finished;
    lk.unlock();
    for (size_t i : batch) threads[i].join();
    if (progress) progress(finished, n);
    lk.lock();
  };

  const clock::time_point t0 = clock::now();
  for (size_t i : order) {
    const auto due = t0 + std::chrono::duration_cast<clock::duration>(
                              std::chrono::duration<double>(schedule[i]));
    std::unique_lock<std::mutex> lk(mu);
    while (true) {
      reap(lk);
      if (clock::now() >= due) break;
      cv.wait_until(lk, due, [&] { return !ended.empty(); });
    }
    while (params.max_concurrency > 0 && in_flight >= params.max_concurrency) {
      cv.wait(lk, [&] { return !ended.empty() || in_flight < params.max_concurrency; });
      reap(lk);
    }
    ++in_flight;
    lk.unlock();
    try {
      threads[i] = std::thread([&, i] {
        RequestRecord r;
        try {
          r = send(requests[i], t0);
        } catch (const std::exception& e) {  // a bug or bad_alloc: a failed request, not a crash
          r.ok = false;
          r.error = std::string("request aborted: ") + e.what();
        }
        std::lock_guard<std::mutex> g(mu);
        records[i] = std::move(r);
        --in_flight;
        ++n_finished;
        ended.push_back(i);
        cv.notify_all();
      });
    } catch (const std::system_error& e) {
      std::lock_guard<std::mutex> g(mu);
      records[i].ok = false;
      records[i].error = std::string("cannot start a request thread: ") + e.what();
      records[i].start_s = std::chrono::duration<double>(clock::now() - t0).count();
      --in_flight;
      ++n_finished;
    }
  }
  std::unique_lock<std::mutex> lk(mu);
  while (true) {
    reap(lk);
    if (n_finished == n) break;
    cv.wait(lk, [&] { return !ended.empty(); });
  }
  lk.unlock();
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
  if (progress) progress(n, n);
  return records;
}

std::vector<RequestRecord> run_load(const std::vector<RequestSpec>& requests,
                                    const LoadParams& params, const ClientConfig& client,
                                    const ProgressFn& progress) {
  return run_load(
      requests, params,
      [&client](const RequestSpec& spec, std::chrono::steady_clock::time_point t0) {
        return send_request(client, spec, t0);
      },
      progress);
}

}  // namespace sluice::loadgen
