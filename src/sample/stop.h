// StopMatcher: finds stop strings in streamed text and decides what is safe to emit.
//
// Fed the decoded text of each generated token (StreamingDecoder output), it returns the part
// that can no longer be the beginning of a stop string and holds back the longest suffix that
// still can ("Hel" with stop "Hello" is held; "Help" releases it). When a stop string
// completes, the emitted text ends right before it (or after it, with include_stop) and
// everything after is dropped. Nothing is ever lost: held text is released once it cannot
// match, or by flush() at the end of generation.
//
// Which stop wins: the occurrence that ENDS first in the text (the one a token-by-token check
// sees first), and among those ending at the same byte the one that starts first (the longest).
// This depends only on the text, never on how it was split into pieces.
//
// Matching is bytewise. With valid UTF-8 pieces and stops (all whole characters), matches and
// the emit/hold split fall on character boundaries, since a stop begins with a lead byte.
// Cost per push: O(n_stops * (held + piece)) to search and O(sum of stop lengths^2) to find
// the held suffix; held text is shorter than the longest stop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class StopMatcher {
 public:
  struct Output {
    std::string text;         // safe to emit now (possibly empty)
    int32_t stop_index = -1;  // index into stops() of the matched stop, -1 while none

    bool stopped() const { return stop_index >= 0; }
  };

  // Empty strings in `stops` never match (an empty stop list passes everything through).
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  // Appends `piece`. After a stop has matched, returns empty text and the same stop_index.
  Output push(std::string_view piece);

  // End of generation: the held-back text (empty after a stop matched).
  std::string flush();

  bool stopped() const { return stop_index_ >= 0; }
  int32_t stop_index() const { return stop_index_; }
  const std::vector<std::string>& stops() const { return stops_; }
  size_t n_held() const { return held_.size(); }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t held_suffix_len() const;

  std::vector<std::string> stops_;
  bool include_stop_;
  std::string held_;  // text not yet emitted; never contains a whole stop string
  int32_t stop_index_ = -1;
};

}  // namespace sluice
