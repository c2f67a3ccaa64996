// Server metrics in the Prometheus text format (GET /metrics). Names and meanings are listed
// in docs/server.md; latencies are in seconds.
//
// Who writes what: the engine thread records per-request latencies (from the engine's own
// timestamps, RequestTimes) and per-step times, and publishes a snapshot of engine state
// (queues, KV blocks, prefix cache, token counters) after every step, since only it may read
// the engine; HTTP threads count responses by route and status. One mutex guards everything:
// updates are a few additions, and a scrape copies nothing large.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "http/http_transport.h"

namespace sluice::server {

// Appends one unlabelled sample with its "# HELP" and "# TYPE" lines ("counter", "gauge").
void scalar(std::string& out, const std::string& name, const char* type, const std::string& help,
            double v);

// A cumulative Prometheus histogram with fixed upper bounds.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends "# HELP", "# TYPE" and the _bucket/_sum/_count lines.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], per bucket (the last one is +Inf)
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Engine state, copied by the engine thread after each step.
struct EngineSnapshot {
  int64_t waiting = 0;         // requests in the scheduler's waiting queue
  int64_t running = 0;         // requests in the running batch
  int64_t kv_blocks_used = 0;  // referenced by a request (cached-but-free blocks not counted)
  int64_t kv_blocks_total = 0;
  int64_t kv_bytes_per_block = 0;  // K and V of every layer slot of a block (0: not known)
  int64_t state_slots_used = 0;    // recurrent states of running sequences
  int64_t state_slots_total = 0;
  int64_t state_bytes_per_slot = 0;
  int64_t state_checkpoints_used = 0;  // saved states of the prefix cache (recurrent models)
  int64_t state_checkpoints_total = 0;
  uint64_t preemptions = 0;
  // The engine's own counters, as its parts keep them.
  EngineStats stats;                      // Engine::stats (speculation included)
  PrefixCacheStats prefix;                // KvCacheManager::prefix_stats
  CheckpointStats checkpoints;            // KvCacheManager::checkpoint_stats
  BlockShareStats sharing;                // KvCacheManager::share_stats
  SampleWorkspace::GrammarStats grammar;  // Engine::grammar_stats (structured output)
  // Forward passes against the roofline (executor/step_roofline.h); has_roofline false when this
  // machine's ceilings were never measured.
  bool has_roofline = false;
  RooflineStats roofline;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // Engine thread.
  void observe_finished(const RequestTimes& t, FinishReason why);
  void observe_step(double seconds);
  void set_engine(const EngineSnapshot& s);
  // Any thread.
  void count_finish(const std::string& reason, uint64_t n = 1);  // "error", "cancelled"
  void count_http(const std::string& route, int status);
  void count_prompt_tokens(uint64_t n);
  void set_queue_depth(int64_t n);  // admitted, not yet scheduled (the --max-queue count)
  void set_ready(bool ready);
  // The compiled-grammar caches whose counters /metrics reports (set once the model loaded).
  void set_grammar_caches(std::vector<std::shared_ptr<const grammar::GrammarCache>> caches);

  EngineSnapshot engine() const;
  std::string render(const http::ConnectionStats& conn) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const grammar::GrammarCache>> grammar_caches_;
  Histogram ttft_, itl_, e2e_, queue_, step_;
  EngineSnapshot engine_;
  std::map<std::string, uint64_t> finished_;              // finish reason -> count
  std::map<std::pair<std::string, int>, uint64_t> http_;  // (route, status) -> count
  uint64_t prompt_tokens_ = 0;
  int64_t queue_depth_ = 0;
  bool ready_ = false;
};

}  // namespace sluice::server
