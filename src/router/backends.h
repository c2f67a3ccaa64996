// The router's picture of its backends: health, models, load, what it routed where, and the
// counters /metrics exports. Thread-safe: HTTP handler threads pick backends and report results,
// the health thread polls (one mutex around the routing state; HTTP happens outside it).
//
// Health (poll_once, every --health-interval):
//   GET /health     200: healthy. Anything else, or no answer: taken out of routing (and its
//                   prefix tree forgotten: a backend that comes back has most likely restarted)
//                   until a later poll says 200. A request that cannot reach it takes it out too.
//   GET /metrics    running/waiting requests (sluice_num_requests_running/_waiting; vLLM's
//                   vllm:num_requests_*), when the backend exports them
//   GET /v1/models  the model ids it serves (on the way back in, then every 10th poll)
//   GET /v1/cache/routes?ids=..  (sluice serve) how many leading prompt tokens of the requests
//                   the router tagged (X-Sluice-Route-Id) are still in its prefix cache: a
//                   request whose cached prefix shrank since the last report is trimmed from the
//                   tree in proportion (cached / prompt tokens of its key's bytes)
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "http/api_error.h"
#include "router/policy.h"
#include "router/upstream.h"

namespace sluice::router {

struct BackendsOptions {
  int poll_timeout_ms = 2000;        // per health/metrics/models request
  size_t max_tracked_routes = 1024;  // per backend: requests whose eviction reports are followed
  size_t max_tracked_bytes = size_t(32) << 20;  // per backend: their keys' bytes at most
  // The backends' API key (the router's own: the deployment shares one), sent on the polls of
  // key-protected routes (GET /v1/models); empty: none.
  std::string api_key;
};

// Where a request goes (Backends::pick).
struct Pick {
  int backend = -1;
  RouteDecision decision;
  uint64_t route_id = 0;  // 0: not tracked
};

// Parses running + waiting out of a Prometheus text (sums every series whose name ends in
// num_requests_running / num_requests_waiting). -1 where absent.
std::pair<int64_t, int64_t> parse_load_metrics(std::string_view text);

class Backends {
 public:
  Backends(std::vector<Endpoint> endpoints, const PolicyConfig& policy,
           const BackendsOptions& options);
  Backends(const Backends&) = delete;
  Backends& operator=(const Backends&) = delete;

  int size() const { return int(backends_.size()); }
  ConnectionPool& pool(int b) { return backends_[size_t(b)]->pool; }
  const Endpoint& endpoint(int b) const { return backends_[size_t(b)]->pool.endpoint(); }

  // Chooses a healthy backend serving `model` ("" = any) other than those in `excluded`, and
  // counts the request in its load. `track`: a generation whose key enters the backend's tree
  // (and whose eviction reports are followed). Errors: 404 (no backend serves the model), 503
  // (none is healthy).
  std::variant<Pick, http::ApiError> pick(const std::string& model, const std::string& key,
                                          std::span<const int> excluded, bool track);
  // The request picked for `b` ended (whatever the outcome).
  void finish(int b);
  // A request to `b` failed before its answer started; `take_out`: the backend is unreachable.
  void record_failure(int b, bool take_out, const std::string& why);
  void record_retry(int b);
  void record_stream_error(int b);
  void record_client_gone();
  // usage of a response from `b` (prompt_tokens_details.cached_tokens; -1 where absent).
  void record_usage(int b, int64_t prompt_tokens, int64_t cached_tokens);

  // One round of health, load, model and cache polls over every backend (in parallel; returns
  // when all are done).
  void poll_once(const std::atomic<bool>* stop);

  bool any_healthy() const;
  int n_healthy() const;
  bool healthy(int b) const;
  // The union of the healthy backends' model cards ({"object": "list", "data": [...]}).
  nlohmann::ordered_json models_json() const;
  std::optional<nlohmann::ordered_json> model_card(const std::string& id) const;
  // `prefill`: P/D mode's prefill workers, rendered into the same families with role="prefill"
  // (these then carry role="decode").
  std::string render_metrics(const Backends* prefill = nullptr) const;
  // Copy of the routing state for tests and the simulator's comparisons.
  size_t tree_chars(int b) const;

 private:
  struct Tracked {
    std::string key;
    int64_t max_cached = -1;  // largest cached prefix reported so far (tokens)
    std::list<uint64_t>::iterator lru;
  };
  struct Backend {
    explicit Backend(Endpoint ep) : pool(std::move(ep)) {}
    ConnectionPool pool;
    // Guarded by Backends::mu_.
    bool healthy = false;
    int polls = 0;
    std::vector<nlohmann::ordered_json> models;  // cards from /v1/models
    bool models_known = false;  // false: never listed (it then takes any model name)
    int64_t running = -1, waiting = -1, in_flight = 0;
    bool reports_cache = true;  // /v1/cache/routes answered (false once it did not)
    std::unordered_map<uint64_t, Tracked> tracked;
    std::list<uint64_t> lru;  // most recent first
    size_t tracked_bytes = 0;
    // Counters.
    uint64_t requests = 0, affinity = 0, key_tokens = 0, predicted_hit_tokens = 0;
    uint64_t reported_prompt_tokens = 0, reported_cached_tokens = 0, reported_responses = 0;
    uint64_t failures = 0, retries = 0, stream_errors = 0, takeouts = 0, trimmed_routes = 0;
  };

  bool serves_locked(const Backend& b, const std::string& model) const;
  void set_health_locked(int b, bool healthy, const std::string& why);
  void untrack_locked(Backend& b, uint64_t id);
  void poll_backend(int b, const std::atomic<bool>* stop);
  void poll_cache_routes(int b, const std::atomic<bool>* stop);

  const BackendsOptions options_;
  mutable std::mutex mu_;
  Router router_;  // guarded by mu_
  std::vector<std::unique_ptr<Backend>> backends_;
  uint64_t next_route_id_;
  uint64_t client_gone_ = 0;
};

}  // namespace sluice::router
