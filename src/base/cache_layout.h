// Cache state per layer kind (architecture.md): which layers keep K/V for the whole context,
// which only for a sliding window, and which keep a fixed-size recurrent state instead. The
// model config says which kind each layer is (ModelConfig::kv_cache_layout); kv/ accounts the
// blocks, the executor addresses its memory by the same layout. One type, below both.
//
// K/V groups. A model's attention layers are cut into groups of `layers_per_group` layers of
// one window each; a sequence holds one block table per group, and every group draws its
// blocks from ONE pool of equal blocks, each holding `layers_per_group` layers' K/V for
// block_size positions (vLLM's hybrid allocator does the same). A windowed group's table
// releases the blocks wholly outside its window, a global group's keeps them all, so windowed
// layers free memory while global layers share the same pool as the load shifts:
//
//   gemma2 (26 layers, even windowed):  layers_per_group 13, groups {w 4096: 0 2 .. 24}
//                                                                   {w 0:    1 3 .. 25}
//   gemma3 (34 layers, 5 global):       layers_per_group 1, 34 groups of one layer
//   llama (every layer global):         layers_per_group 32, one group: today's layout
//
// layers_per_group is the greatest common divisor of the layer counts of the distinct
// windows, so no slot of any block is padding: the bytes a sequence holds are exactly
//   (global layers x its context + windowed layers x what the window keeps) x bytes/token-layer
// (block-rounded). Recurrent layers hold no K/V (layer_group -1); their state is accounted
// apart.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace sluice {

enum class LayerKind : uint8_t {
  kGlobal,     // K/V for every position of the context
  kWindowed,   // K/V for the last `window` positions (and the block they start in)
  kRecurrent,  // no K/V: a fixed-size state per sequence (Gated DeltaNet, Mamba2, short conv)
};

struct KvCacheLayout {
  int32_t layers_per_group = 0;       // K/V slots in every block
  std::vector<int32_t> group_window;  // [n_groups] > 0: that many newest positions; 0: global
  std::vector<int16_t> layer_group;   // [n_layer] the layer's group, -1: no K/V (recurrent)
  std::vector<int16_t> layer_slot;    // [n_layer] its slot in the group's blocks, -1: none

  int32_t n_groups() const { return int32_t(group_window.size()); }
  int32_t n_layer() const { return int32_t(layer_group.size()); }
  // Layers with K/V (n_groups x layers_per_group).
  int32_t n_kv_layers() const { return n_groups() * layers_per_group; }
  bool single_group() const { return n_groups() == 1; }
  bool any_windowed() const {
    for (int32_t w : group_window) {
      if (w > 0) return true;
    }
    return false;
  }

  // From each layer's kind and window: windows[il] > 0 a windowed layer, 0 a global one, < 0 a
  // recurrent one. Groups are ordered by their first layer.
  static KvCacheLayout from_windows(std::span<const int32_t> windows) {
    KvCacheLayout l;
    l.layer_group.assign(windows.size(), -1);
    l.layer_slot.assign(windows.size(), -1);
    // Distinct windows in order of first appearance, and how many layers each has.
    std::vector<int32_t> kinds, counts;
    for (int32_t w : windows) {
      if (w < 0) continue;
      size_t k = 0;
      while (k < kinds.size() && kinds[k] != w) ++k;
      if (k == kinds.size()) {
        kinds.push_back(w);
        counts.push_back(0);
      }
      ++counts[k];
    }
    if (kinds.empty()) return l;
    int32_t g = 0;
    for (int32_t c : counts) g = std::gcd(g, c);
    l.layers_per_group = g;
    // The i-th layer of window w goes to that window's group i / g, slot i % g; groups are
    // numbered as their first layers appear.
    std::vector<int32_t> seen(kinds.size(), 0);
    std::vector<std::vector<int16_t>> group_of(kinds.size());
    for (size_t il = 0; il < windows.size(); ++il) {
      if (windows[il] < 0) continue;
      size_t k = 0;
      while (kinds[k] != windows[il]) ++k;
      const int32_t i = seen[k]++;
      if (i % g == 0) {
        group_of[k].push_back(int16_t(l.group_window.size()));
        l.group_window.push_back(windows[il]);
      }
      l.layer_group[il] = group_of[k][size_t(i / g)];
      l.layer_slot[il] = int16_t(i % g);
    }
    return l;
  }

  // Blocks group `g`'s table holds for a sequence whose step computed positions up to
  // context_len - 1, the step's first new token being at first_new (context_len for a sequence
  // at rest): a global group every block of the context, a windowed one those from the block
  // holding first_new - window + 1 on.
  int64_t group_blocks_held(int32_t g, int64_t context_len, int64_t first_new,
                            int32_t block_size) const {
    const int64_t total = (context_len + block_size - 1) / block_size;
    const int32_t w = group_window[size_t(g)];
    if (w <= 0) return total;
    const int64_t first_seen = std::max<int64_t>(0, first_new - w + 1);
    return total - std::min(total, first_seen / block_size);
  }
  // The most blocks a decoding sequence of `context_len` positions holds over all groups (its
  // next token at context_len): the per-layer-kind formula in blocks.
  int64_t blocks_held(int64_t context_len, int32_t block_size) const {
    int64_t n = 0;
    for (int32_t g = 0; g < n_groups(); ++g) {
      n += group_blocks_held(g, context_len, context_len, block_size);
    }
    return n;
  }
};

}  // namespace sluice
