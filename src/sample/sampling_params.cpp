#include "sample/sampling_params.h"

#include <cmath>
#include <sstream>
#include <string>

namespace sluice {
namespace {

// Shortest round-trip text of a float ("0.95", "nan", "-inf") for error messages.
std::string fmt(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Status SamplingParams::validate(int32_t n_vocab) const {
  // `!(x >= lo)` forms also reject NaN.
  if (!(temperature >= 0.0f) || std::isinf(temperature)) {
    return make_error("temperature must be a finite number >= 0 (0 = greedy), got ",
                      fmt(temperature));
  }
  if (top_k < -1) {
    return make_error("top_k must be a positive count, or 0 or -1 to disable it, got ", top_k);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return make_error("top_p must be in (0, 1] (1 = off), got ", fmt(top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return make_error("min_p must be in [0, 1] (0 = off), got ", fmt(min_p));
  }
  if (!(repetition_penalty > 0.0f) || std::isinf(repetition_penalty)) {
    return make_error("repetition_penalty must be a finite number > 0 (1 = off), got ",
                      fmt(repetition_penalty));
  }
  if (penalty_last_n < -1) {
    return make_error("penalty_last_n must be -1 (whole context), 0 (off) or a positive window, ",
                      "got ", penalty_last_n);
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return make_error("presence_penalty must be in [-2, 2], got ", fmt(presence_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return make_error("frequency_penalty must be in [-2, 2], got ", fmt(frequency_penalty));
  }
  if (n_logprobs < -1 || n_logprobs > kMaxLogprobs) {
    return make_error("n_logprobs must be in [0, ", kMaxLogprobs, "] (or -1 for none), got ",
                      n_logprobs);
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || (n_vocab > 0 && id >= n_vocab)) {
      return make_error("logit_bias token id ", id, " is outside the vocabulary [0, ",
                        n_vocab > 0 ? std::to_string(n_vocab) : std::string("n_vocab"), ")");
    }
    const bool ban = std::isinf(bias) && bias < 0;
    if (!ban && !(bias >= -100.0f && bias <= 100.0f)) {
      return make_error("logit_bias for token ", id, " must be in [-100, 100] or -inf, got ",
                        fmt(bias));
    }
  }
  return {};
}

}  // namespace sluice
