// How many KV blocks a serving instance gets. `--kv-cache-gb G` asks for G GiB; the default is
// a stated share of the memory available at start-up, capped at what `max_seqs` sequences of
// the full context could ever use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "executor/kv_cache.h"
#include "model/config.h"

namespace sluice {

// Share of MemAvailable the KV cache takes when --kv-cache-gb is not given.
constexpr double kDefaultKvMemoryShare = 0.40;

// The K/V slots of a block this instance stores (ModelConfig::kv_cache_layout): every slot of
// a block, or a pipeline stage's share [base, base + n) of them.
struct KvStageSlots {
  int base = 0;
  int n = 0;
};
KvStageSlots kv_stage_slots(const ModelConfig& config);

// K and V bytes of one block: 2 x its slots (kv_stage_slots; n_layer for a model of one K/V
// group) x block_size x n_kv_head x head_dim (ModelConfig::kv_slot_width: the widest layer
// that stores K/V) x element size.
size_t kv_bytes_per_block(const ModelConfig& config, int block_size, KvType type);

// One sequence's recurrent state over the recurrent layers this instance runs (f32: conv
// inputs and S x S matrices, RecurrentShape::state_floats); 0 without recurrent layers.
size_t recurrent_state_bytes(const ModelConfig& config);

struct KvPlan {
  int32_t n_blocks = 0;
  size_t bytes = 0;
  size_t state_bytes = 0;   // max_seqs recurrent states, taken from the same budget
  std::string description;  // one line for the start-up log
};

// kv_cache_gb > 0: exactly that budget (an error if it holds less than one full context);
// otherwise the default share of MemAvailable, capped at what max_seqs sequences of n_ctx
// tokens hold (KvCacheLayout::blocks_held: windowed layers only their window). Recurrent
// layers' states for max_seqs sequences and n_state_checkpoints more slots (checkpoints,
// speculation's draft states) come out of the budget first.
Result<KvPlan> plan_kv_cache(const ModelConfig& config, int block_size, KvType type,
                             double kv_cache_gb, int max_seqs, int n_state_checkpoints = 16);

// MemAvailable from /proc/meminfo in bytes (0 if unknown).
size_t available_memory_bytes();

}  // namespace sluice
