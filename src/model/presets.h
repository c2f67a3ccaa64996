// Architecture shapes of real models, used by `sluice synth` (random weights, real shapes).
// Numbers are the published configs of each model. The shape part is base/model_shape.h's
// ModelShape, the struct the planner's table (perf/planner.h, the seeds' models) and a loaded
// model's ModelConfig use too.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/model_shape.h"

namespace sluice {

// Llama 3 "rope_scaling": {rope_type: llama3, factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}. factor == 0 means no scaling.
struct Llama3RopeScaling {
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_context = 8192;
};

// A shape (base/model_shape.h: the catalogue entry the planner and ModelConfig share) plus what
// a GGUF of it needs.
struct ModelPreset : ModelShape {
  std::string arch;  // GGUF general.architecture: "llama", "qwen2", "gemma2", "phi3", ...
  int n_ctx = 0;     // trained context length
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool qkv_bias = false;  // qwen2, qwen2moe
  bool qk_norm = false;   // qwen3, qwen3moe, gemma3
  Llama3RopeScaling rope_scaling;
  // gemma2 / gemma3 / phi3 / gpt-oss: ModelShape::sliding_window (attention.sliding_window, 0:
  // none; swa_period is the architecture's, set by model_presets()); gemma2's soft-caps.
  float attn_softcap = 0;
  float final_softcap = 0;
  // Embedding models: <arch>.pooling_type (llama.cpp's enum: 1 mean, 2 cls, 3 last, 4 rank;
  // -1: not written), and with rank a classifier head (cls, cls.output of n_cls_out rows).
  int pooling = -1;
  int n_cls_out = 0;
  // YaRN RoPE scaling (gpt-oss): rope.scaling.factor over original_context_length (0: none).
  float yarn_factor = 0;
  int yarn_orig_ctx = 0;
  // Partial RoPE: rope.dimension_count (0: head_dim); qwen35's rope.dimension_sections.
  int n_rot = 0;
  std::vector<int> rope_sections;
  // Gemma 4 (arch "gemma4"): every swa_period-th layer global (ModelShape::swa_period), the
  // others windowed (attention.sliding_window_pattern); the windowed layers' own head size, KV
  // heads, rotary
  // dims and RoPE base (head_dim / n_kv_head / n_rot / rope_theta are the global layers');
  // the global layers rotate rope_partial of their head through rope_freqs ("proportional"
  // RoPE); the last n_shared_kv_layers read an earlier layer's K/V; per-layer inputs of
  // n_embd_per_layer a layer (0: none).
  int head_dim_swa = 0;
  int n_kv_head_swa = 0;
  int n_rot_swa = 0;
  float rope_theta_swa = 0;
  float rope_partial = 0;
  int n_shared_kv_layers = 0;
  int n_embd_per_layer = 0;
  // gemma4: whether layer il is windowed, its head size and KV heads, and whether it stores K/V.
  bool windowed(int il) const { return layer_window(il) > 0; }
  int layer_head_dim(int il) const {
    return windowed(il) && head_dim_swa > 0 ? head_dim_swa : head_dim;
  }
  int layer_n_kv_head(int il) const {
    return windowed(il) && n_kv_head_swa > 0 ? n_kv_head_swa : n_kv_head;
  }
  bool layer_stores_kv(int il) const { return il < n_layer - n_shared_kv_layers; }
};

const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_preset(std::string_view name);
// "tiny, llama-3.2-1b, ..." for help and error messages.
std::string preset_names();

}  // namespace sluice
