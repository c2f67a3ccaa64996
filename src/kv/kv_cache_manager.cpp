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
}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config), pool_(config.n_blocks, config.block_size) {}

BlockHash KvCacheManager::hash_block(BlockHash parent, std::span<const int32_t> tokens) const {
  uint64_t h = mix(parent, config_.salt);
  for (int32_t t : tokens) h = mix(h, uint64_t(uint32_t(t)));
  return h;
}

PrefixHit KvCacheManager::find_prefix(std::span<const int32_t> tokens) {
  PrefixHit hit;
  if (!config_.enable_prefix_cache) return hit;
  const int32_t bs = block_size();
  // At least one token must remain to be computed.
  const int32_t max_blocks = tokens.empty() ? 0 : int32_t((tokens.size() - 1) / size_t(bs));
  PrefixCacheStats& st = pool_.stats();
  ++st.lookups;
  st.queried_blocks += uint64_t(max_blocks);
  BlockHash parent = 0;
  for (int32_t b = 0; b < max_blocks; ++b) {
    auto block_tokens = tokens.subspan(size_t(b) * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(parent, block_tokens);
    auto id = pool_.find_cached(h, block_tokens);
    if (!id) break;
    hit.blocks.push_back(*id);
    parent = h;
  }
  hit.n_tokens = int32_t(hit.blocks.size()) * bs;
  st.hit_blocks += hit.blocks.size();
  st.hit_tokens += uint64_t(hit.n_tokens);
  return hit;
}

int32_t KvCacheManager::n_cached_prefix_tokens(std::span<const int32_t> tokens) const {
  return int32_t(cached_prefix_blocks(tokens).size()) * block_size();
}

std::vector<BlockId> KvCacheManager::cached_prefix_blocks(std::span<const int32_t> tokens) const {
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
  const size_t have = fresh ? (prefix ? prefix->blocks.size() : 0) : it->second.blocks.size();
  const int32_t n_tokens = n_computed + n_new_tokens;
  const int32_t need = std::max(0, blocks_for(n_tokens) - int32_t(have));
  // Blocks this step writes into that another table shares need a private copy first. Only a
  // known table can hold such blocks (adopted prefix blocks all lie before n_computed).
  const size_t first_written = size_t(n_computed / block_size());
  const size_t end_written = std::min(have, size_t(blocks_for(n_tokens)));
  int32_t n_cow = 0;
  if (!fresh) {
    for (size_t b = first_written; b < end_written; ++b) {
      n_cow += pool_.ref_count(it->second.blocks[b]) > 1 ? 1 : 0;
    }
  }
  // Adopting free cached prefix blocks takes them out of the free pool too.
  int32_t taken_from_free = 0;
  if (fresh && prefix) {
    for (BlockId b : prefix->blocks) taken_from_free += pool_.ref_count(b) == 0 ? 1 : 0;
  }
  if (!pool_.can_allocate(need + n_cow + taken_from_free)) return false;

  Table* table = nullptr;
  if (fresh) {
    table = &tables_[id];
    if (prefix) {
      for (BlockId b : prefix->blocks) pool_.retain(b);
      table->blocks = prefix->blocks;
    }
  } else {
    table = &it->second;
  }
  for (size_t b = first_written; n_cow > 0 && b < end_written; ++b) {
    const BlockId src = table->blocks[b];
    if (pool_.ref_count(src) <= 1) continue;
    // A partial block: never hashed (only committed full blocks are, and they precede it).
    assert(b >= table->hashes.size());
    const BlockId dst = pool_.allocate(1)[0];
    pool_.release(std::span<const BlockId>(&src, 1));  // stays held by the other tables
    table->blocks[b] = dst;
    copies_.push_back({src, dst});
    ++share_stats_.cow_copies;
  }
  if (need > 0) {
    std::vector<BlockId> fresh_blocks = pool_.allocate(need);
    table->blocks.insert(table->blocks.end(), fresh_blocks.begin(), fresh_blocks.end());
  }
  release_outside_window(*table, n_computed);
  return true;
}

void KvCacheManager::release_outside_window(Table& t, int32_t first_pos) {
  if (config_.sliding_window <= 0) return;
  const int32_t first_seen = first_pos - config_.sliding_window + 1;
  const size_t n = std::min(t.blocks.size(), size_t(std::max(0, first_seen) / block_size()));
  if (n <= t.n_released) return;
  // Oldest first: they are the first to be evicted from the prefix cache.
  pool_.release(std::span<const BlockId>(t.blocks.data() + t.n_released, n - t.n_released));
  t.n_released = n;
}

int32_t KvCacheManager::n_released(RequestId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? 0 : int32_t(it->second.n_released);
}

int32_t KvCacheManager::n_held(RequestId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? 0 : int32_t(it->second.blocks.size() - it->second.n_released);
}

std::vector<BlockCopy> KvCacheManager::take_copies() {
  std::vector<BlockCopy> out;
  out.swap(copies_);
  return out;
}

void KvCacheManager::fork(RequestId parent, RequestId child) {
  assert(!tables_.count(child));
  auto it = tables_.find(parent);
  if (it == tables_.end()) return;
  Table t = it->second;  // block ids and hashes: a few dozen integers
  // The released leading blocks stay released (stale entries) in the child too.
  for (size_t b = t.n_released; b < t.blocks.size(); ++b) pool_.retain(t.blocks[b]);
  ++share_stats_.forks;
  share_stats_.forked_blocks += t.blocks.size() - t.n_released;
  tables_.emplace(child, std::move(t));
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
  const size_t n_full = std::min(size_t(n_computed / bs), t.blocks.size());
  while (t.hashes.size() < n_full) {
    const size_t b = t.hashes.size();
    auto block_tokens = tokens.subspan(b * size_t(bs), size_t(bs));
    const BlockHash h = hash_block(b == 0 ? 0 : t.hashes.back(), block_tokens);
    pool_.cache(t.blocks[b], h, block_tokens);
    t.hashes.push_back(h);
    if (record_cached_) {
      newly_cached_.push_back({t.blocks[b], h, {block_tokens.begin(), block_tokens.end()}});
    }
  }
}

void KvCacheManager::truncate(RequestId id, int32_t n_tokens) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const size_t keep = size_t(blocks_for(std::max(n_tokens, 0)));
  if (t.blocks.size() <= keep) return;
  assert(t.hashes.size() <= keep);  // committed full blocks hold only kept tokens
  assert(keep >= t.n_released);     // only rejected new tokens are truncated
  std::vector<BlockId> dropped(t.blocks.rbegin(), t.blocks.rend() - std::ptrdiff_t(keep));
  pool_.release(dropped);
  t.blocks.resize(keep);
}

void KvCacheManager::free(RequestId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  // Tail first: a request's last blocks are the least likely to be shared, evict them first.
  const Table& t = it->second;
  std::vector<BlockId> reversed(t.blocks.rbegin(), t.blocks.rend() - std::ptrdiff_t(t.n_released));
  pool_.release(reversed);
  tables_.erase(it);
}

const std::vector<BlockId>& KvCacheManager::block_table(RequestId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? kEmpty : it->second.blocks;
}

}  // namespace sluice
