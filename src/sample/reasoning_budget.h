// A reasoning budget: caps how many tokens a reasoning model may think before it answers
// (llama-server's --reasoning-budget, Anthropic's thinking.budget_tokens). Fed the text of each
// generated token, it knows whether the reasoning is open; once `budget` tokens were generated
// inside it, the next tokens are forced to `close_tokens` (the tokenized close text, e.g.
// "\n</think>\n\n"), one per step, after which the model answers on its own.
//
//   ReasoningBudget b(params.reasoning);
//   if (int32_t t = b.forced(); t >= 0) token = t; else token = sample(...);
//   b.on_token(token, text_of_token);
//
// Markers are matched in the text (bytes), so it does not matter how the tokenizer split them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct ReasoningBudgetParams {
  int32_t budget = -1;                // tokens of reasoning at most; < 0: no budget
  bool starts_open = false;           // the prompt left the model inside its reasoning
  std::string open_marker;            // text that opens the reasoning ("<think>")
  std::string close_marker;           // text that closes it ("</think>")
  std::vector<int32_t> close_tokens;  // forced when the budget is spent (ends in close_marker)

  bool active() const { return budget >= 0 && !close_tokens.empty(); }
};

class ReasoningBudget {
 public:
  ReasoningBudget() = default;
  explicit ReasoningBudget(const ReasoningBudgetParams& params);

  // The token to emit next instead of sampling, or -1.
  int32_t forced() const;
  // Records a generated token (`text`: its decoded text, may be empty or partial UTF-8).
  void on_token(std::string_view text);

  bool open() const { return state_ == State::kOpen; }
  bool closed() const { return state_ == State::kClosed; }
  int32_t n_reasoning() const { return n_reasoning_; }

 private:
  enum class State : uint8_t { kOff, kBefore, kOpen, kForcing, kClosed };
  ReasoningBudgetParams p_;
  State state_ = State::kOff;
  std::string tail_;  // the last bytes of text, for markers split over tokens
  int32_t n_reasoning_ = 0;
  size_t n_forced_ = 0;
};

}  // namespace sluice
