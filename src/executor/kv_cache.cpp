#include "executor/kv_cache.h"

#include "base/huge_alloc.h"

#include <cstdlib>
#include <cstring>

namespace sluice {

Result<std::unique_ptr<KvCacheStorage>> KvCacheStorage::create(const KvCacheShape& shape) {
  if (shape.n_layer <= 0 || shape.n_blocks <= 0 || shape.block_size <= 0 || shape.n_kv_head <= 0 ||
      shape.head_dim <= 0) {
    return make_error("KV cache: every dimension must be positive (layers ", shape.n_layer,
                      ", blocks ", shape.n_blocks, ", block size ", shape.block_size, ")");
  }
  std::unique_ptr<KvCacheStorage> s(new KvCacheStorage(shape));
  const size_t bytes = shape.bytes_per_layer() * size_t(shape.n_layer);
  const size_t rounded = (bytes + 63) / 64 * 64;
  for (auto* dst : {&s->k_, &s->v_}) {
    *dst = alloc_streamed(rounded);  // huge pages: attention reads rows all over it
    if (!*dst) {
      return make_error("KV cache: cannot allocate ", 2 * rounded, " bytes (", shape.n_blocks,
                        " blocks of ", shape.block_size, " tokens x ", shape.n_layer,
                        " layers); use fewer blocks");
    }
    // A fresh mapping reads as zeros and is faulted in as blocks are first written; only a
    // heap buffer needs clearing. Touching a mapping here cost every start-up its whole size
    // (a 131072-token llama-3.2-1b context: 4 GiB, 1.4 s of page faults, before any request).
    if (dst->get_deleter().mapped == 0) std::memset(dst->get(), 0, rounded);
  }
  return s;
}

void KvCacheStorage::copy_block(int32_t src, int32_t dst) {
  const size_t block_bytes = shape_.elems_per_block() * size_t(kv_type_size(shape_.type));
  for (int layer = 0; layer < shape_.n_layer; ++layer) {
    for (uint8_t* base : {static_cast<uint8_t*>(k(layer)), static_cast<uint8_t*>(v(layer))}) {
      std::memcpy(base + size_t(dst) * block_bytes, base + size_t(src) * block_bytes, block_bytes);
    }
  }
}

std::string KvCacheStorage::block_layout() const {
  std::string width;
  if (shape_.token_width > 0) width = " W" + std::to_string(shape_.token_width);
  return std::string(shape_.type == KvType::kF16 ? "f16" : "f32") + " L" +
         std::to_string(shape_.n_layer) + " H" + std::to_string(shape_.n_kv_head) + " D" +
         std::to_string(shape_.head_dim) + width + " B" + std::to_string(shape_.block_size) +
         " k-dim-major/v-row-major";
}

void KvCacheStorage::read_block(int32_t id, uint8_t* dst) const {
  const size_t block_bytes = shape_.elems_per_block() * size_t(kv_type_size(shape_.type));
  for (int layer = 0; layer < shape_.n_layer; ++layer) {
    for (const void* base : {k(layer), v(layer)}) {
      std::memcpy(dst, static_cast<const uint8_t*>(base) + size_t(id) * block_bytes, block_bytes);
      dst += block_bytes;
    }
  }
}

void KvCacheStorage::write_block(int32_t id, const uint8_t* src) {
  const size_t block_bytes = shape_.elems_per_block() * size_t(kv_type_size(shape_.type));
  for (int layer = 0; layer < shape_.n_layer; ++layer) {
    for (void* base : {k(layer), v(layer)}) {
      std::memcpy(static_cast<uint8_t*>(base) + size_t(id) * block_bytes, src, block_bytes);
      src += block_bytes;
    }
  }
}

BlockFreeList::BlockFreeList(int32_t n_blocks) : n_blocks_(n_blocks) {
  free_.reserve(size_t(n_blocks));
  // LIFO: block 0 is handed out first.
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockFreeList::allocate(int32_t n, std::vector<int32_t>& table) {
  if (!can_allocate(n)) return false;
  for (int32_t i = 0; i < n; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

bool BlockFreeList::allocate_for(int32_t n_tokens, int32_t block_size,
                                 std::vector<int32_t>& table) {
  const int32_t need = (n_tokens + block_size - 1) / block_size - int32_t(table.size());
  return need <= 0 || allocate(need, table);
}

void BlockFreeList::free(std::span<const int32_t> ids) {
  free_.insert(free_.end(), ids.begin(), ids.end());
}

}  // namespace sluice
