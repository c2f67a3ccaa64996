// What this run's steps have cost, by their number of new tokens: the price the measured
// speculation gate (Speculator::gate, SpecGate::kMeasured) puts on a step with and without
// its drafts. The roofline counts bytes and FLOPs but knows neither the per-step overheads
// (scheduling, sampling, waking threads) nor how the kernels fare at small sizes:
// stories260K's steps cost 37 us + 40 us per token on a 2-core Zen 4, where the roofline sees
// a few microseconds and calls every draft token free.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace sluice {

class MeasuredStepCost {
 public:
  // One step of `n_tokens` new tokens took `seconds`.
  void record(int64_t n_tokens, double seconds);
  // Seconds a step of n new tokens takes: interpolated between the step sizes seen (each at
  // least kMinSteps times: a size's first step runs cold), and past them along the line
  // through the two nearest. nullopt where that is not known: nothing seen yet, or n beyond
  // the one size seen.
  std::optional<double> seconds(int64_t n_tokens) const;

  // Steps are grouped by size in powers of two: 1, 2, 3-4, 5-8, ..; each group stands for the
  // median step (by seconds) of its last kWindow: a step slowed by a page fault, another
  // process or a cold cache moves no price.
  static constexpr int kBuckets = 24;
  static constexpr int kWindow = 15;
  static constexpr int kMinSteps = 3;

 private:
  struct Step {
    double n = 0, seconds = 0;
  };
  struct Bucket {
    std::array<Step, kWindow> last{};
    int64_t count = 0;  // steps recorded (the last min(count, kWindow) are in `last`)
    Step median;        // of `last` by seconds, kept for seconds(), which runs per candidate
  };
  static int bucket_of(int64_t n_tokens);
  std::array<Bucket, kBuckets> b_{};
};

}  // namespace sluice
