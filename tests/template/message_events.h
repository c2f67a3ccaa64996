// Test helpers for the streaming message parsers (ToolCallParser, MessageParser): events merged
// into the form that does not depend on how the text was split, a readable dump, and the
// every-split check (whole, at every byte boundary, and random chunks with 1-byte chunks).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "template/tool_calls.h"

namespace sluice::test {

// Adjacent content, reasoning, and arguments of one call merged.
inline std::vector<ToolCallEvent> merged(const std::vector<ToolCallEvent>& events) {
  using Kind = ToolCallEvent::Kind;
  std::vector<ToolCallEvent> out;
  for (const ToolCallEvent& e : events) {
    if (!out.empty() && out.back().kind == e.kind && out.back().index == e.index &&
        (e.kind == Kind::kContent || e.kind == Kind::kArguments || e.kind == Kind::kReasoning)) {
      out.back().text += e.text;
    } else {
      out.push_back(e);
    }
  }
  return out;
}

inline std::string describe(const std::vector<ToolCallEvent>& events) {
  std::string out;
  for (const ToolCallEvent& e : events) {
    const char* kinds[] = {"content", "begin", "args", "end", "invalid", "reasoning"};
    out += std::string(kinds[int(e.kind)]) + "[" + std::to_string(e.index) + "] " + e.name + " '" +
           e.text + "'\n";
  }
  return out;
}

// `run(pieces)` feeds the pieces to a fresh parser and returns every event (finish included).
// Returns the merged events of the whole text; a split that disagrees fails the test.
template <typename Run>
std::vector<ToolCallEvent> parse_every_way(const Run& run, std::string_view text) {
  const std::vector<ToolCallEvent> whole = merged(run(std::vector<std::string_view>{text}));
  for (size_t k = 0; k <= text.size(); ++k) {
    auto split = merged(run(std::vector<std::string_view>{text.substr(0, k), text.substr(k)}));
    if (split != whole) {
      ADD_FAILURE() << "split at " << k << " of '" << text << "':\n"
                    << describe(split) << "whole:\n"
                    << describe(whole);
      return whole;
    }
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::string_view> pieces;
    const size_t max_chunk = trial == 0 ? 1 : 1 + rng() % 8;  // trial 0: 1-byte chunks
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::min(text.size() - i, 1 + rng() % max_chunk);
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    auto chunked = merged(run(pieces));
    if (chunked != whole) {
      ADD_FAILURE() << "random chunks (trial " << trial << ") of '" << text << "':\n"
                    << describe(chunked) << "whole:\n"
                    << describe(whole);
      return whole;
    }
  }
  return whole;
}

}  // namespace sluice::test
