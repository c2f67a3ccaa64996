#include "server/route_log.h"

namespace sluice::server {

void RouteLog::record(uint64_t route_id, std::vector<int32_t> prompt) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(route_id); it != entries_.end()) {
    n_tokens_ -= it->second.prompt->size();
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  n_tokens_ += prompt.size();
  lru_.push_front(route_id);
  entries_.emplace(route_id, Entry{std::make_shared<const std::vector<int32_t>>(std::move(prompt)),
                                   lru_.begin()});
  while (!lru_.empty() && (entries_.size() > max_entries_ || n_tokens_ > max_tokens_)) {
    auto it = entries_.find(lru_.back());
    n_tokens_ -= it->second.prompt->size();
    entries_.erase(it);
    lru_.pop_back();
  }
}

std::vector<std::pair<uint64_t, RouteLog::Prompt>> RouteLog::find(
    const std::vector<uint64_t>& ids) const {
  std::vector<std::pair<uint64_t, Prompt>> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t id : ids) {
    auto it = entries_.find(id);
    if (it != entries_.end()) out.emplace_back(id, it->second.prompt);
  }
  return out;
}

size_t RouteLog::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace sluice::server
