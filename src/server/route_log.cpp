#include "server/route_log.h"

#include <charconv>

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

std::optional<std::vector<uint64_t>> parse_route_ids(std::string_view list, size_t max_ids) {
  std::vector<uint64_t> ids;
  for (size_t at = 0; at < list.size() && ids.size() < max_ids;) {
    size_t comma = list.find(',', at);
    if (comma == std::string_view::npos) comma = list.size();
    uint64_t id = 0;
    const auto [end, ec] = std::from_chars(list.data() + at, list.data() + comma, id);
    if (ec != std::errc() || end != list.data() + comma) return std::nullopt;
    ids.push_back(id);
    at = comma + 1;
  }
  return ids;
}

}  // namespace sluice::server
