// Sampler: greedy, determinism, exact bias/penalty arithmetic, logprobs, errors; TokenCounts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "sample/rng.h"
#include "sample/sampler.h"
#include "sample/token_counts.h"

namespace sluice {
namespace {

constexpr float kSamplerInf = std::numeric_limits<float>::infinity();

Sampler make(const SamplingParams& p, std::span<const int32_t> prompt = {}) {
  Result<Sampler> s = Sampler::create(p, prompt);
  EXPECT_TRUE(s.ok()) << s.message();
  return std::move(s).value();
}

int32_t sample_token(Sampler& s, std::span<const float> logits) {
  Result<SampleResult> r = s.sample(logits);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? r->token : -1;
}

// ---------------------------------------------------------------------------------------------
// Greedy

TEST(SampleGreedy, ArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s = make(p);
  const std::vector<float> a = {0.1f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(sample_token(s, a), 1);
  const std::vector<float> tie = {1.0f, 5.0f, 2.0f, 5.0f, 5.0f};
  EXPECT_EQ(sample_token(s, tie), 1);
  const std::vector<float> all_equal(7, 0.25f);
  EXPECT_EQ(sample_token(s, all_equal), 0);
  const std::vector<float> last = {-kSamplerInf, -3.0f, -2.0f};
  EXPECT_EQ(sample_token(s, last), 2);
  const std::vector<float> one = {42.0f};
  EXPECT_EQ(sample_token(s, one), 0);
}

TEST(SampleGreedy, IgnoresSeedAndTruncation) {
  const std::vector<float> logits = {0.5f, 1.5f, 1.4f, -2.0f, 1.5f};
  for (uint64_t seed : {1ull, 2ull, 99ull}) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.top_k = 2;
    p.top_p = 0.3f;
    p.min_p = 0.9f;
    p.seed = seed;
    Sampler s = make(p);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(sample_token(s, logits), 1);
  }
}

// A large vocabulary with ties among the best is still lowest-id-first under top-k, and
// top_k = 1 is greedy.
TEST(SampleGreedy, TopKOneIsArgmax) {
  std::vector<float> logits(50000, 0.0f);
  logits[31337] = 7.0f;
  logits[40000] = 7.0f;
  logits[12] = 6.9f;
  SamplingParams p;
  p.top_k = 1;
  p.seed = 5;
  Sampler s = make(p);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(s, logits), 31337);
}

// ---------------------------------------------------------------------------------------------
// Seeds

std::vector<int32_t> draw_sequence(uint64_t seed, int n) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 17) * 0.1f;
  SamplingParams p;
  p.seed = seed;
  p.top_p = 0.9f;
  Sampler s = make(p);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sample_token(s, logits));
  return out;
}

TEST(SampleSeed, SameSeedSameSequenceDifferentSeedsDiffer) {
  const auto a = draw_sequence(1234, 200);
  const auto b = draw_sequence(1234, 200);
  const auto c = draw_sequence(1235, 200);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(SampleSeed, UnseededSamplersReportTheirSeed) {
  SamplingParams p;
  Sampler a = make(p);
  Sampler b = make(p);
  EXPECT_NE(a.seed(), b.seed());  // 2^-64 chance of a false failure
  p.seed = a.seed();
  Sampler c = make(p);
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(a, logits), sample_token(c, logits));
}

// The random stream is part of the reproducibility contract: a seeded request must give the
// same tokens on every platform and every sluice version. Reference values from Vigna's
// xoshiro256** and splitmix64 (computed independently).
TEST(SampleSeed, RngStreamIsPinned) {
  Xoshiro256 ref = Xoshiro256::from_state(1, 2, 3, 4);
  EXPECT_EQ(ref.next(), 11520u);
  EXPECT_EQ(ref.next(), 0u);
  EXPECT_EQ(ref.next(), 1509978240u);
  EXPECT_EQ(ref.next(), 1215971899390074240u);

  uint64_t sm = 0;
  EXPECT_EQ(splitmix64(sm), 0xE220A8397B1DCDAFull);
  Xoshiro256 rng(0);  // state = four splitmix64 outputs from 0
  EXPECT_EQ(rng.next(), 0x99EC5F36CB75F2B4ull);
  EXPECT_EQ(rng.next(), 0xBF6E1F784956452Aull);
  EXPECT_EQ(rng.next(), 0x1A5F849D4933E6E0ull);
  for (int i = 0; i < 1000; ++i) {
    const double u = rng.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

// One workspace shared by interleaved requests gives each the tokens it gets alone.
TEST(SampleSeed, SharedWorkspaceChangesNothing) {
  std::vector<float> a(3000);
  std::vector<float> b(500);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i)) * 4.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.11f * static_cast<float>(i)) * 3.0f;
  SamplingParams pa;
  pa.seed = 1;
  pa.top_p = 0.9f;
  pa.n_logprobs = 3;
  SamplingParams pb;
  pb.seed = 2;
  pb.top_k = 20;
  pb.repetition_penalty = 1.3f;
  Sampler sa = make(pa);
  Sampler sb = make(pb);
  Sampler ra = make(pa);
  Sampler rb = make(pb);
  SampleWorkspace ws;
  for (int i = 0; i < 200; ++i) {
    Result<SampleResult> x = sa.sample(a, ws);
    Result<SampleResult> y = sb.sample(b, ws);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(ws.logits().size(), b.size());
    Result<SampleResult> x_alone = ra.sample(a);
    Result<SampleResult> y_alone = rb.sample(b);
    EXPECT_EQ(x->token, x_alone->token);
    EXPECT_EQ(x->logprob, x_alone->logprob);
    EXPECT_EQ(y->token, y_alone->token);
    sb.accept(y->token);
    rb.accept(y_alone->token);
  }
}

// ---------------------------------------------------------------------------------------------
// Bias and penalties: exact processed logits

TEST(SamplePenalties, RepetitionFrequencyPresenceExact) {
  //            id:    0      1     2     3      4     5
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.penalty_last_n = -1;  // whole context
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 1};
  Sampler s = make(p, prompt);
  s.accept(2);
  s.accept(2);
  s.accept(4);
  EXPECT_EQ(s.n_generated(), 3);
  ASSERT_TRUE(s.sample(logits).ok());
  const std::vector<float> got(s.last_logits().begin(), s.last_logits().end());
  // Repetition over prompt + generated {0,1,2,4}: positive / 2, negative * 2.
  // Frequency/presence over generated only: 2 (x2) -= 2*0.5 + 0.25, 4 (x1) -= 0.5 + 0.25.
  const std::vector<float> want = {1.0f, -2.0f, 0.25f - 1.25f, 3.0f, -4.0f - 0.75f, 0.0f};
  EXPECT_EQ(got, want);
}

TEST(SamplePenalties, WindowCoversLastNContextTokens) {
  const std::vector<float> logits = {2.0f, 2.0f, 2.0f, 2.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.penalty_last_n = 2;
  const std::vector<int32_t> prompt = {0, 1, 3};
  Sampler s = make(p, prompt);
  ASSERT_TRUE(s.sample(logits).ok());
  EXPECT_EQ(std::vector<float>(s.last_logits().begin(), s.last_logits().end()),
            (std::vector<float>{2.0f, 1.0f, 2.0f, 1.0f, 2.0f}));  // window {1, 3}
  s.accept(2);
  s.accept(2);
  ASSERT_TRUE(s.sample(logits).ok());
  EXPECT_EQ(std::vector<float>(s.last_logits().begin(), s.last_logits().end()),
            (std::vector<float>{2.0f, 2.0f, 1.0f, 2.0f, 2.0f}));  // window {2, 2}: once
}

// Randomized: the penalized set equals the distinct ids among the last n context tokens.
TEST(SamplePenalties, WindowMatchesBruteForce) {
  const int32_t n_vocab = 40;
  const std::vector<float> logits(n_vocab, 1.0f);
  for (int32_t last_n : {1, 3, 16, -1}) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.repetition_penalty = 4.0f;
    p.penalty_last_n = last_n;
    Xoshiro256 rng(static_cast<uint64_t>(last_n + 100));
    std::vector<int32_t> context;
    for (int i = 0; i < 30; ++i) context.push_back(static_cast<int32_t>(rng.next() % n_vocab));
    Sampler s = make(p, context);
    for (int step = 0; step < 300; ++step) {
      ASSERT_TRUE(s.sample(logits).ok());
      std::set<int32_t> want;
      const size_t n =
          last_n < 0 ? context.size() : std::min(context.size(), static_cast<size_t>(last_n));
      for (size_t i = context.size() - n; i < context.size(); ++i) want.insert(context[i]);
      for (int32_t id = 0; id < n_vocab; ++id) {
        ASSERT_EQ(s.last_logits()[static_cast<size_t>(id)], want.count(id) ? 0.25f : 1.0f)
            << "last_n " << last_n << " step " << step << " id " << id;
      }
      const auto t = static_cast<int32_t>(rng.next() % n_vocab);
      context.push_back(t);
      s.accept(t);
    }
  }
}

TEST(SamplePenalties, LogitBiasAppliedBeforePenalties) {
  //            id:    0     1      2     3     4     5
  const std::vector<float> logits = {1.0f, -1.0f, 4.0f, 9.0f, 0.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{1, 1.5f}, {3, -100.0f}, {4, -kSamplerInf}, {5, -0.5f}};
  const std::vector<int32_t> prompt = {1};
  Sampler s = make(p, prompt);
  Result<SampleResult> r = s.sample(logits);
  ASSERT_TRUE(r.ok()) << r.message();
  // id 1: -1 + 1.5 = 0.5 > 0, then / 2; -100 and -inf ban.
  const std::vector<float> want = {1.0f, 0.25f, 4.0f, -kSamplerInf, -kSamplerInf, 1.5f};
  EXPECT_EQ(std::vector<float>(s.last_logits().begin(), s.last_logits().end()), want);
  EXPECT_EQ(r->token, 2);  // 3 was the argmax before its ban
}

TEST(SamplePenalties, NegativePenaltiesEncourageAndBannedStaysBanned) {
  const std::vector<float> logits = {1.0f, 1.0f, -3.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = -1.0f;
  p.frequency_penalty = -0.5f;
  p.repetition_penalty = 0.5f;  // < 1 encourages repeats
  p.logit_bias = {{2, -kSamplerInf}};
  Sampler s = make(p);
  s.accept(1);
  s.accept(2);
  Result<SampleResult> r = s.sample(logits);
  ASSERT_TRUE(r.ok());
  // id 1: 1 / 0.5 = 2, then + 0.5 + 1 = 3.5; id 2 banned: stays -inf.
  EXPECT_EQ(std::vector<float>(s.last_logits().begin(), s.last_logits().end()),
            (std::vector<float>{1.0f, 3.5f, -kSamplerInf}));
  EXPECT_EQ(r->token, 1);
}

TEST(SamplePenalties, IdsBeyondVocabAreIgnored) {
  const std::vector<float> logits = {1.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  const std::vector<int32_t> prompt = {5, -3, 1};
  Sampler s = make(p, prompt);
  s.accept(7);
  s.accept(-1);  // ignored
  EXPECT_EQ(s.n_generated(), 1);
  ASSERT_TRUE(s.sample(logits).ok());
  EXPECT_EQ(std::vector<float>(s.last_logits().begin(), s.last_logits().end()),
            (std::vector<float>{1.0f, 1.0f}));
}

// ---------------------------------------------------------------------------------------------
// Logprobs

TEST(SampleLogprobs, ChosenMatchesHandComputation) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.n_logprobs = 0;
  Sampler s = make(p);
  Result<SampleResult> r = s.sample(logits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 2);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(r->logprob, 3.0 - lse, 1e-6);  // -0.40760596
  EXPECT_EQ(r->n_top, 0);
}

TEST(SampleLogprobs, TopNSortedAndNormalized) {
  const std::vector<float> logits = {0.3f, -1.0f, 2.5f, 0.3f, 1.7f, -kSamplerInf, 2.5f, 0.0f};
  SamplingParams p;
  p.n_logprobs = 20;  // more than the vocabulary: every finite token
  p.seed = 3;
  Sampler s = make(p);
  Result<SampleResult> r = s.sample(logits);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->n_top, 7);  // the banned token is not listed
  const std::vector<int32_t> want_order = {2, 6, 4, 0, 3, 7, 1};
  double total = 0.0;
  for (int32_t i = 0; i < r->n_top; ++i) {
    EXPECT_EQ(r->top[static_cast<size_t>(i)].token, want_order[static_cast<size_t>(i)]);
    if (i > 0) {
      EXPECT_LE(r->top[static_cast<size_t>(i)].logprob, r->top[static_cast<size_t>(i - 1)].logprob);
    }
    total += std::exp(static_cast<double>(r->top[static_cast<size_t>(i)].logprob));
  }
  EXPECT_NEAR(total, 1.0, 1e-6);
  // The chosen token's logprob is the one listed for it.
  for (const TokenLogprob& t : r->top_logprobs()) {
    if (t.token == r->token) {
      EXPECT_EQ(t.logprob, r->logprob);
    }
  }
}

TEST(SampleLogprobs, FullDistributionSumsToOneOnLargeVocab) {
  std::vector<float> logits(128256);
  Xoshiro256 rng(77);
  for (float& l : logits) l = static_cast<float>(rng.uniform() * 20.0 - 10.0);
  SamplingParams p;
  p.n_logprobs = 5;
  p.top_k = 40;
  p.seed = 1;
  Sampler s = make(p);
  Result<SampleResult> r = s.sample(logits);
  ASSERT_TRUE(r.ok());
  // lse from the chosen token: logprob(i) = l(i) - lse for every i.
  const double lse = static_cast<double>(logits[static_cast<size_t>(r->token)]) - r->logprob;
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l) - lse);
  EXPECT_NEAR(total, 1.0, 1e-4);
  ASSERT_EQ(r->n_top, 5);
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(r->top[i].logprob, static_cast<double>(sorted[i]) - lse, 1e-4);
  }
}

// Logprobs are taken after bias/penalties and before temperature and truncation.
TEST(SampleLogprobs, IndependentOfTemperatureAndTruncation) {
  const std::vector<float> logits = {0.5f, 1.0f, 1.5f, 2.0f};
  std::vector<float> ref;
  for (float t : {0.0f, 0.3f, 1.0f, 4.0f}) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = 2;
    p.top_p = 0.5f;
    p.n_logprobs = 4;
    p.logit_bias = {{0, 1.0f}};
    p.seed = 9;
    Sampler s = make(p);
    Result<SampleResult> r = s.sample(logits);
    ASSERT_TRUE(r.ok());
    std::vector<float> lp(4);
    for (const TokenLogprob& tl : r->top_logprobs()) lp[static_cast<size_t>(tl.token)] = tl.logprob;
    if (ref.empty()) {
      ref = lp;
      // Bias included: token 0 has logit 1.5, tied with token 2.
      EXPECT_EQ(r->top[1].token, 0);
      EXPECT_EQ(r->top[2].token, 2);
    } else {
      EXPECT_EQ(lp, ref) << "temperature " << t;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(SampleErrors, BadLogitsAndBans) {
  SamplingParams p;
  p.seed = 1;
  Sampler s = make(p);
  EXPECT_EQ(s.sample({}).message(), "sample: the logits row is empty");
  const std::vector<float> nan = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  EXPECT_EQ(s.sample(nan).message(),
            "sample: logits[1] is NaN (the model produced a non-finite value)");
  const std::vector<float> inf = {0.0f, 1.0f, kSamplerInf};
  EXPECT_EQ(s.sample(inf).message(),
            "sample: logits[2] is +inf (the model produced a non-finite value)");

  const std::vector<float> banned = {-kSamplerInf, -kSamplerInf};
  for (float t : {0.0f, 1.0f}) {
    for (int32_t k : {0, 1}) {
      SamplingParams q;
      q.temperature = t;
      q.top_k = k;
      Sampler b = make(q);
      Result<SampleResult> r = b.sample(banned);
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.message().find("every token is banned"), std::string::npos);
    }
  }

  SamplingParams q;
  q.logit_bias = {{5, 1.0f}};
  Sampler b = make(q);
  const std::vector<float> small = {1.0f, 2.0f};
  EXPECT_EQ(b.sample(small).message(), "logit_bias token id 5 is outside the vocabulary [0, 2)");
}

TEST(SampleErrors, ExtremePenaltiesStayFinite) {
  const std::vector<float> logits = {3.0e38f, -3.0e38f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 1e-30f;
  p.n_logprobs = 3;
  p.seed = 2;
  const std::vector<int32_t> prompt = {0};
  Sampler s = make(p, prompt);
  Result<SampleResult> r = s.sample(logits);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->token, 0);
  EXPECT_TRUE(std::isfinite(s.last_logits()[0]));
}

// ---------------------------------------------------------------------------------------------
// TokenCounts against std::map

TEST(SampleTokenCounts, MatchesMapUnderRandomAddRemove) {
  TokenCounts tc;
  std::map<int32_t, int32_t> ref;
  Xoshiro256 rng(42);
  std::vector<int32_t> live;
  for (int step = 0; step < 200000; ++step) {
    const bool remove = !live.empty() && rng.next() % 3 == 0;
    if (remove) {
      const size_t j = rng.next() % live.size();
      const int32_t id = live[j];
      tc.add(id, -1);
      if (--ref[id] == 0) ref.erase(id);
      live[j] = live.back();
      live.pop_back();
    } else {
      // Ids clustered so probe runs collide and wrap.
      const auto id = static_cast<int32_t>(rng.next() % 3000);
      tc.add(id, 1);
      ++ref[id];
      live.push_back(id);
    }
    if (step % 997 == 0) {
      ASSERT_EQ(tc.size(), ref.size());
      std::map<int32_t, int32_t> got;
      tc.for_each([&](int32_t id, int32_t c) { got[id] = c; });
      ASSERT_EQ(got, ref) << "step " << step;
      for (int32_t id = 0; id < 3000; id += 7) {
        const auto it = ref.find(id);
        ASSERT_EQ(tc.count(id), it == ref.end() ? 0 : it->second);
      }
    }
  }
}

}  // namespace
}  // namespace sluice
