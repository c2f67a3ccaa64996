#include "grammar/grammar_cache.h"

#include <algorithm>
#include <chrono>

namespace sluice::grammar {

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(capacity, 1)) {}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(
    const std::string& key, const std::function<Result<GrammarSpec>()>& make) {
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
  }
  // Compiled outside the lock: a slow schema does not stall other requests' lookups. Two
  // requests missing on one key at once both compile; the second insert keeps the first.
  const auto t0 = std::chrono::steady_clock::now();
  Result<GrammarSpec> spec = make();
  Result<std::shared_ptr<const Grammar>> g =
      spec.ok() ? lower(*spec) : Result<std::shared_ptr<const Grammar>>(spec.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mu_);
  ++stats_.misses;
  stats_.compile_seconds += seconds;
  stats_.compile_seconds_max = std::max(stats_.compile_seconds_max, seconds);
  if (!g.ok()) {
    ++stats_.errors;
    return g.status();
  }
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  auto cg = std::const_pointer_cast<CompiledGrammar>(CompiledGrammar::make(*g, vocab_));
  cg->compile_seconds = seconds;
  lru_.emplace_front(key, cg);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  stats_.entries = lru_.size();
  return std::shared_ptr<const CompiledGrammar>(cg);
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace sluice::grammar
