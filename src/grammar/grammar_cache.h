// Compiled grammars by source: a request that repeats a schema (nearly all of them do: one
// application, one schema) reuses its CompiledGrammar and with it the warm mask cache, instead
// of compiling again (vLLM #12122: compiling per request took TTFT from 0.6 s to 4 s).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "grammar/token_mask.h"

namespace sluice::grammar {

struct GrammarCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;         // compiles (successful or not)
  uint64_t errors = 0;         // compiles that failed
  double compile_seconds = 0;  // total, front end + lower()
  double compile_seconds_max = 0;
  size_t entries = 0;
};

// Thread-safe LRU of compiled grammars for one vocabulary.
class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity = 256);

  // The grammar for `key` (the kind and canonical text of a source, e.g. "json_schema:" +
  // schema.dump()), compiled by `make` on a miss. Errors are not cached.
  Result<std::shared_ptr<const CompiledGrammar>> get(
      const std::string& key, const std::function<Result<GrammarSpec>()>& make);
  GrammarCacheStats stats() const;
  const std::shared_ptr<const TokenVocab>& vocab() const { return vocab_; }

 private:
  std::shared_ptr<const TokenVocab> vocab_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>>
      lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  GrammarCacheStats stats_;
};

}  // namespace sluice::grammar
