#include "kv/kv_cache_manager.h"

#include <algorithm>

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

bool KvCacheManager::allocate_slots(RequestId id, int32_t n_tokens, const PrefixHit* prefix) {
  Table* table = nullptr;
  auto it = tables_.find(id);
  const bool fresh = it == tables_.end();
  const size_t have = fresh ? (prefix ? prefix->blocks.size() : 0) : it->second.blocks.size();
  const int32_t need = std::max(0, blocks_for(n_tokens) - int32_t(have));
  // Adopting free cached prefix blocks takes them out of the free pool too.
  int32_t taken_from_free = 0;
  if (fresh && prefix) {
    for (BlockId b : prefix->blocks) taken_from_free += pool_.ref_count(b) == 0 ? 1 : 0;
  }
  if (!pool_.can_allocate(need + taken_from_free)) return false;

  if (fresh) {
    table = &tables_[id];
    if (prefix) {
      for (BlockId b : prefix->blocks) pool_.retain(b);
      table->blocks = prefix->blocks;
    }
  } else {
    table = &it->second;
  }
  if (need > 0) {
    std::vector<BlockId> fresh_blocks = pool_.allocate(need);
    table->blocks.insert(table->blocks.end(), fresh_blocks.begin(), fresh_blocks.end());
  }
  return true;
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
  }
}

void KvCacheManager::free(RequestId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  // Tail first: a request's last blocks are the least likely to be shared, evict them first.
  std::vector<BlockId> reversed(it->second.blocks.rbegin(), it->second.blocks.rend());
  pool_.release(reversed);
  tables_.erase(it);
}

const std::vector<BlockId>& KvCacheManager::block_table(RequestId id) const {
  auto it = tables_.find(id);
  return it == tables_.end() ? kEmpty : it->second.blocks;
}

}  // namespace sluice
