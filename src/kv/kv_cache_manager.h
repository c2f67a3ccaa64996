// Per-request KV block tables over a BlockPool, plus the prefix cache: a full block is known
// by hash(parent block's hash, its token ids, salt), so a request whose prompt starts with
// blocks some earlier request computed adopts them instead of recomputing.
//
//   tokens:  [t0 .. t15][t16 .. t31][t32 .. t39]      block_size 16
//   table:   [  b7     ][  b2      ][  b9 (partial)]
//   hashes:  h0 = H(0, t0..t15, salt), h1 = H(h0, t16..t31, salt); partial blocks have none
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace sluice {

using RequestId = int64_t;

struct KvCacheConfig {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_cache = true;
  uint64_t salt = 0;  // distinguishes models/adapters sharing one cache
};

// Cached full blocks that prefix a token sequence (from find_prefix; no references held).
struct PrefixHit {
  std::vector<BlockId> blocks;
  int32_t n_tokens = 0;
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  int32_t block_size() const { return pool_.block_size(); }
  int32_t n_blocks() const { return pool_.n_blocks(); }
  int32_t n_free_blocks() const { return pool_.n_free(); }
  int32_t n_used_blocks() const { return pool_.n_used(); }
  bool prefix_cache_enabled() const { return config_.enable_prefix_cache; }
  const PrefixCacheStats& prefix_stats() const { return pool_.stats(); }

  // Longest run of cached full blocks that prefixes `tokens`, leaving at least one token to
  // compute (its logits are needed). Counts a lookup in the stats.
  PrefixHit find_prefix(std::span<const int32_t> tokens);

  // Makes request `id` hold blocks for `n_tokens` tokens. On a request's first call, `prefix`
  // blocks are adopted first. Returns false, changing nothing, if the pool is short.
  bool allocate_slots(RequestId id, int32_t n_tokens, const PrefixHit* prefix = nullptr);

  // K/V now exist for tokens[0, n_computed): full blocks enter the prefix cache.
  void commit_computed(RequestId id, std::span<const int32_t> tokens, int32_t n_computed);

  // Releases all of a request's blocks (finish, abort or preemption). Unknown ids are ignored.
  void free(RequestId id);

  bool has(RequestId id) const { return tables_.count(id) != 0; }
  // The request's block table (empty if unknown).
  const std::vector<BlockId>& block_table(RequestId id) const;
  int32_t ref_count(BlockId id) const { return pool_.ref_count(id); }
  void reset_prefix_cache() { pool_.clear_cache(); }

 private:
  struct Table {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;  // of the leading full blocks already committed
  };
  int32_t blocks_for(int32_t n_tokens) const {
    return (n_tokens + block_size() - 1) / block_size();
  }
  BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) const;

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<RequestId, Table> tables_;
};

}  // namespace sluice
