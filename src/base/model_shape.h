// The shape of a transformer: the one catalogue entry shared by `sluice synth`'s presets
// (model/presets.h: a shape plus what a GGUF needs), the planner's table (perf/planner.h) and a
// loaded model's configuration (model/config.h: ModelConfig is a shape plus the rest of the
// hyperparameters). In the seeds' notation: L = n_layer, D = n_embd, F = n_ff, N = n_head,
// K = n_kv_head, H = head_dim, V = n_vocab, E = n_expert, k = n_expert_used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// A recurrent (linear-attention) layer's shape: Gated DeltaNet (qwen35). Per V head a state of
// state_size x state_size; the Q/K heads are shared by n_v_heads / n_k_heads V heads (V head j
// reads Q/K head j mod n_k_heads, as llama.cpp's converter lays them out).
struct RecurrentShape {
  int conv_kernel = 0;  // ssm.conv_kernel: causal conv taps (K), the current token's last
  int state_size = 0;   // ssm.state_size: S, the K and V head size
  int n_k_heads = 0;    // ssm.group_count
  int n_v_heads = 0;    // ssm.time_step_rank
  int qk_dim() const { return n_k_heads * state_size; }
  int v_dim() const { return n_v_heads * state_size; }  // ssm.inner_size
  // Channels of the fused projection and of the conv: query, key, value.
  int conv_channels() const { return 2 * qk_dim() + v_dim(); }
  // Floats of one sequence's state in one layer: the conv's last K - 1 inputs and the
  // per-V-head S x S matrices.
  int64_t state_floats() const {
    return int64_t(conv_kernel - 1) * conv_channels() +
           int64_t(n_v_heads) * state_size * state_size;
  }
};

struct ModelShape {
  std::string name;              // "llama-3.2-1b"
  int n_layer = 0;               // L
  int n_embd = 0;                // D
  int n_ff = 0;                  // F: the FFN width (of each expert unless n_ff_exp is set)
  int n_head = 0;                // N: query heads
  int n_kv_head = 0;             // K: == n_head: MHA, 1: MQA, else GQA
  int head_dim = 0;              // H: usually n_embd / n_head
  int n_vocab = 0;               // V
  bool tied_embeddings = false;  // the output projection is token_embd (counted once)
  int n_mlp_matrices = 3;        // gated MLP (gate, up, down)
  int n_expert = 0;              // mixture of experts: E FFNs a layer (0: dense)
  int n_expert_used = 0;         // k experts per token
  std::string source;            // where the numbers come from
  int n_ff_exp = 0;              // each expert's width when it differs from n_ff (0: n_ff)
  int n_ff_shexp = 0;            // a shared expert's width (qwen2moe), 0: none
  // Hybrids (qwen35): the recurrent layers' shape, and which layers are recurrent: all but every
  // full_attention_interval-th (0: none; a loaded model's ModelConfig::layer_recurrent says
  // which, whatever the file's form).
  RecurrentShape recurrent{};
  int full_attention_interval = 0;
  // Sliding-window attention (attention.sliding_window): a windowed layer's query at position p
  // sees keys p - sliding_window + 1 .. p. Which layers are windowed: layer_swa when given
  // (gemma4's sliding_window_pattern array: [n_layer], 1 windowed), else by swa_period: 0 every
  // layer (phi3, mistral), n: layer il is global when il % n == n - 1 (gemma2 and gpt-oss: 2,
  // even layers windowed; gemma3: 6). The period is the architecture's (model/arch.h
  // ArchFamily::swa_period: a loaded file's and a synth preset's alike).
  int sliding_window = 0;
  int swa_period = 0;
  std::vector<uint8_t> layer_swa = {};

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_kv_head * head_dim; }
  int n_gqa() const { return n_head / n_kv_head; }
  bool is_moe() const { return n_expert > 0; }
  // The width of one expert's FFN (the dense FFN's for a dense model).
  int expert_ff() const { return n_ff_exp > 0 ? n_ff_exp : n_ff; }
  // Layers with a recurrent state instead of K/V (by full_attention_interval).
  int n_recurrent_layers() const {
    return full_attention_interval > 0 ? n_layer - n_layer / full_attention_interval : 0;
  }
  // The sliding window of layer il (0: none).
  int layer_window(int il) const {
    if (sliding_window <= 0) return 0;
    if (!layer_swa.empty()) return layer_swa[size_t(il)] ? sliding_window : 0;
    return swa_period > 0 && il % swa_period == swa_period - 1 ? 0 : sliding_window;
  }
  bool any_window() const { return sliding_window > 0; }
};

}  // namespace sluice
