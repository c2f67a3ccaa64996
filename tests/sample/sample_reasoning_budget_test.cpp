// ReasoningBudget: counts the tokens generated inside the reasoning and forces the close tokens
// once the budget is spent; markers are found in the text however the tokens split them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sample/reasoning_budget.h"

namespace sluice {
namespace {

ReasoningBudgetParams params(int32_t budget, bool open) {
  ReasoningBudgetParams p;
  p.budget = budget;
  p.starts_open = open;
  p.open_marker = "<think>";
  p.close_marker = "</think>";
  p.close_tokens = {7, 8, 9};
  return p;
}

TEST(ReasoningBudget, InactiveWithoutABudgetOrCloseTokens) {
  ReasoningBudget none(params(-1, true));
  for (int i = 0; i < 100; ++i) none.on_token("x");
  EXPECT_EQ(none.forced(), -1);
  ReasoningBudgetParams p = params(2, true);
  p.close_tokens.clear();
  ReasoningBudget no_tokens(p);
  for (int i = 0; i < 10; ++i) no_tokens.on_token("x");
  EXPECT_EQ(no_tokens.forced(), -1);
}

TEST(ReasoningBudget, ForcesTheCloseTokensOnceSpent) {
  ReasoningBudget b(params(3, /*open=*/true));
  EXPECT_TRUE(b.open());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b.forced(), -1) << i;
    b.on_token("a");
  }
  std::vector<int32_t> forced;
  while (b.forced() >= 0) {
    forced.push_back(b.forced());
    b.on_token("x");
  }
  EXPECT_EQ(forced, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_TRUE(b.closed());
  for (int i = 0; i < 10; ++i) b.on_token("more");
  EXPECT_EQ(b.forced(), -1);
  EXPECT_EQ(b.n_reasoning(), 3);
}

TEST(ReasoningBudget, ZeroBudgetClosesAtOnce) {
  ReasoningBudget b(params(0, true));
  EXPECT_EQ(b.forced(), 7);
}

TEST(ReasoningBudget, CountsOnlyInsideTheReasoning) {
  // Not opened by the prompt: the model writes the marker, split over tokens.
  ReasoningBudget b(params(2, /*open=*/false));
  b.on_token("Sure");
  b.on_token(" <th");
  EXPECT_FALSE(b.open());
  b.on_token("ink>");
  EXPECT_TRUE(b.open());
  b.on_token("one");
  EXPECT_EQ(b.forced(), -1);
  b.on_token("two");
  EXPECT_EQ(b.forced(), 7);
}

TEST(ReasoningBudget, TheModelClosingItselfEndsTheCount) {
  ReasoningBudget b(params(5, true));
  b.on_token("a");
  b.on_token("</thi");
  b.on_token("nk>");
  EXPECT_TRUE(b.closed());
  for (int i = 0; i < 10; ++i) b.on_token("z");
  EXPECT_EQ(b.forced(), -1);
  // Open and close in one piece of text.
  ReasoningBudget c(params(5, false));
  c.on_token("<think>x</think>");
  EXPECT_TRUE(c.closed());
}

}  // namespace
}  // namespace sluice
