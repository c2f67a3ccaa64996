#include "sample/reasoning_budget.h"

#include <algorithm>

namespace sluice {

ReasoningBudget::ReasoningBudget(const ReasoningBudgetParams& params) : p_(params) {
  if (!p_.active()) return;
  state_ = p_.starts_open ? State::kOpen : State::kBefore;
  if (state_ == State::kOpen && p_.budget == 0) state_ = State::kForcing;
}

int32_t ReasoningBudget::forced() const {
  if (state_ != State::kForcing || n_forced_ >= p_.close_tokens.size()) return -1;
  return p_.close_tokens[n_forced_];
}

void ReasoningBudget::on_token(std::string_view text) {
  if (state_ == State::kOff || state_ == State::kClosed) return;
  if (state_ == State::kForcing) {
    if (++n_forced_ >= p_.close_tokens.size()) state_ = State::kClosed;
    return;
  }
  tail_ += text;
  const std::string& marker = state_ == State::kBefore ? p_.open_marker : p_.close_marker;
  const size_t at = tail_.find(marker);
  if (state_ == State::kOpen) ++n_reasoning_;
  if (at != std::string::npos) {
    tail_.erase(0, at + marker.size());
    if (state_ == State::kOpen) {
      state_ = State::kClosed;
      return;
    }
    state_ = State::kOpen;
    // The close marker may already follow in the same text.
    if (tail_.find(p_.close_marker) != std::string::npos) {
      state_ = State::kClosed;
      return;
    }
  }
  // Keep only what could still be the start of a marker.
  const size_t keep = std::max(p_.open_marker.size(), p_.close_marker.size());
  if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
  if (state_ == State::kOpen && n_reasoning_ >= p_.budget) state_ = State::kForcing;
}

}  // namespace sluice
