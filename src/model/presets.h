// Architecture shapes of real models, used by `sluice synth` (random weights, real shapes).
// Numbers are the published configs of each model. (The planner's own table of shapes is
// perf/planner.h's planner_models(): perf/ sits beside model/, not above it.)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

// Llama 3 "rope_scaling": {rope_type: llama3, factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings}. factor == 0 means no scaling.
struct Llama3RopeScaling {
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_context = 8192;
};

struct ModelPreset {
  std::string name;  // "llama-3.2-1b"
  std::string arch;  // GGUF general.architecture: "llama", "qwen2", "gemma2", "phi3", ...
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;  // usually n_embd / n_head
  int n_vocab = 0;
  int n_ctx = 0;  // trained context length
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // qwen2
  bool qk_norm = false;   // qwen3, qwen3moe
  Llama3RopeScaling rope_scaling;
  // gemma2 / phi3 / mistral: attention.sliding_window (0: none); gemma2's soft-caps.
  int sliding_window = 0;
  float attn_softcap = 0;
  float final_softcap = 0;
  // Mixture of experts (n_expert > 0; arch "llama" for Mixtral, "qwen2moe", "qwen3moe"):
  // expert width n_ff_exp, shared expert width n_ff_shexp (qwen2moe).
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  int n_ff_shexp = 0;
};

const std::vector<ModelPreset>& model_presets();
const ModelPreset* find_preset(std::string_view name);
// "tiny, llama-3.2-1b, ..." for help and error messages.
std::string preset_names();

}  // namespace sluice
