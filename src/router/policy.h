// Which backend serves a request: the routing policies of `sluice router` (docs/router.md), as
// pure logic over routing keys and loads, so that `sluice sim` can run the same decisions on
// virtual replicas. No HTTP, no threads, no clocks; the caller locks around a Router.
//
//   cache_aware (SGLang's cache-aware router):
//     1. load imbalance: max_load - min_load > balance_abs_threshold
//                        and max_load > balance_rel_threshold * min_load  -> least loaded
//     2. else the backend with the longest predicted prefix match, if
//        match / key length >= cache_threshold                            -> longest match
//     3. else                                                            -> least loaded
//     ties: lower load, then smaller tree, then lower index.
//   least_load:  least loaded (ties: round robin among the tied).
//   round_robin: the next eligible backend in turn.
//
// Load of a backend = max(requests the router has in flight there, running + waiting the backend
// reported): the router's own count is fresh but misses other clients' requests; the report is
// complete but as old as the last poll. They overlap (the router's requests are in the report),
// so the larger of the two, not the sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "router/prefix_tree.h"

namespace sluice::router {

enum class Policy : uint8_t { kCacheAware, kLeastLoad, kRoundRobin };
Result<Policy> parse_policy(std::string_view name);  // "cache_aware" | "least_load" | "round_robin"
const char* policy_name(Policy p);

// Routing keys hold about this many bytes per token (text: ~4 characters per token in English
// BPE vocabularies; token ids: 4 bytes each), for turning predicted matches into tokens.
inline constexpr double kKeyBytesPerToken = 4.0;

struct PolicyConfig {
  Policy policy = Policy::kCacheAware;
  double cache_threshold = 0.5;             // match / key length needed to route by affinity
  int64_t balance_abs_threshold = 64;       // imbalance: max - min load above this ...
  double balance_rel_threshold = 1.5;       // ... and max above this times min
  size_t max_tree_chars = size_t(1) << 24;  // per backend
};

// One backend as the policy sees it at decision time.
struct BackendLoad {
  bool eligible = true;   // healthy and serving the requested model
  int64_t in_flight = 0;  // requests the router has there now
  int64_t running = -1;   // last reported by the backend; -1: unknown
  int64_t waiting = -1;
  int64_t load() const;
};

struct RouteDecision {
  int backend = -1;        // -1: no eligible backend
  size_t match_chars = 0;  // predicted cached prefix of the key at that backend
  bool by_affinity = false;
};

class Router {
 public:
  Router(const PolicyConfig& config, int n_backends);

  // `backends[i]` describes backend i (size n_backends()). Does not change any tree: call
  // insert() once the request was sent.
  RouteDecision choose(std::string_view key, std::span<const BackendLoad> backends);
  // The request with `key` went to `backend`: its prefix cache will hold the key.
  void insert(int backend, std::string_view key);
  // `backend` reports that only the first `keep_chars` bytes of `key` are still cached.
  void trim(int backend, std::string_view key, size_t keep_chars);
  // Forgets everything about `backend` (it restarted, or was taken out).
  void clear(int backend);

  int n_backends() const { return int(trees_.size()); }
  const PrefixTree& tree(int backend) const { return trees_[size_t(backend)]; }
  const PolicyConfig& config() const { return config_; }

 private:
  // Eligible backend with the least load; ties: smaller tree then lower index, or (rotate) the
  // first one at or after the round-robin cursor.
  int least_loaded(std::span<const BackendLoad> backends, bool rotate);

  PolicyConfig config_;
  std::vector<PrefixTree> trees_;
  size_t next_ = 0;  // round-robin cursor
};

}  // namespace sluice::router
