// The sampler draws from exactly the intended distribution: chi-square goodness of fit of
// 100k seeded draws against a double-precision, sort-based reference of the spec
// (top-k -> temperature -> softmax -> top-p -> min-p), rejecting at p = 0.001. Tokens the
// reference excludes must never be drawn. Deterministic: every sampler is seeded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "sample/rng.h"
#include "sample/sampler.h"

namespace sluice {
namespace {

constexpr int kDraws = 100000;

// The spec, written plainly: probability of every token (0 = excluded).
std::vector<double> reference(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t n = logits.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t keep = n;
  if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
  const double l_max = logits[order[0]];
  std::vector<double> prob(n, 0.0);
  double z = 0.0;
  for (size_t r = 0; r < keep; ++r) {
    const size_t i = order[r];
    prob[i] = std::exp((logits[i] - l_max) / p.temperature);
    z += prob[i];
  }
  for (double& q : prob) q /= z;
  if (p.top_p < 1.0f) {
    double acc = 0.0;
    size_t r = 0;
    while (r < keep && acc < p.top_p) acc += prob[order[r++]];
    for (size_t j = r; j < n; ++j) prob[order[j]] = 0.0;
    keep = r;
  }
  if (p.min_p > 0.0f) {
    const double p_max = prob[order[0]];
    for (size_t r = 0; r < keep; ++r) {
      if (prob[order[r]] < p.min_p * p_max) prob[order[r]] = 0.0;
    }
  }
  const double total = std::accumulate(prob.begin(), prob.end(), 0.0);
  for (double& q : prob) q /= total;
  return prob;
}

// Upper 0.001 critical value of chi-square with `df` degrees of freedom.
double chi2_critical_001(int df) {
  static const double table[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322,
                                 26.124, 27.877, 29.588, 31.264, 32.909, 34.528, 36.123,
                                 37.697, 39.252, 40.790, 42.312, 43.820, 45.315};
  EXPECT_GE(df, 1);
  EXPECT_LE(df, 20);
  return table[df - 1];
}

// Draws kDraws tokens and checks them against reference(): no draw outside the support, and
// chi-square over the support, each token its own category (pooled in id order when fewer than 5
// draws are expected, or when the support is large, into at most 21 bins).
void expect_counts(const std::vector<double>& prob, const std::vector<int64_t>& counts);

void expect_distribution(const std::vector<float>& logits, SamplingParams p, uint64_t seed) {
  p.seed = seed;
  Result<Sampler> made = Sampler::create(p);
  ASSERT_TRUE(made.ok()) << made.message();
  Sampler s = std::move(made).value();
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    Result<SampleResult> r = s.sample(logits);
    ASSERT_TRUE(r.ok()) << r.message();
    ++counts[static_cast<size_t>(r->token)];
  }
  expect_counts(reference(logits, p), counts);
}

// Chi-square of kDraws draws `counts` against `prob`, as described above.
void expect_counts(const std::vector<double>& prob, const std::vector<int64_t>& counts) {
  size_t support = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (prob[i] == 0.0) {
      ASSERT_EQ(counts[i], 0) << "token " << i << " is outside the distribution";
    } else {
      ++support;
    }
  }
  // One bin per token for small supports; large ones pooled into bins of >= N/20 expected.
  const double min_expected = support <= 20 ? 5.0 : kDraws / 20.0;
  std::vector<double> exp_bins;
  std::vector<double> obs_bins;
  double e = 0.0;
  double o = 0.0;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (prob[i] == 0.0) continue;
    e += prob[i] * kDraws;
    o += static_cast<double>(counts[i]);
    if (e >= min_expected) {
      exp_bins.push_back(e);
      obs_bins.push_back(o);
      e = o = 0.0;
    }
  }
  if (e > 0.0) {  // remainder joins the last bin
    if (exp_bins.empty()) {
      exp_bins.push_back(0.0);
      obs_bins.push_back(0.0);
    }
    exp_bins.back() += e;
    obs_bins.back() += o;
  }
  if (exp_bins.size() < 2) {
    EXPECT_EQ(support, 1u);  // a single token: nothing to test beyond the support
    return;
  }
  double chi2 = 0.0;
  for (size_t b = 0; b < exp_bins.size(); ++b) {
    chi2 += (obs_bins[b] - exp_bins[b]) * (obs_bins[b] - exp_bins[b]) / exp_bins[b];
  }
  const int df = static_cast<int>(exp_bins.size()) - 1;
  EXPECT_LT(chi2, chi2_critical_001(df)) << "df " << df << ", support " << support;
}

const std::vector<float> kLogits12 = {1.2f,  -0.3f, 2.0f, 0.7f,  0.0f,  1.9f,
                                      -1.5f, 0.4f,  1.1f, -0.8f, 0.25f, 1.55f};

TEST(SampleDistribution, TemperatureOne) {
  SamplingParams p;
  expect_distribution(kLogits12, p, 1);
}

TEST(SampleDistribution, LowAndHighTemperature) {
  SamplingParams p;
  p.temperature = 0.6f;
  expect_distribution(kLogits12, p, 2);
  p.temperature = 1.7f;
  expect_distribution(kLogits12, p, 3);
}

TEST(SampleDistribution, TopK) {
  SamplingParams p;
  p.top_k = 5;
  p.temperature = 0.8f;
  expect_distribution(kLogits12, p, 4);
  p.top_k = 12;  // = vocabulary: off
  expect_distribution(kLogits12, p, 5);
}

TEST(SampleDistribution, TopP) {
  // Sorted probabilities at T = 1: .200 .183 .131 .097 .083 .064 .056 .045 .039 .030 .022 .009
  // cumulative .200 .383 .514 .611 .694 .758 ...: top_p 0.7 keeps 6 tokens (edge well away).
  SamplingParams p;
  p.top_p = 0.7f;
  expect_distribution(kLogits12, p, 6);
  p.top_p = 0.15f;  // only the best token
  expect_distribution(kLogits12, p, 7);
}

TEST(SampleDistribution, MinP) {
  SamplingParams p;
  p.min_p = 0.3f;  // keeps p >= 0.3 * 0.200 = 0.060: 6 tokens
  expect_distribution(kLogits12, p, 8);
}

TEST(SampleDistribution, AllTogether) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 9;
  p.top_p = 0.85f;
  p.min_p = 0.12f;
  expect_distribution(kLogits12, p, 9);
}

// Ties on the top-k boundary: the lower ids are kept.
TEST(SampleDistribution, TopKTiesKeepLowerIds) {
  const std::vector<float> flat(16, 0.5f);
  SamplingParams p;
  p.top_k = 3;
  expect_distribution(flat, p, 10);  // reference's stable sort keeps ids 0, 1, 2
}

// Without top-k and over the sort limit, top-p goes through the histogram path: a big
// vocabulary with 14 strong tokens over a long tail.
TEST(SampleDistribution, TopPLargeVocabulary) {
  std::vector<float> logits(1500, -9.0f);
  Xoshiro256 rng(11);
  for (float& l : logits) l += static_cast<float>(rng.uniform());
  const float strong[] = {3.0f, 2.7f, 2.6f, 2.2f, 2.0f, 1.9f, 1.5f,
                          1.4f, 1.0f, 0.8f, 0.5f, 0.3f, 0.1f, 0.0f};
  for (size_t i = 0; i < std::size(strong); ++i) logits[100 + 101 * i] = strong[i];
  SamplingParams p;
  p.top_p = 0.8f;
  expect_distribution(logits, p, 12);
  p.top_p = 0.95f;
  p.temperature = 1.3f;
  expect_distribution(logits, p, 13);
}

// A nucleus of thousands of tokens: the crossing bucket holds many tokens and is sorted.
TEST(SampleDistribution, TopPWideNucleus) {
  std::vector<float> logits(2000);
  Xoshiro256 rng(21);
  for (float& l : logits) l = static_cast<float>(rng.uniform() * 2.0);
  SamplingParams p;
  p.top_p = 0.5f;
  expect_distribution(logits, p, 14);
  p.top_p = 0.9f;
  p.min_p = 0.4f;
  expect_distribution(logits, p, 15);
}

// The full no-truncation path on a large vocabulary.
TEST(SampleDistribution, LargeVocabularyNoTruncation) {
  std::vector<float> logits(2048, -30.0f);
  for (int i = 0; i < 10; ++i)
    logits[static_cast<size_t>(200 * i + 7)] = 0.3f * static_cast<float>(i);
  SamplingParams p;
  expect_distribution(logits, p, 16);
}

// Radix selection down to its last level: every weight equal, so the cut is by id.
TEST(SampleDistribution, TopPAllEqualWeights) {
  const std::vector<float> flat(1201, 1.25f);
  SamplingParams p;
  p.top_p = 0.95f;  // 0.95 * 1201 = 1140.95: ids 0..1140 (no rounding edge)
  expect_distribution(flat, p, 17);
}

// Banned tokens leave whole zero-weight blocks for the block-sum draw to skip.
TEST(SampleDistribution, NoTruncationSkipsEmptyBlocks) {
  std::vector<float> logits(3000, -std::numeric_limits<float>::infinity());
  const size_t live[] = {0, 255, 256, 700, 1023, 1024, 2047, 2999};
  for (size_t i = 0; i < std::size(live); ++i) logits[live[i]] = 0.2f * static_cast<float>(i);
  SamplingParams p;
  p.temperature = 1.2f;
  expect_distribution(logits, p, 18);
}

// Speculative verification (Sampler::verify): a draft token drawn from q, accepted with
// min(1, p/q), else replaced by a draw from norm(max(0, p - q)), yields tokens distributed as
// the target's p, for any q. `q` empty: a one-hot q at `fixed_draft` (n-gram drafts).
void expect_verified(const std::vector<float>& logits, SamplingParams p, std::vector<double> q,
                     int32_t fixed_draft, uint64_t seed, double* acceptance = nullptr) {
  p.seed = seed;
  Result<Sampler> made = Sampler::create(p);
  ASSERT_TRUE(made.ok()) << made.message();
  Sampler s = std::move(made).value();
  SampleWorkspace ws;
  Xoshiro256 draft_rng(seed * 7919 + 1);
  std::vector<float> qf(q.begin(), q.end());
  std::vector<int64_t> counts(logits.size(), 0);
  int64_t accepted = 0;
  for (int i = 0; i < kDraws; ++i) {
    int32_t draft = fixed_draft;
    if (!q.empty()) {  // draw the draft from q
      double u = draft_rng.uniform(), acc = 0.0;
      draft = -1;
      for (size_t t = 0; t < q.size() && draft < 0; ++t) {
        acc += q[t];
        if (u < acc) draft = int32_t(t);
      }
      if (draft < 0) draft = int32_t(q.size() - 1);
    }
    Result<VerifyResult> r = s.verify(logits, draft, qf, ws);
    ASSERT_TRUE(r.ok()) << r.message();
    if (r->accepted) {
      ASSERT_EQ(r->sample.token, draft);
      ++accepted;
    }
    ++counts[static_cast<size_t>(r->sample.token)];
  }
  expect_counts(reference(logits, p), counts);
  if (acceptance) *acceptance = double(accepted) / kDraws;
}

std::vector<double> softmax_of(const std::vector<float>& l, double t = 1.0) {
  std::vector<double> q(l.size());
  double z = 0.0;
  for (size_t i = 0; i < l.size(); ++i) z += q[i] = std::exp(l[i] / t);
  for (double& x : q) x /= z;
  return q;
}

TEST(SampleVerify, IdenticalQAcceptsAlmostEverything) {
  SamplingParams p;
  double acceptance = 0;
  expect_verified(kLogits12, p, softmax_of(kLogits12), -1, 21, &acceptance);
  EXPECT_GT(acceptance, 0.99);  // p == q up to float rounding: accept with min(1, p/q) = 1
}

TEST(SampleVerify, DisjointSupportRejectsEverything) {
  SamplingParams p;
  p.top_k = 4;  // p lives on the 4 best tokens: ids 2, 5, 11, 0
  std::vector<double> q(12, 0.0);
  q[1] = 0.5;
  q[6] = 0.5;
  double acceptance = 1;
  expect_verified(kLogits12, p, q, -1, 22, &acceptance);
  EXPECT_EQ(acceptance, 0.0);
}

TEST(SampleVerify, OneHotDraftsOfEveryKind) {
  SamplingParams p;
  p.temperature = 0.8f;
  double acceptance = 0;
  // The most likely token is accepted with probability p(2); a mid one with p(7); a token
  // outside top-p never.
  expect_verified(kLogits12, p, {}, 2, 23, &acceptance);
  const std::vector<double> ref = reference(kLogits12, p);
  EXPECT_NEAR(acceptance, ref[2], 0.01);
  expect_verified(kLogits12, p, {}, 7, 24, &acceptance);
  EXPECT_NEAR(acceptance, ref[7], 0.01);
  p.top_p = 0.7f;
  expect_verified(kLogits12, p, {}, 6, 25, &acceptance);
  EXPECT_EQ(acceptance, 0.0);
}

TEST(SampleVerify, RandomQWithEveryProcessor) {
  Xoshiro256 rng(26);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<float> ql(12);
    for (float& x : ql) x = float(rng.uniform() * 4.0 - 2.0);
    SamplingParams p;
    p.temperature = 0.7f + 0.3f * float(trial);
    p.top_k = 10;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    expect_verified(kLogits12, p, softmax_of(ql), -1, 27 + uint64_t(trial));
  }
}

TEST(SampleVerify, GreedyAcceptsOnlyTheArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Result<Sampler> s = Sampler::create(p);
  ASSERT_TRUE(s.ok());
  SampleWorkspace ws;
  for (int32_t d = 0; d < 12; ++d) {
    Result<VerifyResult> r = s->verify(kLogits12, d, {}, ws);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->sample.token, 2);
    EXPECT_EQ(r->accepted, d == 2);
  }
  // Errors: a q of the wrong size, non-finite logits.
  std::vector<float> bad_q(5, 0.2f);
  EXPECT_FALSE(s->verify(kLogits12, 2, bad_q, ws).ok());
  std::vector<float> nan_logits = kLogits12;
  nan_logits[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(s->verify(nan_logits, 2, {}, ws).ok());
}

// distribution() is the spec's distribution (reference()), and draw() samples it.
TEST(SampleVerify, DistributionIsTheSpecAndDrawSamplesIt) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 9;
  p.top_p = 0.85f;
  p.min_p = 0.12f;
  p.seed = 31;
  Result<Sampler> s = Sampler::create(p);
  ASSERT_TRUE(s.ok());
  SampleWorkspace ws;
  std::vector<float> dist;
  ASSERT_TRUE(s->distribution(kLogits12, ws, dist).ok());
  const std::vector<double> ref = reference(kLogits12, p);
  ASSERT_EQ(dist.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(dist[i], ref[i], 1e-6) << i;
  std::vector<int64_t> counts(dist.size(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[size_t(s->draw(dist))];
  expect_counts(ref, counts);
  // Without truncation: the softmax over the whole vocabulary; greedy: one-hot.
  SamplingParams plain;
  Result<Sampler> s2 = Sampler::create(plain);
  ASSERT_TRUE(s2->distribution(kLogits12, ws, dist).ok());
  const std::vector<double> ref2 = reference(kLogits12, plain);
  for (size_t i = 0; i < ref2.size(); ++i) EXPECT_NEAR(dist[i], ref2[i], 1e-6) << i;
  SamplingParams greedy;
  greedy.temperature = 0;
  Result<Sampler> s3 = Sampler::create(greedy);
  ASSERT_TRUE(s3->distribution(kLogits12, ws, dist).ok());
  for (size_t i = 0; i < dist.size(); ++i) EXPECT_EQ(dist[i], i == 2 ? 1.0f : 0.0f);
}

}  // namespace
}  // namespace sluice
