// Sampler cost per token over a Llama-3 vocabulary (128256). Logits are model-like: normal
// with std 2.5 plus a few strong candidates; "Flat" uses a narrow uniform spread, the worst
// case for top-p (a nucleus of ~100k tokens). Time per iteration = one sampled token.
//   BM_Sample/greedy, /temp, /topk40_topp095 (the common server default), /topp095,
//   /minp005, /topp095_flat, /topk40_topp095_logprobs5, /penalties (rep 1.1 over a 4096-token
//   context + frequency/presence over 1024 generated, with top-k 40 / top-p 0.95)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sample/rng.h"
#include "sample/sampler.h"

namespace sluice {
namespace {

constexpr int32_t kVocab = 128256;

std::vector<float> model_like_logits() {
  std::vector<float> l(kVocab);
  Xoshiro256 rng(2024);
  for (size_t i = 0; i < l.size(); i += 2) {  // Box-Muller pairs
    const double u1 = rng.uniform() + 0x1.0p-60;
    const double u2 = rng.uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)) * 2.5;
    l[i] = static_cast<float>(r * std::cos(6.283185307179586 * u2));
    if (i + 1 < l.size()) l[i + 1] = static_cast<float>(r * std::sin(6.283185307179586 * u2));
  }
  for (int i = 0; i < 8; ++i)
    l[static_cast<size_t>(1000 + 9973 * i)] = 14.0f - 0.7f * static_cast<float>(i);
  return l;
}

std::vector<float> flat_logits() {
  std::vector<float> l(kVocab);
  Xoshiro256 rng(7);
  for (float& x : l) x = static_cast<float>(rng.uniform() * 0.5);
  return l;
}

enum Case { kGreedy, kTemp, kTopKTopP, kTopP, kMinP, kTopPFlat, kLogprobs, kPenalties };

void BM_Sample(benchmark::State& state, Case c) {
  SamplingParams p;
  p.seed = 1;
  p.temperature = 0.8f;
  switch (c) {
    case kGreedy:
      p.temperature = 0.0f;
      break;
    case kTemp:
      break;
    case kTopKTopP:
      p.top_k = 40;
      p.top_p = 0.95f;
      break;
    case kTopP:
      p.top_p = 0.95f;
      break;
    case kMinP:
      p.min_p = 0.05f;
      break;
    case kTopPFlat:
      p.top_p = 0.95f;
      break;
    case kLogprobs:
      p.top_k = 40;
      p.top_p = 0.95f;
      p.n_logprobs = 5;
      break;
    case kPenalties:
      p.top_k = 40;
      p.top_p = 0.95f;
      p.repetition_penalty = 1.1f;
      p.penalty_last_n = -1;
      p.frequency_penalty = 0.3f;
      p.presence_penalty = 0.2f;
      break;
  }
  const std::vector<float> logits = c == kTopPFlat ? flat_logits() : model_like_logits();
  std::vector<int32_t> prompt;
  Xoshiro256 rng(3);
  if (c == kPenalties) {
    for (int i = 0; i < 4096; ++i) prompt.push_back(static_cast<int32_t>(rng.next() % kVocab));
  }
  Result<Sampler> made = Sampler::create(p, prompt);
  if (!made.ok()) {
    state.SkipWithError(made.message().c_str());
    return;
  }
  Sampler s = std::move(made).value();
  if (c == kPenalties) {
    for (int i = 0; i < 1024; ++i) s.accept(static_cast<int32_t>(rng.next() % kVocab));
  }
  for (auto _ : state) {
    Result<SampleResult> r = s.sample(logits);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_CAPTURE(BM_Sample, greedy, kGreedy)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, temp, kTemp)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, topk40_topp095, kTopKTopP)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, topp095, kTopP)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, minp005, kMinP)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, topp095_flat, kTopPFlat)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, topk40_topp095_logprobs5, kLogprobs)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, penalties, kPenalties)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
