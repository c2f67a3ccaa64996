// SamplingParams::validate: every out-of-range field is rejected with a message naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "sample/sampler.h"
#include "sample/sampling_params.h"

namespace sluice {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kParamsInf = std::numeric_limits<float>::infinity();

// The error message of params modified by `edit`, or "" when valid.
std::string error_of(const std::function<void(SamplingParams&)>& edit, int32_t n_vocab = 0) {
  SamplingParams p;
  edit(p);
  Status s = p.validate(n_vocab);
  return s.ok() ? std::string() : s.message();
}

TEST(SampleParams, DefaultsAreValid) {
  EXPECT_EQ(error_of([](SamplingParams&) {}), "");
  EXPECT_EQ(error_of(
                [](SamplingParams& p) {
                  p.temperature = 0.0f;
                  p.top_k = -1;
                  p.top_p = 1.0f;
                  p.min_p = 1.0f;
                  p.repetition_penalty = 1.3f;
                  p.penalty_last_n = -1;
                  p.presence_penalty = -2.0f;
                  p.frequency_penalty = 2.0f;
                  p.n_logprobs = kMaxLogprobs;
                  p.logit_bias = {{0, -kParamsInf}, {5, 100.0f}, {7, -100.0f}};
                },
                10),
            "");
}

TEST(SampleParams, RejectsEachBadField) {
  struct Case {
    std::function<void(SamplingParams&)> edit;
    std::string field;
  };
  const Case cases[] = {
      {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = kNan; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = kParamsInf; }, "temperature"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = 1.01f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = kNan; }, "top_p"},
      {[](SamplingParams& p) { p.min_p = -0.01f; }, "min_p"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.repetition_penalty = kParamsInf; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.penalty_last_n = -2; }, "penalty_last_n"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = -2.01f; }, "presence_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = kNan; }, "frequency_penalty"},
      {[](SamplingParams& p) { p.n_logprobs = 21; }, "n_logprobs"},
      {[](SamplingParams& p) { p.n_logprobs = -2; }, "n_logprobs"},
      {[](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       },
       "logit_bias token id -1"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, 101.0f}};
       },
       "logit_bias for token 3"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, -150.0f}};
       },
       "logit_bias for token 3"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, kParamsInf}};
       },
       "logit_bias for token 3"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, kNan}};
       },
       "logit_bias for token 3"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of(c.edit);
    EXPECT_NE(msg.find(c.field), std::string::npos)
        << "expected an error about '" << c.field << "', got '" << msg << "'";
  }
  // Messages carry the offending value.
  EXPECT_EQ(error_of([](SamplingParams& p) { p.top_p = 1.5f; }),
            "top_p must be in (0, 1] (1 = off), got 1.5");
  EXPECT_EQ(error_of([](SamplingParams& p) { p.n_logprobs = 50; }),
            "n_logprobs must be in [0, 20] (or -1 for none), got 50");
}

TEST(SampleParams, LogitBiasIdCheckedAgainstVocab) {
  const auto edit = [](SamplingParams& p) { p.logit_bias = {{10, 1.0f}}; };
  EXPECT_EQ(error_of(edit, 0), "");  // vocabulary unknown
  EXPECT_EQ(error_of(edit, 11), "");
  EXPECT_EQ(error_of(edit, 10), "logit_bias token id 10 is outside the vocabulary [0, 10)");
}

TEST(SampleParams, SamplerCreateValidates) {
  SamplingParams p;
  p.top_p = 0.0f;
  Result<Sampler> s = Sampler::create(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace sluice
