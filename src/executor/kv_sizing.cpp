#include "executor/kv_sizing.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace sluice {

KvStageSlots kv_stage_slots(const ModelConfig& c) {
  const KvCacheLayout layout = c.kv_cache_layout();
  int lo = layout.layers_per_group, hi = 0;
  for (int il = c.layer_begin; il < c.stage_layer_end(); ++il) {
    const int slot = layout.layer_slot[size_t(il)];
    if (slot < 0) continue;
    lo = std::min(lo, slot);
    hi = std::max(hi, slot + 1);
  }
  return hi > lo ? KvStageSlots{lo, hi - lo} : KvStageSlots{0, 1};
}

size_t recurrent_state_bytes(const ModelConfig& c) {
  if (!c.any_recurrent()) return 0;
  int n = 0;
  for (int il = c.layer_begin; il < c.stage_layer_end(); ++il) n += c.layer_recurrent[size_t(il)];
  return size_t(n) * size_t(c.recurrent.state_floats()) * sizeof(float);
}

size_t kv_bytes_per_block(const ModelConfig& c, int block_size, KvType type) {
  return 2 * size_t(kv_stage_slots(c).n) * size_t(block_size) * size_t(c.kv_slot_width()) *
         size_t(kv_type_size(type));
}

size_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

Result<KvPlan> plan_kv_cache(const ModelConfig& c, int block_size, KvType type, double kv_cache_gb,
                             int max_seqs, int n_state_checkpoints) {
  const size_t per_block = kv_bytes_per_block(c, block_size, type);
  // What one sequence of the full context holds over every K/V group (windowed groups only
  // their window).
  const KvCacheLayout layout = c.kv_cache_layout();
  const int32_t blocks_per_context = int32_t(layout.blocks_held(c.n_ctx, block_size));
  // Recurrent layers: one state per sequence that may run (max_seqs), out of the same budget.
  // (and the prefix cache's state checkpoints).
  const int n_ckpt = std::max(n_state_checkpoints, 0);
  const size_t state_bytes = size_t(std::max(max_seqs, 1) + n_ckpt) * recurrent_state_bytes(c);
  KvPlan p;
  p.state_bytes = state_bytes;
  char line[256];
  if (kv_cache_gb > 0) {
    const double bytes = kv_cache_gb * double(size_t(1) << 30) - double(state_bytes);
    p.n_blocks = int32_t(std::min(bytes / double(per_block), 2.0e9));
    if (p.n_blocks < blocks_per_context) {
      return make_error("--kv-cache-gb ", kv_cache_gb, " holds ", p.n_blocks, " blocks of ",
                        block_size, " tokens, less than the ", blocks_per_context,
                        " one full context of ", c.n_ctx, " needs (raise it or lower --ctx-size)");
    }
    std::snprintf(line, sizeof line, "KV cache: %.2f GiB (--kv-cache-gb)", kv_cache_gb);
  } else {
    const size_t avail = available_memory_bytes();
    const int64_t cap = int64_t(std::max(max_seqs, 1)) * blocks_per_context;
    const double share = double(avail) * kDefaultKvMemoryShare - double(state_bytes);
    int64_t n = avail > 0 ? int64_t(std::max(0.0, share) / double(per_block)) : cap;
    n = std::max<int64_t>(std::min(n, cap), blocks_per_context);
    p.n_blocks = int32_t(n);
    std::snprintf(
        line, sizeof line,
        "KV cache: %.2f GiB (default: %.0f%% of %.1f GiB available, at most %d x %d-token "
        "contexts; set --kv-cache-gb to change)",
        double(n) * double(per_block) / double(size_t(1) << 30), kDefaultKvMemoryShare * 100,
        double(avail) / double(size_t(1) << 30), std::max(max_seqs, 1), c.n_ctx);
  }
  p.bytes = size_t(p.n_blocks) * per_block;
  char tail[160];
  if (layout.single_group()) {
    std::snprintf(tail, sizeof tail, ", %d blocks of %d tokens = %lld tokens", p.n_blocks,
                  block_size, (long long)p.n_blocks * block_size);
  } else {
    std::snprintf(tail, sizeof tail,
                  ", %d blocks of %d tokens x %d layers in %d K/V groups (%lld blocks per "
                  "%d-token sequence)",
                  p.n_blocks, block_size, layout.layers_per_group, layout.n_groups(),
                  (long long)blocks_per_context, c.n_ctx);
  }
  p.description = std::string(line) + tail;
  if (state_bytes > 0) {
    char st[160];
    std::snprintf(st, sizeof st, "; recurrent state: %d sequences + %d checkpoints x %.1f MiB",
                  std::max(max_seqs, 1), n_ckpt,
                  double(recurrent_state_bytes(c)) / double(1 << 20));
    p.description += st;
  }
  return p;
}

}  // namespace sluice
