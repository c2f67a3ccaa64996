// The KV block pool: ref-counted fixed-size blocks of KV memory, identified by id only (this
// module never touches tensor memory). Free blocks sit in one queue ordered for eviction:
//
//   free queue:  head [LRU ... MRU] tail
//   allocate():  pops from the head; a popped block that still holds a cached prefix loses it
//   release():   a block whose ref count drops to 0 goes to the tail, keeping its cached hash
//
// so blocks of finished requests stay reusable by the prefix cache until memory is needed,
// and are evicted least-recently-used first.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace sluice {

using BlockId = int32_t;
constexpr BlockId kNoBlock = -1;

// Identity of a full block's contents: hash of (parent hash, its token ids, salt).
using BlockHash = uint64_t;

struct PrefixCacheStats {
  uint64_t lookups = 0;         // admissions that consulted the cache
  uint64_t queried_blocks = 0;  // full prompt blocks asked for
  uint64_t hit_blocks = 0;
  uint64_t hit_tokens = 0;
  uint64_t evictions = 0;  // cached blocks reused for new contents
  // hit_blocks / queried_blocks (0 before any query).
  double hit_ratio() const {
    return queried_blocks ? double(hit_blocks) / double(queried_blocks) : 0.0;
  }
  PrefixCacheStats& operator+=(const PrefixCacheStats& o) {
    lookups += o.lookups;
    queried_blocks += o.queried_blocks;
    hit_blocks += o.hit_blocks;
    hit_tokens += o.hit_tokens;
    evictions += o.evictions;
    return *this;
  }
};

class BlockPool {
 public:
  BlockPool(int32_t n_blocks, int32_t block_size);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t n_blocks() const { return int32_t(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks that allocate() can hand out now (free, including evictable cached ones).
  int32_t n_free() const { return n_free_; }
  int32_t n_used() const { return n_blocks() - n_free_; }
  bool can_allocate(int32_t n) const { return n <= n_free_; }

  // Takes `n` blocks (ref count 1 each); the caller checked can_allocate(n).
  std::vector<BlockId> allocate(int32_t n);
  // Adds a reference to a block (a prefix-cache hit or a shared block). A free cached block
  // leaves the free queue.
  void retain(BlockId id);
  // Drops one reference per block. Blocks are queued in the given order, so pass a request's
  // blocks tail-first: its last (least shareable) blocks are then evicted first.
  void release(std::span<const BlockId> ids);

  // Prefix cache: the block holding `hash` with exactly `tokens`, if any (no ref taken).
  std::optional<BlockId> find_cached(BlockHash hash, std::span<const int32_t> tokens) const;
  // Records that full block `id` now holds `tokens` with identity `hash`.
  void cache(BlockId id, BlockHash hash, std::span<const int32_t> tokens);
  bool is_cached(BlockId id) const { return blocks_[size_t(id)].cached; }
  // Forgets every cached hash (e.g. after a weights change); blocks in use are unaffected.
  void clear_cache();

  int32_t ref_count(BlockId id) const { return blocks_[size_t(id)].ref_count; }
  PrefixCacheStats& stats() { return stats_; }
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct Block {
    int32_t ref_count = 0;
    bool cached = false;
    BlockHash hash = 0;
    std::vector<int32_t> tokens;  // cached contents, checked on lookup (hash collisions)
    BlockId prev = kNoBlock;      // free-queue links (valid while ref_count == 0)
    BlockId next = kNoBlock;
  };
  void push_free_tail(BlockId id);
  void unlink_free(BlockId id);
  void uncache(BlockId id);

  int32_t block_size_;
  std::vector<Block> blocks_;
  BlockId free_head_ = kNoBlock;
  BlockId free_tail_ = kNoBlock;
  int32_t n_free_ = 0;
  std::unordered_multimap<BlockHash, BlockId> cached_;
  PrefixCacheStats stats_;
};

}  // namespace sluice
