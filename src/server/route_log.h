// The prompts of requests a router tagged (header X-Sluice-Route-Id: N), so that the router can
// ask later how much of each is still in the prefix cache (GET /v1/cache/routes?ids=N,M,...) and
// correct its predicted picture after evictions (docs/router.md). Bounded: the newest
// `max_entries` requests and `max_tokens` prompt tokens; older ones are forgotten (the router
// then stops asking about them). Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::server {

class RouteLog {
 public:
  using Prompt = std::shared_ptr<const std::vector<int32_t>>;

  explicit RouteLog(size_t max_entries = 4096, size_t max_tokens = size_t(4) << 20)
      : max_entries_(max_entries), max_tokens_(max_tokens) {}

  void record(uint64_t route_id, std::vector<int32_t> prompt);
  // The prompts of the known ids among `ids` (unknown ones are left out), in `ids` order.
  std::vector<std::pair<uint64_t, Prompt>> find(const std::vector<uint64_t>& ids) const;
  size_t size() const;

 private:
  struct Entry {
    Prompt prompt;
    std::list<uint64_t>::iterator lru;
  };
  const size_t max_entries_;
  const size_t max_tokens_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // newest first
  size_t n_tokens_ = 0;
};

// The ids of GET /v1/cache/routes?ids=N,M,...: comma-separated decimal integers, at most
// `max_ids` (the rest are ignored; a trailing comma is allowed); nullopt when one is not an
// integer.
std::optional<std::vector<uint64_t>> parse_route_ids(std::string_view list, size_t max_ids = 4096);

}  // namespace sluice::server
