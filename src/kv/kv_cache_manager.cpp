#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cassert>

namespace sluice {

namespace {
uint64_t mix(uint64_t h, uint64_t x) {
  // splitmix64-style mixing of x into h.
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}
const std::vector<BlockId> kEmpty;
const std::vector<std::vector<BlockId>> kEmptyTables;
}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config),
      windows_(config.group_windows.empty() ? std::vector<int32_t>{0} : config.group_windows),
      pool_(config.n_blocks, config.block_size) {
  for (int32_t s = config.n_state_slots - 1; s >= 0; --s) free_states_.push_back(s);
  ckpt_key_.assign(size_t(std::max(config.n_state_checkpoints, 0)), 0);
  ckpt_used_.assign(ckpt_key_.size(), 0);
  ckpt_pins_.assign(ckpt_key_.size(), 0);
  ckpt_ready_.assign(ckpt_key_.size(), 0);
}

int32_t KvCacheManager::deepest_checkpoint(std::span<const int32_t> tokens, int32_t limit,
                                           int32_t* slot, bool in_place_only) const {
  if (ckpt_by_hash_.empty() || limit <= 0) return 0;
  const int32_t bs = block_size();
  BlockHash h = 0;
  int32_t best = 0;
  for (int32_t b = 0; b < limit; ++b) {
    h = hash_block(h, tokens.subspan(size_t(b) * size_t(bs), size_t(bs)));
    auto it = ckpt_by_hash_.find(h);
    if (it != ckpt_by_hash_.end() &&
        (!in_place_only || ckpt_ready_[size_t(it->second - config_.n_state_slots)])) {
      best = b + 1;
      *slot = it->second;
    }
  }
  return best;
}

void KvCacheManager::drop_checkpoint(BlockHash key) {
  auto it = ckpt_by_hash_.find(key);
  if (it == ckpt_by_hash_.end()) return;
  ckpt_key_[size_t(it->second - config_.n_state_slots)] = 0;
  ckpt_by_hash_.erase(it);
  ++ckpt_stats_.evicted;
}

int32_t KvCacheManager::take_checkpoint_index() {
  // A free checkpoint, else the least recently used; never a pinned one.
  int32_t victim = -1;
  for (size_t i = 0; i < ckpt_key_.size(); ++i) {
    if (ckpt_pins_[i] > 0) continue;
    if (ckpt_key_[i] == 0) {
      victim = int32_t(i);
      break;
    }
    if (victim < 0 || ckpt_used_[i] < ckpt_used_[size_t(victim)]) victim = int32_t(i);
  }
  if (victim >= 0 && ckpt_key_[size_t(victim)] != 0) drop_checkpoint(ckpt_key_[size_t(victim)]);
  return victim;
}

void KvCacheManager::save_state(RequestId id, int32_t n_computed, bool keep) {
  if (!checkpointing() || n_computed <= 0 || n_computed % block_size() != 0) return;
  auto it = tables_.find(id);
  if (it == tables_.end() || it->second.state_slot < 0) return;
  Table& t = it->second;
  const size_t n = size_t(n_computed / block_size());
  if (t.hashes.size() < n) return;  // not committed (no prefix cache entry to tie it to)
  const BlockHash key = t.hashes[n - 1];
  keep = keep || n % size_t(std::max(config_.checkpoint_interval_blocks, 1)) == 0;
  if (auto found = ckpt_by_hash_.find(key); found != ckpt_by_hash_.end()) {
    ckpt_used_[size_t(found->second - config_.n_state_slots)] = ++ckpt_tick_;
  } else {
    const int32_t victim = take_checkpoint_index();
    if (victim < 0) return;  // every checkpoint is pinned (transfers in flight)
    const int32_t slot = config_.n_state_slots + victim;
    ckpt_key_[size_t(victim)] = key;
    ckpt_used_[size_t(victim)] = ++ckpt_tick_;
    ckpt_ready_[size_t(victim)] = 0;  // until the copy below runs in a step
    ckpt_unready_.push_back({key, slot});
    ckpt_by_hash_[key] = slot;
    state_copies_.push_back({t.state_slot, slot});
    ++ckpt_stats_.saved;
  }
  // A request keeps one rolling checkpoint: the newer replaces the older.
  if (t.rolling != 0 && t.rolling != key) drop_checkpoint(t.rolling);
  t.rolling = keep ? 0 : key;
}

KvCacheManager::CheckpointRef KvCacheManager::pin_checkpoint(std::span<const int32_t> tokens,
                                                             int32_t max_blocks) {
  CheckpointRef out;
  const int32_t limit = std::min(max_blocks, int32_t(tokens.size() / size_t(block_size())));
  out.n_blocks = deepest_checkpoint(tokens, limit, &out.slot, /*in_place_only=*/true);
  if (out.n_blocks == 0) return {};
  ++ckpt_pins_[size_t(out.slot - config_.n_state_slots)];
  return out;
}

void KvCacheManager::unpin_checkpoint(int32_t slot) {
  const int32_t i = slot - config_.n_state_slots;
  if (i < 0 || i >= int32_t(ckpt_pins_.size()) || ckpt_pins_[size_t(i)] <= 0) return;
  --ckpt_pins_[size_t(i)];
}

int32_t KvCacheManager::import_checkpoint(std::span<const int32_t> tokens) {
  const int32_t bs = block_size();
  if (!checkpointing() || tokens.empty() || tokens.size() % size_t(bs) != 0) return -1;
  const std::vector<BlockHash> hashes = prefix_hashes(tokens);
  const BlockHash key = hashes.back();
  if (ckpt_by_hash_.count(key) != 0) return -1;
  const int32_t victim = take_checkpoint_index();
  if (victim < 0) return -1;
  const int32_t slot = config_.n_state_slots + victim;
  ckpt_key_[size_t(victim)] = key;
  ckpt_used_[size_t(victim)] = ++ckpt_tick_;
  ckpt_ready_[size_t(victim)] = 1;  // the caller writes it before the next step
  ckpt_by_hash_[key] = slot;
  if (record_cached_) newly_ckpt_.push_back({key, slot});
  return slot;
}

void KvCacheManager::forget_checkpoint(int32_t slot) {
  const int32_t i = slot - config_.n_state_slots;
  if (i < 0 || i >= int32_t(ckpt_key_.size()) || ckpt_key_[size_t(i)] == 0) return;
  drop_checkpoint(ckpt_key_[size_t(i)]);
}

std::vector<KvCacheManager::SavedCheckpoint> KvCacheManager::take_newly_checkpointed() {
  std::vector<SavedCheckpoint> out;
  for (const SavedCheckpoint& c : newly_ckpt_) {
    // Still the same checkpoint (a later save may have evicted it and queued a new copy there).
    if (ckpt_key_[size_t(c.slot - config_.n_state_slots)] == c.key) out.push_back(c);
  }
  newly_ckpt_.clear();
  return out;
}

BlockHash KvCacheManager::hash_block(BlockHash parent, std::span<const int32_t> tokens) const {
  uint64_t h = mix(parent, config_.salt);
  for (int32_t t : tokens) h = mix(h, uint64_t(uint32_t(t)));
  return h;
}

BlockHash KvCacheManager::group_key(BlockHash h, int32_t g) {
  return g == 0 ? h : mix(h, 0x6b76'6772'6f75'7000ull + uint64_t(g));  // "kvgroup" + g
}

size_t KvCacheManager::first_needed_block(int32_t w, int64_t first_pos) const {
  if (w <= 0) return 0;
  return size_t(std::max<int64_t>(0, first_pos - w + 1) / block_size());
}

int32_t KvCacheManager::match_prefix(std::span<const int32_t> tokens, int32_t max_blocks,
                                     std::vector<BlockId>* out) const {
  const int32_t bs = block_size();
  const int32_t G = n_groups();
  // ids[g * max_blocks + b]: group g's cached copy of block b (kNoBlock: none). A global
  // group ends the scan at its first miss; a windowed one may have lost early blocks (released
  // oldest first while its request ran) and still hold the last window of a deeper prefix.
  std::vector<BlockId> ids(size_t(G) * size_t(std::max(max_blocks, 0)), kNoBlock);
  const auto at = [&](int32_t g, size_t b) -> BlockId& {
    return ids[size_t(g) * size_t(max_blocks) + b];
  };
  int32_t limit = 0;
  BlockHash parent = 0;
  for (int32_t b = 0; b < max_blocks; ++b) {
    auto block_tokens = tokens.subspan(size_t(b) * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(parent, block_tokens);
    bool global_miss = false;
    for (int32_t g = 0; g < G; ++g) {
      const std::optional<BlockId> id = pool_.find_cached(group_key(h, g), block_tokens);
      if (id) {
        at(g, size_t(b)) = *id;
      } else if (windows_[size_t(g)] <= 0) {
        global_miss = true;
      }
    }
    if (global_miss) break;
    limit = b + 1;
    parent = h;
  }
  // run[g][b]: cached blocks of group g ending at b. The deepest n <= limit at which every
  // windowed group holds its blocks first_needed_block(w, n x bs) .. n-1.
  std::vector<int32_t> run(ids.size(), 0);
  for (int32_t g = 0; g < G; ++g) {
    for (int32_t b = 0; b < limit; ++b) {
      const size_t i = size_t(g) * size_t(max_blocks) + size_t(b);
      run[i] = ids[i] == kNoBlock ? 0 : (b > 0 ? run[i - 1] : 0) + 1;
    }
  }
  int32_t n = limit;
  for (; n > 0; --n) {
    bool ok = true;
    for (int32_t g = 0; g < G && ok; ++g) {
      const int32_t w = windows_[size_t(g)];
      if (w <= 0) continue;
      const int64_t needed = n - int64_t(first_needed_block(w, int64_t(n) * bs));
      ok = needed <= run[size_t(g) * size_t(max_blocks) + size_t(n - 1)];
    }
    if (ok) break;
  }
  if (out) {
    out->assign(size_t(G) * size_t(n), kNoBlock);
    for (int32_t g = 0; g < G; ++g) {
      const size_t first = first_needed_block(windows_[size_t(g)], int64_t(n) * bs);
      for (size_t b = first; b < size_t(n); ++b) {
        (*out)[size_t(g) * size_t(n) + b] = at(g, b);
      }
    }
  }
  return n;
}

PrefixHit KvCacheManager::find_prefix(std::span<const int32_t> tokens) {
  PrefixHit hit;
  const int32_t n = usable_prefix(tokens, &hit.blocks, &hit.state_checkpoint);
  if (n < 0) return hit;
  PrefixCacheStats& st = pool_.stats();
  ++st.lookups;
  st.queried_blocks += uint64_t(tokens.empty() ? 0 : (tokens.size() - 1) / size_t(block_size()));
  hit.n_tokens = n * block_size();
  st.hit_blocks += uint64_t(n);
  st.hit_tokens += uint64_t(hit.n_tokens);
  return hit;
}

int32_t KvCacheManager::n_hit_tokens(std::span<const int32_t> tokens) const {
  int32_t slot = -1;
  return std::max(usable_prefix(tokens, nullptr, &slot), 0) * block_size();
}

int32_t KvCacheManager::usable_prefix(std::span<const int32_t> tokens, std::vector<BlockId>* blocks,
                                      int32_t* state_checkpoint) const {
  if (!config_.enable_prefix_cache || (config_.n_state_slots > 0 && !checkpointing())) return -1;
  // At least one token must remain to be computed.
  const int32_t max_blocks =
      tokens.empty() ? 0 : int32_t((tokens.size() - 1) / size_t(block_size()));
  int32_t n = match_prefix(tokens, max_blocks, blocks);
  if (config_.n_state_slots > 0) {
    // The recurrent layers resume from a checkpoint: the deepest one within the K/V hit.
    const int32_t with_state = deepest_checkpoint(tokens, n, state_checkpoint);
    if (with_state < n) n = match_prefix(tokens, with_state, blocks);
    if (n == 0) *state_checkpoint = -1;
  }
  return n;
}

int32_t KvCacheManager::n_cached_prefix_tokens(std::span<const int32_t> tokens) const {
  if (!config_.enable_prefix_cache || (config_.n_state_slots > 0 && !checkpointing())) return 0;
  const int32_t bs = block_size();
  int32_t n = match_prefix(tokens, int32_t(tokens.size() / size_t(bs)), nullptr);
  if (config_.n_state_slots > 0) {
    int32_t slot = -1;
    const int32_t with_state = deepest_checkpoint(tokens, n, &slot);
    n = with_state < n ? match_prefix(tokens, with_state, nullptr) : n;
  }
  return n * bs;
}

std::vector<BlockId> KvCacheManager::cached_prefix_blocks(std::span<const int32_t> tokens) const {
  assert(n_groups() == 1);
  std::vector<BlockId> out;
  if (!config_.enable_prefix_cache) return out;
  const int32_t bs = block_size();
  const int32_t n_blocks = int32_t(tokens.size() / size_t(bs));
  BlockHash parent = 0;
  for (int32_t b = 0; b < n_blocks; ++b) {
    auto block_tokens = tokens.subspan(size_t(b) * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(parent, block_tokens);
    const std::optional<BlockId> id = pool_.find_cached(h, block_tokens);
    if (!id) break;
    out.push_back(*id);
    parent = h;
  }
  return out;
}

std::vector<BlockHash> KvCacheManager::prefix_hashes(std::span<const int32_t> tokens) const {
  std::vector<BlockHash> out;
  if (!config_.enable_prefix_cache) return out;
  const int32_t bs = block_size();
  const size_t n_full = tokens.size() / size_t(bs);
  out.reserve(n_full);
  BlockHash parent = 0;
  for (size_t b = 0; b < n_full; ++b) {
    parent = hash_block(parent, tokens.subspan(b * size_t(bs), size_t(bs)));
    out.push_back(parent);
  }
  return out;
}

std::vector<BlockId> KvCacheManager::pin_prefix(std::span<const int32_t> tokens) {
  std::vector<BlockId> ids = cached_prefix_blocks(tokens);
  for (BlockId id : ids) pool_.retain(id);
  n_pinned_ += int64_t(ids.size());
  return ids;
}

void KvCacheManager::unpin(std::span<const BlockId> blocks) {
  // Tail first, as free() does: the last blocks of a prompt are evicted first.
  std::vector<BlockId> reversed(blocks.rbegin(), blocks.rend());
  pool_.release(reversed);
  n_pinned_ -= int64_t(blocks.size());
}

std::vector<KvCacheManager::CachedBlock> KvCacheManager::take_newly_cached() {
  std::vector<CachedBlock> out;
  out.swap(newly_cached_);
  return out;
}

std::vector<KvCacheManager::ImportedBlock> KvCacheManager::import_prefix(
    std::span<const int32_t> tokens, int32_t first_block) {
  assert(n_groups() == 1);
  std::vector<ImportedBlock> out;
  if (!config_.enable_prefix_cache) return out;
  const int32_t bs = block_size();
  const int32_t n_full = int32_t(tokens.size() / size_t(bs));
  // Each block is referenced while the import runs, so allocating the next cannot evict it.
  std::vector<BlockId> held;
  BlockHash parent = 0;
  for (int32_t b = 0; b < n_full; ++b) {
    auto block_tokens = tokens.subspan(size_t(b) * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(parent, block_tokens);
    if (std::optional<BlockId> cached = pool_.find_cached(h, block_tokens)) {
      pool_.retain(*cached);
      held.push_back(*cached);
    } else {
      if (b < first_block || !pool_.can_allocate(1)) break;
      const BlockId id = pool_.allocate(1)[0];
      pool_.cache(id, h, block_tokens);
      held.push_back(id);
      out.push_back({b, id});
      if (record_cached_)
        newly_cached_.push_back({id, h, {block_tokens.begin(), block_tokens.end()}});
    }
    parent = h;
  }
  std::reverse(held.begin(), held.end());  // tail-first: the last blocks are evicted first
  pool_.release(held);
  return out;
}

bool KvCacheManager::allocate_slots(RequestId id, int32_t n_computed, int32_t n_new_tokens,
                                    const PrefixHit* prefix) {
  auto it = tables_.find(id);
  const bool fresh = it == tables_.end();
  assert(!fresh || !prefix || n_computed >= prefix->n_tokens);
  const int32_t G = n_groups();
  const size_t n_prefix = prefix ? size_t(prefix->n_tokens / block_size()) : 0;
  assert(!prefix || prefix->blocks.size() == size_t(G) * n_prefix);
  const size_t have = fresh ? (prefix ? n_prefix : 0) : it->second.size();
  const int32_t n_tokens = n_computed + n_new_tokens;
  const int32_t need = std::max(0, blocks_for(n_tokens) - int32_t(have));
  // Blocks this step writes into that another table shares need a private copy first. Only a
  // known table can hold such blocks (adopted prefix blocks all lie before n_computed).
  const size_t first_written = size_t(n_computed / block_size());
  const size_t end_written = std::min(have, size_t(blocks_for(n_tokens)));
  int32_t n_cow = 0, n_freed = 0;
  if (!fresh) {
    const Table& t = it->second;
    for (int32_t g = 0; g < G; ++g) {
      const std::vector<BlockId>& row = t.blocks[size_t(g)];
      for (size_t b = first_written; b < end_written; ++b) {
        n_cow += pool_.ref_count(row[b]) > 1 ? 1 : 0;
      }
      // Blocks the window releases below that no other table holds come back first.
      const size_t first =
          std::min(row.size(), first_needed_block(windows_[size_t(g)], n_computed));
      for (size_t b = t.n_released[size_t(g)]; b < first; ++b) {
        n_freed += pool_.ref_count(row[b]) == 1 ? 1 : 0;
      }
    }
  }
  // Adopting free cached prefix blocks takes them out of the free pool too.
  int32_t taken_from_free = 0;
  if (fresh && prefix) {
    for (BlockId b : prefix->blocks) taken_from_free += b != kNoBlock && pool_.ref_count(b) == 0;
  }
  if (!pool_.can_allocate(G * need + n_cow + taken_from_free - n_freed)) return false;
  if (fresh && config_.n_state_slots > 0 && free_states_.empty()) return false;

  Table* table = nullptr;
  if (fresh) {
    table = &tables_[id];
    if (config_.n_state_slots > 0) {
      table->state_slot = free_states_.back();
      free_states_.pop_back();
      if (prefix && prefix->n_tokens > 0 && prefix->state_checkpoint >= 0) {
        state_copies_.push_back({prefix->state_checkpoint, table->state_slot});
        ckpt_used_[size_t(prefix->state_checkpoint - config_.n_state_slots)] = ++ckpt_tick_;
        ++ckpt_stats_.restored;
      }
    }
    table->blocks.assign(size_t(G), {});
    table->n_released.assign(size_t(G), 0);
    if (prefix) {
      for (int32_t g = 0; g < G; ++g) {
        std::vector<BlockId>& row = table->blocks[size_t(g)];
        row.assign(prefix->blocks.begin() + std::ptrdiff_t(size_t(g) * n_prefix),
                   prefix->blocks.begin() + std::ptrdiff_t(size_t(g + 1) * n_prefix));
        size_t released = 0;
        while (released < row.size() && row[released] == kNoBlock) ++released;
        table->n_released[size_t(g)] = released;
        for (size_t b = released; b < row.size(); ++b) pool_.retain(row[b]);
      }
    }
  } else {
    table = &it->second;
  }
  release_outside_window(*table, n_computed);
  for (int32_t g = 0; g < G; ++g) {
    std::vector<BlockId>& row = table->blocks[size_t(g)];
    for (size_t b = std::max(first_written, table->n_released[size_t(g)]);
         n_cow > 0 && b < end_written; ++b) {
      const BlockId src = row[b];
      if (pool_.ref_count(src) <= 1) continue;
      // A partial block: never hashed (only committed full blocks are, and they precede it).
      assert(b >= table->hashes.size());
      const BlockId dst = pool_.allocate(1)[0];
      pool_.release(std::span<const BlockId>(&src, 1));  // stays held by the other tables
      row[b] = dst;
      copies_.push_back({src, dst});
      ++share_stats_.cow_copies;
    }
    if (need > 0) {
      std::vector<BlockId> fresh_blocks = pool_.allocate(need);
      row.insert(row.end(), fresh_blocks.begin(), fresh_blocks.end());
    }
    // Released entries name the first block still held: the attention kernels may read (and
    // mask) a few positions before a window in whole key tiles, so every entry must be a valid
    // block id, whatever that block holds by then (kernels/attention.h).
    const size_t released = table->n_released[size_t(g)];
    if (released > 0 && released < row.size()) {
      std::fill(row.begin(), row.begin() + std::ptrdiff_t(released), row[released]);
    }
  }
  return true;
}

void KvCacheManager::release_outside_window(Table& t, int32_t first_pos) {
  for (int32_t g = 0; g < n_groups(); ++g) {
    const int32_t w = windows_[size_t(g)];
    if (w <= 0) continue;
    std::vector<BlockId>& row = t.blocks[size_t(g)];
    size_t& released = t.n_released[size_t(g)];
    const size_t n = std::min(row.size(), first_needed_block(w, first_pos));
    if (n <= released) continue;
    // Oldest first: they are the first to be evicted from the prefix cache. Their entries are
    // refilled by allocate_slots.
    pool_.release(std::span<const BlockId>(row.data() + released, n - released));
    released = n;
  }
}

int32_t KvCacheManager::blocks_for_step(int32_t n_tokens) const {
  int32_t n = 0;
  for (int32_t w : windows_) {
    n += blocks_for(n_tokens) - int32_t(first_needed_block(w, std::max(0, n_tokens - 1)));
  }
  return n;
}

int32_t KvCacheManager::n_released(RequestId id) const {
  auto it = tables_.find(id);
  if (it == tables_.end()) return 0;
  size_t n = 0;
  for (size_t r : it->second.n_released) n += r;
  return int32_t(n);
}

int32_t KvCacheManager::n_held(RequestId id) const {
  auto it = tables_.find(id);
  if (it == tables_.end()) return 0;
  return int32_t(it->second.size()) * n_groups() - n_released(id);
}

std::vector<BlockCopy> KvCacheManager::take_copies() {
  std::vector<BlockCopy> out;
  out.swap(copies_);
  return out;
}

std::vector<BlockCopy> KvCacheManager::take_state_copies() {
  std::vector<BlockCopy> out;
  out.swap(state_copies_);
  // The step these copies go into writes the checkpoints saved since the last one.
  for (const SavedCheckpoint& c : ckpt_unready_) {
    const size_t i = size_t(c.slot - config_.n_state_slots);
    if (ckpt_key_[i] != c.key) continue;  // dropped meanwhile
    ckpt_ready_[i] = 1;
    if (record_cached_) newly_ckpt_.push_back(c);
  }
  ckpt_unready_.clear();
  return out;
}

int32_t KvCacheManager::state_slot(RequestId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? -1 : it->second.state_slot;
}

bool KvCacheManager::fork(RequestId parent, RequestId child) {
  assert(!tables_.count(child));
  auto it = tables_.find(parent);
  if (it == tables_.end()) return false;
  if (config_.n_state_slots > 0 && free_states_.empty()) return false;
  Table t = it->second;  // block ids and hashes: a few dozen integers per group
  if (config_.n_state_slots > 0) {
    t.state_slot = free_states_.back();
    free_states_.pop_back();
    state_copies_.push_back({it->second.state_slot, t.state_slot});
  }
  t.rolling = 0;  // the parent's rolling checkpoint stays the parent's
  // The released leading blocks stay released (kNoBlock) in the child too.
  for (int32_t g = 0; g < n_groups(); ++g) {
    const std::vector<BlockId>& row = t.blocks[size_t(g)];
    for (size_t b = t.n_released[size_t(g)]; b < row.size(); ++b) pool_.retain(row[b]);
    share_stats_.forked_blocks += row.size() - t.n_released[size_t(g)];
  }
  ++share_stats_.forks;
  tables_.emplace(child, std::move(t));
  return true;
}

void KvCacheManager::move_table(RequestId from, RequestId to) {
  assert(!tables_.count(to));
  auto it = tables_.find(from);
  if (it == tables_.end()) return;
  Table t = std::move(it->second);
  tables_.erase(it);
  tables_.emplace(to, std::move(t));
}

void KvCacheManager::commit_computed(RequestId id, std::span<const int32_t> tokens,
                                     int32_t n_computed) {
  if (!config_.enable_prefix_cache) return;
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const int32_t bs = block_size();
  const size_t n_full = std::min(size_t(n_computed / bs), t.size());
  while (t.hashes.size() < n_full) {
    const size_t b = t.hashes.size();
    auto block_tokens = tokens.subspan(b * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(b == 0 ? 0 : t.hashes.back(), block_tokens);
    for (int32_t g = 0; g < n_groups(); ++g) {
      const BlockId blk = t.blocks[size_t(g)][b];
      if (blk != kNoBlock) pool_.cache(blk, group_key(h, g), block_tokens);
    }
    t.hashes.push_back(h);
    if (record_cached_) {
      assert(n_groups() == 1);
      newly_cached_.push_back({t.blocks[0][b], h, {block_tokens.begin(), block_tokens.end()}});
    }
  }
}

void KvCacheManager::truncate(RequestId id, int32_t n_tokens) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const size_t keep = size_t(blocks_for(std::max(n_tokens, 0)));
  if (t.size() <= keep) return;
  assert(t.hashes.size() <= keep);  // committed full blocks hold only kept tokens
  for (int32_t g = 0; g < n_groups(); ++g) {
    std::vector<BlockId>& row = t.blocks[size_t(g)];
    assert(keep >= t.n_released[size_t(g)]);  // only rejected new tokens are truncated
    std::vector<BlockId> dropped(row.rbegin(), row.rend() - std::ptrdiff_t(keep));
    pool_.release(dropped);
    row.resize(keep);
  }
}

void KvCacheManager::free(RequestId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  // Tail first: a request's last blocks are the least likely to be shared, evict them first.
  const Table& t = it->second;
  std::vector<BlockId> reversed;
  for (int32_t g = 0; g < n_groups(); ++g) {
    const std::vector<BlockId>& row = t.blocks[size_t(g)];
    reversed.insert(reversed.end(), row.rbegin(),
                    row.rend() - std::ptrdiff_t(t.n_released[size_t(g)]));
  }
  pool_.release(reversed);
  if (t.state_slot >= 0) free_states_.push_back(t.state_slot);
  tables_.erase(it);
}

const std::vector<BlockId>& KvCacheManager::block_table(RequestId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? kEmpty : it->second.blocks[0];
}

const std::vector<std::vector<BlockId>>& KvCacheManager::block_tables(RequestId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? kEmptyTables : it->second.blocks;
}

}  // namespace sluice
