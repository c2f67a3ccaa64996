#include "router/policy.h"

#include <algorithm>

namespace sluice::router {

Result<Policy> parse_policy(std::string_view name) {
  if (name == "cache_aware") return Policy::kCacheAware;
  if (name == "least_load") return Policy::kLeastLoad;
  if (name == "round_robin") return Policy::kRoundRobin;
  return make_error("unknown routing policy '", name,
                    "' (use cache_aware, least_load or round_robin)");
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kCacheAware:
      return "cache_aware";
    case Policy::kLeastLoad:
      return "least_load";
    case Policy::kRoundRobin:
      return "round_robin";
  }
  return "?";
}

int64_t BackendLoad::load() const {
  const int64_t reported = running >= 0 ? running + std::max<int64_t>(0, waiting) : 0;
  return std::max(in_flight, reported);
}

Router::Router(const PolicyConfig& config, int n_backends) : config_(config) {
  trees_.reserve(size_t(std::max(0, n_backends)));
  for (int i = 0; i < n_backends; ++i) trees_.emplace_back(config_.max_tree_chars);
}

int Router::least_loaded(std::span<const BackendLoad> backends, bool rotate) {
  const size_t n = backends.size();
  int best = -1;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = rotate ? (next_ + k) % n : k;
    if (!backends[i].eligible) continue;
    if (best < 0) {
      best = int(i);
      continue;
    }
    const int64_t li = backends[i].load(), lb = backends[size_t(best)].load();
    if (li < lb || (!rotate && li == lb && trees_[i].n_chars() < trees_[size_t(best)].n_chars())) {
      best = int(i);
    }
  }
  if (rotate && best >= 0) next_ = size_t(best) + 1;
  return best;
}

RouteDecision Router::choose(std::string_view key, std::span<const BackendLoad> backends) {
  RouteDecision d;
  const size_t n = std::min(backends.size(), trees_.size());
  backends = backends.first(n);
  switch (config_.policy) {
    case Policy::kRoundRobin:
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (next_ + k) % n;
        if (!backends[i].eligible) continue;
        d.backend = int(i);
        next_ = i + 1;
        break;
      }
      break;
    case Policy::kLeastLoad:
      d.backend = least_loaded(backends, /*rotate=*/true);
      break;
    case Policy::kCacheAware: {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (const BackendLoad& b : backends) {
        if (!b.eligible) continue;
        lo = std::min(lo, b.load());
        hi = std::max(hi, b.load());
      }
      if (lo == INT64_MAX) break;  // nothing eligible
      const bool imbalanced = hi - lo > config_.balance_abs_threshold &&
                              double(hi) > config_.balance_rel_threshold * double(lo);
      if (!imbalanced && !key.empty()) {
        int best = -1;
        size_t best_match = 0;
        for (size_t i = 0; i < n; ++i) {
          if (!backends[i].eligible) continue;
          const size_t m = trees_[i].match(key);
          if (best < 0 || m > best_match ||
              (m == best_match && backends[i].load() < backends[size_t(best)].load())) {
            best = int(i);
            best_match = m;
          }
        }
        if (best >= 0 && best_match > 0 &&
            double(best_match) >= config_.cache_threshold * double(key.size())) {
          d.backend = best;
          d.by_affinity = true;
        }
      }
      if (d.backend < 0) d.backend = least_loaded(backends, /*rotate=*/false);
      break;
    }
  }
  if (d.backend >= 0) d.match_chars = trees_[size_t(d.backend)].match(key);
  return d;
}

void Router::insert(int backend, std::string_view key) {
  if (backend < 0 || size_t(backend) >= trees_.size() || key.empty()) return;
  trees_[size_t(backend)].insert(key);
}

void Router::trim(int backend, std::string_view key, size_t keep_chars) {
  if (backend < 0 || size_t(backend) >= trees_.size()) return;
  trees_[size_t(backend)].trim(key, keep_chars);
}

void Router::clear(int backend) {
  if (backend < 0 || size_t(backend) >= trees_.size()) return;
  trees_[size_t(backend)].clear();
}

}  // namespace sluice::router
