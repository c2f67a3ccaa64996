#include "kv/block_pool.h"

#include <algorithm>
#include <cassert>

namespace sluice {

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), blocks_(static_cast<size_t>(std::max(n_blocks, 0))) {
  for (BlockId id = 0; id < n_blocks; ++id) push_free_tail(id);
}

void BlockPool::push_free_tail(BlockId id) {
  Block& b = blocks_[size_t(id)];
  b.prev = free_tail_;
  b.next = kNoBlock;
  if (free_tail_ != kNoBlock) {
    blocks_[size_t(free_tail_)].next = id;
  } else {
    free_head_ = id;
  }
  free_tail_ = id;
  ++n_free_;
}

void BlockPool::unlink_free(BlockId id) {
  Block& b = blocks_[size_t(id)];
  if (b.prev != kNoBlock) {
    blocks_[size_t(b.prev)].next = b.next;
  } else {
    free_head_ = b.next;
  }
  if (b.next != kNoBlock) {
    blocks_[size_t(b.next)].prev = b.prev;
  } else {
    free_tail_ = b.prev;
  }
  b.prev = b.next = kNoBlock;
  --n_free_;
}

void BlockPool::uncache(BlockId id) {
  Block& b = blocks_[size_t(id)];
  if (!b.cached) return;
  auto [lo, hi] = cached_.equal_range(b.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == id) {
      cached_.erase(it);
      break;
    }
  }
  b.cached = false;
  b.tokens.clear();
}

std::vector<BlockId> BlockPool::allocate(int32_t n) {
  assert(can_allocate(n));
  std::vector<BlockId> out;
  out.reserve(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    const BlockId id = free_head_;
    unlink_free(id);
    if (blocks_[size_t(id)].cached) {
      uncache(id);
      ++stats_.evictions;
    }
    blocks_[size_t(id)].ref_count = 1;
    out.push_back(id);
  }
  return out;
}

void BlockPool::retain(BlockId id) {
  Block& b = blocks_[size_t(id)];
  if (b.ref_count == 0) unlink_free(id);
  ++b.ref_count;
}

void BlockPool::release(std::span<const BlockId> ids) {
  for (BlockId id : ids) {
    Block& b = blocks_[size_t(id)];
    assert(b.ref_count > 0);
    if (--b.ref_count == 0) push_free_tail(id);
  }
}

std::optional<BlockId> BlockPool::find_cached(BlockHash hash,
                                              std::span<const int32_t> tokens) const {
  auto [lo, hi] = cached_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const Block& b = blocks_[size_t(it->second)];
    if (std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end())) {
      return it->second;
    }
  }
  return std::nullopt;
}

void BlockPool::cache(BlockId id, BlockHash hash, std::span<const int32_t> tokens) {
  Block& b = blocks_[size_t(id)];
  if (b.cached) return;                   // a block's contents never change once full
  if (find_cached(hash, tokens)) return;  // an identical block is already cached
  b.cached = true;
  b.hash = hash;
  b.tokens.assign(tokens.begin(), tokens.end());
  cached_.emplace(hash, id);
}

void BlockPool::clear_cache() {
  for (BlockId id = 0; id < n_blocks(); ++id) uncache(id);
}

}  // namespace sluice
