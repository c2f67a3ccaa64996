#include "sample/stop.h"

#include <algorithm>
#include <utility>

namespace sluice {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {}

StopMatcher::Output StopMatcher::push(std::string_view piece) {
  Output out;
  if (stopped()) {
    out.stop_index = stop_index_;
    return out;
  }
  const size_t old_size = held_.size();
  held_.append(piece);

  // held_ had no whole stop before this piece, so a match must end inside the new bytes:
  // a stop of length L can start no earlier than old_size - (L - 1).
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  int32_t best = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    if (s.empty()) continue;
    const size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
    const size_t pos = held_.find(s, from);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_start)) {
      best_start = pos;
      best_end = end;
      best = static_cast<int32_t>(i);
    }
  }
  if (best >= 0) {
    stop_index_ = best;
    out.stop_index = best;
    held_.resize(include_stop_ ? best_end : best_start);
    out.text = std::move(held_);
    held_.clear();
    return out;
  }

  const size_t keep = held_suffix_len();
  const size_t emit = held_.size() - keep;
  out.text.assign(held_, 0, emit);
  held_.erase(0, emit);
  return out;
}

std::string StopMatcher::flush() {
  std::string text = std::move(held_);
  held_.clear();
  return text;
}

size_t StopMatcher::held_suffix_len() const {
  const std::string_view held(held_);
  size_t best = 0;
  for (const std::string& s : stops_) {
    // Proper prefixes only: a whole stop would have matched.
    for (size_t k = std::min(s.empty() ? 0 : s.size() - 1, held.size()); k > best; --k) {
      if (held.substr(held.size() - k) == std::string_view(s).substr(0, k)) {
        best = k;
        break;
      }
    }
  }
  return best;
}

}  // namespace sluice
