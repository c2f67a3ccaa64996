#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

namespace sluice::eval {

Result<WindowPlan> plan_windows(int64_t n_tokens, int32_t n_ctx, int32_t stride) {
  if (n_ctx < 3) {
    return make_error("a window of ", n_ctx, " tokens scores none (--ctx-size must be >= 3)");
  }
  if (stride < 1 || stride > n_ctx) {
    return make_error("--stride must be in [1, --ctx-size = ", n_ctx, "] (got ", stride, ")");
  }
  if (n_tokens < n_ctx) {
    return make_error("the text has ", n_tokens, " tokens, fewer than one window of ", n_ctx,
                      " (give a longer text or a smaller --ctx-size)");
  }
  WindowPlan p;
  p.n_ctx = n_ctx;
  p.stride = stride;
  p.first_scored = std::max(n_ctx / 2 + 1, n_ctx - stride);
  const int64_t n = (n_tokens - n_ctx) / stride + 1;
  if (n > INT32_MAX) return make_error("the text has too many windows (", n, ")");
  p.n_windows = int32_t(n);
  return p;
}

std::vector<int32_t> window_tokens(std::span<const int32_t> tokens, const WindowPlan& plan,
                                   int32_t w, int32_t bos) {
  const auto first = tokens.begin() + plan.start(w);
  std::vector<int32_t> out(first, first + plan.n_ctx);
  if (bos >= 0) out[0] = bos;
  return out;
}

double log_sum_exp(std::span<const float> logits) {
  float max = logits[0];
  for (float x : logits) max = std::max(max, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - double(max));
  return double(max) + std::log(sum);
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  }
  return best;
}

void log_softmax(std::span<const float> logits, std::span<float> out) {
  const double lse = log_sum_exp(logits);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = float(double(logits[i]) - lse);
}

double MeanStats::std_error() const {
  if (count < 2) return 0;
  const double m = mean();
  const double var = sum2 / double(count) - m * m;
  return var > 0 ? std::sqrt(var / double(count - 1)) : 0;
}

PerplexityResult perplexity_of(const MeanStats& nll) {
  PerplexityResult r;
  r.mean_nll = nll.mean();
  r.ppl = std::exp(r.mean_nll);
  r.ppl_error = r.ppl * nll.std_error();
  r.n_tokens = nll.count;
  return r;
}

double quantile_sorted(std::span<const float> sorted, double q) {
  if (sorted.empty()) return 0;
  if (q <= 0) return sorted.front();
  if (q >= 1) return sorted.back();
  const double pos = q * double(sorted.size() - 1);
  const auto i = size_t(pos);
  const double frac = pos - double(i);
  const size_t j = std::min(i + 1, sorted.size() - 1);
  return (1 - frac) * double(sorted[i]) + frac * double(sorted[j]);
}

void KlStats::add(std::span<const float> base_log_probs, std::span<const float> logits,
                  int32_t token) {
  log_probs_.resize(logits.size());
  log_softmax(logits, log_probs_);
  const double nll = -double(log_probs_[size_t(token)]);
  const double nll_base = -double(base_log_probs[size_t(token)]);
  nll_.add(nll);
  nll_base_.add(nll_base);
  sum_nll_nll_base_ += nll * nll_base;
  // KL(base || model) = sum_v p_base(v) * (log p_base(v) - log p(v)), over the whole vocabulary.
  double kld = 0;
  for (size_t v = 0; v < logits.size(); ++v) {
    const double lb = base_log_probs[v];
    kld += std::exp(lb) * (lb - double(log_probs_[v]));
  }
  kld_.add(kld);
  kld_values_.push_back(float(kld));
  if (argmax(logits) == argmax(base_log_probs)) ++n_same_top_;
  const double dp = std::exp(-nll) - std::exp(-nll_base);
  delta_p2_.add(dp * dp);
}

KlStats::Report KlStats::report() {
  Report r;
  r.n_tokens = nll_.count;
  r.ppl = perplexity_of(nll_);
  r.ppl_base = perplexity_of(nll_base_);
  // Covariance of the two mean NLLs (the same tokens: strongly correlated), which the
  // uncertainty of their difference must subtract.
  const double n = double(std::max<int64_t>(nll_.count, 1));
  const double cov = nll_.count >= 2 ? (sum_nll_nll_base_ / n - nll_.mean() * nll_base_.mean()) /
                                           double(nll_.count - 1)
                                     : 0;
  const double e = nll_.std_error(), eb = nll_base_.std_error();
  r.ppl_correlation = e > 0 && eb > 0 ? cov / (e * eb) : 0;
  r.ln_ppl_ratio = nll_.mean() - nll_base_.mean();
  r.ln_ppl_ratio_error = std::sqrt(std::max(0.0, e * e + eb * eb - 2 * cov));
  r.delta_ppl = r.ppl.ppl - r.ppl_base.ppl;
  r.delta_ppl_error = std::sqrt(std::max(0.0, r.ppl.ppl_error * r.ppl.ppl_error +
                                                  r.ppl_base.ppl_error * r.ppl_base.ppl_error -
                                                  2 * r.ppl.ppl * r.ppl_base.ppl * cov));
  r.kld_mean = kld_.mean();
  r.kld_mean_error = kld_.std_error();
  std::sort(kld_values_.begin(), kld_values_.end());
  r.kld_median = quantile_sorted(kld_values_, 0.5);
  r.kld_p90 = quantile_sorted(kld_values_, 0.90);
  r.kld_p99 = quantile_sorted(kld_values_, 0.99);
  r.kld_max = kld_values_.empty() ? 0 : kld_values_.back();
  if (nll_.count > 0) {
    r.top1_agreement = double(n_same_top_) / double(nll_.count);
    r.top1_agreement_error =
        nll_.count >= 2
            ? std::sqrt(r.top1_agreement * (1 - r.top1_agreement) / double(nll_.count - 1))
            : 0;
  }
  r.rms_delta_p = std::sqrt(delta_p2_.mean());
  return r;
}

}  // namespace sluice::eval
