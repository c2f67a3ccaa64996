// The shape of a transformer: the one catalogue entry shared by `sluice synth`'s presets
// (model/presets.h: a shape plus what a GGUF needs), the planner's table (perf/planner.h) and a
// loaded model's configuration (model/config.h: ModelConfig is a shape plus the rest of the
// hyperparameters). In the seeds' notation: L = n_layer, D = n_embd, F = n_ff, N = n_head,
// K = n_kv_head, H = head_dim, V = n_vocab, E = n_expert, k = n_expert_used.
#pragma once

#include <string>

namespace sluice {

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

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_kv_head * head_dim; }
  int n_gqa() const { return n_head / n_kv_head; }
  bool is_moe() const { return n_expert > 0; }
  // The width of one expert's FFN (the dense FFN's for a dense model).
  int expert_ff() const { return n_ff_exp > 0 ? n_ff_exp : n_ff; }
};

}  // namespace sluice
