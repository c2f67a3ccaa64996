// Paged K/V memory of the CPU executor, and a trivial block allocator.
//
// KvCacheStorage owns the tensor memory: per layer, K and V as fixed-size blocks
//   k(layer): [n_blocks, n_kv_head, head_dim, block_size]   (f16 or f32)
//   v(layer): [n_blocks, n_kv_head, block_size, head_dim]   (kernels/attention.h, KvLayout)
// (with token_width set, blocks of block_size x token_width elements, each layer reading its
// own [n_kv_head, head_dim] shape from the start of a block).
// Which blocks a sequence uses is not its business: block ids arrive in each Batch.
//
// BlockFreeList hands out and takes back block ids and nothing else: for driving an executor
// directly (`sluice bench`'s runner, executor tests). The engine allocates through kv/
// (KvCacheManager: ref counts, prefix cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/huge_alloc.h"
#include "base/status.h"
#include "kernels/attention.h"

namespace sluice {

struct KvCacheShape {
  // K/V layer slots per block: KvCacheLayout::layers_per_group (every layer of a model of one
  // K/V group), or a pipeline stage's share of them (executor/kv_sizing.h, kv_stage_slots).
  int n_layer = 0;
  int n_blocks = 0;
  int block_size = 0;  // tokens per block
  int n_kv_head = 0;
  int head_dim = 0;
  KvType type = KvType::kF16;
  // Elements of one token's K (or V) in a slot when the layers sharing the slots differ in
  // head shape (ModelConfig::kv_slot_width, gemma4: the widest; each layer's KvLayout then has
  // block_stride elems_per_block()); 0: n_kv_head x head_dim.
  int token_width = 0;

  size_t token_elems() const {
    return token_width > 0 ? size_t(token_width) : size_t(n_kv_head) * size_t(head_dim);
  }
  size_t elems_per_block() const { return size_t(block_size) * token_elems(); }
  size_t bytes_per_layer() const {
    return size_t(n_blocks) * elems_per_block() * size_t(kv_type_size(type));
  }
};

class KvCacheStorage {
 public:
  // Allocates 2 * n_layer * n_blocks * block_size * token_elems() elements (zeroed,
  // 64-byte aligned). Fails with a message when the allocation does.
  static Result<std::unique_ptr<KvCacheStorage>> create(const KvCacheShape& shape);
  KvCacheStorage(const KvCacheStorage&) = delete;
  KvCacheStorage& operator=(const KvCacheStorage&) = delete;

  const KvCacheShape& shape() const { return shape_; }
  size_t n_bytes() const { return 2 * size_t(shape_.n_layer) * shape_.bytes_per_layer(); }

  // A layer's K or V: n_blocks blocks of block_size x n_kv_head x head_dim elements of
  // shape().type, in the KvLayout of kernels/attention.h.
  void* k(int layer) { return k_.get() + size_t(layer) * shape_.bytes_per_layer(); }
  void* v(int layer) { return v_.get() + size_t(layer) * shape_.bytes_per_layer(); }
  const void* k(int layer) const { return k_.get() + size_t(layer) * shape_.bytes_per_layer(); }
  const void* v(int layer) const { return v_.get() + size_t(layer) * shape_.bytes_per_layer(); }

  // Block `dst` takes block `src`'s contents, K and V of every layer, whatever the KV type
  // (2 * n_layer memcpy of elems_per_block elements). Ids must be in range and distinct.
  void copy_block(int32_t src, int32_t dst);

  // One block's K and V of every layer as bytes: [n_layer][K, V][elems_per_block elements].
  size_t bytes_per_block() const {
    return 2 * size_t(shape_.n_layer) * shape_.elems_per_block() *
           size_t(kv_type_size(shape_.type));
  }
  // The layout tag of those bytes (executor.h, KvBlockData::layout).
  std::string block_layout() const;
  // Block `id` (in range) to / from bytes_per_block() bytes.
  void read_block(int32_t id, uint8_t* dst) const;
  void write_block(int32_t id, const uint8_t* src);

 private:
  explicit KvCacheStorage(const KvCacheShape& shape) : shape_(shape) {}

  KvCacheShape shape_;
  StreamedBuffer k_;  // [n_layer, n_blocks, n_kv_head, head_dim, block_size]
  StreamedBuffer v_;  // [n_layer, n_blocks, n_kv_head, block_size, head_dim]
};

// A LIFO free list of block ids [0, n_blocks).
class BlockFreeList {
 public:
  explicit BlockFreeList(int32_t n_blocks);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t n_free() const { return int32_t(free_.size()); }
  bool can_allocate(int32_t n) const { return n <= n_free(); }
  // Appends n block ids to `table`; false (and nothing taken) when fewer than n are free.
  bool allocate(int32_t n, std::vector<int32_t>& table);
  // Grows `table` until it covers n_tokens positions of block_size tokens; false when the
  // blocks run out (the table is then unchanged).
  bool allocate_for(int32_t n_tokens, int32_t block_size, std::vector<int32_t>& table);
  // Returns blocks to the pool (ids must have come from allocate and not be freed twice).
  void free(std::span<const int32_t> ids);

 private:
  int32_t n_blocks_ = 0;
  std::vector<int32_t> free_;
};

}  // namespace sluice
