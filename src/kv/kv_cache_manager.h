// Per-request KV block tables over a BlockPool, plus the prefix cache: a full block is known
// by hash(parent block's hash, its token ids, salt), so a request whose prompt starts with
// blocks some earlier request computed adopts them instead of recomputing.
//
//   tokens:  [t0 .. t15][t16 .. t31][t32 .. t39]      block_size 16
//   table:   [  b7     ][  b2      ][  b9 (partial)]
//   hashes:  h0 = H(0, t0..t15, salt), h1 = H(h0, t16..t31, salt); partial blocks have none
//
// Block sharing and copy-on-write (n samples of one prompt): fork() gives a new table every
// block of another (ref counts + 1, full blocks keep their hashes). A block is written only by
// a table that holds it alone: allocate_slots() replaces a shared block that the step writes
// into (the forked prompt's last, partial block) by a fresh one and records the copy, which
// the executor performs before that step's forward pass. The last holder writes in place:
//
//   after fork:  A [b7 b2 b9*]  B [b7 b2 b9*]  C [b7 b2 b9*]     b9: 8 of 16 tokens, ref 3
//   next step:   A [b7 b2 b4 ]  B [b7 b2 b5 ]  C [b7 b2 b9 ]     copies b9->b4, b9->b5
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/block_copy.h"
#include "base/request_id.h"
#include "kv/block_pool.h"

namespace sluice {

struct KvCacheConfig {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_cache = true;
  uint64_t salt = 0;  // distinguishes models/adapters sharing one cache
  // The K/V groups (base/cache_layout.h, KvCacheLayout::group_window): each request holds one
  // block table per group, all drawing from the one pool; empty: one global group. A group
  // with window w > 0 attends only to the w newest positions: a step whose first new token is
  // at position p reads nothing before p - w + 1, and no later step reads less recent
  // positions, so allocate_slots() releases that group's blocks wholly before it (their table
  // entries are stale): a long sequence holds about w / block_size blocks there, not its
  // whole context. Released full blocks keep their prefix-cache entries (evictable, as a
  // finished request's), so a later prompt sharing the prefix still finds them until reused.
  std::vector<int32_t> group_windows = {};
  // Models with recurrent layers (base/cache_layout.h, LayerKind::kRecurrent): every request
  // table also holds one of these state slots (the executor's fixed-size state of that
  // sequence), taken with its first blocks and freed with them. 0: no recurrent state. Until
  // the hit's end).
  int32_t n_state_slots = 0;
  // State checkpoints (prefix caching for recurrent models): slots [n_state_slots,
  // n_state_slots + n_state_checkpoints) of the executor's state memory hold saved states, each
  // the state after exactly the full blocks of one cached prefix (known by that prefix's chain
  // hash). A prefix hit then needs the K/V blocks AND a checkpoint at its end, and resumes the
  // request's state from it. Saved by save_state() at block boundaries; least recently used
  // first out. 0 (or no prefix cache): a recurrent model finds no prefix hits.
  int32_t n_state_checkpoints = 0;
  // Checkpoints at every this many blocks of a sequence are kept (until evicted); the others
  // are rolling: each request keeps only its latest (the end of its prompt, then of its output).
  int32_t checkpoint_interval_blocks = 32;
};

// Counters of state checkpoints since start.
struct CheckpointStats {
  uint64_t saved = 0;     // states copied into a checkpoint
  uint64_t restored = 0;  // prefix hits resumed from one
  uint64_t evicted = 0;   // dropped for room (LRU) or replaced by a newer rolling one
};

// Counters of block sharing since start.
struct BlockShareStats {
  uint64_t forks = 0;          // tables forked from another
  uint64_t forked_blocks = 0;  // blocks those forks shared instead of allocating
  uint64_t cow_copies = 0;     // shared blocks copied before a write (copy-on-write)
};

// Cached full blocks that prefix a token sequence (from find_prefix; no references held): per
// K/V group the blocks of the first n_tokens / block_size positions, group-major. A windowed
// group needs only the blocks of the last window before n_tokens; the others are kNoBlock.
//
//   blocks: [ g0: b7 b2 b9 | g1: -1 b4 b5 ]   n_tokens 48, block_size 16, g1's window 20
struct PrefixHit {
  std::vector<BlockId> blocks;  // [n_groups][n_tokens / block_size]
  int32_t n_tokens = 0;
  int32_t state_checkpoint = -1;  // recurrent models: the state slot holding the state there
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  int32_t block_size() const { return pool_.block_size(); }
  // K/V groups: a request holds one block table per group (KvCacheConfig::group_windows).
  int32_t n_groups() const { return int32_t(windows_.size()); }
  int32_t group_window(int32_t g) const { return windows_[size_t(g)]; }
  int32_t n_blocks() const { return pool_.n_blocks(); }
  int32_t n_free_blocks() const { return pool_.n_free(); }
  int32_t n_used_blocks() const { return pool_.n_used(); }
  bool prefix_cache_enabled() const { return config_.enable_prefix_cache; }
  const PrefixCacheStats& prefix_stats() const { return pool_.stats(); }
  const BlockShareStats& share_stats() const { return share_stats_; }

  // Longest run of cached full blocks that prefixes `tokens`, leaving at least one token to
  // compute (its logits are needed). Counts a lookup in the stats.
  PrefixHit find_prefix(std::span<const int32_t> tokens);
  // The tokens find_prefix would hit now (the same rule: one token left, a recurrent model's
  // checkpoint), as a read-only probe: no stats, no references, no LRU change. What a front end
  // reports as a request's cached tokens before the scheduler looks it up.
  int32_t n_hit_tokens(std::span<const int32_t> tokens) const;
  // With windowed groups a hit of n blocks needs every global group's blocks 0 .. n-1 and each
  // windowed group's blocks of the last window before position n x block_size; the deepest
  // such n wins (windowed blocks released or evicted before that window do not matter).
  //
  // Tokens of the longest run of cached full blocks that prefixes `tokens` (every full block
  // may match; find_prefix leaves one token). A read-only probe: no stats, no references, no
  // LRU change. Costs one block hash and a lookup per group per block.
  int32_t n_cached_prefix_tokens(std::span<const int32_t> tokens) const;
  // The blocks of the run of cached full blocks from the first on, in order (the same
  // read-only probe; with a windowed group, every block of the run is still cached, which a
  // hit does not need: what a transfer moves). One K/V group only, as the
  // rest of this block-transfer interface (import_prefix, pin_prefix, set_record_cached): the
  // disk tier and the K/V transfer move single-group caches (their callers refuse the others).
  std::vector<BlockId> cached_prefix_blocks(std::span<const int32_t> tokens) const;

  // Disaggregated serving (a prefill elsewhere, a KV transfer, a disk tier): the full blocks of
  // `tokens` enter the prefix cache as if a finished request had computed them. Blocks already
  // cached are kept; each missing one is allocated and cached (then evictable, last blocks
  // first, as a finished request's). Stops early when the pool is short. Returns the blocks it
  // allocated, whose contents the caller must now write: (index of the block in `tokens`, id).
  // Nothing when the prefix cache is off.
  // `first_block` > 0: the blocks before it must already be cached here (the caller probed
  // them and only brought the rest); the import stops at the first that is not.
  struct ImportedBlock {
    int32_t index = 0;
    BlockId id = kNoBlock;
  };
  std::vector<ImportedBlock> import_prefix(std::span<const int32_t> tokens,
                                           int32_t first_block = 0);

  // The prefix-cache identities of `tokens`' full blocks, in order (the chain hashes a disk
  // tier files blocks under). Empty when the prefix cache is off. Reads only the fixed
  // configuration: safe on any thread while another one uses the manager.
  std::vector<BlockHash> prefix_hashes(std::span<const int32_t> tokens) const;

  // Pinning (a prefill worker keeps a prompt's blocks until a decode worker pulled them): a
  // reference on each block of the cached run that prefixes `tokens` (cached_prefix_blocks), so
  // none is evicted or reused while pinned. Returns the pinned blocks in order; unpin() them
  // exactly once.
  std::vector<BlockId> pin_prefix(std::span<const int32_t> tokens);
  void unpin(std::span<const BlockId> blocks);
  int64_t n_pinned_blocks() const { return n_pinned_; }

  // Newly cached blocks (a disk tier writes them out): while recording is on, every block that
  // enters the prefix cache (commit_computed, import_prefix) is listed until taken. Its data is
  // valid from the end of the step that committed it until the block is reused: take them
  // after each step, before the next.
  struct CachedBlock {
    BlockId id = kNoBlock;
    BlockHash hash = 0;
    std::vector<int32_t> tokens;  // [block_size]
  };
  void set_record_cached(bool on) { record_cached_ = on; }
  std::vector<CachedBlock> take_newly_cached();

  // Makes request `id` hold blocks for tokens [0, n_computed + n_new_tokens), of which
  // [n_computed, n_computed + n_new_tokens) are written next: a block there that another table
  // shares is first replaced by a fresh private one (copy-on-write, queued for take_copies()). On a
  // request's first call, `prefix` blocks are adopted first (n_computed is then
  // prefix->n_tokens). In every windowed group the blocks wholly before the window of
  // position n_computed are released (no step reads them again). Returns false, changing
  // nothing, if the pool is short.
  bool allocate_slots(RequestId id, int32_t n_computed, int32_t n_new_tokens,
                      const PrefixHit* prefix = nullptr);
  // The copies allocate_slots() queued since the last call, in order (apply them in order:
  // a block freed after being copied from may be reused as a later copy's destination).
  std::vector<BlockCopy> take_copies();
  // The state slot copies fork() queued since the last call (src -> dst slots).
  std::vector<BlockCopy> take_state_copies();
  // Recurrent state slots: the request's (-1: none or unknown), and how many are taken.
  int32_t state_slot(RequestId id) const;
  int32_t n_state_slots() const { return config_.n_state_slots; }
  int32_t n_used_state_slots() const {
    return config_.n_state_slots - int32_t(free_states_.size());
  }
  // State checkpoints: request `id` has computed n_computed tokens; at a block boundary the
  // state it holds now is saved (a copy queued for take_state_copies) under the chain hash of
  // its blocks, unless one is saved there already. `keep`: not a rolling checkpoint (e.g. the
  // last boundary of a prompt). No-op without checkpoints or away from a boundary.
  void save_state(RequestId id, int32_t n_computed, bool keep);
  int32_t n_state_checkpoints() const { return config_.n_state_checkpoints; }
  int32_t checkpoint_interval_blocks() const { return config_.checkpoint_interval_blocks; }
  int32_t n_used_checkpoints() const { return int32_t(ckpt_by_hash_.size()); }
  const CheckpointStats& checkpoint_stats() const { return ckpt_stats_; }
  bool checkpointing() const {
    return config_.n_state_checkpoints > 0 && config_.enable_prefix_cache;
  }
  // Moving checkpoints to another engine (K/V transfer) or to disk. A checkpoint is in place
  // once the step its copy went into ran (take_state_copies hands the copies to a step); the
  // calls below see only those.
  //
  // The deepest checkpoint in place whose blocks prefix `tokens`, at most `max_blocks` deep,
  // pinned: neither evicted nor written until unpin_checkpoint(slot) (each pin exactly once).
  // Its state follows tokens [0, n_blocks x block_size). {0, -1}: none.
  struct CheckpointRef {
    int32_t n_blocks = 0;
    int32_t slot = -1;
  };
  CheckpointRef pin_checkpoint(std::span<const int32_t> tokens, int32_t max_blocks);
  void unpin_checkpoint(int32_t slot);
  // A state from elsewhere (a prefill worker, the disk tier) becomes the checkpoint after
  // `tokens` (a positive multiple of block_size; its blocks should be cached for a hit to use
  // it): returns the slot the caller writes at once (before the next step), kept (not
  // rolling), most recently used. -1: a checkpoint is saved there already, or none is free of
  // pins. forget_checkpoint(slot) undoes it (the write failed).
  int32_t import_checkpoint(std::span<const int32_t> tokens);
  void forget_checkpoint(int32_t slot);
  // While recording is on (set_record_cached), the checkpoints that came into place since the
  // last call (a disk tier writes them out): their state is valid until the next step; take
  // them after each step, before the next.
  struct SavedCheckpoint {
    BlockHash key = 0;  // the chain hash of the prefix's last block
    int32_t slot = -1;
  };
  std::vector<SavedCheckpoint> take_newly_checkpointed();

  // `child` (unknown so far) shares every block of `parent`: ref counts + 1, committed full
  // blocks keep their hashes. Takes no free block; the first write into the shared partial
  // last block copies it (see allocate_slots). With recurrent state the child takes a free
  // state slot and a copy of the parent's state is queued (take_state_copies); false, and no
  // fork, when none is free (or the parent is unknown).
  bool fork(RequestId parent, RequestId child);
  // Hands request `from`'s table to `to` (unknown so far), refs unchanged: another request
  // takes over a computation (a group's prompt when its first sample is aborted).
  void move_table(RequestId from, RequestId to);

  // K/V now exist for tokens[0, n_computed): full blocks enter the prefix cache.
  void commit_computed(RequestId id, std::span<const int32_t> tokens, int32_t n_computed);

  // Keeps the blocks of tokens [0, n_tokens) and releases the rest (rejected speculative
  // tokens: blocks only they wrote are freed; they were never committed, so they never enter
  // the prefix cache). Unknown ids are ignored.
  void truncate(RequestId id, int32_t n_tokens);

  // Releases all of a request's blocks (finish, abort or preemption). Unknown ids are ignored.
  void free(RequestId id);

  bool has(RequestId id) const { return tables_.count(id) != 0; }
  // Blocks a sequence of n_tokens holds over every group while its last token is computed
  // alone: the least a prompt of n_tokens - 1 tokens needs to run (a windowed group only its
  // window).
  int32_t blocks_for_step(int32_t n_tokens) const;
  // Leading blocks of the request's tables released as outside a window, summed over the
  // groups (their entries then name the group's first held block: never read, always valid).
  int32_t n_released(RequestId id) const;
  // Blocks the request holds, summed over the groups (its tables less the released entries).
  int32_t n_held(RequestId id) const;
  // The request's block table in group 0 (empty if unknown): the whole story for a single
  // group cache.
  const std::vector<BlockId>& block_table(RequestId id) const;
  // Its tables, one per group ([n_groups][positions / block_size], all the same length; empty
  // if unknown).
  const std::vector<std::vector<BlockId>>& block_tables(RequestId id) const;
  int32_t ref_count(BlockId id) const { return pool_.ref_count(id); }
  void reset_prefix_cache() { pool_.clear_cache(); }

 private:
  struct Table {
    std::vector<std::vector<BlockId>> blocks;  // [n_groups][positional]
    std::vector<size_t> n_released;  // [n_groups] blocks[g][0, n_released[g]) released (stale)
    std::vector<BlockHash> hashes;   // of the leading full blocks already committed
    int32_t state_slot = -1;         // its recurrent state slot (n_state_slots > 0)
    BlockHash rolling = 0;           // its latest rolling checkpoint's key (0: none)
    size_t size() const { return blocks[0].size(); }
  };
  // Releases each windowed group's blocks of `t` wholly before position first_pos - window + 1.
  void release_outside_window(Table& t, int32_t first_pos);
  // The first block a group of window w (0: global) needs when position `first_pos` is
  // computed next.
  size_t first_needed_block(int32_t w, int64_t first_pos) const;
  // The deepest n <= max_blocks such that blocks 0 .. n-1 of `tokens` are a prefix hit (see
  // find_prefix); with `out`, the hit's blocks (PrefixHit::blocks layout).
  int32_t match_prefix(std::span<const int32_t> tokens, int32_t max_blocks,
                       std::vector<BlockId>* out) const;
  // find_prefix's hit in blocks (-1: prefix caching off), its blocks into `blocks` (when not
  // null) and the checkpoint it resumes from into `state_checkpoint` (recurrent models).
  int32_t usable_prefix(std::span<const int32_t> tokens, std::vector<BlockId>* blocks,
                        int32_t* state_checkpoint) const;
  // The key a group's copy of a block is cached under: group 0's is the chain hash itself
  // (what the disk tier files blocks under), the others' are derived from it.
  static BlockHash group_key(BlockHash h, int32_t g);
  int32_t blocks_for(int32_t n_tokens) const {
    return (n_tokens + block_size() - 1) / block_size();
  }
  BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) const;

  KvCacheConfig config_;
  std::vector<int32_t> windows_;  // [n_groups] config_.group_windows, or {0}
  BlockPool pool_;
  std::unordered_map<RequestId, Table> tables_;
  std::vector<BlockCopy> copies_;        // queued by allocate_slots, drained by take_copies
  std::vector<BlockCopy> state_copies_;  // queued by fork, drained by take_state_copies
  std::vector<int32_t> free_states_;     // free recurrent state slots (LIFO)
  // State checkpoints: key (chain hash) -> slot, per checkpoint index its key and last use.
  std::unordered_map<BlockHash, int32_t> ckpt_by_hash_;
  std::vector<BlockHash> ckpt_key_;  // [n_state_checkpoints] (0: free)
  std::vector<uint64_t> ckpt_used_;  // [n_state_checkpoints] LRU ticks
  std::vector<int32_t> ckpt_pins_;   // [n_state_checkpoints] pin_checkpoint()s outstanding
  std::vector<uint8_t> ckpt_ready_;  // [n_state_checkpoints] its state is in place
  std::vector<SavedCheckpoint> ckpt_unready_;  // saved, copy not yet handed to a step
  std::vector<SavedCheckpoint> newly_ckpt_;    // while record_cached_: take_newly_checkpointed
  uint64_t ckpt_tick_ = 0;
  CheckpointStats ckpt_stats_;
  // The deepest n <= limit whose prefix has a checkpoint (hashes: the chain of tokens' blocks),
  // with `in_place_only` one whose state is in place; its slot in *slot. 0 when none.
  int32_t deepest_checkpoint(std::span<const int32_t> tokens, int32_t limit, int32_t* slot,
                             bool in_place_only = false) const;
  void drop_checkpoint(BlockHash key);
  // A checkpoint index for a new state: a free one, else the least recently used (dropped);
  // never a pinned one. -1 when every one is pinned.
  int32_t take_checkpoint_index();
  BlockShareStats share_stats_;
  int64_t n_pinned_ = 0;
  bool record_cached_ = false;
  std::vector<CachedBlock> newly_cached_;  // while record_cached_: drained by take_newly_cached
};

}  // namespace sluice
