// The load of a serving benchmark: when each request is sent (an open-loop arrival process)
// and how many may be in flight at once.
//
// Arrivals are open-loop, as a population of independent users: request i is sent at its
// scheduled time whether or not earlier ones finished, so a saturated server shows up as
// growing TTFT, not as a lower offered rate. `max_concurrency` (optional) caps requests in
// flight; a request whose time has come waits for a free slot (like vLLM's
// --max-concurrency), and its latencies are measured from when it is actually sent.
//
// Threads: one per in-flight request (blocking httplib client), joined as they finish, so a
// run of any length holds at most `max_concurrency` (or all in-flight) threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "loadgen/client.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"

namespace sluice::loadgen {

inline constexpr double kInfiniteRate = std::numeric_limits<double>::infinity();

// Send times (seconds after the start) of `n` requests: request 0 at 0, then i.i.d. gaps from
// a gamma distribution with shape k = `burstiness` and scale 1 / (rate * k), so the mean gap is
// 1 / rate whatever k: k = 1 is a Poisson process (exponential gaps), k < 1 burstier, k > 1
// more regular (vLLM's --burstiness). rate = +inf: everything at 0. Deterministic for a seed.
std::vector<double> arrival_schedule(size_t n, double rate, double burstiness, uint64_t seed);

struct LoadParams {
  double rate = kInfiniteRate;  // requests/s offered
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: no cap
  uint64_t seed = 0;        // of the arrival schedule
};

// Whether any request carries a dataset-given send time (RequestSpec::arrival_s >= 0).
bool has_dataset_arrivals(const std::vector<RequestSpec>& requests);

// When each request is sent, in request order: the requests' own arrival_s when any has one
// (max(arrival_s, 0) for each: a request without one goes at 0; rate, burstiness and seed are
// then unused), else arrival_schedule(n, rate, burstiness, seed).
std::vector<double> send_schedule(const std::vector<RequestSpec>& requests,
                                  const LoadParams& params);

// Sends one request, measured against the run start `t0` (send_request, or a fake in tests).
using SendFn =
    std::function<RequestRecord(const RequestSpec&, std::chrono::steady_clock::time_point t0)>;
// Called on the dispatching thread after each request finished: (finished, total).
using ProgressFn = std::function<void(size_t, size_t)>;

// Runs every request of `requests` at its send_schedule() time (dispatched in time order, the
// same open-loop rule and in-flight cap either way) and returns their records, in request
// order. Never throws; a thread that cannot be started becomes a failed record.
std::vector<RequestRecord> run_load(const std::vector<RequestSpec>& requests,
                                    const LoadParams& params, const SendFn& send,
                                    const ProgressFn& progress = {});

// run_load with the real streaming client.
std::vector<RequestRecord> run_load(const std::vector<RequestSpec>& requests,
                                    const LoadParams& params, const ClientConfig& client,
                                    const ProgressFn& progress = {});

}  // namespace sluice::loadgen
