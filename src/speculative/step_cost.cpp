#include "speculative/step_cost.h"

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

void MeasuredStepCost::record(int64_t n_tokens, double seconds) {
  if (n_tokens <= 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  Bucket& b = b_[size_t(bucket_of(n_tokens))];
  b.last[size_t(b.count % kWindow)] = {double(n_tokens), seconds};
  ++b.count;
  const size_t n = size_t(std::min<int64_t>(b.count, kWindow));
  std::array<Step, kWindow> sorted = b.last;
  std::nth_element(sorted.begin(), sorted.begin() + ptrdiff_t(n / 2), sorted.begin() + ptrdiff_t(n),
                   [](const Step& x, const Step& y) { return x.seconds < y.seconds; });
  b.median = sorted[n / 2];
}

std::optional<double> MeasuredStepCost::seconds(int64_t n_tokens) const {
  const double n = double(n_tokens);
  // The sizes seen, in increasing order (the buckets are).
  const Step* below[2] = {nullptr, nullptr};  // the nearest at or below n, then the one before
  const Step* above[2] = {nullptr, nullptr};  // the nearest above n, then the one after
  for (const Bucket& b : b_) {
    if (b.count < kMinSteps) continue;
    if (b.median.n <= n) {
      below[1] = below[0];
      below[0] = &b.median;
    } else if (!above[0]) {
      above[0] = &b.median;
    } else if (!above[1]) {
      above[1] = &b.median;
    }
  }
  const auto line = [n](const Step& a, const Step& b) {
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

}  // namespace sluice
