// Quality of a model judged on text: perplexity over fixed windows, and how far a model's
// next-token distributions are from a reference model's (KL divergence, top-1 agreement,
// change of perplexity). The method is llama.cpp's `llama-perplexity`, so the numbers compare:
//
//   tokens  [ t0 t1 t2 ............................................................ tN-1 ]
//   window w = tokens [w*stride, w*stride + n_ctx), its first token replaced by BOS when the
//   vocabulary adds BOS; each window is run on its own (fresh context, positions 0..n_ctx-1)
//
//   positions in a window   0  1 ...  first_scored-1 | first_scored ... n_ctx-1
//                           context only              | scored: token p's NLL from the logits
//                                                     | at p-1 (everything before it in the window)
//
// first_scored = max(n_ctx/2 + 1, n_ctx - stride): with stride = n_ctx (non-overlapping windows,
// the default) the second half of each window, as llama.cpp scores it (n_ctx - 1 - n_ctx/2
// tokens); with stride <= n_ctx - n_ctx/2 - 1 the last `stride` tokens, so every token after the
// first window is scored exactly once with at least n_ctx - stride tokens of context.
//
// ppl = exp(mean NLL); its uncertainty is ppl * the standard error of the mean NLL.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace sluice::eval {

struct WindowPlan {
  int32_t n_ctx = 0;         // tokens per window
  int32_t stride = 0;        // tokens between the starts of consecutive windows
  int32_t first_scored = 0;  // first scored position of a window (see the top of this file)
  int32_t n_windows = 0;     // whole windows in the text (a partial last one is left out)

  int32_t n_scored() const { return n_ctx - first_scored; }  // scored tokens per window
  int64_t start(int32_t w) const { return int64_t(w) * stride; }
};

// The windows of a text of `n_tokens` tokens. Fails with what to change when the window is
// shorter than 3 tokens (nothing to score), the stride is outside [1, n_ctx], or the text is
// shorter than one window.
Result<WindowPlan> plan_windows(int64_t n_tokens, int32_t n_ctx, int32_t stride);

// Window `w`'s tokens: tokens[start, start + n_ctx) with the first replaced by `bos` (>= 0).
std::vector<int32_t> window_tokens(std::span<const int32_t> tokens, const WindowPlan& plan,
                                   int32_t w, int32_t bos);

// log(sum(exp(logits))) over a row, computed around its maximum (double accumulation).
double log_sum_exp(std::span<const float> logits);
// The index of the largest logit (the first of equal ones).
int32_t argmax(std::span<const float> logits);
// Row of log-probabilities: logits - log_sum_exp(logits).
void log_softmax(std::span<const float> logits, std::span<float> out);

// Mean, its standard error and the rest of a sample of NLLs (or of any per-token value).
struct MeanStats {
  double sum = 0;
  double sum2 = 0;
  int64_t count = 0;

  void add(double x) {
    sum += x;
    sum2 += x * x;
    ++count;
  }
  double mean() const { return count > 0 ? sum / double(count) : 0; }
  // Standard error of the mean: sqrt(variance / (count - 1)); 0 below 2 values.
  double std_error() const;
};

struct PerplexityResult {
  double ppl = 0;
  double ppl_error = 0;  // ppl * standard error of the mean NLL
  double mean_nll = 0;
  int64_t n_tokens = 0;  // scored tokens
};
PerplexityResult perplexity_of(const MeanStats& nll);

// A model's next-token distributions against a reference's (the base), token by token. add()
// takes the base's log-probability row and the model's logits row at one scored position and
// the token that followed.
class KlStats {
 public:
  void add(std::span<const float> base_log_probs, std::span<const float> logits, int32_t token);

  struct Report {
    PerplexityResult ppl;       // the model's
    PerplexityResult ppl_base;  // the base's (from its saved log-probabilities)
    double ln_ppl_ratio = 0;    // mean NLL - mean base NLL = ln(ppl / ppl_base)
    double ln_ppl_ratio_error = 0;
    double delta_ppl = 0;  // ppl - ppl_base
    double delta_ppl_error = 0;
    double ppl_correlation = 0;  // of the two NLL series
    double kld_mean = 0;         // mean of KL(base || model) per token, nats
    double kld_mean_error = 0;
    double kld_median = 0;
    double kld_p90 = 0;
    double kld_p99 = 0;
    double kld_max = 0;
    double top1_agreement = 0;  // fraction of tokens whose argmax is the base's
    double top1_agreement_error = 0;
    double rms_delta_p = 0;  // RMS of p(token) - p_base(token)
    int64_t n_tokens = 0;
  };
  // Sorts the per-token values it keeps (for the percentiles).
  Report report();
  int64_t count() const { return nll_.count; }

 private:
  MeanStats nll_, nll_base_, kld_, delta_p2_;
  double sum_nll_nll_base_ = 0;
  int64_t n_same_top_ = 0;
  std::vector<float> kld_values_;  // [count]
  std::vector<float> log_probs_;   // scratch: the model's log-probabilities
};

// The `q`-quantile (0..1) of sorted values, interpolated linearly between neighbours.
double quantile_sorted(std::span<const float> sorted, double q);

}  // namespace sluice::eval
