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
//
// Shared K/V (gemma4's attention.shared_kv_layers): a layer may store no K/V of its own and
// attend over an earlier layer's instead. It owns no slot: its layer_group / layer_slot are
// its source's, so the counts above (and every byte) cover only the layers that store K/V:
//
//   tiny gemma4 (S S S S G | S S S S G, the last five shared):
//     owners 0-3 windowed, 4 global -> layers_per_group 1, groups {w 8: 0} {w 8: 1} {w 8: 2}
//     {w 8: 3} {w 0: 4}; layers 5-8 read group 3 (layer 3's), layer 9 group 4 (layer 4's).
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
  // [n_layer] the layer whose K/V layer il reads: il itself, or an earlier layer of the same
  // window (shared K/V: il stores nothing and has its source's group and slot); -1 recurrent.
  std::vector<int16_t> layer_kv_source;

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

  // Whether layer il stores K/V of its own (not recurrent, not reading another layer's).
  bool layer_stores_kv(int il) const {
    return layer_group[size_t(il)] >= 0 && layer_kv_source[size_t(il)] == il;
  }

  // From each layer's kind and window: windows[il] > 0 a windowed layer, 0 a global one, < 0 a
  // recurrent one. kv_source (empty: every layer its own) names, per layer, the earlier layer
  // of the same window whose K/V it reads instead of storing its own. Groups are ordered by
  // their first layer.
  static KvCacheLayout from_windows(std::span<const int32_t> windows,
                                    std::span<const int32_t> kv_source = {}) {
    KvCacheLayout l;
    l.layer_group.assign(windows.size(), -1);
    l.layer_slot.assign(windows.size(), -1);
    l.layer_kv_source.assign(windows.size(), -1);
    const auto owns = [&](size_t il) {
      return windows[il] >= 0 && (kv_source.empty() || kv_source[il] == int32_t(il));
    };
    // Distinct windows in order of first appearance, and how many layers each has.
    std::vector<int32_t> kinds, counts;
    for (size_t il = 0; il < windows.size(); ++il) {
      const int32_t w = windows[il];
      if (!owns(il)) continue;
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
      if (!owns(il)) continue;
      size_t k = 0;
      while (kinds[k] != windows[il]) ++k;
      const int32_t i = seen[k]++;
      if (i % g == 0) {
        group_of[k].push_back(int16_t(l.group_window.size()));
        l.group_window.push_back(windows[il]);
      }
      l.layer_group[il] = group_of[k][size_t(i / g)];
      l.layer_slot[il] = int16_t(i % g);
      l.layer_kv_source[il] = int16_t(il);
    }
    // Readers of another layer's K/V take its group and slot (sources come first).
    for (size_t il = 0; il < windows.size(); ++il) {
      if (windows[il] < 0 || owns(il)) continue;
      const auto src = size_t(kv_source[il]);
      l.layer_group[il] = l.layer_group[src];
      l.layer_slot[il] = l.layer_slot[src];
      l.layer_kv_source[il] = int16_t(src);
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
