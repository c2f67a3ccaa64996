#include "engine/step_cost.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace sluice {

int MeasuredStepCost::bucket_of(int64_t n_tokens) {
  if (n_tokens <= 1) return 0;
  // ceil(log2(n)): 2 -> 1, 3..4 -> 2, 5..8 -> 3.
  const int b = int(std::bit_width(uint64_t(n_tokens - 1)));
  return std::min(b, kBuckets - 1);
}

void MeasuredStepCost::record(int64_t n_tokens, double seconds, double predicted) {
  if (n_tokens <= 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  Bucket& b = b_[size_t(bucket_of(n_tokens))];
  const double ratio = predicted > 0 && std::isfinite(predicted) ? seconds / predicted : 0;
  b.last[size_t(b.count % kWindow)] = {double(n_tokens), seconds, ratio};
  ++b.count;
  const size_t n = size_t(std::min<int64_t>(b.count, kWindow));
  std::array<Step, kWindow> sorted = b.last;
  std::nth_element(sorted.begin(), sorted.begin() + ptrdiff_t(n / 2), sorted.begin() + ptrdiff_t(n),
                   [](const Step& x, const Step& y) { return x.seconds < y.seconds; });
  const Step& median = sorted[n / 2];
  b.n = median.n;
  b.seconds = median.seconds;
  // The correction: the median of the ratios recorded (0 where the step had no prediction).
  std::array<double, kWindow> ratios{};
  size_t n_ratios = 0;
  for (size_t i = 0; i < n; ++i) {
    if (b.last[i].ratio > 0) ratios[n_ratios++] = b.last[i].ratio;
  }
  if (n_ratios > 0) {
    std::nth_element(ratios.begin(), ratios.begin() + ptrdiff_t(n_ratios / 2),
                     ratios.begin() + ptrdiff_t(n_ratios));
    b.ratio = ratios[n_ratios / 2];
  }
}

std::optional<double> MeasuredStepCost::seconds(int64_t n_tokens) const {
  const double n = double(n_tokens);
  // The sizes seen, in increasing order (the buckets are).
  const Bucket* below[2] = {nullptr, nullptr};  // the nearest at or below n, then the one before
  const Bucket* above[2] = {nullptr, nullptr};  // the nearest above n, then the one after
  for (const Bucket& b : b_) {
    if (b.count < kMinSteps) continue;
    if (b.n <= n) {
      below[1] = below[0];
      below[0] = &b;
    } else if (!above[0]) {
      above[0] = &b;
    } else if (!above[1]) {
      above[1] = &b;
    }
  }
  const auto line = [n](const Bucket& a, const Bucket& b) {
    if (b.n == a.n) return a.seconds;
    return a.seconds + (b.seconds - a.seconds) * (n - a.n) / (b.n - a.n);
  };
  if (below[0] && above[0]) return line(*below[0], *above[0]);
  if (below[0] && below[0]->n == n) return below[0]->seconds;
  if (below[0] && below[1]) {
    // Past the largest size seen: along its line, never cheaper than the largest step.
    return std::max(below[0]->seconds, line(*below[1], *below[0]));
  }
  if (above[0] && above[1]) {
    // Below the smallest size seen: along its line, never below a proportional share of it.
    return std::max(above[0]->seconds * n / above[0]->n, line(*above[0], *above[1]));
  }
  return std::nullopt;
}

std::optional<double> MeasuredStepCost::correction(int64_t n_tokens) const {
  const int want = bucket_of(n_tokens);
  const Bucket* best = nullptr;
  int best_d = kBuckets;
  for (int i = 0; i < kBuckets; ++i) {
    const Bucket& b = b_[size_t(i)];
    if (b.ratio == 0 || b.count < kMinSteps) continue;
    const int d = std::abs(i - want);
    if (d < best_d) {
      best_d = d;
      best = &b;
    }
  }
  if (!best) return std::nullopt;
  return best->ratio;
}

}  // namespace sluice
