// The oracle forward pass: one sequence, one token at a time, every sum in f64, plain loops and
// its own K/V history (no paging, no threads, no kernels/ code). Tests compare executors
// against it; it is far too slow for anything else (weights are decoded to f32 up front, so
// only small models fit).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace sluice {

struct ReferenceOptions {
  // MXFP4 matrices (gpt-oss's experts) multiply activations rounded to 8-bit blocks of 32 with
  // f16 scales, as sluice's MXFP4 matmul and ggml's CPU backend do (kernels/matmul.h; the
  // gpt-oss goldens depend on it). true: exact f64 activations instead.
  bool exact_mxfp4_acts = false;
};

class ReferenceForward {
 public:
  // Decodes every weight of `model` (which must outlive this object) to f32.
  static Result<std::unique_ptr<ReferenceForward>> create(const Model& model,
                                                          const ReferenceOptions& options = {});
  ~ReferenceForward();
  ReferenceForward(const ReferenceForward&) = delete;
  ReferenceForward& operator=(const ReferenceForward&) = delete;

  // Runs `token` at position n_past() and returns its logits [n_vocab].
  Result<std::vector<float>> step(int32_t token);
  int n_past() const { return n_past_; }
  // The last step's final hidden state after the output norm [n_embd] (what last-token
  // pooling of an embedding model returns).
  const std::vector<double>& last_hidden() const { return hidden_; }

 private:
  // A layer's matrices decoded to f32, row-major [n_rows, n_cols].
  struct Layer {
    std::vector<float> wq, wk, wv, wo, w_gate, w_up, w_down;
    // Mixture of experts: the router, per expert gate / up / down, the shared expert and its
    // gate (empty when absent).
    std::vector<float> router, sh_gate, sh_up, sh_down, sh_gate_inp;
    std::vector<std::vector<float>> e_gate, e_up, e_down;
    bool round_expert_acts = false;  // the experts are MXFP4 and options ask for the rounding
    std::vector<float> ple_gate, ple_proj;  // per-layer input gate and projection (gemma4)
  };
  // gemma4's per-layer inputs of `token` [n_layer * n_embd_per_layer] from the scaled embedding x.
  std::vector<double> per_layer_inputs(int32_t token, const std::vector<double>& x) const;
  // The FFN of one token (xn normed): dense SwiGLU / GeGLU, or the mixture of experts.
  std::vector<double> ffn(const Layer& l, const LayerWeights& lw,
                          const std::vector<double>& xn) const;
  ReferenceForward(const Model& model, const ReferenceOptions& options)
      : model_(model), options_(options) {}

  const Model& model_;
  ReferenceOptions options_;
  std::vector<float> token_embd_;      // [n_vocab, n_embd]
  std::vector<float> output_;          // [n_vocab, n_embd]
  std::vector<float> ple_embd_;        // [n_vocab, n_layer * P] (gemma4; empty otherwise)
  std::vector<float> ple_model_proj_;  // [n_layer * P, n_embd]
  std::vector<Layer> layers_;
  std::vector<std::vector<double>> k_hist_;  // [layer][pos * layer kv_dim] (empty: shared)
  std::vector<std::vector<double>> v_hist_;  // [layer][pos * layer kv_dim]
  int n_past_ = 0;
  std::vector<double> hidden_;  // last_hidden()
};

}  // namespace sluice
