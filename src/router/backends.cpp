#include "router/backends.h"

#include <algorithm>
#include <charconv>
#include <future>
#include <random>
#include <sstream>
#include <type_traits>

#include "base/log.h"

namespace sluice::router {
namespace {

using ojson = nlohmann::ordered_json;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

http::ApiError api_error(int status, std::string message, std::string type, std::string code,
                         std::string param = "") {
  http::ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

}  // namespace

std::pair<int64_t, int64_t> parse_load_metrics(std::string_view text) {
  double running = -1, waiting = -1;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    const size_t value_at = line.rfind(' ');
    if (name_end == std::string_view::npos || value_at == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, name_end);
    double* slot = ends_with(name, "num_requests_running")   ? &running
                   : ends_with(name, "num_requests_waiting") ? &waiting
                                                             : nullptr;
    if (!slot) continue;
    const std::string value(line.substr(value_at + 1));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) continue;
    *slot = std::max(0.0, *slot) + v;
  }
  return {int64_t(running), int64_t(waiting)};
}

Backends::Backends(std::vector<Endpoint> endpoints, const PolicyConfig& policy,
                   const BackendsOptions& options)
    : options_(options), router_(policy, int(endpoints.size())) {
  for (Endpoint& ep : endpoints) backends_.push_back(std::make_unique<Backend>(std::move(ep)));
  // Route ids of different router processes in front of one backend should not collide.
  next_route_id_ = (std::random_device()() & 0xffffffull) << 20 | 1;
}

bool Backends::serves_locked(const Backend& b, const std::string& model) const {
  if (model.empty() || !b.models_known) return true;
  for (const ojson& card : b.models)
    if (card.value("id", "") == model) return true;
  return false;
}

std::variant<Pick, http::ApiError> Backends::pick(const std::string& model, const std::string& key,
                                                  std::span<const int> excluded, bool track) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = backends_.size();
  std::vector<BackendLoad> loads(n);
  bool any_serves = false;
  for (size_t i = 0; i < n; ++i) {
    const Backend& b = *backends_[i];
    const bool serves = serves_locked(b, model);
    any_serves = any_serves || serves;
    const bool out = std::find(excluded.begin(), excluded.end(), int(i)) != excluded.end();
    loads[i] = BackendLoad{b.healthy && serves && !out, b.in_flight, b.running, b.waiting};
  }
  if (!any_serves) {
    std::string known;
    for (const auto& b : backends_)
      for (const ojson& card : b->models) {
        const std::string id = card.value("id", "");
        if (known.find("'" + id + "'") == std::string::npos)
          known += (known.empty() ? "'" : ", '") + id + "'";
      }
    return api_error(404,
                     "the model '" + model + "' does not exist" +
                         (known.empty() ? "" : "; the router's backends serve " + known),
                     "invalid_request_error", "model_not_found", "model");
  }
  const RouteDecision d = router_.choose(key, loads);
  if (d.backend < 0) {
    http::ApiError e = api_error(
        503,
        excluded.empty() ? "no healthy backend" + (model.empty() ? "" : " serves '" + model + "'")
                         : "the backend failed and no other healthy backend" +
                               (model.empty() ? "" : " serves '" + model + "'"),
        "service_unavailable", "no_backend");
    e.retry_after_s = 1;
    return e;
  }
  Backend& b = *backends_[size_t(d.backend)];
  ++b.in_flight;
  ++b.requests;
  if (d.by_affinity) ++b.affinity;
  Pick p;
  p.backend = d.backend;
  p.decision = d;
  if (!track || key.empty()) return p;
  b.key_tokens += uint64_t(double(key.size()) / kKeyBytesPerToken);
  b.predicted_hit_tokens += uint64_t(double(d.match_chars) / kKeyBytesPerToken);
  router_.insert(d.backend, key);
  if (b.reports_cache && options_.max_tracked_routes > 0) {
    p.route_id = next_route_id_++;
    b.lru.push_front(p.route_id);
    b.tracked.emplace(p.route_id, Tracked{key, -1, b.lru.begin()});
    b.tracked_bytes += key.size();
    while (!b.lru.empty() && (b.tracked.size() > options_.max_tracked_routes ||
                              b.tracked_bytes > options_.max_tracked_bytes)) {
      untrack_locked(b, b.lru.back());
    }
  }
  return p;
}

void Backends::untrack_locked(Backend& b, uint64_t id) {
  auto it = b.tracked.find(id);
  if (it == b.tracked.end()) return;
  b.tracked_bytes -= it->second.key.size();
  b.lru.erase(it->second.lru);
  b.tracked.erase(it);
}

void Backends::finish(int b) {
  std::lock_guard<std::mutex> lock(mu_);
  --backends_[size_t(b)]->in_flight;
}

void Backends::set_health_locked(int i, bool healthy, const std::string& why) {
  Backend& b = *backends_[size_t(i)];
  if (b.healthy == healthy) return;
  b.healthy = healthy;
  if (healthy) {
    SLUICE_LOG(kInfo, "router: backend " + b.pool.endpoint().url + " is healthy");
    return;
  }
  ++b.takeouts;
  router_.clear(i);
  b.tracked.clear();
  b.lru.clear();
  b.tracked_bytes = 0;
  b.running = b.waiting = -1;
  SLUICE_LOG(kWarn, "router: backend " + b.pool.endpoint().url + " taken out: " + why);
}

void Backends::record_failure(int b, bool take_out, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++backends_[size_t(b)]->failures;
  if (take_out) set_health_locked(b, false, why);
}

void Backends::record_retry(int b) {
  std::lock_guard<std::mutex> lock(mu_);
  ++backends_[size_t(b)]->retries;
}

void Backends::record_stream_error(int b) {
  std::lock_guard<std::mutex> lock(mu_);
  ++backends_[size_t(b)]->stream_errors;
}

void Backends::record_client_gone() {
  std::lock_guard<std::mutex> lock(mu_);
  ++client_gone_;
}

void Backends::record_usage(int b, int64_t prompt_tokens, int64_t cached_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  Backend& be = *backends_[size_t(b)];
  if (prompt_tokens >= 0) {
    be.reported_prompt_tokens += uint64_t(prompt_tokens);
    ++be.reported_responses;
  }
  if (cached_tokens >= 0) be.reported_cached_tokens += uint64_t(cached_tokens);
}

void Backends::poll_once(const std::atomic<bool>* stop) {
  // In parallel: a backend that accepts connections but never answers costs its own poll the
  // timeout, not everyone's.
  std::vector<std::future<void>> polls;
  for (int b = 1; b < size(); ++b) {
    polls.push_back(std::async(std::launch::async, [this, b, stop] { poll_backend(b, stop); }));
  }
  if (size() > 0) poll_backend(0, stop);
  for (auto& p : polls) p.wait();
}

void Backends::poll_backend(int i, const std::atomic<bool>* stop) {
  Backend& b = *backends_[size_t(i)];
  const int timeout = options_.poll_timeout_ms;
  Result<SimpleResponse> health = simple_request(b.pool, "GET", "/health", timeout, stop);
  if (!health.ok() || health->status != 200) {
    std::lock_guard<std::mutex> lock(mu_);
    set_health_locked(
        i, false,
        health.ok() ? "GET /health answered " + std::to_string(health->status) : health.message());
    return;
  }
  Result<SimpleResponse> metrics = simple_request(b.pool, "GET", "/metrics", timeout, stop);
  const auto [running, waiting] = metrics.ok() && metrics->status == 200
                                      ? parse_load_metrics(metrics->body)
                                      : std::pair<int64_t, int64_t>{-1, -1};
  bool need_models;
  {
    std::lock_guard<std::mutex> lock(mu_);
    need_models = !b.healthy || !b.models_known || b.polls % 10 == 0;
  }
  std::optional<std::vector<ojson>> models;
  if (need_models) {
    Result<SimpleResponse> r =
        simple_request(b.pool, "GET", "/v1/models", timeout, stop, options_.api_key);
    if (r.ok() && r->status == 200) {
      ojson j = ojson::parse(r->body, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array()) {
        models.emplace();
        for (ojson& card : j["data"])
          if (card.is_object() && card.contains("id") && card["id"].is_string())
            models->push_back(std::move(card));
      }
    }
  }
  bool poll_cache;
  {
    std::lock_guard<std::mutex> lock(mu_);
    b.running = running;
    b.waiting = waiting;
    if (models) {
      b.models = std::move(*models);
      b.models_known = true;
    }
    ++b.polls;
    set_health_locked(i, true, "");
    poll_cache = b.reports_cache && !b.tracked.empty();
  }
  if (poll_cache) poll_cache_routes(i, stop);
}

void Backends::poll_cache_routes(int i, const std::atomic<bool>* stop) {
  Backend& b = *backends_[size_t(i)];
  std::string target = "/v1/cache/routes?ids=";
  std::vector<uint64_t> asked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t id : b.lru) {
      if (!asked.empty()) target += ',';
      target += std::to_string(id);
      asked.push_back(id);
    }
  }
  Result<SimpleResponse> r = simple_request(b.pool, "GET", target, options_.poll_timeout_ms, stop);
  if (!r.ok()) return;  // the next health poll decides
  std::lock_guard<std::mutex> lock(mu_);
  if (r->status == 404 || r->status == 405) {
    // Not a sluice backend (or an older one): stop tagging and following its requests.
    b.reports_cache = false;
    b.tracked.clear();
    b.lru.clear();
    b.tracked_bytes = 0;
    return;
  }
  if (r->status != 200) return;
  const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("routes") || !j["routes"].is_array()) return;
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> got;  // id -> prompt, cached
  for (const nlohmann::json& e : j["routes"]) {
    if (!e.is_object() || !e.contains("id")) continue;
    got[e["id"].get<uint64_t>()] = {e.value("prompt_tokens", int64_t(0)),
                                    e.value("cached_tokens", int64_t(0))};
  }
  for (uint64_t id : asked) {
    auto t = b.tracked.find(id);
    if (t == b.tracked.end()) continue;
    auto g = got.find(id);
    if (g == got.end()) {
      untrack_locked(b, id);  // the backend forgot it
      continue;
    }
    const auto [prompt, cached] = g->second;
    Tracked& tr = t->second;
    if (tr.max_cached >= 0 && cached < tr.max_cached && prompt > 0) {
      const size_t keep = size_t(double(tr.key.size()) * double(cached) / double(prompt));
      router_.trim(i, tr.key, keep);
      ++b.trimmed_routes;
      tr.max_cached = cached;
      if (cached == 0) untrack_locked(b, id);
    } else {
      tr.max_cached = std::max(tr.max_cached, cached);
    }
  }
}

bool Backends::any_healthy() const {
  return n_healthy() > 0;
}

int Backends::n_healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& b : backends_) n += b->healthy ? 1 : 0;
  return n;
}

bool Backends::healthy(int b) const {
  std::lock_guard<std::mutex> lock(mu_);
  return backends_[size_t(b)]->healthy;
}

size_t Backends::tree_chars(int b) const {
  std::lock_guard<std::mutex> lock(mu_);
  return router_.tree(b).n_chars();
}

ojson Backends::models_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  ojson data = ojson::array();
  std::vector<std::string> seen;
  for (const auto& b : backends_) {
    if (!b->healthy) continue;
    for (const ojson& card : b->models) {
      const std::string id = card.value("id", "");
      if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
      seen.push_back(id);
      data.push_back(card);
    }
  }
  return ojson{{"object", "list"}, {"data", std::move(data)}};
}

std::optional<ojson> Backends::model_card(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& b : backends_) {
    if (!b->healthy) continue;
    for (const ojson& card : b->models)
      if (card.value("id", "") == id) return card;
  }
  return std::nullopt;
}

std::string Backends::render_metrics(const Backends* prefill) const {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  std::unique_lock<std::mutex> lock_prefill;
  if (prefill) {
    lock_prefill = std::unique_lock<std::mutex>(prefill->mu_, std::defer_lock);
    std::lock(lock, lock_prefill);
  } else {
    lock.lock();
  }
  std::ostringstream out;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
    for (const Backends* set : {this, prefill}) {
      if (!set) continue;
      const char* role = !prefill ? "" : set == prefill ? ",role=\"prefill\"" : ",role=\"decode\"";
      for (size_t i = 0; i < set->backends_.size(); ++i) {
        const Backend& b = *set->backends_[i];
        out << name << "{backend=\"" << b.pool.endpoint().url << '"' << role << "} ";
        if constexpr (std::is_invocable_v<decltype(value), const Backend&, int, const Backends&>) {
          out << value(b, int(i), *set) << '\n';
        } else {
          out << value(b, int(i)) << '\n';
        }
      }
    }
  };
  family("sluice_router_backend_healthy", "gauge", "1 while the backend is in routing.",
         [](const Backend& b, int) { return b.healthy ? 1 : 0; });
  family("sluice_router_requests_total", "counter", "Requests sent to the backend (retries too).",
         [](const Backend& b, int) { return b.requests; });
  family("sluice_router_affinity_requests_total", "counter",
         "Requests routed by predicted prefix match (cache_aware).",
         [](const Backend& b, int) { return b.affinity; });
  family("sluice_router_in_flight", "gauge", "Requests the router has at the backend now.",
         [](const Backend& b, int) { return b.in_flight; });
  family("sluice_router_backend_running", "gauge",
         "Running requests the backend last reported (-1: unknown).",
         [](const Backend& b, int) { return b.running; });
  family("sluice_router_backend_waiting", "gauge",
         "Waiting requests the backend last reported (-1: unknown).",
         [](const Backend& b, int) { return b.waiting; });
  family("sluice_router_key_tokens_total", "counter",
         "Routing-key length of the generations routed there, in approximate tokens (bytes / 4).",
         [](const Backend& b, int) { return b.key_tokens; });
  family("sluice_router_predicted_hit_tokens_total", "counter",
         "Predicted prefix-cache hits of those generations, approximate tokens (bytes / 4).",
         [](const Backend& b, int) { return b.predicted_hit_tokens; });
  family("sluice_router_reported_prompt_tokens_total", "counter",
         "usage.prompt_tokens of the backend's responses.",
         [](const Backend& b, int) { return b.reported_prompt_tokens; });
  family("sluice_router_reported_hit_tokens_total", "counter",
         "usage.prompt_tokens_details.cached_tokens of the backend's responses.",
         [](const Backend& b, int) { return b.reported_cached_tokens; });
  family("sluice_router_failures_total", "counter",
         "Requests that failed at the backend before their answer started.",
         [](const Backend& b, int) { return b.failures; });
  family("sluice_router_retries_total", "counter",
         "Requests retried on this backend after another one failed.",
         [](const Backend& b, int) { return b.retries; });
  family("sluice_router_stream_errors_total", "counter",
         "Answers the backend broke off (ended with an error event or a 502).",
         [](const Backend& b, int) { return b.stream_errors; });
  family("sluice_router_takeouts_total", "counter", "Times the backend was taken out of routing.",
         [](const Backend& b, int) { return b.takeouts; });
  family("sluice_router_trimmed_routes_total", "counter",
         "Routed requests whose predicted prefix was cut after the backend reported evictions.",
         [](const Backend& b, int) { return b.trimmed_routes; });
  family("sluice_router_tree_bytes", "gauge", "Bytes in the backend's predicted prefix tree.",
         [](const Backend&, int i, const Backends& set) { return set.router_.tree(i).n_chars(); });
  out << "# HELP sluice_router_client_disconnects_total Clients that hung up before their "
         "answer ended.\n# TYPE sluice_router_client_disconnects_total counter\n"
      << "sluice_router_client_disconnects_total " << client_gone_ << '\n';
  return out.str();
}

}  // namespace sluice::router
